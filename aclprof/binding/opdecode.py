"""The compiled half of the op record decoder: name interning and the CRC-32C signature.

:class:`aclprof.api.subscription.decoder.Decoder` decodes the numeric fields with numpy;
everything that must call into C per record lives here, so that the api layer holds no
cffi object. The C loop (``_fast.c``, ``aclprof_decode_names``) checks each record's
signature and fetches its name and type through the library's one-shot getters exactly
once (the fetch frees the library's table entry), interning them into :class:`NameTable`.
"""

from __future__ import annotations

from typing import Any

from aclprof.binding.built import import_built

__all__ = ["NameTable", "signature", "STATUS_CORRUPT", "STATUS_NO_TYPE", "STATUS_NO_NAME"]

#: Bits of the per-record status :meth:`NameTable.decode_names` writes (``_fast.h``).
STATUS_CORRUPT, STATUS_NO_TYPE, STATUS_NO_NAME = 1, 2, 4


def _fast() -> Any:
    return import_built("_fast")


class NameTable:
    """An interned string table of at most ``max_names`` entries (C, one per subscription).

    Past its capacity the C loop stores the placeholder id and counts an overflow
    (:attr:`overflows`) rather than grow without bound.
    """

    __slots__ = ("_ffi", "_lib", "_table")

    def __init__(self, max_names: int):
        fast = _fast()
        self._ffi, self._lib = fast.ffi, fast.lib
        table = self._lib.aclprof_interner_new(max_names)
        if table == self._ffi.NULL:
            raise MemoryError("could not allocate the op name table")
        self._table = self._ffi.gc(table, self._lib.aclprof_interner_free)

    def decode_names(self, buffer: bytearray, count: int, record_size: int, validate: bool,
                     type_ids: Any, name_ids: Any, status: Any) -> int:
        """Check and name ``count`` records at the start of ``buffer``; returns how many are
        valid. ``type_ids``/``name_ids`` (uint32) and ``status`` (uint8) are writable arrays
        of at least ``count`` elements: the ids of each record's type and name, and its
        :data:`STATUS_CORRUPT` / :data:`STATUS_NO_TYPE` / :data:`STATUS_NO_NAME` bits."""
        ffi = self._ffi
        return int(self._lib.aclprof_decode_names(
            self._table, ffi.from_buffer("uint8_t[]", buffer), count, record_size, int(validate),
            ffi.from_buffer("uint32_t[]", type_ids), ffi.from_buffer("uint32_t[]", name_ids),
            ffi.from_buffer("uint8_t[]", status)))

    def __len__(self) -> int:
        return int(self._lib.aclprof_interner_size(self._table))

    def entries(self, start: int) -> list[bytes]:
        """The interned strings from id ``start`` on (raw bytes, as the library gave them)."""
        ffi, lib = self._ffi, self._lib
        length = ffi.new("size_t *")
        out = []
        for i in range(start, len(self)):
            ptr = lib.aclprof_interner_entry(self._table, i, length)
            out.append(ffi.unpack(ptr, length[0]))
        return out

    @property
    def overflows(self) -> int:
        """Names that did not fit (they read as the placeholder)."""
        return int(self._lib.aclprof_interner_overflows(self._table))


def signature(record: bytes, record_size: int) -> int:
    """The CRC-32C signature a record of ``record_size`` bytes should carry."""
    fast = _fast()
    return int(fast.lib.aclprof_signature(fast.ffi.from_buffer("uint8_t[]", record), record_size))
