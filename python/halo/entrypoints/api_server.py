"""`python -m halo.entrypoints.api_server --model M --port P`: vLLM's simple /generate server
(halo serve, which serves /generate and the OpenAI API on the same port)."""
import sys

from . import serve

if __name__ == "__main__":
    sys.exit(serve())
