"""The daemon's connections at the socket level: accept, receive (frames out of each
connection's :class:`aclprof.protocol.wire.FrameReader`), non-blocking send with an outgoing
buffer, protocol-error handling (ERROR, then close this connection only) and close.

:class:`Transport` knows sockets and frames, not what frames mean: the daemon
(:class:`aclprofd.server.Daemon`) subclasses it and supplies :meth:`Transport._handle`
(HELLO, then the dispatch table of the connection's role) and the close and
protocol-error hooks. Kept apart so that the I/O rules (read budgets, HELLO limits, never
blocking on a client) are in one place and the event loop reads as a loop.

Connection limits (daemon/README.md "Limits"): at most ``_MAX_CONNECTIONS`` in all, of
which at most ``_MAX_ANONYMOUS`` have not said HELLO yet (a new one evicts the oldest: a
real client says HELLO at once) and at most ``max_control_connections`` are control
clients (a new one evicts the longest idle one that neither streams nor exports); the
rest is the agents' share, so idle control clients cannot lock agents or ``aclprof
status`` out. A control client that sends no request for ``control_idle_timeout_s`` while
not streaming or exporting is closed. When accept() fails (EMFILE, ENFILE, ...) the
listener is left alone for a growing pause (50 ms to 1 s) instead of being retried in a
busy loop, and the failure is logged rate-limited.

No exception from one connection's frame, request or reply leaves the loop: it closes that
connection (:meth:`Transport.internal_error`), counted in ``internal_errors`` and logged
rate-limited.
"""

from __future__ import annotations

import collections
import os
import selectors
import socket
import time
from collections.abc import Mapping
from typing import Protocol

import structlog

from aclprof.protocol.wire import Kind, ProtocolError, encode_json

from .conn import Conn
from .ratelimit import LogLimiter
from .replyfit import cut_text

__all__ = ["Transport", "Outbox", "LogLimiter", "goodbye_frame"]

_log = structlog.get_logger("aclprofd")

_RECV = 1 << 20                 # bytes per recv() at most
READ_BUDGET = 8 << 20           # bytes read from one connection before serving the others
_CONTROL_OUT_CAP = 64 << 20     # a control client that stops reading its replies is closed
_MAX_CONNECTIONS = 4096
_MAX_ANONYMOUS = 256            # connections that have not said HELLO yet
_HELLO_MAX = 64 << 10           # bytes buffered before HELLO
_ACCEPT_PAUSE_MIN = 0.05        # after a failed accept(), leave the listener alone this long ...
_ACCEPT_PAUSE_MAX = 1.0         # ... doubling up to this


class Outbox(Protocol):
    """What the daemon's parts use of the transport to answer clients (a :class:`Transport`,
    in the daemon :class:`aclprofd.server.Daemon`, whose :meth:`queue` minds the memory
    budget): the open connections, queueing and sending frames, closing a connection
    after a bug, and the rate-limited log of peer-caused events."""

    @property
    def conns(self) -> Mapping[int, Conn]: ...
    @property
    def limiter(self) -> LogLimiter: ...
    def queue(self, conn: Conn, frame: bytes) -> None: ...
    def send(self, conn: Conn) -> None: ...
    def internal_error(self, conn: Conn, where: str, exc: BaseException) -> None: ...


def goodbye_frame(conn: Conn) -> bytes:
    """GOODBYE to an agent (daemon/PROTOCOL.md): how many records and LOSS-reported drops
    this connection delivered; the agent counts what it wrote beyond that as lost."""
    return encode_json(Kind.GOODBYE, {"records": conn.records, "dropped": conn.dropped})


