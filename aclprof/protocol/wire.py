"""The framing spoken on the aclprof daemon's Unix socket (agents, the CLI, the daemon).

Every message is one frame: a 12-byte header, then ``length`` payload bytes.

    offset  size  field
    0       4     magic  b"ACLP"
    4       1     version (1)
    5       1     kind (Kind)
    6       2     reserved, 0
    8       4     length of the payload, little-endian, at most MAX_PAYLOAD

Payloads are UTF-8 JSON objects, except ``Kind.BATCH`` whose payload is raw records in the
layout of :data:`RECORD_DTYPE` (little-endian, 56 bytes each), and ``STREAM_RECORDS`` and
``EXPORT_RECORDS`` whose payload is JSON Lines (one record object per ``\n``-terminated
line). ``daemon/PROTOCOL.md`` documents each kind and its JSON fields.

A peer that receives a frame with a bad magic, an unknown version, a reserved field that is
not 0, an oversized length or a payload that does not parse must close that connection (it
affects no other). The daemon also rejects unknown kinds; agents must ignore them
(``FrameReader(ignore_unknown=True)``), so that the daemon may add daemon -> agent frames
within version 1 (``GOODBYE`` was).
"""

from __future__ import annotations

import enum
import json
import socket
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from aclprof.protocol import _jsonl

__all__ = [
    "MAGIC", "VERSION", "HEADER", "MAX_PAYLOAD", "RECORD_DTYPE", "Kind", "ProtocolError",
    "header", "encode", "encode_json", "encode_batch", "decode_json", "decode_batch", "FrameReader",
    "recv_frame", "widen_send_buffer", "FLAG_KEYPOINT", "keypoint_mask", "MAX_NAME_BYTES", "MAX_IDENT_BYTES",
    "MAX_LABELS",
    "MAX_REGEX_BYTES", "FRAME_TARGET", "check_identity", "MAX_NAMES_PAYLOAD", "encode_names", "encode_name_run",
    "name_run_json", "encode_name_pieces",
    "encode_joined",
    "utf8_cut", "AGENT_HEARTBEAT_S", "OP_FAILURE_MAX_TENSORS", "OP_FAILURE_MAX_DIMS", "OP_FAILURE_MAX_NAME",
    "REQUEST_BILL_MAX_TYPES", "REQUEST_BILL_MAX_ATTRS", "REQUEST_BILL_MAX_MODELS", "REQUEST_BILL_MAX_TEXT",
    "REQUEST_BILL_MAX_WINDOWS",
]

MAGIC = b"ACLP"
VERSION = 1
HEADER = struct.Struct("<4sBBHI")
MAX_PAYLOAD = 16 << 20  # 16 MiB: ~300 k records per batch frame

# String limits (daemon/README.md "Limits"), in UTF-8 bytes. A record's JSON line holds its
# op name and type, so these bound every STREAM/EXPORT line far below MAX_PAYLOAD (even with
# every character escaped as \uXXXX), which is what lets the daemon split any reply into
# frames within the limit. The daemon truncates longer op names/types (counted) at ingest
# and refuses longer hosts, services and labels (check_identity).
MAX_NAME_BYTES = 4096   # one op name or op type (NAMES)
MAX_IDENT_BYTES = 256   # host, service, one label key or value (HELLO, WATCH)
MAX_LABELS = 64         # labels per HELLO or WATCH
MAX_REGEX_BYTES = 1024  # a filter's type/name pattern
#: one NAMES frame's payload at most (a larger table goes in several frames, encode_names):
#: the daemon takes a frame in one go on its loop (1 MiB of 70,000 short names: ~50 ms;
#: a 16 MiB frame held every other client ~1 s), so this bounds one agent's stall
MAX_NAMES_PAYLOAD = 1 << 20
# One OP_FAILURE frame (issue 24): tensors per side, dims per tensor, characters of the op
# name. Real ops are far inside (ACL_MAX_DIM_CNT is 128, but shapes of more than 8 dims are
# rare); the agent cuts to these, the daemon refuses more.
OP_FAILURE_MAX_TENSORS = 64
OP_FAILURE_MAX_DIMS = 32
OP_FAILURE_MAX_NAME = 1024
# REQUEST_BILL (issue 25): the most op types, attributes and models one bill carries, and
# the longest text (request id, attribute, op type or name) in it
REQUEST_BILL_MAX_TYPES = 16
REQUEST_BILL_MAX_ATTRS = 16
REQUEST_BILL_MAX_MODELS = 16
REQUEST_BILL_MAX_TEXT = 1024
#: request windows one bill carries for the trace exports (thread id, start, end in the op
#: records' clock: aclprof/exportfmt/requests.py); the rest counted in windows_cut
REQUEST_BILL_MAX_WINDOWS = 16
#: the daemon ends a JSON Lines frame (STREAM_RECORDS, EXPORT_RECORDS) once it holds this
#: many bytes, well within MAX_PAYLOAD: frames of a bounded size whatever the names
FRAME_TARGET = 1 << 20
#: an agent with nothing else to send sends a heartbeat (``LOSS`` with ``dropped`` 0, which
#: every daemon since protocol 1 accepts and ignores) this often; the daemon closes an agent
#: connection that sends no whole frame for its ``agent_idle_timeout`` (a few of these)
AGENT_HEARTBEAT_S = 10.0

