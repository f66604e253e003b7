"""``python -m sluice``: the command line (``sluice.cli``)."""

import sys

from sluice.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
