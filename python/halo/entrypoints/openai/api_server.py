"""`python -m halo.entrypoints.openai.api_server --model M --port P ...`: the OpenAI-compatible
server, as vLLM's module of that name (halo serve with vLLM's flags)."""
import sys

from .. import serve

if __name__ == "__main__":
    sys.exit(serve())