def _record_dtype() -> np.dtype:
    """``aclprof_record`` of ``cdefs/aclprof_records.h``, little-endian: its layout as the
    C encoder (``_jsonl``, compiled from that header) reads it, without cffi."""
    names = [name for name, _, _ in _jsonl.RECORD_FIELDS]
    dtype = np.dtype({"names": names, "formats": [f"<u{size}" for _, _, size in _jsonl.RECORD_FIELDS],
                      "offsets": [off for _, off, _ in _jsonl.RECORD_FIELDS],
                      "itemsize": _jsonl.RECORD_SIZE})
    plain = np.dtype([(name, dtype.fields[name][0]) for name in names])  # type: ignore[index]
    return plain if plain == dtype else dtype  # no padding (_jsonl asserts it): the list form


#: One op record on the wire: ``aclprof_record`` of ``cdefs/aclprof_records.h`` (the same
#: ten fields as aclprof.api.records.OP_DTYPE, fixed little-endian, 56 bytes in protocol
#: 1, which ``_jsonl.c`` asserts when it is compiled). ``op_name``/``op_type`` are ids into
#: the sending connection's name table, which NAMES frames extend. ``execution_time`` (the
#: library's "AI Core execution time") travels and is stored, but nothing shows it.
RECORD_DTYPE = _record_dtype()

#: Set in a wire record's ``flag`` for a step keypoint record (``kind == "keypoint"`` in
#: :class:`aclprof.OpRecord`). The library's flags (aclprofSubscribeOpFlag) are small, so
#: the top bit is free; a receiver that does not know it sees an op with a large flag.
#: (``ACLPROF_FLAG_KEYPOINT`` of the header.)
FLAG_KEYPOINT: int = _jsonl.FLAG_KEYPOINT
_KEYPOINT_BIT = np.uint32(FLAG_KEYPOINT)


def keypoint_mask(records: np.ndarray) -> np.ndarray:
    """A bool array over wire ``records`` (RECORD_DTYPE): True for step keypoint records
    (:data:`FLAG_KEYPOINT` set). The one reading of the bit where a bool is wanted."""
    mask: np.ndarray = (records["flag"] & _KEYPOINT_BIT) != 0
    return mask




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
    # daemon -> agent (additions to version 1: agents ignore kinds they do not know)
    GOODBYE = 15
    LIVE = 16  # {"live": bool}: whether a STREAM client watches (agents send more often)
    # agent -> daemon, protocol 3 (issue 24): one AI Core exception; agents send it only to a
    # daemon whose WELCOME says protocol >= 3 (an older daemon closes on an unknown kind)
    OP_FAILURE = 17
    # agent -> daemon, protocol 4 (issue 25): one request's bill; sent only to a daemon whose
    # WELCOME says protocol >= 4
    REQUEST_BILL = 60  # (18 is TRACE_START: kinds stay unique across directions)
    # CLI -> daemon (requests) and daemon -> CLI (replies)
    STATUS = 20
    STATUS_REPLY = 21
    STREAM = 22
    STREAM_RECORDS = 23
    SNAPSHOT = 24
    SNAPSHOT_REPLY = 25
    EXPORT = 26
    EXPORT_RECORDS = 27
    # 28 was EXPORT_END (protocol 1); END replaces it
    RESET = 29
    RESET_REPLY = 30
    # on-demand traces (aclprof trace; daemon/PROTOCOL.md): TRACE_START daemon -> agent (an
    # old agent ignores it and never answers: the daemon times it out), TRACE_DONE agent ->
    # daemon, TRACE from the CLI and its one TRACE_REPLY
    TRACE_START = 18
    TRACE_DONE = 19
    TRACE = 50
    TRACE_REPLY = 51
    # request bills (issue 25): REQUESTS from the CLI (aclprof requests) and its one reply
    REQUESTS = 52
    REQUESTS_REPLY = 53
    # protocol 2: STREAM and EXPORT end with END; a STREAM reports skipped records apart
    END = 31
    STREAM_SKIPPED = 32
    # protocol 5: a binary STREAM ("format": "records-v1", aclprof.protocol.streambin), sent
    # only to a client that asked for it
    STREAM_SOURCE = 33
    STREAM_NAMES = 34
    STREAM_BATCH = 35
    STREAM_SOURCE_END = 36
    # regression detector baselines (daemon/PROTOCOL.md "Baselines")
    BASELINE_SAVE = 40
    BASELINE_SAVE_REPLY = 41
    BASELINE_LIST = 42
    BASELINE_LIST_REPLY = 43
    BASELINE_GET = 44
    BASELINE_GET_REPLY = 45


