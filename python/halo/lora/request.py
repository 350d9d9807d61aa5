"""vLLM's LoRARequest: which adapter a request runs with.

The engine (LLM(..., enable_lora=True)) loads the adapter from lora_path the first
time a request names it, and keeps it under lora_name."""
import json
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.lora_name:
            raise ValueError("LoRARequest needs a lora_name")
        if self.lora_int_id < 1:
            raise ValueError(f"lora_int_id must be > 0, got {self.lora_int_id}")
        if not self.lora_path:
            raise ValueError("LoRARequest needs a lora_path (a PEFT adapter directory or a Hub id)")

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path


def with_lora(params_json: str, lora_request: Any) -> str:
    """The engine's params JSON with the adapter added ("lora_request")."""
    if lora_request is None:
        return params_json
    if not isinstance(lora_request, LoRARequest):
        raise TypeError(f"lora_request must be a LoRARequest, not {type(lora_request).__name__}")
    body = json.loads(params_json)
    body["lora_request"] = {"lora_name": lora_request.lora_name, "lora_path": lora_request.lora_path}
    return json.dumps(body)


def lora_list(lora_request: Any, n: int) -> list:
    """One LoRARequest (or None) per prompt, from one for all or a list."""
    if isinstance(lora_request, (list, tuple)):
        if len(lora_request) != n:
            raise ValueError(f"lora_request has {len(lora_request)} entries for {n} prompts")
        return list(lora_request)
    return [lora_request] * n
