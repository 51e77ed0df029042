"""Large agent frames read whole (aclprofd.transport.Transport._read_whole, issue 21): the
header first, then the payload with one recv of exactly its length into a bytes of its own,
which the handler, storage and STREAM clients share (no copy of the records in the daemon).
Anything else, and any frame not queued whole yet, takes the plain read, and no byte is
lost or handled twice on either path."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from aclprofd.aggregate.keys import KeySource
from aclprofd.config import Settings
from aclprofd.conn import Conn
from aclprofd.server import Daemon
from aclprofd.transport import READ_BUDGET, WHOLE_MIN
from helpers.daemons import bare_transport
from helpers.records import make_records

from aclprof.protocol.wire import HEADER, Kind, encode_batch, encode_json, encode_names

LARGE = WHOLE_MIN // 56 + 100  # records: a payload past WHOLE_MIN


def _recs(n: int, k: int) -> np.ndarray:
    """``n`` records whose bytes differ from another call's (durations from ``k``)."""
    return make_records(n, durations=1000 + 1000 * k + np.arange(n))


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, Conn]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    b.setblocking(False)
    conn = Conn(b, "x")
    conn.role = "agent"  # past HELLO
    yield a, conn
    a.close()
    b.close()


def test_a_large_frame_queued_whole_is_read_into_its_own_bytes_and_the_next_frame_follows(pair):
    peer, conn = pair
    large, small = _recs(LARGE, 1), _recs(10, 2)
    peer.sendall(encode_batch(large) + encode_batch(small))
    got: list[tuple[Kind, memoryview]] = []
    t = bare_transport(got, [])
    t.receive(conn, budget=READ_BUDGET)
    assert [(k, len(p)) for k, p in got] == [(Kind.BATCH, large.nbytes), (Kind.BATCH, small.nbytes)]
    assert t.whole_reads == 1
    whole = got[0][1]
    # the payload is a whole bytes object: what Ingest._keep keeps without copying it
    assert type(whole.obj) is bytes and len(whole.obj) == whole.nbytes == large.nbytes
    assert bytes(whole) == large.tobytes() and bytes(got[1][1]) == small.tobytes()
    assert conn.reader.buffered == 0 and conn.frames is None and conn.frames_bytes == 0


def test_a_large_frame_not_queued_whole_yet_takes_the_plain_read(pair):
    peer, conn = pair
    frame = encode_batch(_recs(LARGE, 3))
    got: list[tuple[Kind, memoryview]] = []
    t = bare_transport(got, [])
    cut = len(frame) - 1000  # past WHOLE_MIN queued, but not the whole frame
    peer.sendall(frame[:cut])
    t.receive(conn, budget=READ_BUDGET)
    assert got == [] and t.whole_reads == 0 and conn.reader.buffered == cut
    peer.sendall(frame[cut:])
    t.receive(conn, budget=READ_BUDGET)
    assert [bytes(p) for _, p in got] == [frame[HEADER.size:]] and t.whole_reads == 0


def test_a_small_frame_and_a_control_client_take_the_plain_read(pair):
    peer, conn = pair
    got: list[tuple[Kind, memoryview]] = []
    t = bare_transport(got, [])
    peer.sendall(encode_batch(make_records(100)) * 20)  # past WHOLE_MIN queued, each frame small
    t.receive(conn, budget=READ_BUDGET)
    assert len(got) == 20 and t.whole_reads == 0
    conn.role = "control"
    peer.sendall(encode_batch(make_records(LARGE)))
    t.receive(conn, budget=READ_BUDGET)
    assert len(got) == 21 and t.whole_reads == 0


@pytest.mark.parametrize("bad", ["magic", "oversize"])
def test_a_bad_header_in_front_of_a_large_read_ends_the_connection_as_the_plain_read_does(pair, bad):
    peer, conn = pair
    frame = bytearray(encode_batch(make_records(LARGE)))
    if bad == "magic":
        frame[:4] = b"XXXX"
    else:
        frame[8:12] = (1 << 31).to_bytes(4, "little")
    got: list[tuple[Kind, memoryview]] = []
    errors: list[Conn] = []
    t = bare_transport(got, errors)
    peer.sendall(bytes(frame))
    t.receive(conn, budget=READ_BUDGET)
    assert got == [] and errors == [conn] and conn.closed and t.whole_reads == 0


