"""Where the installed commands are, for code that starts them as child processes (the demo,
the tests, the benchmarks).

Children are started through the installed ``aclprofd`` entry point, never as ``python -m
<module>``: ``-m`` puts the current directory first on ``sys.path``, so run from a source
checkout it would import the unbuilt source tree instead of the installed package.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

__all__ = ["CommandNotFound", "daemon_argv", "installed_script"]


class CommandNotFound(RuntimeError):
    """An entry point of the aclprof package is not installed beside this interpreter."""


def installed_script(name: str) -> str:
    """The path of the console script ``name`` installed with this interpreter's aclprof.

    Looks beside ``sys.executable`` (a venv's ``bin/``), then in the interpreter's scripts
    directories (system and user scheme); never in ``$PATH``, where another installation's
    command of the same name may come first.
    """
    dirs = [Path(sys.executable).parent]
    for scheme in (None, f"{os.name}_user"):
        try:
            path = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:  # a scheme this platform does not have
            continue
        dirs.append(Path(path))
    for d in dirs:
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise CommandNotFound(
        f"the {name!r} command is not installed beside {sys.executable} (looked in "
        f"{', '.join(sorted({str(d) for d in dirs}))}): install aclprof with pip into this "
        "interpreter's environment")


def daemon_argv() -> list[str]:
    """The command line that starts this installation's daemon (``aclprofd``)."""
    return [installed_script("aclprofd")]
