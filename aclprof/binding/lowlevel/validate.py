"""Argument checks shared by every area of :mod:`aclprof.binding.lowlevel`.

Integers are range-checked and texts encoded here, before any C call, so that a wrong
argument raises ``TypeError``/``ValueError`` naming the parameter instead of a cffi overflow
or a bare library code; the byte limits are the ones the library enforces (comments say
where each comes from). Also the two ways every area reaches the library: ``_fn`` (a bound
function) and ``_buffer`` (a read-only C view of a bytes-like object).
"""

from __future__ import annotations

import os
from typing import Any

from aclprof.binding.loader import get_library

__all__ = [
    "MAX_PATH_BYTES", "MAX_CONFIG_VALUE_BYTES", "MAX_TRACE_MESSAGE_BYTES", "MAX_MARK_EX_BYTES", "MAX_DEVICES",
    "encode_text",
]

MAX_PATH_BYTES = 4095  # aclprofInit rejects length >= 4096
MAX_CONFIG_VALUE_BYTES = 256  # aclprofSetConfig rejects configLength > 256
# aclprofSetStampTraceMessage rejects msgLen >= 128 and copies into a 127-byte field with
# strncpy_s, which needs room for the NUL: 126 bytes is the longest message that survives.
MAX_TRACE_MESSAGE_BYTES = 126
# aclprofMarkEx accepts 1..MAX_MESSAGE_LEN-1 bytes: 127 in CANN 2025 (RT0 prof_common.h:721,
# MAX_MESSAGE_LEN 128, and the documentation), 155 since 9b35e9be6 (2026-04-16). The binding
# cannot tell the release (there is no version call, and aclprofStr2Id, its only era probe,
# came two months before the larger limit), so it allows what every release accepts
# (fidelity audit 3, R11): a longer message would pass on one CANN and fail on another.
MAX_MARK_EX_BYTES = 127
MAX_DEVICES = 64  # PROF_MAX_DEV_NUM
_U32 = 0xFFFFFFFF


# ---- argument helpers ------------------------------------------------------------------

def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _u32(value: Any, name: str) -> int:
    return _int(value, name, 0, _U32)


def encode_text(value: Any, name: str, max_bytes: int, *, allow_empty: bool = False) -> bytes:
    """str/bytes -> bytes without NUL, at most ``max_bytes`` long."""
    if isinstance(value, str):
        data = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    else:
        raise TypeError(f"{name} must be str or bytes, not {type(value).__name__}")
    if b"\0" in data:
        raise ValueError(f"{name} must not contain NUL characters")
    if not data and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    if len(data) > max_bytes:
        raise ValueError(f"{name} is {len(data)} bytes encoded; the limit is {max_bytes}")
    return data


def _path_bytes(value: Any, name: str) -> bytes:
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, not {type(value).__name__}")
    return encode_text(os.fsencode(value), name, MAX_PATH_BYTES)


def _buffer(data: Any) -> tuple[Any, int]:
    """A read-only C view of a bytes-like object and its length in bytes."""
    lib = get_library()
    try:
        view = lib.ffi.from_buffer(data)
    except TypeError:
        raise TypeError(f"op data must be a bytes-like object, not {type(data).__name__}") from None
    return view, len(view)


def _fn(name: str) -> Any:
    return get_library().fn(name)
