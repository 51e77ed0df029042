"""A minimal in-process daemon speaking aclprof.protocol.wire (agent side only), for the agent tests.

It checks what a real daemon must reject (frames before HELLO, name ids never defined,
redefined ids) and records, per connection, what the agent sent.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field

from aclprof.protocol import wire


@dataclass
class Conn:
    hello: dict | None = None
    names: dict[int, str] = field(default_factory=dict)
    records: list = field(default_factory=list)   # (model, device, op_type, op_name, duration)
    count: int = 0
    loss: int = 0
    watches: list = field(default_factory=list)
    unwatches: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    closed: bool = False
    kinds: list = field(default_factory=list)


class FakeDaemon:
    def __init__(self, path: str, keep_records: bool = True):
        self.path = path
        self.keep_records = keep_records
        self.conns: list[Conn] = []
        self._lock = threading.Lock()
        self._stop = False
        self._socks: list[socket.socket] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)
        self._server.bind(path)
        self._server.listen(64)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    # totals over every connection
    @property
    def received(self) -> int:
        with self._lock:
            return sum(c.count for c in self.conns)

    @property
    def loss(self) -> int:
        with self._lock:
            return sum(c.loss for c in self.conns)

    def errors(self) -> list:
        with self._lock:
            return [e for c in self.conns for e in c.errors]

    def _accept(self) -> None:
        while not self._stop:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            conn = Conn()
            with self._lock:
                self.conns.append(conn)
                self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock, conn), daemon=True).start()

    def _serve(self, sock: socket.socket, conn: Conn) -> None:
        reader = wire.FrameReader()
        try:
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    break
                for kind, payload in reader.feed(data):
                    conn.kinds.append(kind)
                    self._handle(sock, conn, kind, payload)
        except (OSError, wire.ProtocolError) as exc:
            conn.errors.append(str(exc))
        finally:
            conn.closed = True
            try:
                sock.close()
            except OSError:
                pass

    def _handle(self, sock, conn: Conn, kind, payload) -> None:
        if conn.hello is None:
            if kind != wire.Kind.HELLO:
                raise wire.ProtocolError(f"{kind.name} before HELLO")
            conn.hello = wire.decode_json(payload)
            sock.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 1,
                                                               "pid": os.getpid(), "started_ts": time.time()}))
            return
        if kind == wire.Kind.NAMES:
            for key, value in wire.decode_json(payload)["names"].items():
                if int(key) in conn.names:
                    raise wire.ProtocolError(f"name id {key} redefined")
                conn.names[int(key)] = value
        elif kind == wire.Kind.BATCH:
            recs = wire.decode_batch(payload)
            ids = set(recs["op_name"].tolist()) | set(recs["op_type"].tolist())
            missing = ids - set(conn.names)
            if missing:
                raise wire.ProtocolError(f"undefined name ids {sorted(missing)[:5]}")
            if self.keep_records:
                names = conn.names
                for r in recs.tolist():
                    # (model_id, op_name, op_type, flag, thread_id, device_id, start, end, duration, ex)
                    conn.records.append((r[0], r[5], names[r[2]], names[r[1]], r[8], r[7]))
            with self._lock:
                # counted once the records are kept: a test that waits for the count then reads
                # the records (it read a batch half appended on a loaded machine)
                conn.count += len(recs)
        elif kind == wire.Kind.LOSS:
            obj = wire.decode_json(payload)
            with self._lock:
                conn.loss += int(obj["dropped"])
        elif kind == wire.Kind.WATCH:
            conn.watches.append(wire.decode_json(payload))
        elif kind == wire.Kind.UNWATCH:
            conn.unwatches.append(wire.decode_json(payload))
        else:
            raise wire.ProtocolError(f"agent sent {kind.name}")

    def goodbye(self, shortfall: int = 0, loss_shortfall: int = 0, unknown_kind: int | None = None) -> None:
        """Say GOODBYE on every open connection as a stopping daemon does, claiming
        ``shortfall`` records (and ``loss_shortfall`` LOSS drops) fewer than were read,
        as if they had been left unread; optionally precede it with a frame of a kind the
        agent does not know. Then close those connections (the listener stays)."""
        with self._lock:
            pairs = [(s, c) for s, c in zip(self._socks, self.conns) if not c.closed]
        for sock, conn in pairs:
            frames = b""
            if unknown_kind is not None:
                frames += wire.HEADER.pack(wire.MAGIC, wire.VERSION, unknown_kind, 0, 2) + b"{}"
            frames += wire.encode_json(wire.Kind.GOODBYE, {"records": conn.count - shortfall,
                                                           "dropped": conn.loss - loss_shortfall})
            try:
                sock.sendall(frames)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Stop like a crashed daemon: close the listener and every connection."""
        self._stop = True
        try:
            # shutdown wakes the accept() blocked in the other thread; close alone would
            # not, and that thread would then accept on whatever reuses the fd number.
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(2)
        try:
            self._server.close()
        except OSError:
            pass
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
