"""A STREAM fan-out (aclprofd.fanout.Fanout) on stand-ins: no loop, socketpairs nobody
reads, an outbox that keeps what each client was sent (or leaves it queued, as for a client
that does not read)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from aclprofd.conn import Conn
from aclprofd.fanout import Fanout
from aclprofd.memory import Memory

__all__ = ["Outbox", "CountingMemory", "stub_fanout"]


class Outbox:
    """The transport's part: ``send`` takes all a client has queued (``reading`` False: a
    client that reads nothing, its bytes stay queued)."""

    def __init__(self, conns: dict[int, Conn]):
        self.conns = conns
        self.sent: dict[str, bytes] = {}
        self.reading = True

    def send(self, c: Conn) -> None:
        if self.reading:
            self.sent[c.id] = self.sent.get(c.id, b"") + bytes(c.out)
            c.out.clear()

    def queue(self, c: Conn, frame: bytes) -> None:
        pass

    def internal_error(self, c: Conn, what: str, exc: Exception) -> None:
        raise exc


class CountingMemory(Memory):
    """A memory budget that counts its reads of the stream room."""

    reads = 0

    def stream_room(self) -> tuple[int, int]:
        self.reads += 1
        return super().stream_room()


@contextmanager
def stub_fanout(budget: int = 64 << 20, stream_buffer: int = 8 << 20) -> Iterator[tuple[Fanout, Any, CountingMemory]]:
    """(fanout, conn(id, role) -> a new Conn, its memory budget)."""
    conns: dict[int, Conn] = {}
    socks: list[socket.socket] = []

    def conn(cid: str, role: str) -> Conn:
        a, b = socket.socketpair()
        socks.extend((a, b))
        c = Conn(a, cid)
        c.role = role
        conns[len(conns)] = c
        return c

    mem = CountingMemory(conns, budget, {}, rss=lambda: 1 << 20)
    mem.start()
    host = SimpleNamespace(settings=SimpleNamespace(stream_buffer_bytes=stream_buffer), storage=None)
    try:
        yield Fanout(host, Outbox(conns), SimpleNamespace(stream_skipped_total=0), mem), conn, mem  # type: ignore[arg-type]
    finally:
        for s in socks:
            s.close()