class Transport:
    """Connections by file descriptor, one selector; subclasses handle the frames."""

    #: limits the daemon may change (from its settings)
    max_control = 64
    control_idle_s = 60.0

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.listener: socket.socket | None = None
        self.conns: dict[int, Conn] = {}
        self._id_base = f"{time.time_ns():x}-{os.getpid()}"
        self._seq = 0
        # oldest first: connections without HELLO (by connect time), control clients (by
        # their last request)
        self._anon: collections.OrderedDict[Conn, None] = collections.OrderedDict()
        self._controls: collections.OrderedDict[Conn, float] = collections.OrderedDict()
        self._accept_paused_until = 0.0  # listener unregistered until then (0: registered)
        self._accept_pause = 0.0
        self.limiter = LogLimiter()
        self.close_limiter = LogLimiter(burst=50)  # protocol errors: one line each, short of a flood
        self.internal_errors = 0     # connections closed for an exception while serving them
        self.refused = 0             # connections refused or evicted by the limits above
        self.idle_closed = 0         # control clients closed for idling
        self.accept_errors = 0
        # peers that were gone when the daemon wrote to them (EPIPE, ECONNRESET): a client
        # that closed before reading its reply (``aclprof status --timeout 0``, a Ctrl-C).
        # Not a protocol error: nothing was sent that breaks the protocol.
        self.peer_gone = 0
        # recv_into one buffer, then an exact-size copy: recv(1 MiB) allocated a fresh 1 MiB
        # object per call that glibc mmap'd and page-faulted each time (~120 us per 100-400 KB
        # read, ~14 us this way); the copy is a fresh bytes, so the frame reader's views of
        # it stay valid as long as they are referenced
        self._rbuf = bytearray(_RECV)
        self._rview = memoryview(self._rbuf)

    def open_counts(self) -> tuple[int, int, int]:
        """Connections open now: (all, control clients, not yet said HELLO). Each table
        holds open connections only, so the three agree with what is connected."""
        return len(self.conns), len(self._controls), len(self._anon)

    # hooks
    def _handle(self, conn: Conn, kind: Kind, payload: memoryview) -> None:
        raise NotImplementedError

    def _on_close(self, conn: Conn) -> None:
        """``conn`` was just closed (its socket is gone)."""

    def _on_protocol_error(self, conn: Conn) -> None:
        """``conn`` is being closed for breaking the protocol."""

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: pause accepting, keep serving the others
                self._pause_accept(exc)
                return
            self._accept_pause = 0.0
            if len(self.conns) >= _MAX_CONNECTIONS:
                sock.close()
                self.refused += 1
                self.limiter.log("warning", "connection refused", reason=f"{_MAX_CONNECTIONS} connections open")
                continue
            if len(self._anon) >= _MAX_ANONYMOUS:
                oldest = next(iter(self._anon))
                self.refused += 1
                self._close(oldest, None)
                self.limiter.log("warning", "connection evicted",
                                 reason=f"more than {_MAX_ANONYMOUS} connections without HELLO")
            sock.setblocking(False)
            self._seq += 1
            conn = Conn(sock, f"{self._id_base}-{self._seq}")
            self.conns[sock.fileno()] = conn
            self._anon[conn] = None
            self.sel.register(sock, selectors.EVENT_READ, conn)

    def _pause_accept(self, exc: OSError) -> None:
        """accept() failed: the listener stays readable, so retrying at once would spin at
        100 % CPU (and log each time) until a descriptor frees up. Unregister it for a pause
        that doubles while the failures go on."""
        self.accept_errors += 1
        self._accept_pause = min(_ACCEPT_PAUSE_MAX, max(_ACCEPT_PAUSE_MIN, 2 * self._accept_pause))
        self._accept_paused_until = time.monotonic() + self._accept_pause
        if self.listener is not None:
            try:
                self.sel.unregister(self.listener)
            except (KeyError, ValueError):
                pass
        self.limiter.log("error", "accept failed; pausing accepts", error=str(exc), pause_s=self._accept_pause,
                         connections=len(self.conns))

    def replace_listener(self, new: socket.socket) -> None:
        """Listen on ``new`` instead of the current listener (closed). During an accept pause
        the listener is out of the selector: ``new`` stays out too, and :meth:`accept_timeout`
        registers it when the pause ends (never twice, never unregistering what is not there)."""
        old = self.listener
        if old is not None:
            if not self._accept_paused_until:
                self.sel.unregister(old)
            old.close()
        self.listener = new
        if not self._accept_paused_until:
            self.sel.register(new, selectors.EVENT_READ, "listen")

    def accept_timeout(self, timeout: float) -> float:
        """Before each select: listen again once an accept pause is over; ``timeout``
        shortened so that the pause ends on time."""
        until = self._accept_paused_until
        if not until:
            return timeout
        now = time.monotonic()
        if now < until:
            return min(timeout, until - now)
        self._accept_paused_until = 0.0
        if self.listener is not None:
            self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        return timeout

    def admitted(self, conn: Conn) -> None:
        """``conn`` said HELLO (its role is set): it leaves the anonymous share; a control
        client joins the control share, evicting the longest idle one when it is full.
        A connection already closed (its peer left before WELCOME could be written) joins
        nothing: the tables hold open connections only."""
        self._anon.pop(conn, None)
        if conn.role != "control" or conn.closed:
            return
        self._controls[conn] = time.monotonic()
        if len(self._controls) <= self.max_control:
            return
        for other in self._controls:
            if other is not conn and self._idle(other):
                self.refused += 1
                self._fail(other, f"evicted: more than {self.max_control} control connections "
                                  "and this one was the longest idle", quiet=True, protocol_error=False)
                self.limiter.log("warning", "control connection evicted", pid=other.pid,
                                 limit=self.max_control)
                return
        self.refused += 1
        self._fail(conn, f"too many control connections (limit {self.max_control}, all busy)",
                   protocol_error=False)

    def keep_waiting(self, conn: Conn, now: float) -> None:
        """``conn`` waits for a reply the daemon owes it (a TRACE runs): a control client
        doing so is not idle, as if it had just sent a request."""
        if conn in self._controls:
            self._controls[conn] = now
            self._controls.move_to_end(conn)

    @staticmethod
    def _idle(conn: Conn) -> bool:
        return conn.stream is None and conn.export is None and not conn.out

    def reap_idle(self, now: float) -> None:
        """Close control clients without a request for ``control_idle_s`` that neither
        stream nor export (called with the flush tick)."""
        cutoff = now - self.control_idle_s
        for conn, last in list(self._controls.items()):
            if last > cutoff:
                break  # ordered by last request
            if self._idle(conn):
                self.idle_closed += 1
                self._fail(conn, f"idle control connection: no request in {self.control_idle_s:g} s", quiet=True,
                           protocol_error=False)
                self.limiter.log("info", "connection closed", reason="idle control connection", pid=conn.pid)

    def internal_error(self, conn: Conn, where: str, exc: BaseException) -> None:
        """An exception while serving ``conn`` outside a frame handler (STREAM/EXPORT
        pumps): close that connection, count it, log it rate-limited."""
        self.internal_errors += 1
        self.limiter.log("error", "internal error serving a connection; closing it", where=where,
                         pid=conn.pid, error=f"{type(exc).__name__}: {exc}")
        if not conn.closed:
            self._fail(conn, f"internal error in {where}: {type(exc).__name__}", quiet=True, protocol_error=False)

    def _read(self, conn: Conn) -> None:
        """The selector says ``conn`` is readable."""
        self._receive(conn, budget=READ_BUDGET)

    def _receive(self, conn: Conn, budget: int | None, deadline: float | None = None) -> None:
        """Receive and handle until EAGAIN, EOF, a closed connection, ``budget`` bytes (so one
        busy agent cannot starve the others; None: no limit) or ``deadline``."""
        while not conn.closed and (budget is None or budget > 0) and (
                deadline is None or time.monotonic() < deadline):
            try:
                n = conn.sock.recv_into(self._rbuf)
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionResetError:  # the peer closed with our replies unread in its socket
                self.peer_gone += 1
                self._close(conn, "peer left before reading its replies", level="info")
                return
            except OSError as exc:
                self._close(conn, f"receive failed: {exc}", level="info")
                return
            if not n:
                self._close(conn, None)
                return
            data = bytes(self._rview[:n])
            if budget is not None:
                budget -= n
            if not self._feed(conn, data):
                return
            if conn.yield_read and budget is not None:  # a large NAMES frame: the others' turn now
                conn.yield_read = False
                return

    def _feed(self, conn: Conn, data: bytes) -> bool:
        """Handle the frames ``data`` completes; False once the connection is closed."""
        try:
            for kind, payload in conn.reader.feed(data):
                self._handle(conn, kind, payload)
                if conn.closed:
                    return False
                if conn.role == "control":  # a request: not idle
                    self._controls[conn] = time.monotonic()
                    self._controls.move_to_end(conn)
        except ProtocolError as exc:
            self._fail(conn, str(exc))
            return False
        except Exception as exc:  # a bug must cost one connection, never the daemon
            self.internal_errors += 1
            if self.limiter.allow("internal error handling a frame") is not None:
                _log.exception("internal error handling a frame", pid=conn.pid)
            self._fail(conn, f"internal error: {type(exc).__name__}", protocol_error=False)
            return False
        if conn.role is None and conn.reader.buffered > _HELLO_MAX:
            # an anonymous peer may not make the daemon buffer 16 MiB frames
            self._fail(conn, f"HELLO larger than {_HELLO_MAX} bytes")
            return False
        return True

    def send(self, conn: Conn) -> None:
        """Send what the socket takes now; watch for writability while more is queued."""
        if conn.out:
            try:
                conn.out.send(conn.sock)
            except (BlockingIOError, InterruptedError):
                pass
            except (BrokenPipeError, ConnectionResetError):
                # the peer closed before reading what we owe it: it is gone, nothing more
                self.peer_gone += 1
                self._close(conn, "peer left before reading its replies", level="info")
                return
            except OSError as exc:
                self._close(conn, f"send failed: {exc}", level="info")
                return
        want = bool(conn.out)
        if want != conn.want_write:
            conn.want_write = want
            self.sel.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0), conn)

    def queue(self, conn: Conn, frame: bytes) -> None:
        """Queue a reply and send what the socket takes."""
        conn.out += frame
        if conn.role == "control" and conn.stream is None and conn.export is None and len(conn.out) > _CONTROL_OUT_CAP:
            self._close(conn, "control client does not read its replies")
            return
        self.send(conn)

    def _send_last(self, conn: Conn, frames: bytes) -> None:
        """What is queued plus ``frames``, in one non-blocking send, before a close."""
        try:
            conn.sock.send(bytes(conn.out) + frames)
        except OSError:
            pass
        conn.out.clear()

    def _fail(self, conn: Conn, reason: str, *, quiet: bool = False, protocol_error: bool = True) -> None:
        """Close ``conn`` with an ERROR frame (best effort) and log it with the peer's pid.
        An agent also gets GOODBYE: what it sent after the bad frame is counted as lost.
        ``protocol_error``: the peer broke the protocol (counted in ``protocol_errors``, which
        the ``AclprofdProtocolErrors`` alert watches); the limits (idle, eviction, too many)
        and the daemon's own bugs are counted where they belong instead. A connection
        already closed is left alone and counted nowhere: it is gone, nothing happened."""
        if conn.closed:
            return
        if protocol_error:
            self._on_protocol_error(conn)
        frames = encode_json(Kind.ERROR, {"message": cut_text(reason)})  # it may quote a peer's value
        if conn.role == "agent":
            frames += goodbye_frame(conn)
        self._send_last(conn, frames)
        # quiet: the caller logs (rate-limited); a flood of bad clients is not a flood of lines
        self._close(conn, reason, level="warning", log=not quiet)

    def _close(self, conn: Conn, reason: str | None, level: str = "info", *, log: bool = True) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._anon.pop(conn, None)
        self._controls.pop(conn, None)
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self.conns.pop(conn.sock.fileno(), None)
        conn.sock.close()
        self._on_close(conn)
        if log and (conn.role is not None or reason):
            kw = dict(reason=reason or "peer closed", role=conn.role, pid=conn.pid, service=conn.service,
                      records=conn.records if conn.role == "agent" else None)
            if level == "warning":
                self.close_limiter.log(level, "connection closed", **kw)
            else:
                getattr(_log, level)("connection closed", **kw)