def test_a_short_payload_read_keeps_every_byte(pair, monkeypatch):
    """The payload's recv gives less than the header's length (not seen from a stream socket,
    whose queued bytes were counted first): the bytes wait in the frame reader for the rest."""
    peer, conn = pair
    frame = encode_batch(_recs(LARGE, 4))
    peer.sendall(frame)

    class Short:
        def __init__(self, sock: socket.socket) -> None:
            self._sock = sock
            self.short = 0

        def recv(self, n: int) -> bytes:
            self.short += 1
            return self._sock.recv(n - 5000)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._sock, name)

    conn.sock = short = Short(conn.sock)  # type: ignore[assignment]
    got: list[tuple[Kind, memoryview]] = []
    t = bare_transport(got, [])
    t.receive(conn, budget=READ_BUDGET)
    assert short.short == 1 and got == []  # the payload's recv came up short: held
    t.receive(conn, budget=READ_BUDGET)  # the selector: the rest is readable
    assert [bytes(p) for _, p in got] == [frame[HEADER.size:]] and t.whole_reads == 0
    assert conn.reader.buffered == 0


def test_a_frame_read_whole_is_kept_by_storage_and_streams_without_a_copy(tmp_path):
    d = Daemon(Settings(socket=str(tmp_path / "s"), data_dir=str(tmp_path / "data")))
    a, b = socket.socketpair()
    try:
        conn = Conn(a, "agent")
        conn.role, conn.pid, conn.host, conn.service = "agent", 1, "h", "svc"
        conn.keysrc = KeySource("h", 1, "svc")
        conn.names = {i: f"op{i}" for i in range(1, 9)}
        conn.names_order = list(conn.names.items())
        recs = _recs(LARGE, 5)
        recs["op_name"] = 1 + np.arange(LARGE) % 8
        recs["op_type"] = 1 + np.arange(LARGE) % 3
        payload = recs.tobytes()
        d._handle(conn, Kind.BATCH, memoryview(payload))
        assert conn.pending_store[-1][1] is payload
        framed = encode_json(Kind.LOSS, {}) + payload  # a view into a larger object: copied
        d._handle(conn, Kind.BATCH, memoryview(framed)[len(framed) - len(payload):])
        kept = conn.pending_store[-1][1]
        assert kept == payload and kept is not payload and type(kept) is bytes
        assert conn.records == 2 * LARGE
    finally:
        a.close()
        b.close()
        d.close()


def test_a_large_name_table_and_batch_read_whole_reach_the_daemons_handlers(tmp_path):
    """Through the daemon's own transport and handlers: a NAMES frame and a BATCH frame of
    more than WHOLE_MIN each, queued whole, define the names and aggregate, store and count
    every record (the NAMES frame, 64 KiB or more, ends its slice: the BATCH comes next turn)."""
    d = Daemon(Settings(socket=str(tmp_path / "s"), data_dir=str(tmp_path / "data")))
    a, b = socket.socketpair()
    b.setblocking(False)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    try:
        conn = Conn(b, "agent")
        conn.role, conn.pid, conn.host, conn.service = "agent", 1, "h", "svc"
        conn.keysrc = KeySource("h", 1, "svc")
        names = {i: f"layer{i // 40}/block{i % 40}/conv_{i:05d}" for i in range(1, 3001)}
        [names_frame] = encode_names(names)
        assert len(names_frame) > WHOLE_MIN
        recs = make_records(LARGE, durations=1000 + np.arange(LARGE))
        recs["op_name"] = 1 + np.arange(LARGE) % 3000
        recs["op_type"] = 1 + np.arange(LARGE) % 7
        a.sendall(names_frame + encode_batch(recs))
        t = d.transport
        for _ in range(3):  # the NAMES frame's turn, then the BATCH's
            t.receive(conn, budget=READ_BUDGET)
            t.serve_pending()
        assert t.whole_reads == 2 and not conn.closed
        assert conn.names == names and conn.records == LARGE
        assert b"".join(p for _, p in conn.pending_store) == recs.tobytes()
        assert int(d.aggregator.count.sum()) == LARGE
    finally:
        a.close()
        b.close()
        d.close()
