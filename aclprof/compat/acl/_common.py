"""Shared plumbing of the pyACL-compatible layer: int handles <-> C pointers, calls."""

from __future__ import annotations

from typing import Any

from aclprof.binding.loader import get_library


def ffi() -> Any:
    return get_library().ffi


def fn(name: str) -> Any:
    return get_library().fn(name)


def call_ret(name: str, *args: Any) -> int:
    """Call a C function returning aclError and return the code, as pyACL does."""
    return int(fn(name)(*args))


def ptr(address: int, ctype: str = "void *") -> Any:
    """An int handle as a C pointer (0 is NULL)."""
    if isinstance(address, bool) or not isinstance(address, int):
        raise TypeError(f"pointer arguments are ints, not {type(address).__name__}")
    return ffi().cast(ctype, address)


def address(cdata: Any) -> int:
    """A C pointer as an int handle (NULL is 0)."""
    return int(ffi().cast("uintptr_t", cdata))


def text(value: str | bytes) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise TypeError(f"expected str, not {type(value).__name__}")
