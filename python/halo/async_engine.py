"""AsyncLLMEngine: vLLM's asyncio engine over halo's engine.

No polling: the engine's eventfd (notify_fd) is watched with loop.add_reader; its
callback takes the ids of the requests with new events and wakes each one's waiter,
which then drains that request's stream.
"""
import asyncio
import time
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Dict, List, Optional

from . import _C
from .engine_args import EngineArgs
from .inputs import parse_prompt
from .lora.request import with_lora
from .outputs import (CompletionOutput, RequestMetrics, RequestOutput, cumulative_logprob,
                      prompt_logprobs, sample_logprobs)
from .sampling_params import SamplingParams, params_json
from .tokenizer import Tokenizer


@dataclass
class ModelConfig:
    """The little of vLLM's ModelConfig that halo can tell."""

    model: str
    tokenizer: str
    max_model_len: int
    vocab_size: int
    device: str
    max_num_seqs: int

    def get_vocab_size(self) -> int:
        return self.vocab_size


class _Choice:
    __slots__ = ("index", "token_ids", "text", "logprobs", "finish_reason", "stop_reason")

    def __init__(self, index: int, want_logprobs: bool) -> None:
        self.index = index
        self.token_ids: List[int] = []
        self.text = ""
        self.logprobs: Optional[List[Dict[str, Any]]] = [] if want_logprobs else None
        self.finish_reason: Optional[str] = None
        self.stop_reason: Any = None

    def add(self, event: Dict[str, Any]) -> None:
        self.token_ids.extend(event.get("token_ids", ()))
        self.text += event.get("text", "")
        if event.get("logprobs") is not None:
            if self.logprobs is None:
                self.logprobs = []
            self.logprobs.extend(event["logprobs"])
        if event.get("finished") or event.get("finish_reason") is not None:
            self.finish_reason = event.get("finish_reason") or self.finish_reason or "stop"
            self.stop_reason = event.get("stop_reason")

    def output(self) -> CompletionOutput:
        return CompletionOutput(index=self.index, text=self.text, token_ids=list(self.token_ids),
                                cumulative_logprob=cumulative_logprob(self.logprobs),
                                logprobs=sample_logprobs(self.logprobs),
                                finish_reason=self.finish_reason, stop_reason=self.stop_reason)


class _Request:
    def __init__(self, request_id: str, prompt: Optional[str], n: int, want_logprobs: bool) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.event = asyncio.Event()
        self.stream: Any = None
        self.choices = [_Choice(i, want_logprobs) for i in range(max(1, n))]
        self.arrival = time.time()
        self.first_token: Optional[float] = None
        self.last_token: Optional[float] = None
        self.finished_time: Optional[float] = None
        self.aborted = False
        self.error: Optional[BaseException] = None

    def apply(self, events: List[Dict[str, Any]]) -> None:
        now = time.time()
        for event in events:
            if event.get("error"):
                self.error = RuntimeError(f"request {self.request_id}: {event['error']}")
            index = int(event.get("index", 0))
            while index >= len(self.choices):
                self.choices.append(_Choice(len(self.choices), self.choices[0].logprobs is not None))
            if event.get("token_ids"):
                if self.first_token is None:
                    self.first_token = now
                self.last_token = now
            self.choices[index].add(event)

    def all_finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.choices)

    def output(self, finished: bool) -> RequestOutput:
        if finished and self.finished_time is None:
            self.finished_time = time.time()
        metrics = RequestMetrics(arrival_time=self.arrival, last_token_time=self.last_token,
                                 first_token_time=self.first_token, finished_time=self.finished_time)
        stream = self.stream
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=list(stream.prompt_ids),
            prompt_logprobs=prompt_logprobs(stream.prompt_logprobs()),
            outputs=[c.output() for c in self.choices],
            finished=finished,
            metrics=metrics,
            num_cached_tokens=stream.num_cached_tokens,
        )


# How long an aborted request waits for the engine's own final "abort" event.
_ABORT_GRACE_S = 1.0


