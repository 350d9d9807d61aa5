#!/usr/bin/python3
"""Distil a tiny draft model for speculative decoding from models/pkgchat-5m.

The draft is a 2-layer, hidden-64 Llama (about 0.36M parameters) with the target's tokenizer, trained
on text that the target itself generated (sequence-level distillation): the draft learns to predict
what pkgchat-5m would say, which is what a speculative decoder needs from it.

Requirements:
  * /usr/bin/python3 with Debian's torch and numpy (`apt-get install -y python3-torch python3-numpy`);
    no PyPI packages (safetensors are read and written by hand below). Optional but 5-10x faster:
    `apt-get install -y libopenblas0-serial` (used for this script only, see OPENBLAS_DIR).
  * a built halo (`build/bin/halo`, device plugins in `build/lib`): it generates the training data and
    is the reference forward pass the exported draft is checked against.

Steps (each a subcommand; `all` runs them in order). Everything runs on one thread, so it can share
the machine with a C++ build:
  generate  run the target with halo over varied prompts and record the token ids   -> WORK/data.jsonl
  train     train the draft on those ids with torch on CPU (next-token cross-entropy) -> WORK/draft.pt
  export    write the draft as a Hugging Face Llama directory (bf16 safetensors)      -> OUT/
  eval      check halo loads and runs the draft, and estimate the acceptance rate    -> WORK/eval.json

Reproduce models/pkgchat-5m-draft (from the repository root; about 17 + 37 minutes on one thread):
  nice -n 10 /usr/bin/python3 scripts/distill_draft.py all --work /tmp/distill --out models/pkgchat-5m-draft

Every random choice is seeded (--seed); halo's sampling is seeded per run. The prompts use Debian
package names from the local apt cache (`apt-cache pkgnames`, falling back to `dpkg-query`), so the
data depends on the apt lists of the machine it runs on.
"""

import argparse
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import time

# One thread everywhere: must be set before torch/numpy start their thread pools.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Debian's torch does its matrix products through libblas.so.3, which is the reference BLAS unless an
# optimized one is selected: about 2 GFLOP/s, which makes training 5-10x slower. If Debian's
# libopenblas0-serial is installed, use it for this process only (LD_LIBRARY_PATH, read at exec),
# without switching the machine-wide BLAS alternative.
OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-serial"
if __name__ == "__main__" and os.path.isdir(OPENBLAS_DIR) and OPENBLAS_DIR not in os.environ.get("LD_LIBRARY_PATH", ""):
    os.environ["LD_LIBRARY_PATH"] = ":".join(filter(None, [OPENBLAS_DIR, os.environ.get("LD_LIBRARY_PATH")]))
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
BOS, EOS, END = 1, 2, 5  # <s>, </s>, <|end|> of pkgchat-5m's tokenizer

# The question forms the target was trained on (seen in its unconditional samples), plus a few
# paraphrases so that the draft also sees the target answer questions phrased otherwise.
QUESTIONS = ["What is {}?", "Tell me about {}.", "Describe {}.", "What is the Debian package {} for?",
             "What does the package {} do?"]
PARAPHRASES = ["What does {} do?", "Explain what {} is.", "What is {} used for?", "Should I install {}?"]
# Openings of package descriptions, for raw-text (non-chat) prompts.
OPENINGS = ["This package contains", "This package provides", "Library for", "Python 3 module for",
            "Development files for", "Documentation for", "Perl module to", "Command-line tool to",
            "The GNU", "A fast", "Rust crate", "Haskell library for", "GTK+ widget for",
            "Transitional package", "Debug symbols for", "Plugin for", "Utility to", "Fonts for",
            "Go library for", "Node.js module to", "Tools for", "Simple", "Lightweight"]


