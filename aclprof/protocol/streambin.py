"""Binary STREAM records (``"format": "records-v1"``, daemon/PROTOCOL.md "Binary STREAM"):
the frames, how the daemon makes them, and the client's decoder that renders them as the
daemon's JSON Lines.

A JSON STREAM costs the daemon a JSON encoding (~60 ns) and a ~230-byte socket copy
(~65 ns) per record, on the loop every agent shares (issue 21). In this format the daemon
sends the agents' records as they arrived (RECORD_DTYPE, 56 bytes each, the batch's own
bytes when the client takes all of it) and what a client needs to write them exactly as the
JSON mode would: each agent connection is a *source*, defined once (``STREAM_SOURCE``:
host, pid, service), its name table sent once and then only new ids (``STREAM_NAMES``), and
forgotten when it goes (``STREAM_SOURCE_END``); a ``STREAM_BATCH`` carries one source's
records and their receive time. Everything else of a JSON stream is unchanged: op failures,
request bills and gap lines still come as ``STREAM_RECORDS`` (JSON Lines), and
``STREAM_SKIPPED`` and ``END`` as before.

The client renders a batch with the daemon's own C encoder (:mod:`aclprof.protocol.recordtext`),
so its lines are the JSON mode's byte for byte. It trusts nothing it is sent: every frame is
checked (kinds, sizes, ids, the limits below) and a bad one is a :class:`ProtocolError`
naming the frame.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from aclprof.protocol.recordtext import MAX_LINE_BYTES, NameJson, encode_lines_into, identity_head
from aclprof.protocol.wire import (
    MAX_NAME_BYTES,
    MAX_NAMES_PAYLOAD,
    RECORD_DTYPE,
    Kind,
    ProtocolError,
    check_identity,
    encode_joined,
    encode_json,
    header,
)

__all__ = ["FORMAT", "JSONL", "FORMATS", "BATCH_HEAD", "BATCH_VERSION", "MAX_BATCH_RECORDS", "RENDER_BYTES",
           "MAX_SOURCES", "MAX_NAME_TABLE_BYTES", "source_frame", "names_frames", "batch_prefix",
           "source_end_frame", "StreamDecoder"]

JSONL = "jsonl"
FORMAT = "records-v1"
#: the STREAM formats this side speaks (WELCOME's ``stream_formats``; STREAM's ``format``)
FORMATS = (JSONL, FORMAT)
#: a STREAM_BATCH payload's head: format version (1), two reserved (0), the source id (u32),
#: the receive time (f64, Unix seconds); the records follow it, 56 bytes each
BATCH_HEAD = struct.Struct("<BBHId")
BATCH_VERSION = 1
#: records per STREAM_BATCH at most (3.5 MiB): an agent's batch is one frame unless larger
MAX_BATCH_RECORDS = 1 << 16
#: the client's rendering buffer: a batch's lines are written into it (as many as fit a time)
#: and out of it, the same buffer each time, warm in the cache (a new ~0.5 MB text per batch
#: was an allocation and a copy: most of what the client spent beyond the encoding itself)
RENDER_BYTES = (1 << 20) + MAX_LINE_BYTES
#: sources a client holds at once (each its name table): a daemon has far fewer agents
MAX_SOURCES = 1 << 16
#: bytes of names a client holds in all (each name counted with its id): well above what a
#: daemon's memory budget lets its agents define (memory_budget / 8 per agent)
MAX_NAME_TABLE_BYTES = 512 << 20
_NAME_COST = 64  # bytes a held name costs beyond its text (its literal, dict entries)


# ---- the daemon's side ------------------------------------------------------------------
def source_frame(source: int, host: str, pid: int, service: str | None) -> bytes:
    """STREAM_SOURCE: ``source`` is this agent connection (host, pid, service)."""
    return encode_json(Kind.STREAM_SOURCE, {"source": source, "host": host, "pid": pid, "service": service})


def source_end_frame(source: int) -> bytes:
    """STREAM_SOURCE_END: the agent connection ``source`` closed; no more of its records."""
    return encode_json(Kind.STREAM_SOURCE_END, {"source": source})


def names_frames(source: int, items: list[tuple[int, str]]) -> list[bytes]:
    """STREAM_NAMES frames defining ``items`` (id, name) of ``source``, each payload at most
    MAX_NAMES_PAYLOAD bytes (a name, at most MAX_NAME_BYTES, escaped to at most ~25 KB of
    JSON, always fits): ``{"source": s, "names": [[id, name], ...]}``."""
    return encode_joined(Kind.STREAM_NAMES, '{"source":%d,"names":[' % source,
                         ("[%d,%s]" % (nid, json.dumps(name)) for nid, name in items), "]}")


def batch_prefix(source: int, ts: float, n: int) -> bytes:
    """The frame header and payload head of a STREAM_BATCH of ``n`` records of ``source``
    received at ``ts``: the records' own bytes follow (sent as they are, no copy)."""
    return header(Kind.STREAM_BATCH, BATCH_HEAD.size + n * RECORD_DTYPE.itemsize) + \
        BATCH_HEAD.pack(BATCH_VERSION, 0, 0, source, ts)