class ProtocolError(ValueError):
    """A frame that breaks the protocol; the connection that sent it must be closed."""


def header(kind: Kind | int, length: int) -> bytes:
    """The 12-byte header of a frame of ``length`` payload bytes (a sender that appends
    header and payload to its output buffer separately copies the payload once, not twice)."""
    if length > MAX_PAYLOAD:
        raise ProtocolError(f"payload of {length} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(MAGIC, VERSION, int(kind), 0, length)


def encode(kind: Kind | int, payload: bytes = b"") -> bytes:
    """One frame carrying ``payload``."""
    return header(kind, len(payload)) + payload


def encode_json(kind: Kind | int, obj: Any) -> bytes:
    """One frame whose payload is ``obj`` as compact JSON."""
    return encode(kind, json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def encode_names(names: Mapping[str, str] | Mapping[int, str]) -> list[bytes]:
    """NAMES frames defining ``names`` (connection-scoped id -> name), each payload at most
    MAX_NAMES_PAYLOAD bytes and as full as that allows (one name, MAX_NAME_BYTES long,
    escaped to at most ~25 KB of JSON, always fits), together exactly ``{"names": names}``."""
    return encode_joined(Kind.NAMES, '{"names":{', (f'"{int(nid)}":{json.dumps(name)}' for nid, name in names.items()),
                         "}}")


def encode_joined(kind: Kind, head: str, parts: Iterable[str], tail: str,
                  limit: int = MAX_NAMES_PAYLOAD) -> list[bytes]:
    """``kind`` frames whose payloads are ``head + ",".join(some parts) + tail``, in order,
    each at most ``limit`` bytes and as full as that allows (a part too long for any frame
    gets one of its own). Parts are ASCII JSON (``json.dumps``): characters are bytes."""
    frames: list[bytes] = []
    run: list[str] = []
    size = len(head) + len(tail)  # the payload's bytes so far
    for part in parts:
        cost = len(part) + (1 if run else 0)  # and a comma before all but the first
        if run and size + cost > limit:
            frames.append(encode(kind, (head + ",".join(run) + tail).encode("ascii")))
            run, size, cost = [], len(head) + len(tail), len(part)
        run.append(part)
        size += cost
    if run:
        frames.append(encode(kind, (head + ",".join(run) + tail).encode("ascii")))
    return frames


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # json.dumps(separators=...) makes one per call


def encode_name_run(first: int, names: list[str]) -> list[bytes]:
    """The NAMES frames of ``encode_names({first: names[0], first + 1: names[1], ...})``,
    the same bytes, but built by one call of the C JSON encoder when they fit one frame
    (the usual case): ~0.1 us a name instead of ~0.5 (issue 21: an agent maps every name
    of a model again on each connection, on the thread that holds the GIL meanwhile)."""
    return encode_name_pieces([(first, names, name_run_json(first, names))])


def name_run_json(first: int, names: list[str]) -> str:
    """The JSON members ``"first":"names[0]","first+1":"names[1]",...`` (compact, ASCII) of a
    run of names: a piece of a NAMES payload, built on its own (one GIL hold each, issue 21)
    and framed with others by :func:`encode_name_pieces`; "" for no names."""
    if not names:
        return ""
    return _COMPACT.encode(dict(zip(map(str, range(first, first + len(names))), names)))[1:-1]


def encode_name_pieces(pieces: Iterable[tuple[int, list[str], str]]) -> list[bytes]:
    """NAMES frames of runs of names given as ``(first id, names, name_run_json(first, names))``:
    as few as MAX_NAMES_PAYLOAD allows, split between runs, and a run too large for one frame
    split between its names as :func:`encode_names` splits them. Runs that fit one frame give
    exactly the bytes of ``encode_names`` of all their names."""
    parts: list[str] = []
    room = MAX_NAMES_PAYLOAD - len('{"names":{}}')
    for first, names, members in pieces:
        if len(members) <= room:
            if members:
                parts.append(members)
        else:
            parts.extend(f'"{first + i}":{json.dumps(name)}' for i, name in enumerate(names))
    return encode_joined(Kind.NAMES, '{"names":{', parts, "}}")


def encode_batch(records: np.ndarray) -> bytes:
    """A BATCH frame from an array with the fields of :data:`RECORD_DTYPE`."""
    data = np.ascontiguousarray(records, dtype=RECORD_DTYPE) if records.dtype != RECORD_DTYPE else records
    return encode(Kind.BATCH, np.ascontiguousarray(data).tobytes())


def utf8_cut(text: str, limit: int) -> str | None:
    """``text`` cut to at most ``limit`` UTF-8 bytes (a lone surrogate counts as its 3
    bytes; a character is never split), or None when it is within the limit already.
    The limits are in bytes: a string of fewer characters may still pass one (up to 4
    bytes each), so only the shortest are spared the encoding."""
    if len(text) <= limit // 4:
        return None
    b = text.encode("utf-8", "surrogatepass")
    if len(b) <= limit:
        return None
    for end in range(limit, limit - 4, -1):  # back off a character cut in half
        try:
            return b[:end].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            continue
    raise AssertionError("unreachable: a UTF-8 character is at most 4 bytes")


def check_identity(what: str, *, host: Any = "", service: Any = None, labels: Any = None) -> None:
    """ProtocolError naming ``what`` (e.g. "HELLO") and the field when a host, service or
    label is longer than MAX_IDENT_BYTES or there are more than MAX_LABELS labels. They
    are refused, not truncated: they make up aggregate keys, and a cut one would merge
    senders silently. (Types are the caller's check; only strings are measured.)"""
    def long(s: Any) -> bool:
        return isinstance(s, str) and utf8_cut(s, MAX_IDENT_BYTES) is not None
    for field, v in (("host", host), ("service", service)):
        if long(v):
            raise ProtocolError(f"{what} {field} is longer than {MAX_IDENT_BYTES} bytes")
    if isinstance(labels, dict):
        if len(labels) > MAX_LABELS:
            raise ProtocolError(f"{what} has {len(labels)} labels; at most {MAX_LABELS}")
        for k, v in labels.items():
            if long(k) or long(v):
                raise ProtocolError(f"{what} label {str(k)[:40]!r}...: key and value are at most "
                                    f"{MAX_IDENT_BYTES} bytes each")


def decode_json(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """A JSON object payload; raises ProtocolError for anything else."""
    try:
        obj = json.loads(str(payload, "utf-8"))
    except RecursionError:  # nested deeper than the interpreter's stack: a peer's doing, not a bug
        raise ProtocolError("payload is not JSON this side accepts: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of over 4300 digits
        raise ProtocolError(f"payload is not JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"payload is JSON {type(obj).__name__}, not an object")
    return obj


def decode_batch(payload: bytes | bytearray | memoryview) -> np.ndarray:
    """The records of a BATCH payload: an array over the payload's memory, no copy
    (``np.frombuffer`` on the reader's view; ``.copy()`` it to keep it beyond the frame)."""
    if len(payload) % RECORD_DTYPE.itemsize:
        raise ProtocolError(f"batch of {len(payload)} bytes is not a whole number of "
                            f"{RECORD_DTYPE.itemsize}-byte records")
    return np.frombuffer(payload, dtype=RECORD_DTYPE)


class FrameReader:
    """Incremental decoder: feed bytes as they arrive, get whole frames out.

    Payloads are ``memoryview`` slices, not copies: of the ``data`` passed to :meth:`feed`
    when a frame lies inside it, or of a buffer the reader assembled for a frame that
    arrived in pieces (that frame's bytes are copied once, into a buffer of its own). The
    reader never writes to a buffer once it has handed out a view of it, so a payload
    stays valid as long as it is referenced; ``data`` must not be modified while views of
    it are alive (``socket.recv`` returns a fresh ``bytes`` each time). Consumers that keep
    a payload beyond handling it for long (storage, streams) copy it once (``bytes(view)``).
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD, *, ignore_unknown: bool = False):
        self._part = bytearray()  # an incomplete frame (header first); a fresh one per frame
        self._need = 0            # the whole size of that frame once its header is known, else 0
        self._max = max_payload
        self._ignore_unknown = ignore_unknown

    def _check(self, buf: Any, pos: int) -> tuple[Kind | None, int]:
        """Validate the header at ``pos``: (kind, or None for an ignored unknown kind, length)."""
        magic, version, kind, reserved, length = HEADER.unpack_from(buf, pos)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {bytes(magic)!r}")
        if version != VERSION:
            raise ProtocolError(f"unsupported protocol version {version} (this side speaks {VERSION})")
        if reserved != 0:
            raise ProtocolError("reserved header field is not 0")
        if length > self._max:
            raise ProtocolError(f"frame of {length} bytes exceeds the limit of {self._max}")
        try:
            return Kind(kind), length
        except ValueError:
            if not self._ignore_unknown:
                raise ProtocolError(f"unknown frame kind {kind}") from None
            return None, length

    def check_header(self, buf: Any, pos: int) -> tuple[Kind | None, int]:
        """Validate a frame header at ``buf[pos:]`` as :meth:`feed` does: (kind, or None for
        an ignored unknown kind, payload length); ProtocolError if it is malformed. For a
        client that reads each frame in place (header, then exactly its payload)."""
        return self._check(buf, pos)

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[tuple[Kind, memoryview]]:
        """Yield every complete ``(kind, payload)`` now buffered; raise ProtocolError on a
        malformed header (the caller closes the connection). With ``ignore_unknown`` a
        well-formed frame of a kind this side does not know is skipped instead of raising
        (agents: the daemon may send kinds added after them)."""
        mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        n, pos = len(mv), 0
        part = self._part
        if part:
            # finish the frame begun in an earlier feed: header first, then exactly its payload
            if len(part) < HEADER.size:
                take = min(HEADER.size - len(part), n)
                part += mv[:take]
                pos = take
                if len(part) < HEADER.size:
                    return
                self._need = HEADER.size + self._check(part, 0)[1]
            take = min(self._need - len(part), n - pos)
            part += mv[pos:pos + take]
            pos += take
            if len(part) < self._need:
                return
            self._part, self._need = bytearray(), 0
            kind = self._check(part, 0)[0]
            if kind is not None:
                yield kind, memoryview(part)[HEADER.size:]
        while n - pos >= HEADER.size:
            kind, length = self._check(mv, pos)
            end = pos + HEADER.size + length
            if end > n:
                break
            if kind is not None:
                yield kind, mv[pos + HEADER.size:end]
            pos = end
        if pos < n:
            self._part = part = bytearray(mv[pos:])
            if len(part) >= HEADER.size:
                self._need = HEADER.size + self._check(part, 0)[1]

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._part)


def recv_frame(sock: socket.socket, reader: FrameReader,
               pending: list[tuple[Kind, memoryview]]) -> tuple[Kind, memoryview] | None:
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


def widen_send_buffer(sock: socket.socket, size: int) -> None:
    """Ask for a kernel send buffer of ``size`` bytes on ``sock``, never a smaller one than it
    has. Used where a frame is larger than the default (``net.core.wmem_default``, ~208 KiB
    on most hosts): such a frame left in pieces, the peer woken for each (each partial
    send a loop turn on the receiving side, issue 21). Linux gives twice what is asked,
    capped at twice ``net.core.wmem_max``; the memory is the kernel's, per socket. A
    stand-in without the option keeps its default."""
    try:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < size:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    except OSError:
        pass
