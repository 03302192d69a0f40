"""``python -m examples.chain``: the three services with one command (see run.py)."""

import sys

from examples.chain.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
