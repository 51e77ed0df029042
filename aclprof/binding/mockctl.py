"""Calls into the bundled mock's ``aclmock*`` controls, for :mod:`aclprof.mock`.

Kept in the binding so that :mod:`aclprof.mock` holds no cffi object: the mock's stats
struct is read here into a plain dict, and ``None`` arguments become NULL here.
"""

from __future__ import annotations

from typing import Any

from aclprof.binding.loader import get_library

__all__ = ["call", "stats"]


def call(name: str, *args: Any) -> Any:
    """Call the mock export ``name`` (``None`` arguments as NULL); RuntimeError against a
    library that is not the mock (the controls would not exist, or mean something else)."""
    lib = get_library()
    if not lib.is_mock:
        raise RuntimeError(
            f"aclprof.mock.{name} needs the mock library, but {lib.path} is loaded; "
            "set ACLPROF_BACKEND=mock or call aclprof.use_mock() before first use")
    return lib.fn(name)(*[lib.ffi.NULL if arg is None else arg for arg in args])


def stats() -> tuple[int, dict[str, int]]:
    """``aclmockGetStats``: its return code and the counters, by field name."""
    ffi = get_library().ffi
    out = ffi.new("aclmockStats *")
    rc = call("aclmockGetStats", out)
    return rc, {field: int(getattr(out, field)) for field, _ in ffi.typeof("aclmockStats").fields}
