"""Servers with vLLM's entry point module names."""
import sys
from typing import List, Optional


def serve(argv: Optional[List[str]] = None) -> int:
    """`halo serve ARGS` in this process (OpenAI API under /v1 and vLLM's /generate)."""
    from .. import _C

    return _C.run_cli(["serve", *(sys.argv[1:] if argv is None else argv)])