# ----------------------------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, n_pos, theta):
    """cos/sin of shape [n_pos, head_dim] in Hugging Face Llama's layout: the frequencies are
    repeated as two halves (cat(f, f)), not interleaved, matching rotate_half below."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(n_pos, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, self.n_heads, self.n_kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = h // self.n_heads
        self.q_proj = nn.Linear(h, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # GQA: each KV head serves n_heads / n_kv consecutive query heads.
        rep = self.n_heads // self.n_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        out = scores.softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class Llama(nn.Module):
    """LlamaForCausalLM with tied embeddings; parameter names equal the Hugging Face tensor names."""

    def __init__(self, cfg):
        super().__init__()
        assert cfg.get("tie_word_embeddings", False), "only tied embeddings are implemented"
        self.cfg = cfg
        self.model = Body(cfg)
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        cos, sin = rope_tables(head_dim, cfg["max_position_embeddings"], cfg["rope_theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, self.cos[:t], self.sin[:t], mask)
        return self.model.norm(x) @ self.model.embed_tokens.weight.t()


def init_weights(model, seed):
    torch.manual_seed(seed)
    n_layers = model.cfg["num_hidden_layers"]
    for name, p in model.named_parameters():
        if p.dim() == 2:
            # Residual-branch outputs get a smaller init (GPT-2 style) so the stack starts near identity.
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            nn.init.normal_(p, std=std)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------- safetensors

def read_safetensors(path):
    """name -> float32 tensor; only the BF16 and F32 dtypes that Llama checkpoints here use."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        if meta["dtype"] == "BF16":
            raw = torch.from_numpy(np.frombuffer(data[a:b], dtype="<i2").copy())
            t = raw.view(torch.bfloat16).float()
        elif meta["dtype"] == "F32":
            t = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").copy())
        else:
            raise ValueError(f"{path}: {name} has unsupported dtype {meta['dtype']}")
        out[name] = t.reshape(meta["shape"])
    return out