# ---- the client's side ------------------------------------------------------------------
class _Source:
    __slots__ = ("head", "names", "json")

    def __init__(self, head: bytes):
        self.head = head
        self.names: dict[int, str] = {}
        self.json = _DefinedNames(self.names)


class _DefinedNames(NameJson):
    """A source's literals; an id the daemon never defined is an error, not ``"#<id>"`` (the
    daemon refuses a batch with an undefined id at ingest: it never streams one)."""

    __slots__ = ()

    def __call__(self, nid: int) -> bytes:
        lit = self.cache.get(nid)
        if lit is None:
            name = self.names.get(nid)
            if name is None:
                raise ProtocolError(f"STREAM_BATCH names op id {nid}, which its source never defined")
            lit = self.cache[nid] = self.literal(name)
        return lit


def _obj(kind: Kind, payload: Any) -> dict[str, Any]:
    try:
        obj = json.loads(str(payload, "utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{kind.name} payload is not JSON: {str(exc)[:100]}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{kind.name} payload is not a JSON object")
    return obj


def _u32(kind: Kind, v: Any, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 0xFFFFFFFF:
        raise ProtocolError(f"{kind.name} {what} must be an integer 0..2**32-1, not {str(v)[:40]}")
    return v


class StreamDecoder:
    """The client's state of one binary STREAM: its sources and their names. :meth:`frame`
    takes each frame; ProtocolError (naming the frame) for anything the daemon would not send."""

    def __init__(self, max_sources: int = MAX_SOURCES, max_name_bytes: int = MAX_NAME_TABLE_BYTES):
        self._sources: dict[int, _Source] = {}
        self._max_sources = max_sources
        self._max_name_bytes = max_name_bytes
        self.name_bytes = 0  # what the sources' names cost, counted against max_name_bytes
        self._text = bytearray(RENDER_BYTES)  # where batches are rendered (see RENDER_BYTES)

    @property
    def sources(self) -> int:
        return len(self._sources)

    def frame(self, kind: Kind, payload: Any) -> Iterator[memoryview]:
        """A STREAM_SOURCE, STREAM_NAMES, STREAM_SOURCE_END (nothing to show) or STREAM_BATCH
        frame: its records as JSON Lines, in pieces (one unless a batch's text passes
        RENDER_BYTES), each valid until the next is taken (they share one buffer). The frame
        is checked at once; an op id its source never defined raises during the iteration."""
        if kind == Kind.STREAM_BATCH:
            return self.batch(payload)
        if kind == Kind.STREAM_NAMES:
            self.names(payload)
        elif kind == Kind.STREAM_SOURCE:
            self.source(payload)
        elif kind == Kind.STREAM_SOURCE_END:
            sid = _u32(kind, _obj(kind, payload).get("source"), "source")
            src = self._sources.pop(sid, None)
            if src is None:
                raise ProtocolError(f"STREAM_SOURCE_END of source {sid}, which is not defined")
            self.name_bytes -= sum(map(len, src.names.values())) + _NAME_COST * len(src.names)
        else:
            raise ProtocolError(f"{kind.name} is not a binary stream frame")
        return iter(())

    def source(self, payload: Any) -> None:
        kind = Kind.STREAM_SOURCE
        obj = _obj(kind, payload)
        sid = _u32(kind, obj.get("source"), "source")
        host, pid, service = obj.get("host"), obj.get("pid"), obj.get("service")
        if not isinstance(host, str) or not (service is None or isinstance(service, str)):
            raise ProtocolError("STREAM_SOURCE needs a string host and a string or null service")
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < 1 << 31:
            raise ProtocolError(f"STREAM_SOURCE pid must be an integer 0..2**31-1, not {str(pid)[:40]}")
        check_identity("STREAM_SOURCE", host=host, service=service)  # at most MAX_IDENT_BYTES each
        if sid in self._sources:
            raise ProtocolError(f"STREAM_SOURCE defines source {sid} again")
        if len(self._sources) >= self._max_sources:
            raise ProtocolError(f"STREAM_SOURCE: more than {self._max_sources} sources at once")
        self._sources[sid] = _Source(identity_head(host, pid, service))

    def names(self, payload: Any) -> None:
        kind = Kind.STREAM_NAMES
        if len(payload) > MAX_NAMES_PAYLOAD:
            raise ProtocolError(f"STREAM_NAMES of {len(payload)} bytes: at most {MAX_NAMES_PAYLOAD}")
        obj = _obj(kind, payload)
        sid = _u32(kind, obj.get("source"), "source")
        src = self._sources.get(sid)
        if src is None:
            raise ProtocolError(f"STREAM_NAMES for source {sid}, which is not defined")
        items = obj.get("names")
        if not isinstance(items, list):
            raise ProtocolError("STREAM_NAMES needs a list of [id, name] pairs")
        names = src.names
        for item in items:
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], str):
                raise ProtocolError(f"STREAM_NAMES entry {str(item)[:60]} is not [id, name]")
            nid, name = _u32(kind, item[0], "name id"), item[1]
            if len(name) > MAX_NAME_BYTES // 4 and len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
                raise ProtocolError(f"STREAM_NAMES name {nid} is longer than {MAX_NAME_BYTES} bytes")
            old = names.get(nid)
            if old is not None:
                if old != name:
                    raise ProtocolError(f"STREAM_NAMES redefines name {nid} of source {sid}")
                continue
            cost = len(name) + _NAME_COST
            if self.name_bytes + cost > self._max_name_bytes:
                raise ProtocolError(f"STREAM_NAMES: the sources' names pass this client's limit of "
                                    f"{self._max_name_bytes} bytes")
            names[nid] = name
            self.name_bytes += cost

    def batch(self, payload: Any) -> Iterator[memoryview]:
        n, size = len(payload) - BATCH_HEAD.size, RECORD_DTYPE.itemsize
        if n < 0 or n % size:
            raise ProtocolError(f"STREAM_BATCH of {len(payload)} bytes is not a {BATCH_HEAD.size}-byte head and "
                                f"whole {size}-byte records")
        version, r1, r2, sid, ts = BATCH_HEAD.unpack_from(payload, 0)
        if version != BATCH_VERSION or r1 or r2:
            raise ProtocolError(f"STREAM_BATCH of format version {version} (this client reads {BATCH_VERSION}) "
                                f"or reserved fields not 0")
        src = self._sources.get(sid)
        if src is None:
            raise ProtocolError(f"STREAM_BATCH of source {sid}, which is not defined")
        return self._render(np.frombuffer(payload, dtype=RECORD_DTYPE, offset=BATCH_HEAD.size), ts, src)

    def _render(self, recs: np.ndarray, ts: float, src: _Source) -> Iterator[memoryview]:
        text, i = self._text, 0
        while i < len(recs):
            done, size = encode_lines_into(text, recs[i:], ts, src.head, src.json)
            i += done
            yield memoryview(text)[:size]

