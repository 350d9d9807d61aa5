"""EngineArgs / AsyncEngineArgs: vLLM's engine arguments, turned into the settings
list of halo's engine. Only the arguments that are set (not None) are passed; the
engine decides: the ones halo honours take effect, the ones without effect are
logged, the ones halo refuses raise ValueError."""
import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterable, List, Optional, Tuple

Settings = List[Tuple[str, str]]


def setting_value(value: Any) -> str:
    """A setting's value as the engine takes it: bools as true/false, lists and dicts as
    JSON, everything else as str."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    return str(value)


def settings_from(items: Iterable[Tuple[str, Any]]) -> Settings:
    return [(name, setting_value(value)) for name, value in items if value is not None]


@dataclass
class EngineArgs:
    """vLLM's engine arguments (all optional except model). "" as model is halo's
    embedded model."""

    model: str = ""
    tokenizer: Optional[str] = None
    tokenizer_mode: Optional[str] = None
    skip_tokenizer_init: Optional[bool] = None
    trust_remote_code: Optional[bool] = None
    download_dir: Optional[str] = None
    load_format: Optional[str] = None
    config_format: Optional[str] = None
    dtype: Optional[str] = None
    kv_cache_dtype: Optional[str] = None
    seed: Optional[int] = None
    max_model_len: Optional[int] = None
    distributed_executor_backend: Optional[str] = None
    pipeline_parallel_size: Optional[int] = None
    tensor_parallel_size: Optional[int] = None
    data_parallel_size: Optional[int] = None
    max_parallel_loading_workers: Optional[int] = None
    block_size: Optional[int] = None
    enable_prefix_caching: Optional[bool] = None
    disable_sliding_window: Optional[bool] = None
    use_v2_block_manager: Optional[bool] = None
    swap_space: Optional[float] = None
    cpu_offload_gb: Optional[float] = None
    gpu_memory_utilization: Optional[float] = None
    max_num_batched_tokens: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_logprobs: Optional[int] = None
    disable_log_stats: Optional[bool] = None
    disable_log_requests: Optional[bool] = None
    revision: Optional[str] = None
    code_revision: Optional[str] = None
    rope_scaling: Optional[Dict[str, Any]] = None
    rope_theta: Optional[float] = None
    hf_overrides: Optional[Dict[str, Any]] = None
    tokenizer_revision: Optional[str] = None
    quantization: Optional[str] = None
    enforce_eager: Optional[bool] = None
    max_seq_len_to_capture: Optional[int] = None
    disable_custom_all_reduce: Optional[bool] = None
    tokenizer_pool_size: Optional[int] = None
    enable_lora: Optional[bool] = None
    max_loras: Optional[int] = None
    max_lora_rank: Optional[int] = None
    max_cpu_loras: Optional[int] = None
    device: Optional[str] = None
    num_scheduler_steps: Optional[int] = None
    enable_chunked_prefill: Optional[bool] = None
    speculative_model: Optional[str] = None
    num_speculative_tokens: Optional[int] = None
    speculative_config: Optional[Dict[str, Any]] = None
    preemption_mode: Optional[str] = None
    scheduling_policy: Optional[str] = None
    num_gpu_blocks_override: Optional[int] = None
    served_model_name: Optional[Any] = None
    task: Optional[str] = None
    generation_config: Optional[str] = None
    model_impl: Optional[str] = None
    disable_async_output_proc: Optional[bool] = None
    # vllm-rbln: a model compiled ahead of time (halo compile)
    compiled_model_dir: Optional[str] = None
    # halo's own settings (also reachable as extra keyword arguments of LLM)
    kv_cache_memory: Optional[int] = None
    max_kv_tokens: Optional[int] = None
    device_index: Optional[int] = None
    threads: Optional[int] = None
    quantization_group_size: Optional[int] = None
    hf_token: Optional[str] = None

    @classmethod
    def field_names(cls) -> List[str]:
        return [f.name for f in fields(cls)]

    def to_settings(self) -> Settings:
        """The arguments that are set, as (name, value-string) pairs for _C.Engine (model
        excluded: it is the engine's first argument)."""
        return settings_from((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "model")

    @classmethod
    def split_kwargs(cls, kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(the kwargs that are fields of this class, the others)."""
        names = set(cls.field_names())
        known = {k: v for k, v in kwargs.items() if k in names}
        unknown = {k: v for k, v in kwargs.items() if k not in names}
        return known, unknown

    def replace(self, **changes: Any) -> "EngineArgs":
        return dataclasses.replace(self, **changes)


@dataclass
class AsyncEngineArgs(EngineArgs):
    """vLLM's AsyncEngineArgs: EngineArgs plus the async engine's logging switch."""

    enable_log_requests: Optional[bool] = None
