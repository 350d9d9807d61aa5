"""LLM.chat and the chat template: halo's rendering equals Python jinja2's."""
import json
import os

import jinja2
import pytest

from halo import SamplingParams

CONV = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is curl?"},
]
CONV2 = [
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi. How can I help?"},
    {"role": "user", "content": "Name a text editor."},
]


def jinja_render(model_dir, messages, add_generation_prompt):
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(config["chat_template"]).render(
        messages=messages, add_generation_prompt=add_generation_prompt,
        bos_token=config["bos_token"], eos_token=config["eos_token"])


def test_rendering_matches_jinja2(llm, model_dir):
    tok = llm.get_tokenizer()
    for conv in (CONV, CONV2):
        for agp in (True, False):
            assert tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=agp) == \
                jinja_render(model_dir, conv, agp)


def test_chat_one_conversation(llm):
    tok = llm.get_tokenizer()
    outs = llm.chat(CONV, SamplingParams(temperature=0, max_tokens=16))
    assert len(outs) == 1
    expected = tok.apply_chat_template(CONV, tokenize=False, add_generation_prompt=True)
    assert outs[0].prompt == expected
    assert expected.endswith("<|assistant|>\n")
    assert outs[0].prompt_token_ids == tok.apply_chat_template(CONV, add_generation_prompt=True)
    # one BOS only
    assert outs[0].prompt_token_ids.count(tok.bos_token_id) == 1
    assert outs[0].outputs[0].token_ids


def test_chat_list_of_conversations(llm):
    tok = llm.get_tokenizer()
    outs = llm.chat([CONV, CONV2], SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
    assert len(outs) == 2
    for conv, out in zip((CONV, CONV2), outs):
        assert out.prompt == tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        assert out.outputs[0].token_ids
    # batched chat equals the conversation alone (greedy)
    alone = llm.chat(CONV2, SamplingParams(temperature=0, max_tokens=12))[0]
    assert alone.outputs[0].token_ids == outs[1].outputs[0].token_ids


def test_chat_template_override_and_kwargs(llm):
    tok = llm.get_tokenizer()
    template = "{% for m in messages %}[{{ m['role'] }}|{{ greeting }}]{{ m['content'] }}{% endfor %}"
    text = tok.apply_chat_template(CONV2, tokenize=False, chat_template=template, greeting="hey")
    assert text == "[user|hey]Hello![assistant|hey]Hi. How can I help?[user|hey]Name a text editor."
    out = llm.chat(CONV2, SamplingParams(temperature=0, max_tokens=4), chat_template=template,
                   chat_template_kwargs={"greeting": "yo"})[0]
    assert out.prompt.startswith("[user|yo]Hello!")


def test_continue_final_message(llm):
    tok = llm.get_tokenizer()
    conv = CONV2 + [{"role": "assistant", "content": "Vim is"}]
    text = tok.apply_chat_template(conv, tokenize=False, continue_final_message=True)
    assert text.endswith("Vim is")
    out = llm.chat(conv, SamplingParams(temperature=0, max_tokens=4), add_generation_prompt=False,
                   continue_final_message=True)[0]
    assert out.prompt.endswith("Vim is")


def test_template_error_is_a_value_error(llm):
    with pytest.raises(ValueError) as info:
        llm.chat([{"role": "robot", "content": "beep"}], SamplingParams(max_tokens=2))
    print(info.value)
    assert "robot" in str(info.value)


# A tool conversation as the OpenAI SDKs send it (content None beside
# tool_calls, arguments as JSON text), under Qwen3's own template: LLM.chat
# renders it as jinja2 renders the conversation vLLM prepares (arguments as
# objects, content ""), with the tools in the prompt.
QWEN3_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "tokenizers",
                            "qwen3", "tokenizer_config.json")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SDK_TOOL_CONV = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
]


def test_chat_with_tool_history_renders_as_vllm_prepares_it(llm):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jinja"))
    from render_reference import ENV  # transformers' jinja2 environment (tojson as it overrides it)

    with open(QWEN3_CONFIG, encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    prepared = json.loads(json.dumps(SDK_TOOL_CONV))
    prepared[1]["content"] = ""
    prepared[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    want = ENV.from_string(template).render(messages=prepared, tools=TOOLS, add_generation_prompt=True)
    with pytest.raises(Exception):  # the null as the SDKs send it breaks the template in jinja2 too
        ENV.from_string(template).render(messages=SDK_TOOL_CONV, tools=TOOLS, add_generation_prompt=True)
    assert "<tool_response>" in want and "get_weather" in want
    tok = llm.get_tokenizer()
    assert tok.apply_chat_template(SDK_TOOL_CONV, tools=TOOLS, tokenize=False, chat_template=template,
                                   add_generation_prompt=True) == want
    out = llm.chat(SDK_TOOL_CONV, SamplingParams(temperature=0, max_tokens=4), chat_template=template, tools=TOOLS)[0]
    assert out.prompt == want
    bad = [SDK_TOOL_CONV[0], SDK_TOOL_CONV[1], {"role": "tool", "content": "x"}]
    with pytest.raises(ValueError, match="tool_call_id"):
        llm.chat(bad, SamplingParams(max_tokens=2), chat_template=template, tools=TOOLS)
