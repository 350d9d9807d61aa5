"""Bad parameters raise ValueError with a message that names what is wrong."""
import pytest

from halo import LLM, SamplingParams


@pytest.mark.parametrize("kwargs, word", [
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"top_k": -5}, "top_k"),
    ({"logprobs": 1000}, "logprobs"),
])
def test_bad_sampling_params(llm, kwargs, word):
    with pytest.raises(ValueError) as info:
        llm.generate("Hello", SamplingParams(**kwargs), use_tqdm=False)
    message = str(info.value)
    print(f"{kwargs} -> {message}")
    assert word in message


def test_bad_params_in_a_batch_run_nothing(llm):
    before = llm.engine.metrics()
    with pytest.raises(ValueError, match="temperature"):
        llm.generate(["Hello", "World"], [SamplingParams(max_tokens=2), SamplingParams(temperature=-1)])
    # the engine still serves afterwards
    out = llm.generate("Hello", SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
    assert out[0].outputs[0].token_ids
    assert isinstance(before, dict)


def test_unknown_sampling_param_is_a_type_error():
    with pytest.raises(TypeError):
        SamplingParams(temprature=0.5)


def test_prompt_longer_than_context(llm):
    too_long = [100 + i % 3000 for i in range(600)]  # max_model_len is 512
    with pytest.raises(ValueError) as info:
        llm.generate(prompt_token_ids=too_long, sampling_params=SamplingParams(max_tokens=4))
    print(info.value)
    assert "512" in str(info.value) or "max_model_len" in str(info.value) or "context" in str(info.value)


def test_refused_engine_argument(model_dir):
    # halo refuses the pre-0.8 speculative spelling; the message names the source and the setting
    with pytest.raises(ValueError) as info:
        LLM(model_dir, speculative_model="draft")
    print(info.value)
    message = str(info.value)
    assert message.startswith("LLM") and "speculative_model" in message and "speculative_config" in message


def test_unknown_engine_argument(model_dir):
    with pytest.raises(ValueError) as info:
        LLM(model_dir, no_such_engine_argument=3)
    print(info.value)
    assert "no_such_engine_argument" in str(info.value)


def test_bad_engine_value(model_dir):
    with pytest.raises(ValueError) as info:
        LLM(model_dir, max_num_seqs="many")
    print(info.value)
    assert "max_num_seqs" in str(info.value)


def test_missing_model_is_a_runtime_error(tmp_path):
    with pytest.raises(RuntimeError):
        LLM(str(tmp_path / "no-such-model"))
