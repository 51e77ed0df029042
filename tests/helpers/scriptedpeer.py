"""A scripted daemon for in-process tests of the agent's connection
(``aclprof.agent.connection``): it answers one HELLO with exactly the bytes a test gives."""

from __future__ import annotations

import socket
import threading

from aclprof.protocol import wire
from aclprof.protocol.wire import Kind

__all__ = ["Peer"]


class Peer:
    """Accepts one connection, reads HELLO, answers with ``reply`` (bytes), keeps the socket."""

    def __init__(self, path: str, reply: bytes | None):
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.path = path
        self.server.bind(path)
        self.server.listen(1)
        self.reply = reply
        self.hello: dict | None = None
        self.conn: socket.socket | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.server.accept()
        self.conn = conn
        reader, pending = wire.FrameReader(), []
        frame = wire.recv_frame(conn, reader, pending)
        if frame is None:  # close() unblocking a peer nobody connected to
            return
        assert frame[0] is Kind.HELLO
        self.hello = wire.decode_json(frame[1])
        if self.reply is None:
            conn.close()
        else:
            conn.sendall(self.reply)

    def close(self) -> None:
        if self.conn is None:  # never connected to: unblock accept()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self.path)
        self.thread.join(5)
        if self.conn is not None:
            self.conn.close()
        self.server.close()
