"""The framing spoken on the aclprof daemon's Unix socket (agents, the CLI, the daemon).

Every message is one frame: a 12-byte header, then ``length`` payload bytes.

    offset  size  field
    0       4     magic  b"ACLP"
    4       1     version (1)
    5       1     kind (Kind)
    6       2     reserved, 0
    8       4     length of the payload, little-endian, at most MAX_PAYLOAD

Payloads are UTF-8 JSON objects, except ``Kind.BATCH`` whose payload is raw records in the
layout of :data:`RECORD_DTYPE` (little-endian, 56 bytes each). The meaning of each kind and
its JSON fields are documented in ``daemon/PROTOCOL.md``. A peer that receives a frame with
a bad magic, an unknown version, a reserved field that is not 0, an oversized length or a
payload that does not parse must close that connection (it affects no other). The daemon
also rejects unknown kinds; agents must ignore them (``FrameReader(ignore_unknown=True)``),
so that the daemon may add daemon -> agent frames within version 1 (``GOODBYE`` was).
"""

from __future__ import annotations

import enum
import json
import socket
import struct
from typing import Any, Iterator

import numpy as np

__all__ = [
    "MAGIC", "VERSION", "HEADER", "MAX_PAYLOAD", "RECORD_DTYPE", "Kind", "ProtocolError",
    "encode", "encode_json", "encode_batch", "decode_json", "decode_batch", "FrameReader",
    "recv_frame", "FLAG_KEYPOINT",
]

MAGIC = b"ACLP"
VERSION = 1
HEADER = struct.Struct("<4sBBHI")
MAX_PAYLOAD = 16 << 20  # 16 MiB: ~300 k records per batch frame

#: One op record on the wire (the same fields as aclprof.records.OP_DTYPE, fixed
#: little-endian). ``op_name``/``op_type`` are ids into the sending connection's name
#: table, which NAMES frames extend.
RECORD_DTYPE = np.dtype([
    ("model_id", "<u4"), ("op_name", "<u4"), ("op_type", "<u4"), ("flag", "<u4"),
    ("thread_id", "<u4"), ("device_id", "<u4"), ("start", "<u8"), ("end", "<u8"),
    ("duration", "<u8"), ("execution_time", "<u8"),
])
assert RECORD_DTYPE.itemsize == 56

#: Set in a wire record's ``flag`` for a step keypoint record (``kind == "keypoint"`` in
#: :class:`aclprof.OpRecord`). The library's flags (aclprofSubscribeOpFlag) are small, so
#: the top bit is free; a receiver that does not know it sees an op with a large flag.
FLAG_KEYPOINT = 1 << 31


class Kind(enum.IntEnum):
    """Frame kinds (``daemon/PROTOCOL.md`` describes each)."""

    HELLO = 1
    WELCOME = 2
    ERROR = 3
    # agent -> daemon
    WATCH = 10
    UNWATCH = 11
    NAMES = 12
    BATCH = 13
    LOSS = 14
    # daemon -> agent (an addition to version 1: agents ignore kinds they do not know)
    GOODBYE = 15
    # CLI -> daemon (requests) and daemon -> CLI (replies)
    STATUS = 20
    STATUS_REPLY = 21
    STREAM = 22
    STREAM_RECORDS = 23
    SNAPSHOT = 24
    SNAPSHOT_REPLY = 25
    EXPORT = 26
    EXPORT_RECORDS = 27
    EXPORT_END = 28
    RESET = 29
    RESET_REPLY = 30


class ProtocolError(ValueError):
    """A frame that breaks the protocol; the connection that sent it must be closed."""


def encode(kind: Kind | int, payload: bytes = b"") -> bytes:
    """One frame carrying ``payload``."""
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(MAGIC, VERSION, int(kind), 0, len(payload)) + payload


def encode_json(kind: Kind | int, obj: Any) -> bytes:
    """One frame whose payload is ``obj`` as compact JSON."""
    return encode(kind, json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def encode_batch(records: np.ndarray) -> bytes:
    """A BATCH frame from an array with the fields of :data:`RECORD_DTYPE`."""
    data = np.ascontiguousarray(records, dtype=RECORD_DTYPE) if records.dtype != RECORD_DTYPE else records
    return encode(Kind.BATCH, np.ascontiguousarray(data).tobytes())


def decode_json(payload: bytes) -> dict[str, Any]:
    """A JSON object payload; raises ProtocolError for anything else."""
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"payload is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"payload is JSON {type(obj).__name__}, not an object")
    return obj


def decode_batch(payload: bytes) -> np.ndarray:
    """The records of a BATCH payload (a read-only view, no copy)."""
    if len(payload) % RECORD_DTYPE.itemsize:
        raise ProtocolError(f"batch of {len(payload)} bytes is not a whole number of "
                            f"{RECORD_DTYPE.itemsize}-byte records")
    return np.frombuffer(payload, dtype=RECORD_DTYPE)


class FrameReader:
    """Incremental decoder: feed bytes as they arrive, get whole frames out."""

    def __init__(self, max_payload: int = MAX_PAYLOAD, *, ignore_unknown: bool = False):
        self._buffer = bytearray()
        self._max = max_payload
        self._ignore_unknown = ignore_unknown

    def feed(self, data: bytes) -> Iterator[tuple[Kind, bytes]]:
        """Yield every complete ``(kind, payload)`` now buffered; raise ProtocolError on a
        malformed header (the caller closes the connection). With ``ignore_unknown`` a
        well-formed frame of a kind this side does not know is skipped instead of raising
        (agents: the daemon may send kinds added after them)."""
        self._buffer += data
        while len(self._buffer) >= HEADER.size:
            magic, version, kind, reserved, length = HEADER.unpack_from(self._buffer)
            if magic != MAGIC:
                raise ProtocolError(f"bad magic {bytes(magic)!r}")
            if version != VERSION:
                raise ProtocolError(f"unsupported protocol version {version} (this side speaks {VERSION})")
            if reserved != 0:
                raise ProtocolError("reserved header field is not 0")
            if length > self._max:
                raise ProtocolError(f"frame of {length} bytes exceeds the limit of {self._max}")
            try:
                kind = Kind(kind)
            except ValueError:
                if not self._ignore_unknown:
                    raise ProtocolError(f"unknown frame kind {kind}") from None
            end = HEADER.size + length
            if len(self._buffer) < end:
                return
            if not isinstance(kind, Kind):
                del self._buffer[:end]
                continue
            payload = bytes(self._buffer[HEADER.size:end])
            del self._buffer[:end]
            yield kind, payload

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def recv_frame(sock: socket.socket, reader: FrameReader, pending: list[tuple[Kind, bytes]]) -> tuple[Kind, bytes] | None:
    """Blocking helper for simple clients: the next frame from ``sock`` (None at EOF).

    ``pending`` holds frames already decoded but not yet returned; pass the same list on
    every call.
    """
    while not pending:
        data = sock.recv(1 << 16)
        if not data:
            return None
        pending.extend(reader.feed(data))
    return pending.pop(0)
