"""python -m decoding ...: the command line lives in decoding/cli/main.py."""
import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
