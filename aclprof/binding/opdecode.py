"""The compiled half of the op record decoder: name interning and the CRC-32C signature.

:class:`aclprof.api.subscription.decoder.Decoder` hands each chunk of whole records to
:meth:`NameTable.decode_ops`; everything that must call into C per record lives here, so
that the api layer holds no cffi object. The C loop (``_fast_ops.c``,
``aclprof_decode_ops``, GIL released) checks each record's signature, fetches its name and
type through the library's one-shot getters exactly once (the fetch frees the library's
table entry), interning them into :class:`NameTable` (``_fast_names.c``: the id guessed from
model order and checked, a hash lookup only when the guess misses), and writes the numeric
fields.
"""

from __future__ import annotations

import os
from typing import Any

from aclprof.binding.built import import_built
from aclprof.binding.layout import OP_ROW_DTYPE, RAW_SIZES

__all__ = ["NameTable", "signature", "read_pipe", "READ_EOF", "READ_WOKEN", "OP_ROW_SIZE", "NAME_LIMIT"]

#: Flags :func:`read_pipe` returns (``_fast.h`` ACLPROF_READ_*).
READ_EOF, READ_WOKEN = 1, 2
#: Bytes of the packed row :meth:`NameTable.decode_ops` writes (``aclprof_op_row``,
#: whose dtype is :data:`aclprof.binding.layout.OP_ROW_DTYPE`).
OP_ROW_SIZE = OP_ROW_DTYPE.itemsize
#: Bytes of an op name or type the C loop keeps (``_fast.h`` ACLPROF_NAME_LIMIT): a longer
#: one is cut to this (at a UTF-8 character boundary) and counted (:attr:`NameTable.cut`).
#: One library Get call per string is exact up to this length (``_fast_names.c`` fetch()).
NAME_LIMIT = 16384


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

    def new_counts(self) -> Any:
        """A zeroed ``aclprof_decode_counts`` (``_fast.h``) for :meth:`decode_ops` and
        :meth:`read_ops`: ``corrupt``, ``missing_names``, ``keypoints``, ``max_end``,
        ``whole``, ``rows``, ``left``, read and reset by name."""
        return self._ffi.new("aclprof_decode_counts *")

    def decode_ops(self, buffer: bytearray, count: int, record_size: int, validate: bool,
                   default_device: int, out: Any, counts: Any) -> int:
        """Check, name and decode ``count`` records at the start of ``buffer`` into the
        packed rows of ``out`` (a writable array of at least ``count`` rows of
        :data:`~aclprof.binding.layout.OP_ROW_DTYPE`), all in C with the GIL released;
        returns the rows written (the valid records, in order). ``counts`` (from
        :meth:`new_counts`) gets ``corrupt``, ``missing_names`` and ``keypoints`` added, and
        the largest ``end`` seen kept in ``max_end``.

        Raises:
            ValueError: a record size other than 80 or 72 (decode those with the getters).
        """
        ffi = self._ffi
        good = int(self._lib.aclprof_decode_ops(
            self._table, ffi.from_buffer("uint8_t[]", buffer), count, record_size, int(validate),
            default_device, ffi.from_buffer("uint8_t[]", out, require_writable=True),
            counts))
        if good == 0xFFFFFFFF:
            raise ValueError(f"aclprof_decode_ops: record size {record_size} is not 80 or 72; "
                             "decode it through the library's getters")
        return good

    def read_ops(self, fd: int, wake_fd: int, buffer: bytearray, filled: int, room: int,
                 record_size: int, coalesce_ns: int, validate: bool, default_device: int,
                 out: Any, counts: Any) -> tuple[int, int]:
        """:func:`read_pipe` then :meth:`decode_ops` in one C call (one GIL release per
        batch). ``buffer[:filled]`` is a leftover partial record; reads go up to ``room``.
        ``counts`` as for :meth:`decode_ops`, plus ``whole`` records decoded, ``rows``
        written into ``out`` and the bytes now ``left`` at the start of ``buffer``.
        Returns ``(bytes read, READ_* flags)``.

        Raises:
            OSError: the poll or read failed (nothing was decoded).
            ValueError: a record size other than 80 or 72, or a bad ``filled``/``room``.
        """
        if record_size not in RAW_SIZES or not 0 <= filled < room <= len(buffer):
            raise ValueError(f"read_ops: record size {record_size} (80 or 72 only), filled "
                             f"{filled}, room {room} of a {len(buffer)}-byte buffer")
        ffi = self._ffi
        flags = ffi.new("int *")
        n = int(self._lib.aclprof_read_ops(
            self._table, fd, wake_fd, ffi.from_buffer("uint8_t[]", buffer, require_writable=True),
            filled, room, record_size, coalesce_ns, int(validate), default_device,
            ffi.from_buffer("uint8_t[]", out, require_writable=True),
            counts, flags))
        if n < 0:
            raise OSError(-n, f"aclprof_read_ops(fd={fd}): {os.strerror(-n)}")
        return n, int(flags[0])

    def add(self, data: bytes) -> int:
        """Intern ``data`` (the getters' fallback keeps this table aligned with its own
        list); its id, 0 when the table is full."""
        return int(self._lib.aclprof_interner_add(self._table, data, len(data)))

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

    @property
    def predicted(self) -> int:
        """Names and types the C loop named from its guess of the record's op (the one that
        followed the previous record's op last time: model order) without a hash lookup;
        the same ids either way, only cheaper."""
        return int(self._lib.aclprof_interner_predicted(self._table))

    @property
    def cut(self) -> int:
        """Names and types the C loop cut to :data:`NAME_LIMIT` bytes (they were longer)."""
        return int(self._lib.aclprof_interner_cut(self._table))


def signature(record: bytes, record_size: int) -> int:
    """The CRC-32C signature a record of ``record_size`` bytes should carry."""
    fast = _fast()
    return int(fast.lib.aclprof_signature(fast.ffi.from_buffer("uint8_t[]", record), record_size))


def read_pipe(fd: int, wake_fd: int, buffer: bytearray, start: int, end: int,
              coalesce_ns: int) -> tuple[int, int]:
    """Wait for ``fd`` and read into ``buffer[start:end]`` with the GIL released; a read of
    under half that room waits until ``coalesce_ns`` after the first byte and reads what
    came since. Returns ``(bytes read, READ_* flags)``: ``READ_EOF`` once the write end is
    closed, ``READ_WOKEN`` when ``wake_fd`` became readable with ``fd`` empty.

    Raises:
        OSError: the poll or read failed (errno from the C call).
    """
    fast = _fast()
    ffi = fast.ffi
    if not 0 <= start < end <= len(buffer):
        raise ValueError(f"read_pipe: bad range [{start}, {end}) of a {len(buffer)}-byte buffer")
    flags = ffi.new("int *")
    base = ffi.from_buffer("uint8_t[]", buffer, require_writable=True)
    n = int(fast.lib.aclprof_read_pipe(fd, wake_fd, base + start, end - start, coalesce_ns, flags))
    if n < 0:
        raise OSError(-n, f"aclprof_read_pipe(fd={fd}): {os.strerror(-n)}")
    return n, int(flags[0])
