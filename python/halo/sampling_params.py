"""SamplingParams: vLLM's sampling parameters, with vLLM's names and defaults.

Validation is the engine's: a bad value raises ValueError (with the same message
the HTTP API gives) when a request is added, not when this object is built.
"""
import copy
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

class GuidedDecodingParams:
    """vLLM's guided decoding parameters: one of json (a schema, dict or JSON text),
    regex, choice (a list of strings), grammar (GBNF) or json_object."""

    def __init__(self, json: Any = None, regex: Optional[str] = None,
                 choice: Optional[List[str]] = None, grammar: Optional[str] = None,
                 json_object: Optional[bool] = None, backend: Optional[str] = None,
                 whitespace_pattern: Optional[str] = None) -> None:
        self.json = json
        self.regex = regex
        self.choice = list(choice) if choice is not None else None
        self.grammar = grammar
        self.json_object = json_object
        self.backend = backend
        self.whitespace_pattern = whitespace_pattern

    def to_fields(self) -> Dict[str, Any]:
        """The request fields of vLLM's API that say the same."""
        out: Dict[str, Any] = {}
        if self.json is not None:
            out["guided_json"] = self.json
        if self.regex is not None:
            out["guided_regex"] = self.regex
        if self.choice is not None:
            out["guided_choice"] = self.choice
        if self.grammar is not None:
            out["guided_grammar"] = self.grammar
        if self.json_object:
            out["response_format"] = {"type": "json_object"}
        if self.whitespace_pattern is not None:
            out["guided_whitespace_pattern"] = self.whitespace_pattern
        return out

    def __repr__(self) -> str:
        return f"GuidedDecodingParams({self.to_fields()!r})"


# (name, default) in vLLM's order.
_FIELDS = (
    ("n", 1),
    ("best_of", None),
    ("presence_penalty", 0.0),
    ("frequency_penalty", 0.0),
    ("repetition_penalty", 1.0),
    ("temperature", 1.0),
    ("top_p", 1.0),
    ("top_k", 0),
    ("min_p", 0.0),
    ("seed", None),
    ("stop", None),
    ("stop_token_ids", None),
    ("ignore_eos", False),
    ("max_tokens", 16),
    ("min_tokens", 0),
    ("logprobs", None),
    ("prompt_logprobs", None),
    ("skip_special_tokens", True),
    ("spaces_between_special_tokens", True),
    ("include_stop_str_in_output", False),
    # Beam search (vLLM <= 0.6's fields): width max(n, best_of).
    ("use_beam_search", False),
    ("length_penalty", 1.0),
    ("early_stopping", False),
    # Guided decoding (vLLM >= 0.6): a GuidedDecodingParams.
    ("guided_decoding", None),
)
_DEFAULTS = dict(_FIELDS)


class SamplingParams:
    """Sampling parameters for text generation (vLLM's fields and defaults).

    top_k 0 or -1 turns top-k off; stop may be a string or a list of strings.
    """

    __slots__ = tuple(name for name, _ in _FIELDS)

    def __init__(
        self,
        n: int = 1,
        best_of: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: Optional[int] = None,
        stop: Optional[Union[str, List[str]]] = None,
        stop_token_ids: Optional[List[int]] = None,
        ignore_eos: bool = False,
        max_tokens: Optional[int] = 16,
        min_tokens: int = 0,
        logprobs: Optional[int] = None,
        prompt_logprobs: Optional[int] = None,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        include_stop_str_in_output: bool = False,
        use_beam_search: bool = False,
        length_penalty: float = 1.0,
        early_stopping: Union[bool, str] = False,
        guided_decoding: Optional[GuidedDecodingParams] = None,
    ) -> None:
        self.n = n
        self.best_of = best_of
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.seed = seed
        # As vLLM: a single stop string becomes a list of one.
        self.stop = [stop] if isinstance(stop, str) else (list(stop) if stop is not None else None)
        self.stop_token_ids = list(stop_token_ids) if stop_token_ids is not None else None
        self.ignore_eos = ignore_eos
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.include_stop_str_in_output = include_stop_str_in_output
        self.use_beam_search = use_beam_search
        self.length_penalty = length_penalty
        self.early_stopping = early_stopping
        self.guided_decoding = guided_decoding

    @classmethod
    def from_optional(cls, **kwargs: Any) -> "SamplingParams":
        """As vLLM's: arguments given as None take the default."""
        return cls(**{k: v for k, v in kwargs.items() if v is not None})

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    def to_dict(self) -> Dict[str, Any]:
        """The fields as the engine's params JSON object (vLLM's /generate fields); None
        values are left out so the model's generation_config and vLLM's defaults apply."""
        out: Dict[str, Any] = {}
        for name, default in _FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if name in ("use_beam_search", "length_penalty", "early_stopping") and value == default:
                continue  # sent only when asked for: the engine refuses them without beam search
            if name == "guided_decoding":
                out.update(value.to_fields())
                continue
            if isinstance(value, (list, tuple)):
                value = list(value)
            out[name] = value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SamplingParams):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n, _ in _FIELDS)

    __hash__ = None  # mutable, like vLLM's

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in _FIELDS)
        return f"SamplingParams({fields})"


def params_json(sampling_params: Optional[SamplingParams]) -> str:
    """The engine's params_json for one request: {} (the model's defaults) for None."""
    if sampling_params is None:
        return "{}"
    if isinstance(sampling_params, dict):
        return json.dumps(sampling_params)
    if not isinstance(sampling_params, SamplingParams):
        raise TypeError(f"sampling_params must be a SamplingParams, not {type(sampling_params).__name__}")
    return sampling_params.to_json()


class BeamSearchParams:
    """vLLM's (>= 0.6.3) parameters of LLM.beam_search."""

    def __init__(self, beam_width: int, max_tokens: int, ignore_eos: bool = False,
                 temperature: float = 0.0, length_penalty: float = 1.0,
                 include_stop_str_in_output: bool = False) -> None:
        self.beam_width = beam_width
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.temperature = temperature
        self.length_penalty = length_penalty
        self.include_stop_str_in_output = include_stop_str_in_output

    def sampling_params(self) -> SamplingParams:
        """The same search as SamplingParams (use_beam_search, n = width)."""
        return SamplingParams(n=self.beam_width, use_beam_search=True, max_tokens=self.max_tokens,
                              ignore_eos=self.ignore_eos, temperature=self.temperature,
                              length_penalty=self.length_penalty,
                              include_stop_str_in_output=self.include_stop_str_in_output)

    def __repr__(self) -> str:
        return (f"BeamSearchParams(beam_width={self.beam_width}, max_tokens={self.max_tokens}, "
                f"ignore_eos={self.ignore_eos}, temperature={self.temperature}, "
                f"length_penalty={self.length_penalty})")


@dataclass
class PoolingParams:
    """vLLM's PoolingParams for LLM.embed: `dimensions` keeps the first values (then
    normalises), `normalize` overrides the model's normalisation; None: the model's."""

    dimensions: Optional[int] = None
    normalize: Optional[bool] = None

    def to_json(self) -> str:
        body: Dict[str, Any] = {"embed": True}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        if self.normalize is not None:
            body["normalize"] = self.normalize
        return json.dumps(body)
