"""The C decode loop's op getters, swapped: counting wrappers of the library's own, and a
fake library serving names from a Python dict (``_fast_ops.c``/``_fast_names.c`` call the
getters through pointers bound at load, so a test can bind others and put the real ones
back)."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aclprof.binding._fast import lib as fast
from aclprof.binding.loader import get_library

__all__ = ["GETTERS", "bind", "bound", "counting", "FakeLibrary", "expected_string"]

GETTERS = ("aclprofGetOpTypeLen", "aclprofGetOpType", "aclprofGetOpNameLen", "aclprofGetOpName")
LEN_T = "int(*)(const void *, size_t, uint32_t, size_t *)"
STR_T = "int(*)(const void *, size_t, uint32_t, char *, size_t)"
_INDEX_AT = 16  # ProfOpDesc.opIndex


def bind(fns: dict[str, Any]) -> None:
    """Bind these four getters (cffi function pointers or callbacks) into the C loop."""
    ffi = get_library().ffi
    fast.aclprof_fast_bind_ops(*(int(ffi.cast("uintptr_t", fns[name])) for name in GETTERS))


@contextmanager
def bound(fns: dict[str, Any]) -> Iterator[None]:
    """``fns`` bound for the block (kept alive by the caller), the library's own after it."""
    bind(fns)
    try:
        yield
    finally:
        library = get_library()
        bind({name: library.functions[name] for name in GETTERS})


def counting(calls: Counter) -> dict[str, Any]:
    """Callbacks that count each getter call and forward it to the library's own."""
    library = get_library()
    ffi, real = library.ffi, library.functions
    out = {}
    for name in GETTERS:
        def forward(*args: Any, _name: str = name) -> int:
            calls[_name] += 1
            return int(real[_name](*args))
        out[name] = ffi.callback(LEN_T if name.endswith("Len") else STR_T, forward)
    return out


def expected_string(s: bytes, limit: int) -> bytes:
    """What the loop keeps of a string: all of it up to ``limit`` bytes, else the first
    ``limit`` bytes less a UTF-8 character they would split."""
    if len(s) <= limit:
        return s
    cut = limit
    for _ in range(3):
        if s[cut] & 0xC0 != 0x80:
            break
        cut -= 1
    return s[:cut]


class FakeLibrary:
    """Getters over a side table keyed by the record's opIndex, one-shot like CANN's.

    ``rule="source"``: op_desc_parser.cpp with securec's memcpy_s: a string longer than the
    buffer is refused (the buffer cleared, the entry kept); else its bytes are copied,
    buf[len-1] = 0 and the entry erased. ``rule="docs"``: a short buffer truncates (the
    first len-1 bytes and a NUL; erased). Both leave the buffer's other bytes alone.
    Records are ``size`` bytes (80 or 72); the signature is not checked (the loop's own
    check is what keeps corrupt records away from the getters)."""

    def __init__(self, rule: str, table: dict[int, tuple[bytes | None, bytes | None]], size: int = 80):
        ffi = get_library().ffi
        self.rule, self.table, self.size, self.calls = rule, table, size, Counter()
        self.fns = {"aclprofGetOpTypeLen": ffi.callback(LEN_T, lambda *a: self._len(1, *a)),
                    "aclprofGetOpNameLen": ffi.callback(LEN_T, lambda *a: self._len(0, *a)),
                    "aclprofGetOpType": ffi.callback(STR_T, lambda *a: self._get(1, *a)),
                    "aclprofGetOpName": ffi.callback(STR_T, lambda *a: self._get(0, *a))}
        self._ffi = ffi

    def _index(self, data: Any) -> int:
        (index,) = struct.unpack_from("<Q", bytes(self._ffi.buffer(data, self.size)), _INDEX_AT)
        return int(index)

    def _string(self, which: int, data: Any) -> bytes | None:
        entry = self.table.get(self._index(data))
        return None if entry is None else entry[which]

    def _len(self, which: int, data: Any, size: int, i: int, out: Any) -> int:
        self.calls["len"] += 1
        s = self._string(which, data)
        if s is None:
            return 100000
        out[0] = len(s) + 1
        return 0

    def _get(self, which: int, data: Any, size: int, i: int, buf: Any, buf_len: int) -> int:
        self.calls["get"] += 1
        s = self._string(which, data)
        if s is None:
            return 100000
        if len(s) > buf_len:
            if self.rule == "source":
                self._ffi.memmove(buf, bytes(buf_len), buf_len)
                return 100000
            s = s[:buf_len - 1]
        self._ffi.memmove(buf, s, len(s))
        buf[buf_len - 1] = b"\0"
        index = self._index(data)
        pair = list(self.table[index])
        pair[which] = None
        self.table[index] = (pair[0], pair[1])
        return 0
