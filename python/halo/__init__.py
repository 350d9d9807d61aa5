"""halo: an LLM serving engine, with vLLM's Python API (LLM, SamplingParams,
AsyncLLMEngine, ...) over its C++ engine."""
import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))

# A pip-installed package carries its device plugins and the embedded model.
_plugins = _os.path.join(_here, "plugins")
if _os.path.isdir(_plugins):
    _old = _os.environ.get("HALO_PLUGIN_PATH")
    _os.environ["HALO_PLUGIN_PATH"] = _plugins + (_os.pathsep + _old if _old else "")

from . import _C  # noqa: E402

_model = _os.path.join(_here, "models", "pkgchat-5m")
if _os.path.isdir(_model):
    _C.set_default_model_dir(_model)

from .async_engine import AsyncLLMEngine  # noqa: E402
from .engine_args import AsyncEngineArgs, EngineArgs  # noqa: E402
from .llm import LLM  # noqa: E402
from .lora.request import LoRARequest  # noqa: E402
from .outputs import (BeamSearchOutput, BeamSearchSequence, CompletionOutput,  # noqa: E402
                      EmbeddingOutput, EmbeddingRequestOutput, Logprob, RequestMetrics, RequestOutput)
from .sampling_params import (BeamSearchParams, GuidedDecodingParams, PoolingParams,  # noqa: E402
                              SamplingParams)
from .tokenizer import Tokenizer  # noqa: E402

__version__ = _C.__version__

__all__ = [
    "LLM",
    "LoRARequest",
    "SamplingParams",
    "BeamSearchParams",
    "GuidedDecodingParams",
    "BeamSearchOutput",
    "BeamSearchSequence",
    "RequestOutput",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "PoolingParams",
    "CompletionOutput",
    "Logprob",
    "RequestMetrics",
    "EngineArgs",
    "AsyncEngineArgs",
    "AsyncLLMEngine",
    "Tokenizer",
    "__version__",
]
