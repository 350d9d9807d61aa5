"""Output classes with vLLM's names: RequestOutput, CompletionOutput, Logprob, RequestMetrics,
EmbeddingOutput, EmbeddingRequestOutput."""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

SampleLogprobs = List[Dict[int, "Logprob"]]
PromptLogprobs = List[Optional[Dict[int, "Logprob"]]]


@dataclass
class Logprob:
    """The log probability of a token; rank is its 1-based place among the most
    likely tokens that were asked for (None when it is not among them)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class RequestMetrics:
    """Times (time.time()) of a request, as vLLM's; None when not known."""

    arrival_time: Optional[float] = None
    last_token_time: Optional[float] = None
    first_scheduled_time: Optional[float] = None
    first_token_time: Optional[float] = None
    time_in_queue: Optional[float] = None
    finished_time: Optional[float] = None
    scheduler_time: Optional[float] = None
    model_forward_time: Optional[float] = None
    model_execute_time: Optional[float] = None


@dataclass
class CompletionOutput:
    """One completion of a request."""

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    lora_request: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None

    def __repr__(self) -> str:
        return (f"CompletionOutput(index={self.index}, "
                f"text={self.text!r}, "
                f"token_ids={self.token_ids}, "
                f"cumulative_logprob={self.cumulative_logprob}, "
                f"logprobs={self.logprobs}, "
                f"finish_reason={self.finish_reason}, "
                f"stop_reason={self.stop_reason})")


class RequestOutput:
    """The output of one request: its prompt and its completions (one per n)."""

    def __init__(
        self,
        request_id: str,
        prompt: Optional[str],
        prompt_token_ids: Optional[List[int]],
        prompt_logprobs: Optional[PromptLogprobs],
        outputs: List[CompletionOutput],
        finished: bool,
        metrics: Optional[RequestMetrics] = None,
        lora_request: Any = None,
        encoder_prompt: Optional[str] = None,
        encoder_prompt_token_ids: Optional[List[int]] = None,
        num_cached_tokens: Optional[int] = None,
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.metrics = metrics
        self.lora_request = lora_request
        self.encoder_prompt = encoder_prompt
        self.encoder_prompt_token_ids = encoder_prompt_token_ids
        self.num_cached_tokens = num_cached_tokens

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id}, "
                f"prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids}, "
                f"encoder_prompt={self.encoder_prompt!r}, "
                f"encoder_prompt_token_ids={self.encoder_prompt_token_ids}, "
                f"prompt_logprobs={self.prompt_logprobs}, "
                f"outputs={self.outputs}, "
                f"finished={self.finished}, "
                f"metrics={self.metrics}, "
                f"lora_request={self.lora_request}, "
                f"num_cached_tokens={self.num_cached_tokens})")


# --- conversions from the engine's dicts -------------------------------------------------

def token_logprobs(entry: Dict[str, Any]) -> Dict[int, Logprob]:
    """One engine logprobs entry {"token", "logprob", "decoded", "top": [[id, lp, dec]...]}
    as vLLM's dict: the sampled token first, then the top ones (rank 1-based)."""
    top = entry.get("top") or []
    ranks = {int(t[0]): i + 1 for i, t in enumerate(top)}
    token = int(entry["token"])
    out: Dict[int, Logprob] = {
        token: Logprob(float(entry["logprob"]), ranks.get(token), entry.get("decoded"))
    }
    for i, (tid, lp, dec) in enumerate(top):
        tid = int(tid)
        if tid not in out:
            out[tid] = Logprob(float(lp), i + 1, dec)
    return out


def sample_logprobs(entries: Optional[List[Dict[str, Any]]]) -> Optional[SampleLogprobs]:
    if entries is None:
        return None
    return [token_logprobs(e) for e in entries]


def prompt_logprobs(entries: Optional[List[Any]]) -> Optional[PromptLogprobs]:
    if entries is None:
        return None
    return [None if e is None else token_logprobs(e) for e in entries]


def cumulative_logprob(entries: Optional[List[Dict[str, Any]]]) -> Optional[float]:
    """The sum of the sampled tokens' logprobs when logprobs were asked for (as vLLM V1)."""
    if entries is None:
        return None
    return float(sum(float(e["logprob"]) for e in entries))


def completion_from_choice(choice: Dict[str, Any]) -> CompletionOutput:
    lps = choice.get("logprobs")
    return CompletionOutput(
        index=int(choice.get("index", 0)),
        text=choice.get("text", ""),
        token_ids=list(choice.get("token_ids", [])),
        # A beam search result carries its own; sampling: the sum of the logprobs asked for.
        cumulative_logprob=(choice["cumulative_logprob"] if choice.get("cumulative_logprob") is not None
                            else cumulative_logprob(lps)),
        logprobs=sample_logprobs(lps),
        finish_reason=choice.get("finish_reason"),
        stop_reason=choice.get("stop_reason"),
    )


def request_output_from_result(result: Dict[str, Any], prompt: Optional[str]) -> RequestOutput:
    """A RequestOutput from one result of _C.Engine.generate."""
    arrival = result.get("arrival_time")
    first = result.get("first_token_time")
    done = result.get("finished_time")
    metrics = RequestMetrics(arrival_time=arrival, last_token_time=done or first,
                             first_token_time=first, finished_time=done)
    outputs = sorted((completion_from_choice(c) for c in result.get("outputs", [])),
                     key=lambda c: c.index)
    return RequestOutput(
        request_id=result["request_id"],
        prompt=prompt,
        prompt_token_ids=list(result.get("prompt_token_ids", [])),
        prompt_logprobs=prompt_logprobs(result.get("prompt_logprobs")),
        outputs=outputs,
        finished=True,
        metrics=metrics,
        num_cached_tokens=result.get("num_cached_tokens"),
    )


class BeamSearchSequence:
    """One hypothesis of LLM.beam_search (vLLM's): tokens and text include the prompt."""

    def __init__(self, tokens: List[int], cum_logprob: float, text: str,
                 finish_reason: Optional[str], stop_reason: Any = None) -> None:
        self.tokens = tokens
        self.logprobs: List[Dict[int, Logprob]] = []
        self.cum_logprob = cum_logprob
        self.text = text
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason

    def __repr__(self) -> str:
        return (f"BeamSearchSequence(text={self.text!r}, cum_logprob={self.cum_logprob}, "
                f"finish_reason={self.finish_reason!r})")


class BeamSearchOutput:
    """The hypotheses of one prompt, best first."""

    def __init__(self, sequences: List[BeamSearchSequence]) -> None:
        self.sequences = sequences

    def __repr__(self) -> str:
        return f"BeamSearchOutput(sequences={self.sequences!r})"


@dataclass
class EmbeddingOutput:
    """One prompt's embedding (vLLM's EmbeddingOutput)."""

    embedding: List[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class EmbeddingRequestOutput:
    """The result of one LLM.embed prompt (vLLM's EmbeddingRequestOutput)."""

    request_id: str
    outputs: EmbeddingOutput
    prompt_token_ids: List[int]
    finished: bool = True


def embedding_output_from_result(result: Dict[str, Any]) -> EmbeddingRequestOutput:
    """An EmbeddingRequestOutput from one result of _C.Engine.generate for a pooling request."""
    choices = result.get("outputs", [])
    if not choices or "embedding" not in choices[0]:
        raise RuntimeError(f"request {result.get('request_id')}: no embedding came back")
    return EmbeddingRequestOutput(request_id=result["request_id"],
                                  outputs=EmbeddingOutput(list(choices[0]["embedding"])),
                                  prompt_token_ids=list(result.get("prompt_token_ids", [])))
