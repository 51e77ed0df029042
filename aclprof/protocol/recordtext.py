"""A wire record's JSON text (daemon/PROTOCOL.md "record"): the parts the daemon and the
CLI both need to write it byte for byte alike.

The daemon writes JSON Lines for STREAM (JSON mode) and EXPORT (``aclprofd.records``);
``aclprof tail`` writes the same lines itself from binary STREAM records
(:mod:`aclprof.protocol.streambin`). Both go through the one C encoder
(:mod:`aclprof.protocol._jsonl`) with the literals made here, so the two texts cannot drift
apart: the names' escaping is ``json.dumps``'s, the identity head is formatted by one function.
"""

from __future__ import annotations

import json

import numpy as np

from aclprof.protocol import _jsonl
from aclprof.protocol.wire import MAX_NAME_BYTES, RECORD_DTYPE, utf8_cut

__all__ = ["NameJson", "identity_head", "encode_lines_into", "MAX_LINE_BYTES"]

#: the longest a record's JSON line can be: two names of MAX_NAME_BYTES, every byte escaped
#: as ``\\uXXXX`` (6 bytes), the identity head (host and service of at most 256 bytes, also
#: escaped) and the numbers and keys (well under 600 bytes)
MAX_LINE_BYTES = 2 * 6 * MAX_NAME_BYTES + 2 * 6 * 256 + 600


class NameJson:
    """Name id -> its JSON string literal (UTF-8 bytes), cached in :attr:`cache` (unknown
    ids: ``"#<id>"``); names stored before the ingest limit are cut to MAX_NAME_BYTES, so
    no line passes it. The C encoder looks ids up in ``cache`` and calls this on a miss; it
    keeps the literals of the last ``cache`` it was given across calls, so an entry, once
    set, must never change (a redefined id ends its connection: the next one has a new dict)."""

    __slots__ = ("names", "cache")

    def __init__(self, names: dict[int, str], cache: dict[int, bytes] | None = None):
        self.names = names
        self.cache: dict[int, bytes] = {} if cache is None else cache

    def __call__(self, nid: int) -> bytes:
        lit = self.cache.get(nid)
        if lit is None:
            lit = self.cache[nid] = self.literal(self.names.get(nid, f"#{nid}"))
        return lit

    @staticmethod
    def literal(name: str) -> bytes:
        """``name`` as the JSON string of a record's line: cut to MAX_NAME_BYTES, escaped."""
        name = utf8_cut(name, MAX_NAME_BYTES) or name
        # ensure_ascii: any character (a lone surrogate too) becomes an ASCII escape
        return json.dumps(name).encode("ascii")


def identity_head(host: str, pid: int, service: str | None) -> bytes:
    """The fields a sender's records share: ``"host":...,"pid":...,"service":...,``."""
    return ('"host":%s,"pid":%d,"service":%s,' % (json.dumps(host), pid, json.dumps(service))).encode("ascii")


def encode_lines_into(buffer: bytearray, records: np.ndarray, ts: float, head: bytes,
                      names: NameJson) -> tuple[int, int]:
    """Records (RECORD_DTYPE, C-contiguous) received at ``ts`` as JSON Lines, the payload
    text of the daemon's STREAM_RECORDS frames for them without frame headers, written at
    the start of ``buffer``: as many whole lines as fit (a buffer of MAX_LINE_BYTES holds at
    least one). Returns (records done, bytes written); the caller passes the rest again."""
    if records.dtype != RECORD_DTYPE:
        raise TypeError(f"encode_lines_into needs RECORD_DTYPE records, not {records.dtype}")
    return _jsonl.encode_lines_into(buffer, records, float(ts), head, names.cache, names)
