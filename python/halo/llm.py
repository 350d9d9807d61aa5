"""LLM: vLLM's offline inference class over halo's engine."""
import itertools
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _C
from .engine_args import EngineArgs, settings_from
from .inputs import parse_prompt, prompt_list
from .outputs import (BeamSearchOutput, BeamSearchSequence, EmbeddingRequestOutput, RequestOutput,
                      embedding_output_from_result,
                      request_output_from_result)
from .lora.request import lora_list, with_lora
from .progress import progress_for
from .sampling_params import BeamSearchParams, PoolingParams, SamplingParams, params_json
from .tokenizer import Tokenizer, render_chat

class LLM:
    """An engine for offline generation, as vLLM's LLM.

    model: a model directory, a Hugging Face id, a .gguf file or "" (halo's embedded model).
    Keyword arguments are vLLM's engine arguments (see EngineArgs); others are passed to
    the engine as settings too (halo's flag names work), and the engine refuses the ones
    it does not know or support with ValueError.
    """

    def __init__(self, model: str = "", tokenizer: Optional[str] = None, *,
                 device: Optional[str] = "cpu", **kwargs: Any) -> None:
        known, unknown = EngineArgs.split_kwargs(kwargs)
        self.engine_args = EngineArgs(model=model, tokenizer=tokenizer, device=device, **known)
        settings = self.engine_args.to_settings() + settings_from(unknown.items())
        self._engine = _C.Engine(model, settings, "LLM")
        self._tokenizer: Optional[Tokenizer] = None
        self._counter = itertools.count()

    # --- engine information ---------------------------------------------------------------
    @property
    def engine(self) -> Any:
        """The _C.Engine underneath."""
        return self._engine

    @property
    def llm_engine(self) -> "LLM":
        """For code written as llm.llm_engine.get_tokenizer()."""
        return self

    def get_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self._engine)
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's defaults with the model's generation_config.json over them."""
        return SamplingParams.from_optional(**self._engine.generation_defaults)

    def metrics(self) -> Dict[str, Any]:
        return self._engine.metrics()

    # --- generation -------------------------------------------------------------------------
    def generate(self, prompts: Any = None,
                 sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
                 prompt_token_ids: Optional[Union[List[int], List[List[int]]]] = None,
                 use_tqdm: Any = True, lora_request: Any = None,
                 prompt_adapter_request: Any = None, guided_options_request: Any = None,
                 priority: Optional[List[int]] = None) -> List[RequestOutput]:
        """Generates for every prompt together; returns the outputs in input order.

        prompts: a str, {"prompt": str}, {"prompt_token_ids": [...]}, or a list of them;
        sampling_params: one for all, or one per prompt (None: the model's defaults);
        use_tqdm: a progress bar for more than one prompt (tqdm if installed)."""
        if prompt_adapter_request is not None:
            raise ValueError("halo does not serve prompt adapters (prompt_adapter_request)")
        if guided_options_request is not None:
            raise ValueError("halo has no guided (structured) decoding yet (guided_options_request)")
        prompts = prompt_list(prompts, prompt_token_ids)
        params = self._params_list(sampling_params, len(prompts))
        tokenizer = self.get_tokenizer()
        texts: List[Optional[str]] = []
        requests = []
        for prompt, sp, lr in zip(prompts, params, lora_list(lora_request, len(prompts))):
            text, ids = parse_prompt(prompt, tokenizer)
            texts.append(text)
            requests.append((str(next(self._counter)), ids, with_lora(params_json(sp), lr)))
        return self._run(requests, texts, use_tqdm)

    def chat(self, messages: Any, sampling_params: Any = None, use_tqdm: Any = True,
             lora_request: Any = None, chat_template: Optional[str] = None,
             chat_template_content_format: str = "auto", add_generation_prompt: bool = True,
             continue_final_message: bool = False, tools: Optional[List[Dict[str, Any]]] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None,
             mm_processor_kwargs: Optional[Dict[str, Any]] = None) -> List[RequestOutput]:
        """Generates replies to one conversation (a list of messages) or to a list of them;
        each prompt is the conversation after the chat template."""
        if mm_processor_kwargs:
            raise ValueError("halo serves text models only (mm_processor_kwargs)")
        conversations = messages
        if not messages or not isinstance(messages[0], (list, tuple)):
            conversations = [messages]
        params = self._params_list(sampling_params, len(conversations))
        texts: List[Optional[str]] = []
        requests = []
        for conv, sp, lr in zip(conversations, params, lora_list(lora_request, len(conversations))):
            rendered = render_chat(self._engine, conv, add_generation_prompt=add_generation_prompt,
                                   chat_template=chat_template, tools=tools,
                                   chat_template_kwargs=chat_template_kwargs,
                                   continue_final_message=continue_final_message)
            texts.append(rendered)
            requests.append((str(next(self._counter)), list(self._engine.chat_prompt_ids(rendered)),
                             with_lora(params_json(sp), lr)))
        return self._run(requests, texts, use_tqdm)

    def embed(self, prompts: Any, pooling_params: Optional[PoolingParams] = None, use_tqdm: Any = True,
              truncate_prompt_tokens: Optional[int] = None,
              lora_request: Any = None) -> List[EmbeddingRequestOutput]:
        """vLLM's LLM.embed: one embedding per prompt, pooled as the model is (load it with
        task="embed"; docs/embeddings.md). Prompts as generate's."""
        params = (pooling_params or PoolingParams()).to_json()
        tokenizer = self.get_tokenizer()
        requests = []
        plist = prompt_list(prompts, None)
        for prompt, lr in zip(plist, lora_list(lora_request, len(plist))):
            _, ids = parse_prompt(prompt, tokenizer)
            if truncate_prompt_tokens is not None and truncate_prompt_tokens >= 0:
                ids = ids[len(ids) - min(len(ids), truncate_prompt_tokens):]
            requests.append((str(next(self._counter)), ids, with_lora(params, lr)))
        return [embedding_output_from_result(r) for r in self._results(requests, use_tqdm)]

    def beam_search(self, prompts: Any, params: BeamSearchParams) -> List[BeamSearchOutput]:
        """vLLM's LLM.beam_search: the beam_width best hypotheses of each prompt, best first
        (the engine's beam search: beams share their KV blocks)."""
        outputs = self.generate(prompts, params.sampling_params(), use_tqdm=False)
        result = []
        for out in outputs:
            prompt_text = out.prompt or ""
            result.append(BeamSearchOutput([
                BeamSearchSequence(tokens=list(out.prompt_token_ids) + list(c.token_ids),
                                   cum_logprob=c.cumulative_logprob, text=prompt_text + c.text,
                                   finish_reason=c.finish_reason, stop_reason=c.stop_reason)
                for c in out.outputs]))
        return result

    # --- internals -----------------------------------------------------------------------------
    @staticmethod
    def _params_list(sampling_params: Any, count: int) -> List[Optional[SamplingParams]]:
        if sampling_params is None or isinstance(sampling_params, (SamplingParams, dict)):
            return [sampling_params] * count
        params = list(sampling_params)
        if len(params) != count:
            raise ValueError("The lengths of prompts and sampling_params must be the same "
                             f"({count} prompts, {len(params)} sampling_params).")
        return params

    def _results(self, requests: list, use_tqdm: Any) -> List[Dict[str, Any]]:
        """_C.Engine.generate's results in input order; RuntimeError on the first failed one."""
        if not requests:
            return []
        progress = progress_for(len(requests), use_tqdm)
        try:
            results = self._engine.generate(requests, progress)
        finally:
            if progress is not None:
                progress.close()
        for result in results:
            error = result.get("error") or next(
                (c.get("error") for c in result.get("outputs", []) if c.get("error")), "")
            if error:
                raise RuntimeError(f"request {result.get('request_id')}: {error}")
        return results

    def _run(self, requests: list, texts: List[Optional[str]], use_tqdm: Any) -> List[RequestOutput]:
        return [request_output_from_result(r, t) for r, t in zip(self._results(requests, use_tqdm), texts)]

    def __repr__(self) -> str:
        e = self._engine
        return f"LLM(model={e.model_dir!r}, device={e.device!r}, max_model_len={e.max_model_len})"