class AsyncLLMEngine:
    """An asyncio engine, as vLLM's AsyncLLMEngine: many concurrent generate() calls share
    the engine, which batches them."""

    def __init__(self, engine: Any, engine_args: Optional[EngineArgs] = None, **kwargs: Any) -> None:
        self._engine = engine
        self.engine_args = engine_args
        self._requests: Dict[str, _Request] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._fd: Optional[int] = None
        self._tokenizer: Optional[Tokenizer] = None
        self._errored: Optional[BaseException] = None
        self._shutdown = False

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs, start_engine_loop: bool = True,
                         usage_context: Any = None, stat_loggers: Any = None,
                         **kwargs: Any) -> "AsyncLLMEngine":
        source = type(engine_args).__name__ if isinstance(engine_args, EngineArgs) else "AsyncEngineArgs"
        engine = _C.Engine(engine_args.model, engine_args.to_settings(), source)
        return cls(engine, engine_args)

    # --- state ----------------------------------------------------------------------------
    @property
    def engine(self) -> Any:
        return self._engine

    @property
    def is_running(self) -> bool:
        return not self._shutdown and self._errored is None

    @property
    def is_stopped(self) -> bool:
        return self._shutdown

    @property
    def errored(self) -> bool:
        return self._errored is not None

    @property
    def dead_error(self) -> BaseException:
        return RuntimeError(f"halo engine is dead: {self._errored}")

    async def check_health(self) -> None:
        if self._errored is not None:
            raise self.dead_error

    async def get_tokenizer(self, lora_request: Any = None) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self._engine)
        return self._tokenizer

    async def get_model_config(self) -> ModelConfig:
        e = self._engine
        return ModelConfig(model=e.model_dir, tokenizer=e.model_dir, max_model_len=e.max_model_len,
                           vocab_size=e.vocab_size, device=e.device, max_num_seqs=e.max_num_seqs)

    def metrics(self) -> Dict[str, Any]:
        return self._engine.metrics()

    # --- the eventfd reader -------------------------------------------------------------------
    def _ensure_reader(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            self._remove_reader()
        self._fd = self._engine.notify_fd()
        loop.add_reader(self._fd, self._on_ready)
        self._loop = loop

    def _remove_reader(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and self._fd is not None and not loop.is_closed():
            try:
                loop.remove_reader(self._fd)
            except (RuntimeError, ValueError, OSError):
                pass

    def _on_ready(self) -> None:
        try:
            ready = self._engine.take_ready()
        except Exception as e:  # the engine failed: wake everyone so they raise
            self._errored = e
            self._remove_reader()
            for req in self._requests.values():
                req.event.set()
            return
        for request_id in ready:
            req = self._requests.get(request_id)
            if req is not None:
                req.event.set()

    def shutdown_background_loop(self) -> None:
        """Stops watching the engine (vLLM's name); running requests are aborted."""
        for request_id in list(self._requests):
            self._engine.abort(request_id)
        self._remove_reader()
        self._shutdown = True

    def shutdown(self) -> None:
        self.shutdown_background_loop()

    # --- requests --------------------------------------------------------------------------------
    async def add_request(self, *args: Any, **kwargs: Any) -> AsyncGenerator[RequestOutput, None]:
        return self.generate(*args, **kwargs)

    async def generate(self, prompt: Any, sampling_params: Optional[SamplingParams] = None,
                       request_id: Optional[str] = None, lora_request: Any = None,
                       trace_headers: Any = None, prompt_adapter_request: Any = None,
                       priority: int = 0) -> AsyncGenerator[RequestOutput, None]:
        """Yields the request's output as tokens arrive, each holding everything so far; the
        last one has finished=True. Cancelling the consuming task or closing the generator
        before the end aborts the request."""
        if self._shutdown:
            raise RuntimeError("the AsyncLLMEngine was shut down")
        if self._errored is not None:
            raise self.dead_error
        if request_id is None:
            raise TypeError("generate() needs a request_id")
        request_id = str(request_id)
        if request_id in self._requests:
            raise ValueError(f"Request {request_id} already exists")
        self._ensure_reader()
        tokenizer = await self.get_tokenizer()
        text, ids = parse_prompt(prompt, tokenizer)
        n = sampling_params.n if isinstance(sampling_params, SamplingParams) and sampling_params.n else 1
        want_lp = isinstance(sampling_params, SamplingParams) and sampling_params.logprobs is not None
        req = _Request(request_id, text, n, want_lp)
        self._requests[request_id] = req
        finished = False
        try:
            req.stream = self._engine.add_request(request_id, ids,
                                                  with_lora(params_json(sampling_params), lora_request))
            abort_deadline: Optional[float] = None
            while True:
                if self._errored is not None:
                    raise self.dead_error
                events = req.stream.poll()
                if events:
                    req.apply(events)
                    if req.error is not None:
                        raise req.error
                ended = bool(req.stream.ended) or req.all_finished()
                if ended:
                    finished = True
                    yield req.output(True)
                    return
                if events:
                    yield req.output(False)
                if req.aborted:
                    # the engine ends an aborted request with an "abort" event; if it does
                    # not come soon, end it here.
                    if abort_deadline is None:
                        abort_deadline = time.monotonic() + _ABORT_GRACE_S
                    remaining = abort_deadline - time.monotonic()
                    if remaining <= 0:
                        for c in req.choices:
                            if c.finish_reason is None:
                                c.finish_reason = "abort"
                        finished = True
                        yield req.output(True)
                        return
                    try:
                        await asyncio.wait_for(req.event.wait(), remaining)
                    except asyncio.TimeoutError:
                        pass
                else:
                    await req.event.wait()
                req.event.clear()
        finally:
            if not finished and req.stream is not None:
                self._engine.abort(request_id)
            self._requests.pop(request_id, None)

    async def abort(self, request_id: str) -> None:
        """Aborts a request; its generate() ends with finish_reason "abort". Unknown ids are
        ignored."""
        request_id = str(request_id)
        self._engine.abort(request_id)
        req = self._requests.get(request_id)
        if req is not None:
            req.aborted = True
            req.event.set()
