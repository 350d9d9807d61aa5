"""The Tokenizer of LLM.get_tokenizer() against the model's tokenizer files."""
import json
import os


def load(model_dir, name):
    with open(os.path.join(model_dir, name), encoding="utf-8") as f:
        return json.load(f)


def test_round_trip(llm):
    tok = llm.get_tokenizer()
    for text in ["Hello, my name is", "The capital of France is Paris.", "  spaces\tand\nlines  "]:
        ids = tok.encode(text)
        assert ids[0] == tok.bos_token_id
        assert tok.encode(text, add_special_tokens=False) == ids[1:]
        assert tok.decode(ids) == text
        assert tok(text)["input_ids"] == ids
    assert tok.decode(tok.encode("Hi"), skip_special_tokens=False).startswith(tok.bos_token)


def test_special_tokens_match_the_files(llm, model_dir):
    tok = llm.get_tokenizer()
    config = load(model_dir, "tokenizer_config.json")
    tj = load(model_dir, "tokenizer.json")
    by_content = {t["content"]: t["id"] for t in tj["added_tokens"]}
    assert tok.eos_token == config["eos_token"]
    assert tok.bos_token == config["bos_token"]
    assert tok.eos_token_id == by_content[config["eos_token"]]
    assert tok.bos_token_id == by_content[config["bos_token"]]
    assert tok.convert_tokens_to_ids(tok.eos_token) == tok.eos_token_id
    assert tok.convert_tokens_to_ids([tok.bos_token, tok.eos_token]) == [tok.bos_token_id, tok.eos_token_id]
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == tok.eos_token
    assert tok.pad_token_id is None  # pad_token is null in tokenizer_config.json


def test_added_tokens_decoder(llm, model_dir):
    tok = llm.get_tokenizer()
    tj = load(model_dir, "tokenizer.json")
    decoder = tok.added_tokens_decoder
    assert decoder
    expected = {t["id"]: t["content"] for t in tj["added_tokens"]}
    assert {i: t.content for i, t in decoder.items()} == expected
    assert all(str(t) == t.content for t in decoder.values())


def test_vocab_size(llm, model_dir):
    tok = llm.get_tokenizer()
    config = load(model_dir, "config.json")
    assert tok.vocab_size == config["vocab_size"]
    assert len(tok) >= tok.vocab_size
    assert llm.engine.vocab_size == config["vocab_size"]
    ids = tok.encode("Hello world", add_special_tokens=False)
    pieces = tok.convert_ids_to_tokens(ids)
    assert len(pieces) == len(ids) and tok.convert_tokens_to_ids(pieces) == ids
