"""The pure-Python objects: SamplingParams, EngineArgs, outputs, the package's exports."""
import json

import pytest

import halo
from halo import AsyncEngineArgs, EngineArgs, SamplingParams
from halo.outputs import completion_from_choice
from halo.progress import PlainBar


def test_exports():
    for name in ("LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "EngineArgs",
                 "AsyncEngineArgs", "AsyncLLMEngine"):
        assert hasattr(halo, name), name
    assert isinstance(halo.__version__, str) and halo.__version__
    assert halo.__version__ == halo._C.__version__


def test_sampling_params_defaults_are_vllms():
    sp = SamplingParams()
    assert (sp.n, sp.best_of, sp.temperature, sp.top_p, sp.top_k, sp.min_p) == (1, None, 1.0, 1.0, 0, 0.0)
    assert (sp.presence_penalty, sp.frequency_penalty, sp.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (sp.max_tokens, sp.min_tokens, sp.seed, sp.stop, sp.stop_token_ids) == (16, 0, None, None, None)
    assert (sp.logprobs, sp.prompt_logprobs, sp.ignore_eos) == (None, None, False)
    assert sp.skip_special_tokens and sp.spaces_between_special_tokens
    assert not sp.include_stop_str_in_output


def test_sampling_params_json():
    sp = SamplingParams(temperature=0.5, stop="###", stop_token_ids=[5], seed=3, logprobs=2)
    d = json.loads(sp.to_json())
    assert d["stop"] == ["###"] and d["stop_token_ids"] == [5] and d["seed"] == 3
    assert d["temperature"] == 0.5 and d["logprobs"] == 2 and d["max_tokens"] == 16
    assert "best_of" not in d and "prompt_logprobs" not in d  # None left out
    assert set(json.loads(SamplingParams(max_tokens=None).to_json())) >= {"n", "temperature"}
    assert "max_tokens" not in json.loads(SamplingParams(max_tokens=None).to_json())


def test_sampling_params_from_optional_clone_repr():
    sp = SamplingParams.from_optional(temperature=None, top_p=0.5, max_tokens=None)
    assert sp.temperature == 1.0 and sp.top_p == 0.5 and sp.max_tokens == 16
    c = sp.clone()
    assert c == sp and c is not sp
    c.stop = ["x"]
    assert sp.stop is None
    assert repr(sp).startswith("SamplingParams(n=1,") and "top_p=0.5" in repr(sp)
    with pytest.raises(TypeError):
        SamplingParams(bogus=1)


def test_engine_args_settings():
    args = EngineArgs(model="m", max_num_seqs=4, enable_prefix_caching=True, enforce_eager=False,
                      gpu_memory_utilization=0.5)
    settings = args.to_settings()
    assert ("max_num_seqs", "4") in settings
    assert ("enable_prefix_caching", "true") in settings
    assert ("enforce_eager", "false") in settings
    assert ("gpu_memory_utilization", "0.5") in settings
    assert all(v is not None for _, v in settings)
    assert not any(name == "model" for name, _ in settings)
    assert len(settings) == 4  # only the ones set
    a = AsyncEngineArgs(model="m", disable_log_requests=True, compiled_model_dir="/x")
    assert ("disable_log_requests", "true") in a.to_settings()
    assert ("compiled_model_dir", "/x") in a.to_settings()
    with pytest.raises(TypeError):
        EngineArgs(model="m", not_an_arg=1)


def test_completion_from_choice_logprobs():
    choice = {"index": 0, "token_ids": [7, 9], "text": "ab", "finish_reason": "length",
              "stop_reason": None, "finished": True, "error": "",
              "logprobs": [{"token": 7, "logprob": -0.5, "decoded": "a", "top": [[7, -0.5, "a"], [8, -1.5, "b"]]},
                           {"token": 9, "logprob": -3.0, "decoded": "b", "top": [[1, -0.1, "x"], [2, -2.5, "y"]]}]}
    c = completion_from_choice(choice)
    assert c.cumulative_logprob == pytest.approx(-3.5)
    assert list(c.logprobs[0]) == [7, 8] and c.logprobs[0][7].rank == 1 and c.logprobs[0][8].rank == 2
    assert list(c.logprobs[1]) == [9, 1, 2] and c.logprobs[1][9].rank is None
    assert c.logprobs[1][9].decoded_token == "b"
    assert c.finished()


def test_plain_progress_bar(capsys):
    import io
    buf = io.StringIO()
    bar = PlainBar(4, file=buf)
    for _ in range(4):
        bar.update(1)
    bar.set_postfix_str("output: 10.00 toks/s")
    bar.close()
    text = buf.getvalue()
    assert "4/4" in text and "100%" in text and text.endswith("\n")
