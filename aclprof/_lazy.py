"""The package's lazy public names, read from its stub (``aclprof/__init__.pyi``).

The stub is the one list of public names: type checkers read it in place of
``__init__.py``, and :class:`LazyNames` reads the same ``from aclprof.<module> import Name as
Name`` lines (``from aclprof import sub as sub`` for a submodule) on the first lookup of a
name the package does not hold yet, then imports only the module that defines it. So
``import aclprof`` stays free of cffi and numpy (the daemon and the CLI import parts of
the package), and adding a public name is one line in the stub.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LazyNames", "read_stub"]


def read_stub(package: str, path: str) -> tuple[dict[str, str], frozenset[str]]:
    """(public name -> the module defining it, the submodules reachable as attributes) from
    the ``from <package>.<module> import Name as Name`` lines of ``path``."""
    import ast

    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except OSError as exc:
        raise ImportError(f"{package}: its list of public names {path} cannot be read ({exc}); "
                          f"reinstall {package} (its wheel ships the stub beside __init__.py)") from None
    exports: dict[str, str] = {}
    submodules: set[str] = set()
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        module = node.module or ""
        for alias in node.names:
            if module == package:
                submodules.add(alias.name)
            elif module.startswith(package + "."):
                exports[alias.asname or alias.name] = module
    return exports, frozenset(submodules)


class LazyNames:
    """A package's module-level ``__getattr__`` and ``__dir__`` over its stub."""

    def __init__(self, package: str, stub: str, namespace: dict[str, Any]):
        self.package, self.stub, self.namespace = package, stub, namespace
        self._table: tuple[dict[str, str], frozenset[str]] | None = None

    @property
    def exports(self) -> dict[str, str]:
        """Public name -> the module (absolute) that defines it."""
        return self._read()[0]

    @property
    def submodules(self) -> frozenset[str]:
        return self._read()[1]

    def _read(self) -> tuple[dict[str, str], frozenset[str]]:
        if self._table is None:
            self._table = read_stub(self.package, self.stub)
        return self._table

    def getattr(self, name: str) -> Any:
        exports, submodules = self._read()
        if name == "__all__":
            value: Any = ["__version__", *exports]
        elif name in submodules:
            return importlib.import_module(f"{self.package}.{name}")
        elif name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        else:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        self.namespace[name] = value  # later lookups skip __getattr__
        return value

    def dir(self) -> list[str]:
        exports, submodules = self._read()
        return sorted(set(self.namespace) | set(exports) | submodules | {"__all__"})
