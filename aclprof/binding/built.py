"""Import the parts of aclprof that ``pip install`` compiles or generates, with an error that
says what to do when they are missing.

The usual cause is running from a source checkout (``python -m aclprof.demo`` in the
repository root): Python puts the current directory first on ``sys.path``, so it imports the
unbuilt ``aclprof/`` folder there instead of the installed package.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aclprof.binding._fast import Lib

__all__ = ["import_built", "not_built_hint", "fast_lib"]


def not_built_hint(what: str) -> str:
    """Why ``what`` (a compiled part of aclprof) is missing, and what to do."""
    package = Path(__file__).resolve().parent.parent  # aclprof/
    if (package.parent / "pyproject.toml").is_file() and (package.parent / "cdefs").is_dir():
        return (f"{what} is not built: this aclprof was imported from the source checkout at "
                f"{package.parent}, which shadows the installed package because it is the "
                "current directory (or on PYTHONPATH). Run from another directory, or build the "
                "checkout in place with `pip install -e .`")
    return (f"{what} is missing from {package}: reinstall aclprof with pip (it compiles a small "
            "C helper and the bundled mock)")


def import_built(name: str) -> ModuleType:
    """``importlib.import_module("aclprof." + name)``, or ImportError naming the fix."""
    try:
        return importlib.import_module(f"aclprof.binding.{name}")
    except ImportError as exc:
        raise ImportError(not_built_hint(f"aclprof.binding.{name}")) from exc


def fast_lib() -> Lib:
    """The compiled helper's ``lib`` (``aclprof.binding._fast``), typed by ``_fast.pyi``."""
    lib: Lib = import_built("_fast").lib
    return lib
