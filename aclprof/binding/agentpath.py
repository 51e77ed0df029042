"""The agent's record conversion in the compiled helper (``_fast_agent.c``).

:func:`convert` turns one batch of library op records (``OP_DTYPE``) into wire records
(``RECORD_DTYPE``) written in place into the agent's frame buffer: every field copied, the
name ids mapped to the connection's, the keypoint byte folded into ``flag``. It is one C
call that runs without the GIL, where numpy would take four operations holding it
(a strided copy, two ``take``s, a masked ``|=``): the service's step thread, which needs
the GIL to return from ``aclmdlExecute``, does not wait behind the agent's sender for
that work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aclprof.binding.built import import_built
from aclprof.binding.layout import FLAG_KEYPOINT, OP_ROW_DTYPE, RECORD_SIZE

__all__ = ["convert", "WIRE_RECORD_SIZE", "FLAG_KEYPOINT"]

_fast: Any = import_built("_fast")
_ffi, _lib = _fast.ffi, _fast.lib

#: bytes of one wire record written (``aclprof_record``, cdefs/aclprof_records.h)
WIRE_RECORD_SIZE: int = RECORD_SIZE
#: what _fast_agent.c reads of an op row: each field's offset (``aclprof_op_row``)
_ROW_OFFSETS = {name: field[1] for name, field in (OP_ROW_DTYPE.fields or {}).items()}
_U32 = np.dtype(np.uint32)
_checked: set[np.dtype] = set()  # dtypes whose layout was checked (the check costs ~3 us)


def _check_op_layout(dtype: np.dtype) -> None:
    """The C code reads op rows at the offsets of ``aclprof_op_row``: refuse any other layout
    (a dtype with more fields after them, or wider rows, is fine)."""
    want = _ROW_OFFSETS
    fields: dict[str, Any] = dict(dtype.fields or {})
    got = {name: fields[name][1] for name in want if name in fields}
    if got != want or not all(fields[n][0].isnative for n in want):
        raise TypeError(f"aclprof.binding.agentpath.convert: op records of dtype {dtype} do not "
                        "have the layout _fast_agent.c reads (aclprof.api.records.OP_DTYPE)")


def convert(out: np.ndarray, at: int, data: np.ndarray, mapping: np.ndarray | None) -> int:
    """Write ``len(data)`` wire records at byte ``at`` of ``out`` (a uint8 array with room
    for them). ``mapping[i]`` is the connection id of the subscription's name id ``i``.

    Returns -1 when done; otherwise the largest name id of the batch, which ``mapping``
    does not cover yet (nothing usable was written: extend the mapping and call again).
    """
    n = len(data)
    if n == 0:
        return -1
    if at < 0 or at + n * WIRE_RECORD_SIZE > len(out) or out.dtype != np.uint8:
        raise ValueError(f"aclprof.binding.agentpath.convert: no room for {n} records at {at} "
                         f"in a buffer of {len(out)} bytes")
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    if data.dtype not in _checked:
        _check_op_layout(data.dtype)
        _checked.add(data.dtype)
    if mapping is None or len(mapping) == 0:
        map_ptr, map_len = _ffi.NULL, 0
    else:
        if mapping.dtype != _U32 or not mapping.flags.c_contiguous:
            raise TypeError("aclprof.binding.agentpath.convert: the mapping must be a contiguous "
                            "uint32 array")
        map_ptr, map_len = _ffi.from_buffer("uint32_t[]", mapping), len(mapping)
    dst = _ffi.from_buffer("uint8_t[]", out, require_writable=True)
    src = _ffi.from_buffer("uint8_t[]", data)
    return int(_lib.aclprof_agent_convert(dst + at, src, n, data.dtype.itemsize, map_ptr, map_len))
