"""`python -m halo ARGS` is `halo ARGS`."""
import sys

from . import _C


def main() -> int:
    return _C.run_cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
