"""Name ids: the library's interned name ids -> the current connection's ids.

Each subscription interns op names and types into its own string table; the wire uses
one id space per connection (a daemon keeps a table per connection, extended by NAMES
frames). :class:`NameMap` assigns connection ids, reports which names are new (they go
out in a NAMES frame before the first record that uses them) and writes converted
records in place into a BATCH frame.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from aclprof.agent.watched import Watched
from aclprof.api.records import OP_DTYPE
from aclprof.protocol import wire

__all__ = ["NameMap", "write_records"]



def _same_prefix() -> bool:
    """Whether a library record's first 56 bytes are already a wire record on this host."""
    if sys.byteorder != "little":
        return False
    op: dict[str, Any] = dict(OP_DTYPE.fields or {})
    rec: dict[str, Any] = dict(wire.RECORD_DTYPE.fields or {})
    for name in wire.RECORD_DTYPE.names or ():
        if name not in op or op[name][1] != rec[name][1]:
            return False
        if op[name][0].newbyteorder("<") != rec[name][0].newbyteorder("<"):
            return False
    return True


# OP_DTYPE is RECORD_DTYPE plus a trailing ``keypoint`` byte: on a little-endian host one
# strided copy moves whole records, then three fields are fixed up (the whole conversion:
# ~25 ns/record, against ~50 field by field). Elsewhere: field by field.
_SAME_PREFIX = _same_prefix()
_VOID = np.dtype(f"V{wire.RECORD_DTYPE.itemsize}")


class NameMap:
    """The name table of one connection; :meth:`reset` for each new connection."""

    def __init__(self) -> None:
        self.gen = 0
        self.ids: dict[str, int] = {}

    def reset(self, gen: int) -> None:
        """A new connection (generation ``gen``): its ids start afresh."""
        self.gen = gen
        self.ids = {}

    def extend(self, w: Watched, data: np.ndarray, names: Any) -> dict[str, str]:
        """Map every name id ``data`` uses (``names`` is the subscription's table);
        returns the names this connection has not seen, ``{str(conn_id): text}``."""
        top = int(max(data["op_name"].max(), data["op_type"].max()))
        if w.map_gen != self.gen:
            w.name_map, w.map_gen = None, self.gen
        mapping = w.name_map
        have = 0 if mapping is None else len(mapping)
        new: dict[str, str] = {}
        if top < have:
            return new
        # The table only grows: map the ids not mapped yet, all at once.
        extra = np.empty(top + 1 - have, np.uint32)
        ids = self.ids
        for i in range(have, top + 1):
            text = names[i]
            cid = ids.get(text)
            if cid is None:
                cid = len(ids)
                ids[text] = cid
                new[str(cid)] = text
            extra[i - have] = cid
        w.name_map = extra if mapping is None else np.concatenate([mapping, extra])
        return new


def write_records(out: np.ndarray, data: np.ndarray, mapping: np.ndarray) -> None:
    """OP_DTYPE ``data`` -> wire records ``out`` (same length, written in place): name ids
    through ``mapping`` (from :meth:`NameMap.extend`), step keypoint records marked by
    ``wire.FLAG_KEYPOINT`` in ``flag`` (the wire has no keypoint column)."""
    n = len(data)
    if _SAME_PREFIX and data.flags.c_contiguous:
        # each record's first 56 bytes as one opaque item: a memcpy per record
        out.view(_VOID)[...] = np.ndarray((n,), dtype=_VOID, buffer=data, strides=(OP_DTYPE.itemsize,))
    else:
        for name in wire.RECORD_DTYPE.names or ():
            out[name] = data[name]
    # mode="clip": no bounds-check buffering (every id is < len(mapping) by construction)
    np.take(mapping, data["op_name"], out=out["op_name"], mode="clip")
    np.take(mapping, data["op_type"], out=out["op_type"], mode="clip")
    keypoint = data["keypoint"]
    if keypoint.any():
        flag = out["flag"]
        flag[keypoint] |= np.uint32(wire.FLAG_KEYPOINT)
