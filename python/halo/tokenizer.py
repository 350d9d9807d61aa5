"""A tokenizer with the Hugging Face transformers methods vLLM users call, over the
engine's own tokenizer (tokenizer.json read by halo)."""
import json
import os
from typing import Any, Dict, List, Optional, Union


class AddedToken:
    """Like tokenizers.AddedToken: .content, and str() is the content."""

    __slots__ = ("content", "special", "single_word", "lstrip", "rstrip", "normalized")

    def __init__(self, content: str, special: bool = False, single_word: bool = False,
                 lstrip: bool = False, rstrip: bool = False, normalized: bool = False) -> None:
        self.content = content
        self.special = special
        self.single_word = single_word
        self.lstrip = lstrip
        self.rstrip = rstrip
        self.normalized = normalized

    def __str__(self) -> str:
        return self.content

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AddedToken):
            return self.content == other.content
        if isinstance(other, str):
            return self.content == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.content)

    def __repr__(self) -> str:
        return (f"AddedToken({self.content!r}, rstrip={self.rstrip}, lstrip={self.lstrip}, "
                f"single_word={self.single_word}, normalized={self.normalized}, "
                f"special={self.special})")


# Hugging Face apply_chat_template arguments that are not template variables.
_HF_CALL_ARGS = ("padding", "truncation", "max_length", "return_tensors", "return_dict",
                 "return_assistant_tokens_mask", "tokenizer_kwargs", "documents")


def _token_content(value: Any) -> Optional[str]:
    if isinstance(value, dict):
        return value.get("content")
    return value


class Tokenizer:
    """The model's tokenizer (what LLM.get_tokenizer() returns)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._tok = engine.tokenizer()
        self._added: Optional[Dict[int, AddedToken]] = None
        self._config: Optional[Dict[str, Any]] = None

    # --- encoding --------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> List[int]:
        return list(self._tok.encode(text, add_special_tokens))

    def decode(self, token_ids: Union[int, List[int]], skip_special_tokens: bool = True,
               **kwargs: Any) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self._tok.decode(list(token_ids), skip_special_tokens)

    def batch_decode(self, sequences: List[List[int]], skip_special_tokens: bool = True,
                     **kwargs: Any) -> List[str]:
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __call__(self, text: Union[str, List[str]], add_special_tokens: bool = True,
                 **kwargs: Any) -> Dict[str, Any]:
        if isinstance(text, (list, tuple)):
            ids = [self.encode(t, add_special_tokens) for t in text]
            return {"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}
        ids = self.encode(text, add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def convert_tokens_to_ids(self, tokens: Union[str, List[str]]):
        return self._tok.convert_tokens_to_ids(tokens)

    def convert_ids_to_tokens(self, ids: Union[int, List[int]], skip_special_tokens: bool = False):
        if skip_special_tokens and not isinstance(ids, int):
            special = set(self.all_special_ids)
            ids = [i for i in ids if i not in special]
        return self._tok.convert_ids_to_tokens(ids)

    # --- chat ---------------------------------------------------------------------------
    def apply_chat_template(self, conversation: List[Any], tools: Optional[List[Dict[str, Any]]] = None,
                            chat_template: Optional[str] = None, add_generation_prompt: bool = False,
                            continue_final_message: bool = False, tokenize: bool = True,
                            **kwargs: Any):
        """As transformers': the rendered prompt (tokenize=False) or its token ids; extra
        keyword arguments become template variables. A list of conversations gives a list."""
        call = {k: kwargs.pop(k) for k in _HF_CALL_ARGS if k in kwargs}
        if call.get("return_tensors") is not None:
            raise ValueError("halo's tokenizer returns lists: return_tensors is not supported")
        if call.get("documents") is not None:
            kwargs["documents"] = call["documents"]
        if conversation and isinstance(conversation[0], (list, tuple)):
            return [self.apply_chat_template(c, tools=tools, chat_template=chat_template,
                                             add_generation_prompt=add_generation_prompt,
                                             continue_final_message=continue_final_message,
                                             tokenize=tokenize, **call, **kwargs)
                    for c in conversation]
        rendered = render_chat(self._engine, conversation, add_generation_prompt=add_generation_prompt,
                               chat_template=chat_template, tools=tools,
                               chat_template_kwargs=kwargs or None,
                               continue_final_message=continue_final_message)
        if not tokenize:
            return rendered
        ids = list(self._engine.chat_prompt_ids(rendered))
        if call.get("truncation") and call.get("max_length"):
            ids = ids[:call["max_length"]]
        if call.get("return_dict"):
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        return ids

    @property
    def chat_template(self) -> Optional[str]:
        return self._config_json().get("chat_template")

    # --- special tokens ---------------------------------------------------------------------
    @property
    def eos_token_id(self) -> Optional[int]:
        return self._tok.eos_token_id

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._tok.bos_token_id

    @property
    def eos_token(self) -> Optional[str]:
        return self._tok.eos_token or None

    @property
    def bos_token(self) -> Optional[str]:
        return self._tok.bos_token or None

    @property
    def pad_token(self) -> Optional[str]:
        return _token_content(self._config_json().get("pad_token"))

    @property
    def pad_token_id(self) -> Optional[int]:
        token = self.pad_token
        if not token:
            return None
        tid = self.convert_tokens_to_ids(token)
        return tid if isinstance(tid, int) else None

    @property
    def unk_token(self) -> Optional[str]:
        return _token_content(self._config_json().get("unk_token"))

    @property
    def all_special_ids(self) -> List[int]:
        return list(self._tok.special_token_ids())

    @property
    def all_special_tokens(self) -> List[str]:
        return list(self.convert_ids_to_tokens(self.all_special_ids))

    @property
    def added_tokens_decoder(self) -> Dict[int, AddedToken]:
        if self._added is None:
            special = set(self._tok.special_token_ids())
            self._added = {int(i): AddedToken(str(c), special=int(i) in special)
                           for i, c in sorted(dict(self._tok.added_tokens_decoder).items())}
        return dict(self._added)

    def get_added_vocab(self) -> Dict[str, int]:
        return {t.content: i for i, t in self.added_tokens_decoder.items()}

    # --- vocabulary ----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._tok.vocab_size

    def __len__(self) -> int:
        return len(self._tok)

    def get_vocab(self) -> Dict[str, int]:
        ids = list(range(len(self)))
        return {t: i for i, t in zip(ids, self.convert_ids_to_tokens(ids)) if t is not None}

    @property
    def name_or_path(self) -> str:
        return self._engine.model_dir

    def _config_json(self) -> Dict[str, Any]:
        if self._config is None:
            self._config = {}
            path = os.path.join(self._engine.model_dir, "tokenizer_config.json")
            try:
                with open(path, encoding="utf-8") as f:
                    self._config = json.load(f)
            except (OSError, ValueError):
                pass
        return self._config

    def __repr__(self) -> str:
        return f"halo.Tokenizer(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size})"


def render_chat(engine: Any, conversation: List[Any], *, add_generation_prompt: bool = True,
                chat_template: Optional[str] = None, tools: Optional[List[Dict[str, Any]]] = None,
                chat_template_kwargs: Optional[Dict[str, Any]] = None,
                continue_final_message: bool = False) -> str:
    """One conversation rendered by the engine's chat template (ValueError on template errors)."""
    return engine.render_chat(
        json.dumps(list(conversation)),
        add_generation_prompt,
        chat_template,
        json.dumps(tools) if tools is not None else None,
        json.dumps(chat_template_kwargs) if chat_template_kwargs else None,
        continue_final_message,
    )
