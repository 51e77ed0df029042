"""The lowlevel package: one module per area, one public face.

``aclprof.binding.lowlevel`` was one module; it is now a package whose ``__init__`` re-exports
the areas. These pin what callers rely on: the same ``__all__`` (order included) from both
public names, every area's ``__all__`` in the package's and nothing public left out, and
every area module documented.
"""

from __future__ import annotations

import importlib

import aclprof.lowlevel as public
from aclprof.binding import lowlevel

AREAS = ("session", "subscribe", "step", "msproftx", "runtime", "validate")


def test_the_public_facade_is_the_package():
    assert public.__all__ == lowlevel.__all__
    for name in lowlevel.__all__:
        assert getattr(public, name) is getattr(lowlevel, name)


def test_every_area_export_is_reexported_and_nothing_else_is_public():
    union: list[str] = []
    for area in AREAS:
        module = importlib.import_module(f"aclprof.binding.lowlevel.{area}")
        assert module.__doc__ and module.__doc__.strip(), area
        for name in module.__all__:
            assert getattr(lowlevel, name) is getattr(module, name), (area, name)
        if area != "validate":  # its limits are importable from the package, not in __all__
            union += module.__all__
    assert sorted(union) == sorted(lowlevel.__all__)
    assert len(set(lowlevel.__all__)) == len(lowlevel.__all__)


def test_the_era_table_stays_in_the_package_docstring():
    assert "2025" in lowlevel.__doc__ and "2026" in lowlevel.__doc__
    assert "start(None) / stop(None)" in lowlevel.__doc__
