"""The daemon's connections at the socket level: accept, receive (frames out of each
connection's :class:`aclprof.protocol.wire.FrameReader`), non-blocking send with an outgoing
buffer, protocol-error handling (ERROR, then close this connection only) and close.

:class:`Transport` knows sockets and frames, not what frames mean: the daemon
(:class:`aclprofd.server.Daemon`) subclasses it and supplies :meth:`Transport._handle`
(HELLO, then the dispatch table of the connection's role) and the close and
protocol-error hooks. Kept apart so that the I/O rules (read budgets, HELLO limits, never
blocking on a client) are in one place and the event loop reads as a loop.
"""

from __future__ import annotations

import os
import selectors
import socket
import time

import structlog

from aclprof.protocol.wire import Kind, ProtocolError, encode_json

from .conn import Conn

__all__ = ["Transport"]

_log = structlog.get_logger("aclprofd")

_RECV = 1 << 20                 # bytes per recv()
READ_BUDGET = 8 << 20           # bytes read from one connection before serving the others
_CONTROL_OUT_CAP = 64 << 20     # a control client that stops reading its replies is closed
_MAX_CONNECTIONS = 4096
_HELLO_MAX = 64 << 10           # bytes buffered before HELLO


class Transport:
    """Connections by file descriptor, one selector; subclasses handle the frames."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.listener: socket.socket | None = None
        self.conns: dict[int, Conn] = {}
        self._id_base = f"{time.time_ns():x}-{os.getpid()}"
        self._seq = 0

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
            except OSError as exc:  # EMFILE and friends: log, keep serving the others
                _log.error("accept failed", error=str(exc))
                return
            if len(self.conns) >= _MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            self._seq += 1
            conn = Conn(sock, f"{self._id_base}-{self._seq}")
            self.conns[sock.fileno()] = conn
            self.sel.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: Conn) -> None:
        """The selector says ``conn`` is readable."""
        self._receive(conn, budget=READ_BUDGET)

    def _receive(self, conn: Conn, budget: int | None, deadline: float | None = None) -> None:
        """Receive and handle until EAGAIN, EOF, a closed connection, ``budget`` bytes (so one
        busy agent cannot starve the others; None: no limit) or ``deadline``."""
        while not conn.closed and (budget is None or budget > 0) and (
                deadline is None or time.monotonic() < deadline):
            try:
                data = conn.sock.recv(_RECV)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._close(conn, f"receive failed: {exc}", level="info")
                return
            if not data:
                self._close(conn, None)
                return
            if budget is not None:
                budget -= len(data)
            if not self._feed(conn, data):
                return

    def _feed(self, conn: Conn, data: bytes) -> bool:
        """Handle the frames ``data`` completes; False once the connection is closed."""
        try:
            for kind, payload in conn.reader.feed(data):
                self._handle(conn, kind, payload)
                if conn.closed:
                    return False
        except ProtocolError as exc:
            self._fail(conn, str(exc))
            return False
        except Exception as exc:  # a bug must cost one connection, never the daemon
            _log.exception("internal error handling a frame", pid=conn.pid)
            self._fail(conn, f"internal error: {type(exc).__name__}")
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
                n = conn.sock.send(conn.out)
                del conn.out[:n]
            except (BlockingIOError, InterruptedError):
                pass
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

    def _fail(self, conn: Conn, reason: str) -> None:
        """A protocol error: ERROR frame (best effort), close, log with the peer's pid.
        An agent also gets GOODBYE: what it sent after the bad frame is counted as lost."""
        self._on_protocol_error(conn)
        frames = encode_json(Kind.ERROR, {"message": reason})
        if conn.role == "agent":
            frames += encode_json(Kind.GOODBYE, {"records": conn.records, "dropped": conn.dropped})
        self._send_last(conn, frames)
        self._close(conn, reason, level="warning")

    def _close(self, conn: Conn, reason: str | None, level: str = "info") -> None:
        if conn.closed:
            return
        conn.closed = True
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self.conns.pop(conn.sock.fileno(), None)
        conn.sock.close()
        self._on_close(conn)
        if conn.role is not None or reason:
            getattr(_log, level)("connection closed", reason=reason or "peer closed",
                                 role=conn.role, pid=conn.pid, service=conn.service,
                                 records=conn.records if conn.role == "agent" else None)
