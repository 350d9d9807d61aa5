// Checks tools/make_gguf.py's GGUF files and halo's tokenizer-from-GGUF
// against llama.cpp itself (the npm package node-llama-cpp, pinned in
// tests/js/package.json, which ships llama.cpp's prebuilt CPU binaries).
//
//   node compare_gguf_llama_cpp.mjs --dump PATH/TO/tokenize_dump --python /usr/bin/python3
//        --root HALO_SOURCE_DIR --work DIR [--corpus FILE.jsonl]
//
// 1. models/pkgchat-5m is written to GGUF (f32) by make_gguf.py, and the
//    tokenizers of tests/data/tokenizers (llama2, mistral, llama3, qwen3) to
//    vocabulary-only GGUFs, each with its metadata as JSON; halo's tokenizer
//    built from that metadata
//    (tokenize_dump --gguf-metadata) must give the same ids as llama.cpp's
//    tokenizer (model.tokenize(text, true): special tokens recognized, no
//    BOS) for every corpus line, and llama.cpp's detokenize must give what
//    halo's decode gives (special tokens rendered / skipped). Known llama.cpp
//    departures from the Hugging Face tokenizers are handled below (NFC,
//    FORCED_CONTROL).
// 2. llama.cpp's greedy tokens for a chat prompt on that GGUF (and on GGUFs of
//    small random qwen3 and untied llama models) must equal those of the
//    independent numpy reference tests/reference/forward.py on the original
//    safetensors: the tensor names, shapes and the q/k row permutation of
//    the "llama" architecture are what llama.cpp expects.
// Exits 77 (ctest: skipped) with the reason when llama.cpp's binary cannot be
// loaded on this machine; 1 on any mismatch or a missing package.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const INSTALL_HINT = "run scripts/install-deps.sh --test (npm ci in tests/js installs node-llama-cpp 3.21.1)";

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(arg("root", path.join(here, "..", "..")));
const dump = arg("dump");
const halo = arg("halo");  // the halo binary, for part 3
const python = arg("python", "/usr/bin/python3");
const work = path.resolve(arg("work", path.join(root, "build", "gguf_llama_cpp")));
const corpusPath = arg("corpus", path.join(here, "corpus.jsonl"));
fs.mkdirSync(work, { recursive: true });

const entry = path.join(root, "tests", "js", "node_modules", "node-llama-cpp", "dist", "index.js");
if (!fs.existsSync(entry)) {
  console.error(`compare_gguf_llama_cpp: ${entry} is missing: ${INSTALL_HINT}`);
  process.exit(1);
}
const nodeMajor = Number(process.versions.node.split(".")[0]);
if (nodeMajor < 20) {
  console.log(`SKIPPED: node-llama-cpp 3.21.1 needs Node.js 20 or later; this is ${process.version} (Debian 12 ships 18)`);
  process.exit(77);
}
let llama, LlamaLogLevel;
try {
  const mod = await import(pathToFileURL(entry).href);
  LlamaLogLevel = mod.LlamaLogLevel;
  llama = await mod.getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
} catch (e) {
  console.log(`SKIPPED: node-llama-cpp's prebuilt llama.cpp binary cannot run here: ${e}`);
  process.exit(77);
}

const run = (cmd, args) => execFileSync(cmd, args, { encoding: "utf8", maxBuffer: 1 << 28 });
const texts = fs
  .readFileSync(corpusPath, "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => {
    const j = JSON.parse(l);
    return typeof j === "string" ? j : j.text;
  });
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
let failures = 0;
let checks = 0;

// ---------------------------------------------------------------- 1. tokenizer
const pk = path.join(root, "models", "pkgchat-5m");
const pkGguf = path.join(work, "pkgchat-5m.f32.gguf");
const tokenizers = [
  ["pkgchat-5m", pk, false],
  ...["llama2", "mistral", "llama3", "qwen3"].map((n) => [n, path.join(root, "tests", "data", "tokenizers", n), true]),
];
// Where llama.cpp knowingly differs from the Hugging Face tokenizer that halo
// follows: Qwen's tokenizer.json normalizes to NFC and llama.cpp does not (so
// llama.cpp gets the NFC text), and llama.cpp turns a few end-of-generation
// strings into control tokens even where the vocabulary has them as normal
// tokens ("</s>" in Qwen's), so lines containing them are not compared.
const NFC = new Set(["qwen3"]);
const FORCED_CONTROL = { qwen3: ["</s>"] };
for (const [name, dir, vocabOnly] of tokenizers) {
  const gguf = vocabOnly ? path.join(work, `${name}.vocab.gguf`) : pkGguf;
  const meta = path.join(work, `${name}.metadata.json`);
  run(python, [
    path.join(root, "tools", "make_gguf.py"),
    ...(vocabOnly ? ["--vocab-only"] : []),
    dir,
    gguf,
    "--outtype",
    "f32",
    "--metadata-json",
    meta,
  ]);
  const dumped = run(dump, ["--gguf-metadata", meta, corpusPath])
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l));
  const model = await llama.loadModel({ modelPath: gguf, vocabOnly });
  const bos = model.tokens.bos;
  let bad = 0;
  let skipped = 0;
  for (let i = 0; i < texts.length; ++i) {
    const text = texts[i];
    if ((FORCED_CONTROL[name] ?? []).some((t) => text.includes(t))) {
      ++skipped;
      continue;
    }
    const ref = Array.from(model.tokenize(NFC.has(name) ? text.normalize("NFC") : text, true));
    const halo = dumped[i].ids_plain;
    ++checks;
    if (!same(ref, halo)) {
      ++bad;
      console.log(
        `${name}: tokenize mismatch on ${JSON.stringify(text)}\n  llama.cpp ${JSON.stringify(ref)}\n  halo      ${JSON.stringify(halo)}`,
      );
      continue;
    }
    // with BOS when the tokenizer adds it (halo's encode(text, true))
    const ids = dumped[i].ids;
    const withBos = ids.length > ref.length ? [bos, ...ref] : ref;
    ++checks;
    if (!same(ids, withBos)) {
      ++bad;
      console.log(`${name}: BOS mismatch on ${JSON.stringify(text)}: halo ${JSON.stringify(ids.slice(0, 3))}`);
      continue;
    }
    // detokenize: special tokens rendered (with BOS) and left out (without
    // the leading special tokens: llama.cpp drops the space prefix from the
    // very first token even when that is a special token it leaves out)
    let lead = 0;
    while (lead < ref.length && model.isSpecialToken(ref[lead])) ++lead;
    for (const [toks, special, want] of [
      [ids, true, dumped[i].decoded_raw],
      [ref.slice(lead), false, dumped[i].decoded_plain],
    ]) {
      const back = model.detokenize(toks, special);
      ++checks;
      if (back !== want) {
        ++bad;
        console.log(
          `${name}: detokenize(specialTokens ${special}) mismatch on ${JSON.stringify(text)}\n  llama.cpp ${JSON.stringify(back)}\n  halo      ${JSON.stringify(want)}`,
        );
      }
    }
  }
  failures += bad;
  console.log(
    `tokenizer ${name}: ${texts.length - skipped} corpus lines compared with llama.cpp` +
      (skipped ? ` (${skipped} left out: ${FORCED_CONTROL[name].join(" ")})` : "") +
      `, ${bad} mismatches`,
  );
  await model.dispose();
}

