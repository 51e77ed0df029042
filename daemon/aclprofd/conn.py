"""One client connection of the daemon (agent or control): its socket, frame reader,
outgoing buffer and the per-connection state the other modules keep on it.

The state lives on the connection rather than in per-module dicts keyed by connection so
that closing a connection drops all of it at once (nothing to forget to clean up).
"""

from __future__ import annotations

import collections
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from aclprof.protocol.wire import FrameReader, Kind

from .aggregate.aggregator import KeySource
from .filters import Filter, NameMatcher

__all__ = ["Conn", "OutQueue", "Rate"]

_SEND_BUFFERS = 64  # chunks per sendmsg (well below IOV_MAX)


class OutQueue:
    """A connection's outgoing bytes: a queue of immutable chunks sent with one
    ``sendmsg`` of several of them, never joined or moved (issue 12: a ``bytearray`` that
    was appended to and cut from the front copied its remainder over and over, ~2 ms per
    STREAM pump at 250 k records/s). A frame encoded once for several STREAM clients is
    the same ``bytes`` object in each of their queues. ``len()`` is the bytes still to send."""

    __slots__ = ("_chunks", "_head", "_len")

    def __init__(self) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._head = 0  # bytes of the first chunk already sent
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iadd__(self, data: bytes | bytearray | memoryview) -> OutQueue:
        if data:
            chunk = data if type(data) is bytes else bytes(data)  # mutable input: a copy of it
            self._chunks.append(chunk)
            self._len += len(chunk)
        return self

    def __bytes__(self) -> bytes:
        if not self._chunks:
            return b""
        first = self._chunks[0][self._head:]
        return first + b"".join(list(self._chunks)[1:]) if len(self._chunks) > 1 else first

    def clear(self) -> None:
        self._chunks.clear()
        self._head = self._len = 0

    def send(self, sock: socket.socket) -> int:
        """One non-blocking ``sendmsg`` of the first chunks; the bytes sent leave the
        queue. Raises what the socket raises (BlockingIOError when it is full)."""
        chunks = self._chunks
        if not chunks:
            return 0
        head = self._head
        bufs: list[bytes | memoryview] = [memoryview(chunks[0])[head:] if head else chunks[0]]
        for i in range(1, min(len(chunks), _SEND_BUFFERS)):
            bufs.append(chunks[i])
        n = sock.sendmsg(bufs) if len(bufs) > 1 else sock.send(bufs[0])
        self._len -= n
        left = n + head
        while chunks and left >= len(chunks[0]):
            left -= len(chunks.popleft())
        self._head = left
        return n


class Rate:
    """Events per second over the last ``span`` whole seconds (one counter per second)."""

    __slots__ = ("span", "_slots")

    def __init__(self, span: int = 10):
        self.span = span
        self._slots: collections.deque[list[int]] = collections.deque()

    def add(self, n: int, now: float) -> None:
        sec = int(now)
        if self._slots and self._slots[-1][0] == sec:
            self._slots[-1][1] += n
        else:
            self._slots.append([sec, n])
            while self._slots[0][0] <= sec - self.span - 1:
                self._slots.popleft()

    def per_s(self, now: float) -> float:
        sec = int(now)
        total = sum(n for s, n in self._slots if sec - self.span <= s < sec)
        return total / self.span


