"""``python -m aclprof``: the ``aclprof`` command (see :mod:`aclprof.cli`)."""

import sys

from aclprof.cli.main import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
