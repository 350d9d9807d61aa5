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