def write_safetensors_bf16(path, tensors):
    """Write {name: tensor} as BF16 safetensors: 8-byte little-endian header length, JSON header
    (padded with spaces to a multiple of 8, as the format allows), then the raw little-endian data.
    fp32 -> bf16 uses torch's round-to-nearest-even."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().float().contiguous()
        raw = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def load_hf_llama(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    model = Llama(cfg)
    missing, unexpected = model.load_state_dict(read_safetensors(os.path.join(model_dir, "model.safetensors")),
                                                strict=False)
    if missing or unexpected:
        raise ValueError(f"{model_dir}: missing {missing}, unexpected {unexpected}")
    return model.eval()


# -------------------------------------------------------------------------------------- generate

def halo_env():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("HALO_PLUGIN_PATH", os.path.join(REPO, "build", "lib"))
    return env


def run_halo(args, model_dir, prompts_path, out_path, extra, log_path):
    """One halo process generates for a whole prompts file (it batches them): much faster than one
    process per prompt. Retries once after a minute, as the binary may be mid-rebuild."""
    cmd = ["nice", "-n", "10", args.halo, "generate", model_dir, "--prompts-file", prompts_path,
           "--threads", "1", "--output", "json", "--seed", str(args.seed)] + extra
    for attempt in range(2):
        with open(out_path, "w") as out, open(log_path, "a") as log:
            log.write(" ".join(cmd) + "\n")
            log.flush()
            rc = subprocess.call(cmd, stdout=out, stderr=log, env=halo_env())
        if rc == 0:
            return
        print(f"halo failed (rc={rc}), see {log_path}; retrying in 60 s", file=sys.stderr)
        time.sleep(60)
    raise RuntimeError(f"halo failed twice: {' '.join(cmd)}")


def package_names():
    """Debian package names from the local apt cache (the target's domain), sorted so that a seed
    fixes the draw; dpkg's installed packages if apt has no lists."""
    try:
        names = subprocess.run(["apt-cache", "pkgnames"], capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        names = []
    if len(names) < 1000:
        names += subprocess.run(["dpkg-query", "-W", "-f=${Package}\\n"], capture_output=True, text=True).stdout.split()
    return sorted(set(names))


def split_names(seed):
    """Shuffled names; the first 20 are held out for eval and never appear in a training prompt."""
    names = package_names()
    random.Random(seed).shuffle(names)
    return names[:20], names[20:]


def chat_prompts(names, rng):
    qs = [rng.choice(PARAPHRASES if rng.random() < 0.1 else QUESTIONS).format(n) for n in names]
    return [{"prompt": q} for q in qs]


def raw_prompts(names, rng):
    out = []
    for n in names:
        r = rng.random()
        text = rng.choice(OPENINGS) if r < 0.5 else (f"{n} is" if r < 0.8 else f"{n}:")
        out.append({"prompt": text})
    return out


# (name, kind, count, halo sampling flags, max tokens). Sampling with top-k 100 is about twice as fast
# in halo as over the full vocabulary; the 0.7/top-p 0.9 runs are the target's generation_config
# defaults. "uncond" samples start from <s> alone and run past <|end|> (to </s> or the limit), giving
# the target's own questions and answers back to back as it was trained on them.
RUNS = [
    ("uncond_t10", "uncond", 1536, ["--temperature", "1.0", "--top-k", "100"], 320),
    ("uncond_t08", "uncond", 1536, ["--temperature", "0.8", "--top-k", "100"], 320),
    ("uncond_t07p", "uncond", 512, ["--temperature", "0.7", "--top-p", "0.9"], 320),
    ("chat_greedy", "chat", 3000, ["--temperature", "0"], 256),
    ("chat_t08", "chat", 4000, ["--temperature", "0.8", "--top-k", "100"], 256),
    ("chat_t10", "chat", 3000, ["--temperature", "1.0", "--top-k", "100"], 256),
    ("chat_t07p", "chat", 2000, ["--temperature", "0.7", "--top-p", "0.9"], 256),
    ("raw_t08", "raw", 1500, ["--temperature", "0.8", "--top-k", "100"], 160),
]


def make_prompts(kind, count, names, rng):
    if kind == "uncond":
        return [{"prompt_token_ids": [BOS]}] * count
    picked = [names[rng.randrange(len(names))] for _ in range(count)]
    return chat_prompts(picked, rng) if kind == "chat" else raw_prompts(picked, rng)


def halo_flags(kind, sampling, max_tokens):
    flags = ["--max-tokens", str(max_tokens)] + sampling
    if kind == "chat":
        flags.append("--chat")
    if kind == "uncond":
        flags += ["--ignore-eos", "--stop-token-ids", str(EOS)]
    return flags


def cmd_generate(args):
    os.makedirs(args.work, exist_ok=True)
    _, names = split_names(args.seed)
    rng = random.Random(args.seed + 1)
    data_path = os.path.join(args.work, "data.jsonl")
    n_seqs = n_tokens = 0
    t0 = time.time()
    with open(data_path, "w") as data:
        for name, kind, count, sampling, max_tokens in RUNS:
            count = max(1, int(count * args.scale))
            prompts_path = os.path.join(args.work, f"prompts_{name}.jsonl")
            with open(prompts_path, "w") as f:
                f.writelines(json.dumps(p) + "\n" for p in make_prompts(kind, count, names, rng))
            out_path = os.path.join(args.work, f"halo_{name}.jsonl")
            t1 = time.time()
            run_halo(args, args.target, prompts_path, out_path, halo_flags(kind, sampling, max_tokens),
                     os.path.join(args.work, "halo.log"))
            # halo's JSON gives the prompt's and the output's token ids (the stop token included),
            # so no Python tokenizer is needed.
            run_tokens = 0
            for line in open(out_path):
                r = json.loads(line)
                p, g = r["prompt_token_ids"], r["token_ids"]
                data.write(json.dumps({"src": name, "n_prompt": len(p), "ids": p + g}) + "\n")
                n_seqs += 1
                run_tokens += len(p) + len(g)
            n_tokens += run_tokens
            print(f"{name}: {count} prompts, {run_tokens} tokens in {time.time() - t1:.0f} s", flush=True)
    print(f"wrote {data_path}: {n_seqs} sequences, {n_tokens} tokens in {time.time() - t0:.0f} s")


# ----------------------------------------------------------------------------------------- train

def load_data(work, seed, val_frac=0.05):
    seqs = [json.loads(l) for l in open(os.path.join(work, "data.jsonl"))]
    random.Random(seed).shuffle(seqs)
    n_val = max(1, int(len(seqs) * val_frac))
    return seqs[n_val:], seqs[:n_val]


def make_batches(seqs, max_tokens, rng):
    """Length-bucketed padded batches, each at most max_tokens (padded). Every sequence starts at
    position 0 as in serving. Targets are -100 (ignored) at padding and where the next token is
    part of a prompt we wrote (not the target's text): the draft learns only the target's outputs."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]["ids"]))
    batches, cur = [], []
    for i in order:
        length = len(seqs[i]["ids"])
        if cur and (len(cur) + 1) * length > max_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return [to_tensors([seqs[i] for i in b]) for b in batches]


def to_tensors(batch):
    t = max(len(s["ids"]) for s in batch) - 1
    x = torch.zeros(len(batch), t, dtype=torch.long)
    y = torch.full((len(batch), t), -100, dtype=torch.long)
    for r, s in enumerate(batch):
        ids = torch.tensor(s["ids"])
        x[r, :len(ids) - 1] = ids[:-1]
        y[r, :len(ids) - 1] = ids[1:]
        # The last prompt token predicts the first output token; positions before it predict prompt tokens.
        y[r, :s["n_prompt"] - 1] = -100
    return x, y


def loss_on(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)


@torch.no_grad()
def val_loss(model, batches):
    model.eval()
    total = count = 0
    for x, y in batches:
        n = int((y != -100).sum())
        total += float(loss_on(model, x, y)) * n
        count += n
    model.train()
    return total / count


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))  # cosine to 10% of peak


def draft_config(args, target_dir):
    """The draft's config.json: the target's tokenizer-facing and RoPE settings, a smaller body."""
    with open(os.path.join(target_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
               num_key_value_heads=args.kv_heads, intermediate_size=args.intermediate)
    return cfg


def optimizer_for(model, lr):
    # No weight decay on norms (1-D); decay on the matrices and the embedding.
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def cmd_train(args):
    torch.manual_seed(args.seed)
    cfg = draft_config(args, args.target)
    model = Llama(cfg)
    init_weights(model, args.seed)
    train, val = load_data(args.work, args.seed)
    rng = random.Random(args.seed)
    val_batches = make_batches(val, args.batch_tokens, rng)
    n_train = sum(int((y != -100).sum()) for _, y in make_batches(train, args.batch_tokens, rng))
    print(f"draft: {count_params(model)} parameters; train {len(train)} seqs ({n_train} target tokens), "
          f"val {len(val)} seqs", flush=True)
    t0 = time.time()
    with open(os.path.join(args.work, "train.log"), "w") as log:
        train_loop(model, train, val_batches, args, rng, log)
    final = {"steps": args.steps, "seconds": round(time.time() - t0),
             "train_loss": val_loss(model, batches_sample(train, args, rng)),
             "val_loss": val_loss(model, val_batches), "params": count_params(model), "train_tokens": n_train}
    print(json.dumps(final), flush=True)
    torch.save({"config": cfg, "state_dict": model.state_dict(), "summary": final},
               os.path.join(args.work, "draft.pt"))


def train_loop(model, train, val_batches, args, rng, log, stop_at=None):
    """args.steps steps of AdamW (the schedule's length; stop_at ends early, for tests), logging the
    loss every args.log_every steps and the validation loss every 10 logs."""
    opt = optimizer_for(model, args.lr)
    step, t0, batches = 0, time.time(), []
    while step < (stop_at or args.steps):
        if not batches:
            batches = make_batches(train, args.batch_tokens, rng)  # a new epoch, reshuffled
        x, y = batches.pop()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        loss = train_step(model, opt, x, y)
        step += 1
        if step % args.log_every == 0 or step == args.steps:
            msg = f"step {step} loss {loss:.4f} lr {opt.param_groups[0]['lr']:.2e} {time.time() - t0:.0f}s"
            if step % (args.log_every * 10) == 0 or step == args.steps:
                msg += f" val {val_loss(model, val_batches):.4f}"
            print(msg, flush=True)
            log.write(msg + "\n")
            log.flush()


def train_step(model, opt, x, y):
    loss = loss_on(model, x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def batches_sample(train, args, rng):
    """Final training loss, measured like the validation loss on a same-sized sample of the training
    set (the per-step loss is noisy and lags the weights)."""
    sample = rng.sample(train, min(len(train), max(1, len(train) // 19)))
    return make_batches(sample, args.batch_tokens, rng)


# ---------------------------------------------------------------------------------------- export

def cmd_export(args):
    ckpt = torch.load(os.path.join(args.work, "draft.pt"))
    os.makedirs(args.out, exist_ok=True)
    cfg = dict(ckpt["config"], torch_dtype="bfloat16")
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for name in TOKENIZER_FILES + ["generation_config.json"]:
        shutil.copyfile(os.path.join(args.target, name), os.path.join(args.out, name))
    write_safetensors_bf16(os.path.join(args.out, "model.safetensors"), ckpt["state_dict"])
    print(f"wrote {args.out} ({count_params(load_hf_llama(args.out))} parameters)")


# ------------------------------------------------------------------------------------------ eval

def halo_greedy(args, model_dir, prompts_path, max_tokens):
    out_path = prompts_path + "." + os.path.basename(os.path.normpath(model_dir)) + ".out"
    run_halo(args, model_dir, prompts_path, out_path, ["--chat", "--max-tokens", str(max_tokens), "--temperature", "0"],
             os.path.join(args.work, "halo_eval.log"))
    return [json.loads(l) for l in open(out_path)]


@torch.no_grad()
def teacher_forced(model, prompt_ids, cont_ids):
    """The model's distributions at each position of the target's continuation (the next-token
    predictions for cont_ids[0..n-1]), as the draft is used in speculative decoding."""
    ids = torch.tensor([prompt_ids + cont_ids[:-1]])
    return model(ids)[0, len(prompt_ids) - 1:].float()


def sampled_acceptance(p_logits, q_logits, temperature):
    """Expected acceptance of one drafted token under speculative sampling: sum_x min(p(x), q(x))."""
    p, q = (p_logits / temperature).softmax(-1), (q_logits / temperature).softmax(-1)
    return torch.minimum(p, q).sum(-1)


def greedy_agreement(model, outs):
    """Fraction of generated tokens where the model's greedy token equals halo's greedy output."""
    same = total = 0
    for r in outs:
        pred = teacher_forced(model, r["prompt_token_ids"], r["token_ids"]).argmax(-1)
        same += int((pred == torch.tensor(r["token_ids"])).sum())
        total += len(r["token_ids"])
    return same / total


def cmd_eval(args):
    held_out, _ = split_names(args.seed)
    rng = random.Random(args.seed + 2)
    prompts_path = os.path.join(args.work, "eval_prompts.jsonl")
    with open(prompts_path, "w") as f:
        f.writelines(json.dumps({"prompt": rng.choice(QUESTIONS).format(n)}) + "\n" for n in held_out)
    target_outs = halo_greedy(args, args.target, prompts_path, 32)
    draft_outs = halo_greedy(args, args.out, prompts_path, 32)
    target, draft = load_hf_llama(args.target), load_hf_llama(args.out)
    accept, positions, sampled = 0, 0, {0.7: [], 1.0: []}
    for r in target_outs:
        p_logits = teacher_forced(target, r["prompt_token_ids"], r["token_ids"])
        q_logits = teacher_forced(draft, r["prompt_token_ids"], r["token_ids"])
        accept += int((q_logits.argmax(-1) == torch.tensor(r["token_ids"])).sum())
        positions += len(r["token_ids"])
        for temp in sampled:
            sampled[temp] += sampled_acceptance(p_logits, q_logits, temp).tolist()
    result = {
        "prompts": len(target_outs), "positions": positions,
        "greedy_acceptance": accept / positions,
        "sampled_acceptance": {f"T={t}": sum(v) / len(v) for t, v in sampled.items()},
        # Checks that torch and halo compute the same model: the torch target must reproduce halo's
        # target greedy output, and the torch draft halo's draft output (bf16 rounding aside).
        "torch_vs_halo_target": greedy_agreement(target, target_outs),
        "torch_vs_halo_draft": greedy_agreement(draft, draft_outs),
        "examples": [{"prompt": t["prompt"], "target": t["text"], "draft": d["text"]}
                     for t, d in zip(target_outs[:5], draft_outs[:5])],
    }
    with open(os.path.join(args.work, "eval.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


# ------------------------------------------------------------------------------------------- cli

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["generate", "train", "export", "eval", "all"])
    ap.add_argument("--work", default="/tmp/distill", help="scratch directory for data and checkpoints")
    ap.add_argument("--target", default=os.path.join(REPO, "models", "pkgchat-5m"))
    ap.add_argument("--out", default=os.path.join(REPO, "models", "pkgchat-5m-draft"))
    ap.add_argument("--halo", default=os.path.join(REPO, "build", "bin", "halo"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--scale", type=float, default=1.0, help="generate: multiply every run's prompt count")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=176)
    ap.add_argument("--steps", type=int, default=1400)
    ap.add_argument("--batch-tokens", type=int, default=8192, help="padded tokens per training batch")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=50)
    return ap.parse_args()


def main():
    args = parse_args()
    steps = {"generate": cmd_generate, "train": cmd_train, "export": cmd_export, "eval": cmd_eval}
    for name in (list(steps) if args.command == "all" else [args.command]):
        steps[name](args)


if __name__ == "__main__":
    main()
