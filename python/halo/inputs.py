"""Prompts as vLLM takes them: a string, {"prompt": str} or {"prompt_token_ids": [...]}."""
from typing import Any, List, Optional, Tuple, Union

PromptType = Union[str, dict]


def is_token_ids(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(t, int) for t in value)


def parse_prompt(prompt: Any, tokenizer: Any) -> Tuple[Optional[str], List[int]]:
    """(the prompt text or None, its token ids). Text is encoded with the special tokens."""
    if isinstance(prompt, str):
        return prompt, tokenizer.encode(prompt, add_special_tokens=True)
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            ids = prompt["prompt_token_ids"]
            if not is_token_ids(ids):
                raise TypeError("prompt_token_ids must be a list of int")
            return prompt.get("prompt"), list(ids)
        if "prompt" in prompt:
            if not isinstance(prompt["prompt"], str):
                raise TypeError("'prompt' must be a str")
            return prompt["prompt"], tokenizer.encode(prompt["prompt"], add_special_tokens=True)
        raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
    raise TypeError(f"a prompt must be a str or a dict, not {type(prompt).__name__}")


def prompt_list(prompts: Any, prompt_token_ids: Any) -> List[PromptType]:
    """LLM.generate's prompts / prompt_token_ids arguments as a list of prompts."""
    if prompts is None and prompt_token_ids is None:
        raise ValueError("Either prompts or prompt_token_ids must be provided.")
    if prompts is not None and prompt_token_ids is not None:
        # vLLM's legacy form: both given, the token ids win, the texts stay as prompts.
        texts = [prompts] if isinstance(prompts, str) else list(prompts)
        ids = [prompt_token_ids] if is_token_ids(prompt_token_ids) else list(prompt_token_ids)
        if len(texts) != len(ids):
            raise ValueError("The lengths of prompts and prompt_token_ids must be the same.")
        return [{"prompt": t, "prompt_token_ids": list(i)} for t, i in zip(texts, ids)]
    if prompt_token_ids is not None:
        if is_token_ids(prompt_token_ids) and prompt_token_ids:
            return [{"prompt_token_ids": list(prompt_token_ids)}]
        return [{"prompt_token_ids": list(i)} for i in prompt_token_ids]
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if is_token_ids(prompts) and prompts:
        return [{"prompt_token_ids": list(prompts)}]
    out: List[PromptType] = []
    for p in prompts:
        out.append({"prompt_token_ids": list(p)} if is_token_ids(p) and not isinstance(p, str) else p)
    return out
