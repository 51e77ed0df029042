"""A stand-in for aclprofd on a Unix socket that follows a script, for the CLI's tests of what
a real daemon does only by timing (how a stop reaches the socket) or on a long export (a
pause while the CLI writes its staging file): one connection, the handshake, then
``script(fake, conn, recv)`` in a thread."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Callable
from typing import Any

from aclprof.protocol import wire

from .procs import short_tmpdir

__all__ = ["FakeDaemon", "Recv"]

Recv = Callable[[], "tuple[wire.Kind, memoryview]"]


class FakeDaemon:
    """Listens on a fresh socket path; the first connection gets WELCOME, then ``script``.
    ``done`` is set when the script returned (``error`` holds what it raised)."""

    def __init__(self, script: Callable[[FakeDaemon, socket.socket, Recv], Any],
                 welcome: dict[str, Any] | None = None):
        self.script = script
        self.welcome_extra = welcome or {}  # WELCOME fields over protocol 2's (a newer daemon's)
        self.path = os.path.join(short_tmpdir("aclp-"), "d.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.done = threading.Event()
        self.release = threading.Event()  # a paused script goes on (tests set it when done)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def stop_listening(self, unlink: bool = True) -> None:
        """As a stopping aclprofd: no more connections, the socket file removed (``unlink``
        False: as a killed one, whose file stays with nothing listening)."""
        self.listener.close()
        if unlink:
            os.unlink(self.path)

    def welcome(self, conn: socket.socket, pid: int = 1) -> None:
        """WELCOME from the daemon of ``pid`` (a restarted daemon has another)."""
        conn.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 2, "pid": pid,
                                                           "started_ts": 1764400000.0 + pid,
                                                           **self.welcome_extra}))

    def answer_one(self, listener: socket.socket | None = None, pid: int = 1) -> None:
        """Accept one more connection (a client checking who listens) and answer its HELLO."""
        c, _ = (listener or self.listener).accept()
        with c:
            frame = wire.recv_frame(c, wire.FrameReader(), [])
            assert frame is not None and frame[0] == wire.Kind.HELLO
            self.welcome(c, pid)

    def _serve(self) -> None:
        conn = None
        try:
            conn, _ = self.listener.accept()
            reader, pending = wire.FrameReader(), []

            def recv() -> tuple[wire.Kind, memoryview]:
                frame = wire.recv_frame(conn, reader, pending)
                assert frame is not None, "the client closed the connection"
                return frame

            assert recv()[0] == wire.Kind.HELLO
            self.welcome(conn)
            self.script(self, conn, recv)
        except BaseException as exc:  # reported by the test through .error
            self.error = exc
        finally:
            if conn is not None:
                conn.close()
            self.done.set()

    def close(self) -> None:
        self.release.set()
        self.listener.close()
        self.thread.join(10)
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)
