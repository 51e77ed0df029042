"""The op record layouts as numpy dtypes, built at import from the C header.

``cdefs/aclprof_records.h`` defines each layout once; cffi reads it into the compiled helper
(``aclprof.binding._fast``), whose field offsets and sizes are the C compiler's (cffi checks
its own reading of the header against them when the module loads). The dtypes here are
made from those, so the numpy views and the C code that writes and reads the same bytes
(``_fast_ops.c``, ``_fast_agent.c``) cannot disagree, and a field added to the header
appears here without another edit.

- :data:`OP_ROW_DTYPE`: ``aclprof_op_row``, one decoded op (native-endian, packed, 57
  bytes): the ten fields of ``aclprof_record`` then the ``keypoint`` bool. Published as
  :data:`aclprof.api.records.OP_DTYPE`.
- :data:`RAW_DTYPE_80` / :data:`RAW_DTYPE_72`: ``ProfOpDesc``, the library's pipe record,
  and older CANN's, which ends before ``devId``.

The wire record (``aclprof.protocol.wire.RECORD_DTYPE``) is the same ``aclprof_record``,
built by the protocol layer from ``aclprof.protocol._jsonl`` (the daemon loads no cffi).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aclprof.binding.built import import_built

__all__ = ["OP_ROW_DTYPE", "OP_ROW_SIZE", "RECORD_SIZE", "RAW_DTYPE_80", "RAW_DTYPE_72",
           "RAW_SIZES", "FLAG_KEYPOINT", "raw_dtype"]

_fast: Any = import_built("_fast")
_ffi = _fast.ffi

#: numpy formats of the C field types the header may use (native byte order)
_FORMATS = {"uint32_t": "=u4", "uint64_t": "=u8", "_Bool": "?", "uint8_t": "=u1"}


def _fields(ctype: Any, base: int = 0) -> list[tuple[str, str, int]]:
    """(name, numpy format, offset) of every scalar field of ``ctype``, nested structs
    flattened into their fields (an op row's ``rec``)."""
    out: list[tuple[str, str, int]] = []
    for name, field in ctype.fields:
        if field.type.kind == "struct":
            out.extend(_fields(field.type, base + field.offset))
        elif field.type.cname in _FORMATS:
            out.append((name, _FORMATS[field.type.cname], base + field.offset))
        else:
            raise ImportError(f"aclprof.binding.layout: {ctype.cname}.{name} is a "
                              f"{field.type.cname}; cdefs/aclprof_records.h may use only "
                              f"{', '.join(_FORMATS)} (add its numpy format to _FORMATS)")
    return out


def _dtype(cname: str, itemsize: int | None = None) -> np.dtype:
    """The structured dtype of C struct ``cname``, cut to ``itemsize`` bytes if given (the
    fields that end within it)."""
    size = _ffi.sizeof(cname) if itemsize is None else itemsize
    fields = [(n, f, off) for n, f, off in _fields(_ffi.typeof(cname))
              if off + np.dtype(f).itemsize <= size]
    packed = np.dtype([(n, f) for n, f, _ in fields])
    if packed.itemsize == size and [off for *_, off in fields] == [
            packed.fields[n][1] for n, *_ in fields]:  # type: ignore[index]
        return packed  # no padding: the plain list form (what repr() and == show)
    return np.dtype({"names": [n for n, *_ in fields], "formats": [f for _, f, _ in fields],
                     "offsets": [off for *_, off in fields], "itemsize": size})


OP_ROW_DTYPE = _dtype("aclprof_op_row")
OP_ROW_SIZE: int = OP_ROW_DTYPE.itemsize
#: bytes of one wire record (``aclprof_record``): the first bytes of an op row
RECORD_SIZE: int = _ffi.sizeof("aclprof_record")
RAW_DTYPE_80 = _dtype("ProfOpDesc")
RAW_DTYPE_72 = _dtype("ProfOpDesc", _ffi.offsetof("ProfOpDesc", "devId"))
#: the pipe record sizes the fast path decodes (current CANN's, older CANN's)
RAW_SIZES: tuple[int, int] = (RAW_DTYPE_80.itemsize, RAW_DTYPE_72.itemsize)
#: the flag bit that marks a step keypoint on the wire (an op row has its keypoint column)
FLAG_KEYPOINT: int = _fast.lib.ACLPROF_FLAG_KEYPOINT


def raw_dtype(record_size: int) -> np.dtype | None:
    """The structured dtype of a pipe record of ``record_size`` bytes, or None if unknown."""
    return {RAW_DTYPE_80.itemsize: RAW_DTYPE_80, RAW_DTYPE_72.itemsize: RAW_DTYPE_72}.get(record_size)
