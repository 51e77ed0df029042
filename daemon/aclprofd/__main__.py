"""``python -m aclprofd``: the same as the ``aclprofd`` command."""

import sys

from .main import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
