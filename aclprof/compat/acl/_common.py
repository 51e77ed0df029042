"""Shared plumbing of the pyACL-compatible layer: text arguments and the binding's int-handle calls.

Every C call goes through :mod:`aclprof.binding.pointers`, which converts int handles to C
pointers and back, so this layer holds no cffi object.
"""

from __future__ import annotations

from aclprof.binding.pointers import (
    NULL,
    Array,
    IntCell,
    Out,
    TextOut,
    call,
    call_ptr,
    call_ret,
    call_text,
    call_void,
    ptr,
)

__all__ = ["NULL", "Array", "IntCell", "Out", "TextOut", "call", "call_ptr", "call_ret", "call_text",
           "call_void", "ptr", "text"]


def text(value: str | bytes) -> bytes:
    """A str (UTF-8) or bytes argument as bytes; TypeError otherwise."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise TypeError(f"expected str, not {type(value).__name__}")
