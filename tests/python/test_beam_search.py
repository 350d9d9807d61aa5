"""Beam search through the Python API (vLLM's LLM.beam_search and the older
SamplingParams(use_beam_search=True)) equals `halo generate --beam-width`."""
import json
import subprocess

import pytest

from halo import BeamSearchParams, SamplingParams

PROMPT = "San Francisco is a"


def cli_beams(halo_bin, model_dir, width, max_tokens, length_penalty=1.0):
    args = [halo_bin, "generate", model_dir, "--prompt", PROMPT, "--beam-width", str(width),
            "--max-tokens", str(max_tokens), "--length-penalty", str(length_penalty), "--output", "json",
            "--max-model-len", "512"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[0])["outputs"]


@pytest.mark.parametrize("width,penalty", [(2, 1.0), (4, 0.5)])
def test_beam_search_equals_halo_generate(llm, halo_bin, model_dir, width, penalty):
    want = cli_beams(halo_bin, model_dir, width, 12, penalty)
    out = llm.beam_search([PROMPT], BeamSearchParams(beam_width=width, max_tokens=12, length_penalty=penalty))
    seqs = out[0].sequences
    assert len(seqs) == width
    prompt_ids = llm.get_tokenizer().encode(PROMPT)
    for got, w in zip(seqs, want):
        assert got.tokens == prompt_ids + w["token_ids"]
        assert got.text == PROMPT + w["text"]
        assert got.cum_logprob == pytest.approx(w["cumulative_logprob"], abs=1e-6)
        assert got.finish_reason == w["finish_reason"]
    # The older SamplingParams form gives the same hypotheses as outputs.
    old = llm.generate(PROMPT, SamplingParams(n=width, use_beam_search=True, temperature=0, max_tokens=12,
                                              length_penalty=penalty), use_tqdm=False)[0]
    assert [c.token_ids for c in old.outputs] == [w["token_ids"] for w in want]


def test_beam_search_refuses_sampling_fields(llm):
    with pytest.raises(ValueError, match="temperature"):
        llm.generate(PROMPT, SamplingParams(n=2, use_beam_search=True, temperature=0.7), use_tqdm=False)
    with pytest.raises(ValueError, match="length_penalty"):
        llm.generate(PROMPT, SamplingParams(length_penalty=0.5), use_tqdm=False)
