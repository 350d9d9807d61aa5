"""LLM.generate: the offline example, greedy parity with `halo generate`, and the input
and sampling forms vLLM users rely on."""
import json
import math
import subprocess

import pytest

from halo import LLM, CompletionOutput, Logprob, RequestOutput, SamplingParams

EXAMPLE_PROMPTS = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]


def test_offline_example(llm):
    # vLLM's examples/offline_inference/basic.py, as users copy it.
    sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
    outputs = llm.generate(EXAMPLE_PROMPTS, sampling_params)
    for output in outputs:
        prompt = output.prompt
        generated_text = output.outputs[0].text
        print(f"Prompt: {prompt!r}, Generated text: {generated_text!r}")

    assert len(outputs) == 4
    for prompt, output in zip(EXAMPLE_PROMPTS, outputs):
        assert isinstance(output, RequestOutput)
        assert output.prompt == prompt
        assert output.finished
        assert output.prompt_token_ids == llm.get_tokenizer().encode(prompt)
        [completion] = output.outputs
        assert isinstance(completion, CompletionOutput)
        assert completion.token_ids, prompt
        assert 1 <= len(completion.token_ids) <= 16
        assert completion.finish_reason in {"stop", "length"}
        assert completion.finished()
        assert completion.cumulative_logprob is None and completion.logprobs is None
    # request ids count up across calls, as vLLM's
    ids = [int(o.request_id) for o in outputs]
    assert ids == list(range(ids[0], ids[0] + 4))
    again = llm.generate(EXAMPLE_PROMPTS[0], sampling_params, use_tqdm=False)
    assert int(again[0].request_id) == ids[-1] + 1
    assert "RequestOutput(request_id=" in repr(outputs[0])
    assert "CompletionOutput(index=0" in repr(outputs[0].outputs[0])


def halo_generate_json(halo_bin, model_dir, prompts, max_tokens):
    args = [halo_bin, "generate", model_dir, "--temperature", "0", "--max-tokens", str(max_tokens),
            "--output", "json", "--log-level", "warn"]
    for p in prompts:
        args += ["--prompt", p]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_greedy_matches_halo_generate(llm, halo_bin, model_dir):
    prompts = ["Hello, my name is", "The capital of France is", "What is a compiler?"]
    cli = halo_generate_json(halo_bin, model_dir, prompts, 24)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24))
    assert len(cli) == len(outs) == 3
    for row, out in zip(cli, outs):
        assert out.prompt_token_ids == row["prompt_token_ids"]
        assert out.outputs[0].token_ids == row["token_ids"], row["prompt"]
        assert out.outputs[0].text == row["text"]
        assert out.outputs[0].finish_reason == row["finish_reason"]


def greedy(max_tokens=24, **kw):
    return SamplingParams(temperature=0, max_tokens=max_tokens, **kw)


def test_prompt_forms_agree(llm):
    tok = llm.get_tokenizer()
    text = "The capital of France is"
    ids = tok.encode(text)
    by_text = llm.generate(text, greedy())[0]
    by_ids = llm.generate(prompt_token_ids=ids, sampling_params=greedy())[0]
    by_dicts = llm.generate([{"prompt": text}, {"prompt_token_ids": ids}], greedy())
    assert by_ids.prompt is None and by_ids.prompt_token_ids == ids
    assert by_dicts[0].prompt == text
    for out in (by_ids, *by_dicts):
        assert out.outputs[0].token_ids == by_text.outputs[0].token_ids
    # a list of token-id lists
    two = llm.generate(prompt_token_ids=[ids, ids[:3]], sampling_params=greedy(4))
    assert [o.prompt_token_ids for o in two] == [ids, ids[:3]]


def test_sampling_params_list_and_length_mismatch(llm):
    prompts = ["Hello, my name is", "The future of AI is"]
    outs = llm.generate(prompts, [greedy(3, ignore_eos=True), greedy(7, ignore_eos=True)])
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 7]
    assert all(o.outputs[0].finish_reason == "length" for o in outs)
    with pytest.raises(ValueError, match="same"):
        llm.generate(prompts, [greedy(3)])
    with pytest.raises(ValueError):
        llm.generate(prompts, [greedy(3)] * 3)


def test_default_sampling_params(llm):
    sp = llm.get_default_sampling_params()
    # models/pkgchat-5m/generation_config.json: temperature 0.7, top_p 0.9, max_new_tokens 256
    assert sp.temperature == pytest.approx(0.7)
    assert sp.top_p == pytest.approx(0.9)
    assert sp.max_tokens == 256
    # sampling_params=None uses the model's defaults (max_tokens 256, not vLLM's 16)
    out = llm.generate("Tell me a long story about a file system.", None, use_tqdm=False)[0]
    assert out.outputs[0].token_ids