class Conn:
    """One client connection. ``role`` is None until HELLO, then "agent" or "control"."""

    def __init__(self, sock: socket.socket, conn_id: str):
        self.sock = sock
        self.id = conn_id
        self.reader = FrameReader()
        self.out = OutQueue()
        self.role: str | None = None
        self.pid: int | None = None
        self.peer: tuple[int, int, int] | None = None  # SO_PEERCRED (pid, uid, gid), set at HELLO
        # identity (aclprofd.peerid): the pid namespace of the peer, its pid there (the kernel's
        # word) and the pid its HELLO stated (its word: shown, never used to select records)
        self.pid_ns = "unknown"
        self.ns_pid: int | None = None
        self.hello_pid: int | None = None
        self.host = ""
        self.service: str | None = None
        self.labels: dict[str, str] = {}
        self.connected = time.monotonic()
        self.closed = False
        self.want_write = False
        self.unread_replies = 0  # reply bytes queued while the socket was full (aclprofd.server)
        self.refused = False  # closed for a request its peer may not send: not a protocol error
        # agents (aclprofd.ingest)
        self.names: dict[int, str] = {}
        self.names_order: list[tuple[int, str]] = []
        self.names_json: dict[int, bytes] = {}  # name id -> JSON literal (aclprofd.records.NameJson)
        self.names_bytes = 0  # what the name table is charged against the memory budget
        self.rejected = 0  # records refused for impossible values (aclprofd.ingest)
        # set by a handler whose frame cost much loop time (a large NAMES frame): the transport
        # reads no more of this connection in this loop turn, so one agent's tables cost the
        # others one frame's time per turn, not READ_BUDGET's worth (aclprofd.transport)
        self.yield_read = False
        # frames received but not handled yet: the rest of the reader's feed() when this
        # connection's slice of a loop turn ended, and the bytes of the chunk it holds
        # (aclprofd.transport; charged in held())
        self.frames: Iterator[tuple[Kind, memoryview]] | None = None
        self.frames_bytes = 0
        # the rest of a frame whose handling is cut into steps (a large NAMES table): resumed
        # before this connection's next frame, a slice's worth per loop turn (aclprofd.transport)
        self.work: Iterator[None] | None = None
        self.models: dict[int, dict[str, Any]] = {}
        # JSON bytes of each model entry and of host/service/labels (-1: not measured yet),
        # measured once so that STATUS fits its frame without measuring again (aclprofd.replyfit)
        self.model_bytes: dict[int, int] = {}
        self.ident_bytes = -1
        self.records = 0
        self.dropped = 0
        self.rate = Rate()
        self.lag_ns: int | None = None
        self.clock_offsets: dict[int, int] = {}  # device -> min(receive - op end), ns
        self.steps = 0  # step keypoint records received
        self.live = False  # told LIVE true (aclprofd.fanout)
        self.unlive_at = 0.0  # monotonic time LIVE false falls due (0: not due)
        self.pending_store: list[tuple[float, bytes]] = []  # owned copies (the one copy per batch)
        self.pending_bytes = 0
        self.keysrc: KeySource | None = None
        # control: STREAM and EXPORT (aclprofd.fanout)
        self.stream: Filter | None = None
        self.stream_binary = False  # records-v1 (aclprof.protocol.streambin), else JSON Lines
        self.stream_est = 0  # bytes a pending record is charged at (aclprofd.fanout)
        # binary: the agent connections defined to this client -> how many of their names
        # (``names_order``) it has been sent
        self.stream_sources: dict[Conn, int] = {}
        # an agent's source id in binary STREAMs, the same for every client (0: none yet)
        self.stream_source = 0
        self.stream_pending: list[tuple[Conn, float, np.ndarray]] = []
        self.stream_pending_n = 0
        self.stream_skipped = 0      # skipped since the last STREAM_SKIPPED frame
        self.stream_sent = 0         # records sent on this stream in all (for END)
        self.stream_skipped_all = 0  # records skipped on this stream in all (for END)
        self.matchers: dict[str, NameMatcher] = {}
        self.export: Iterator[bytes] | None = None  # whole frames (aclprofd.fanout)

    def held(self) -> int:
        """Bytes this client makes the daemon hold, as the memory budget charges them
        (daemon/README.md "Memory budget"): queued outgoing bytes, its name table, received
        records not yet stored, a partial frame, received frames not yet handled. The one
        definition of that sum."""
        return len(self.out) + self.names_bytes + self.pending_bytes + self.reader.buffered + self.frames_bytes

    def identity(self) -> dict[str, Any]:
        """What STATUS shows of who this peer is (daemon/PROTOCOL.md STATUS ``agents``)."""
        return {"uid": self.peer[1] if self.peer else None, "pid_ns": self.pid_ns, "ns_pid": self.ns_pid,
                "hello_pid": self.hello_pid}

    def describe(self) -> dict[str, Any]:
        return {"conn": self.id, "role": self.role, "pid": self.pid, "service": self.service}