// ---------------------------------------------------------------- 2. greedy tokens
async function greedy(gguf, promptIds, steps) {
  const m = await llama.loadModel({ modelPath: gguf });
  const ctx = await m.createContext({ contextSize: 256, batchSize: 256 });
  const seq = ctx.getSequence();
  const out = [];
  for await (const t of seq.evaluate(promptIds, { temperature: 0 })) {
    out.push(t);
    if (out.length >= steps) break;
  }
  await ctx.dispose();
  await m.dispose();
  return out;
}

const steps = 8;
const models = [["pkgchat-5m", pk, null]];
for (const [name, args] of [
  ["rand-qwen3", ["--family", "qwen3", "--head-dim", "32", "--heads", "4", "--hidden", "64", "--dtype", "fp32"]],
  ["rand-llama", ["--family", "llama", "--dtype", "fp32"]],
]) {
  const dir = path.join(work, name);
  fs.rmSync(dir, { recursive: true, force: true });
  run(python, [path.join(root, "tools", "make_test_model.py"), "--out", dir, ...args]);
  models.push([name, dir, null]);
}
// chat prompt (halo's ids: they equal llama.cpp's, checked above)
const prompt = "<s><|user|>\nWhat does the package curl do?<|end|>\n<|assistant|>\n";
const promptIds = Array.from((await llama.loadModel({ modelPath: pkGguf })).tokenize(prompt, true));
for (const [name, dir] of models) {
  const gguf = path.join(work, `${name}.greedy.f32.gguf`);
  run(python, [path.join(root, "tools", "make_gguf.py"), dir, gguf, "--outtype", "f32"]);
  const ref = JSON.parse(
    run(python, [path.join(root, "tests", "reference", "forward.py"), dir, "--prompt-ids", promptIds.join(","), "--steps", String(steps)]),
  ).greedy_ids;
  const got = await greedy(gguf, promptIds, steps);
  ++checks;
  if (!same(got, ref)) {
    ++failures;
    console.log(`greedy mismatch for ${name}\n  llama.cpp ${JSON.stringify(got)}\n  reference ${JSON.stringify(ref)}`);
  } else {
    console.log(`greedy ${name}: ${JSON.stringify(got)} (llama.cpp = numpy reference)`);
  }
}

// ---------------------------------------------------------------- 3. halo = llama.cpp on Q8_0
// The same Q8_0 file, greedy, in halo and in llama.cpp: both quantize the
// activations to int8 per block of 32 and multiply by the Q8_0 blocks, so the
// arithmetic agrees up to summation order and 16+ greedy tokens must match.
if (halo) {
  const qsteps = 24;
  for (const [name, dir] of models.filter(([n]) => n !== "rand-qwen3")) {
    const gguf = path.join(work, `${name}.q8_0.gguf`);
    run(python, [path.join(root, "tools", "make_gguf.py"), dir, gguf, "--outtype", "q8_0"]);
    const want = await greedy(gguf, promptIds, qsteps);
    const out = run(halo, ["generate", gguf, "--prompt-ids", promptIds.join(","), "--max-tokens", String(qsteps),
                           "--temperature", "0", "--ignore-eos", "--output", "json", "--threads", "1"]);
    const got = JSON.parse(out.trim().split("\n").pop()).token_ids;
    ++checks;
    let agree = 0;
    while (agree < Math.min(got.length, want.length) && got[agree] === want[agree]) ++agree;
    if (agree < 16) {
      ++failures;
      console.log(`Q8_0 greedy of ${name}: halo and llama.cpp agree on ${agree} tokens (< 16)\n  llama.cpp ${JSON.stringify(want)}\n  halo      ${JSON.stringify(got)}`);
    } else {
      console.log(`Q8_0 greedy of ${name}: halo = llama.cpp for ${agree} of ${qsteps} tokens`);
    }
  }
}

console.log(`${checks - failures} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