def test_n_gives_n_outputs(llm):
    out = llm.generate("The future of AI is", SamplingParams(n=2, temperature=1.0, seed=7,
                                                             max_tokens=8))[0]
    assert [c.index for c in out.outputs] == [0, 1]
    assert all(c.token_ids for c in out.outputs)


def test_logprobs(llm):
    out = llm.generate("Hello, my name is", greedy(10, logprobs=2, ignore_eos=True))[0]
    c = out.outputs[0]
    assert len(c.token_ids) == 10
    assert c.logprobs is not None and len(c.logprobs) == 10
    total = 0.0
    for tid, entry in zip(c.token_ids, c.logprobs):
        assert tid in entry
        assert 2 <= len(entry) <= 3
        assert all(isinstance(lp, Logprob) for lp in entry.values())
        sampled = entry[tid]
        # greedy: the sampled token is the most likely one
        assert sampled.rank == 1
        assert sampled.logprob <= 0.0 and math.isfinite(sampled.logprob)
        assert sorted(lp.rank for lp in entry.values() if lp.rank is not None) == [1, 2]
        assert sampled.logprob == max(lp.logprob for lp in entry.values())
        total += sampled.logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-6)


def test_prompt_logprobs(llm):
    out = llm.generate("Hello, my name is", greedy(2, prompt_logprobs=1))[0]
    pl = out.prompt_logprobs
    assert pl is not None and len(pl) == len(out.prompt_token_ids)
    assert pl[0] is None
    for tid, entry in zip(out.prompt_token_ids[1:], pl[1:]):
        assert tid in entry


def test_stop_string(llm):
    base = llm.generate("The capital of France is", greedy(24, ignore_eos=True))[0].outputs[0]
    assert len(base.text) > 12, base.text
    stop = base.text[6:10]
    first = base.text.find(stop)
    out = llm.generate("The capital of France is", greedy(24, ignore_eos=True, stop=stop))[0].outputs[0]
    assert out.finish_reason == "stop"
    assert out.stop_reason == stop
    assert out.text == base.text[:first]
    with_stop = llm.generate("The capital of France is",
                             greedy(24, ignore_eos=True, stop=[stop], include_stop_str_in_output=True)
                             )[0].outputs[0]
    assert with_stop.text == base.text[:first + len(stop)]


def test_stop_token_ids(llm):
    base = llm.generate("Hello, my name is", greedy(24, ignore_eos=True))[0].outputs[0]
    # the first token that did not occur before it
    k = next(i for i in range(2, len(base.token_ids)) if base.token_ids[i] not in base.token_ids[:i])
    stop_id = base.token_ids[k]
    out = llm.generate("Hello, my name is", greedy(24, ignore_eos=True, stop_token_ids=[stop_id]))[0]
    c = out.outputs[0]
    assert c.finish_reason == "stop"
    assert c.stop_reason == stop_id
    assert c.token_ids[:k] == base.token_ids[:k]
    assert len(c.token_ids) in (k, k + 1)


def test_min_tokens_and_ignore_eos(llm):
    out = llm.generate("Hello", greedy(40, ignore_eos=True, min_tokens=40))[0].outputs[0]
    assert len(out.token_ids) == 40 and out.finish_reason == "length"


def test_progress_bar(llm, capsys):
    llm.generate(EXAMPLE_PROMPTS[:3], greedy(4), use_tqdm=True)
    err = capsys.readouterr().err
    assert "Processed prompts" in err and "3/3" in err
    llm.generate(EXAMPLE_PROMPTS[:3], greedy(4), use_tqdm=False)
    llm.generate(EXAMPLE_PROMPTS[0], greedy(4))  # one prompt: no bar
    assert "Processed prompts" not in capsys.readouterr().err


def test_embedded_model(llm):
    embedded = LLM(max_num_seqs=2)  # model "" is halo's embedded pkgchat-5m
    assert embedded.engine.model_dir.rstrip("/").endswith("pkgchat-5m")
    a = embedded.generate("Hello, my name is", greedy(12))[0].outputs[0].token_ids
    b = llm.generate("Hello, my name is", greedy(12))[0].outputs[0].token_ids
    assert a == b


def test_speculative_config_keeps_greedy_output(llm, model_dir):
    # vLLM's LLM(speculative_config={...}): prompt lookup; greedy output is plain decoding's.
    prompts = ["apt install apt install apt install", "What is curl? curl is a tool. What is curl?"]
    plain = llm.generate(prompts, greedy(48, ignore_eos=True))
    spec = LLM(model=model_dir, max_num_seqs=4,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})
    outs = spec.generate(prompts, greedy(48, ignore_eos=True))
    for a, b in zip(plain, outs):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
    with pytest.raises(Exception, match="num_speculative_tokens"):
        LLM(model=model_dir, speculative_config={"method": "ngram"})
