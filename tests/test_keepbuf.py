"""The daemon's reused buffers (aclprofd.keepbuf, issue 21): an agent's records are kept in
a per-connection block and socket reads go into reused buffers, instead of fresh memory
per frame. The one ownership rule: a buffer is rewritten only while nothing references it.

Checked here: views stay intact while referenced (a STREAM client's queued batch, records
storage has not written, frames a connection left for the next turn), a block is reused
once they are gone, a steady sender needs no new block, a burst's block is given back, and,
through a real daemon: a binary STREAM client whose socket stays full while storage writes
and the agent goes on sending receives exactly the batches sent; every record is stored;
a storage write that fails loses (and counts) only its own records; an agent that leaves
mid-second has all it sent stored."""

from __future__ import annotations

import gc
import json
import os
import socket
import time

import numpy as np
import pytest
from aclprofd.conn import Conn
from aclprofd.keepbuf import KEEP_FIRST, KEEP_MAX, RecordKeep, RecvBuffers
from helpers.daemons import Client, agent, running

from aclprof.protocol.streambin import BATCH_HEAD
from aclprof.protocol.wire import RECORD_DTYPE, FrameReader, Kind, encode

_NAMES = {1: "conv", 2: "Conv2D"}


def _frame(seq: int, n: int) -> bytes:
    """``n`` records whose start times tell the frame and the record (never two alike)."""
    r = np.zeros(n, RECORD_DTYPE)
    r["model_id"], r["device_id"], r["op_name"], r["op_type"] = 1, 0, 1, 2
    r["start"] = (seq << 20) + np.arange(n, dtype=np.uint64) + 1
    r["duration"] = 1000 + (np.arange(n, dtype=np.uint64) % 7)
    r["end"] = r["start"] + r["duration"]
    return r.tobytes()


# ---- RecordKeep ---------------------------------------------------------------------------

def test_a_kept_view_holds_its_bytes_while_later_frames_rewrite_the_block():
    keep = RecordKeep()
    held = keep.keep(memoryview(_frame(0, 50)))
    assert held.readonly and bytes(held) == _frame(0, 50)
    for seq in range(1, 400):  # many times the block: overflows, rewinds, new blocks
        v = keep.keep(memoryview(_frame(seq, 50)))
        assert bytes(v) == _frame(seq, 50)
        del v
        if seq % 7 == 0:
            keep.stored()
    assert bytes(held) == _frame(0, 50)  # never rewritten while referenced
    arr = np.frombuffer(held, RECORD_DTYPE)
    del held
    for seq in range(400, 800):
        keep.keep(memoryview(_frame(seq, 50)))
        keep.stored()
    assert arr.tobytes() == _frame(0, 50)  # an array over the view holds it the same way


def test_a_steady_sender_reuses_one_block():
    keep = RecordKeep()
    pending: list[memoryview] = []
    for second in range(12):
        for seq in range(40):  # one interval's frames, held until "stored"
            pending.append(keep.keep(memoryview(_frame(second * 40 + seq, 250))))
        assert [bytes(v) for v in pending[-3:]] == [_frame(second * 40 + s, 250) for s in (37, 38, 39)]
        pending.clear()  # the storage wrote them
        keep.stored()
        if second == 4:
            blocks = keep.blocks
    assert keep.blocks == blocks and keep.reuses >= 7  # no new block once it fits an interval
    assert 40 * 250 * RECORD_DTYPE.itemsize <= keep.capacity < 4 * 40 * 250 * RECORD_DTYPE.itemsize


def test_a_block_still_referenced_is_not_rewound_and_a_large_idle_one_is_given_back():
    keep = RecordKeep()
    v = keep.keep(memoryview(_frame(0, 1000)))
    assert not keep.stored()  # v still references it
    cap = keep.capacity
    assert keep.spare == cap - len(v)
    del v
    gc.collect()
    keep.keep(memoryview(_frame(1, 1000)))  # after v: the block was not rewound
    assert keep.spare == cap - 2 * 1000 * RECORD_DTYPE.itemsize
    assert keep.stored() and keep.spare == cap and keep.reuses == 1
    big = [keep.keep(memoryview(_frame(s, 20_000))) for s in range(8)]  # a burst: ~9 MB
    del big
    keep.stored()
    assert keep.capacity > 4 << 20
    for _ in range(20):  # then a trickle: the burst's block goes (the peak halves at each flush)
        keep.keep(memoryview(_frame(99, 10)))
        keep.stored()
    assert keep.capacity <= 2 * KEEP_FIRST


def test_a_frame_over_half_the_largest_block_is_copied_on_its_own():
    keep = RecordKeep()
    n = KEEP_MAX // 2 // RECORD_DTYPE.itemsize + 1
    data = _frame(1, n)
    v = keep.keep(memoryview(data))
    assert bytes(v) == data and v.readonly and keep.capacity == 0


# ---- RecvBuffers --------------------------------------------------------------------------

def test_a_read_buffer_with_views_alive_is_not_handed_out_again():
    bufs = RecvBuffers(64, keep=2)
    a = bufs.get()
    a[:4] = b"abcd"
    view = memoryview(a)[:4].toreadonly()
    del a
    b = bufs.get()
    assert bytes(view) == b"abcd"  # a different buffer: b's writes cannot touch it
    b[:4] = b"wxyz"
    assert bytes(view) == b"abcd"
    del b
    assert bufs.get() is not None and bufs.allocated == 2
    del view
    c = bufs.get()
    del c
    for _ in range(10):
        bufs.get()  # nothing referenced: the same buffers over and over
    assert bufs.allocated == 2


def test_reads_beyond_the_kept_buffers_are_freed_with_their_last_view():
    bufs = RecvBuffers(64, keep=2)
    views = []
    for i in range(5):
        b = bufs.get()
        b[0] = i
        views.append(memoryview(b)[:1].toreadonly())
        del b
    assert bufs.allocated == 5 and [v[0] for v in views] == [0, 1, 2, 3, 4]


# ---- through the daemon ------------------------------------------------------------------

def _stream_batches(data: bytes) -> tuple[list[bytes], int]:
    """The record bytes of each STREAM_BATCH of a binary stream, and the records skipped."""
    out, skipped = [], 0
    for kind, payload in FrameReader().feed(data):
        if kind == Kind.STREAM_BATCH:
            out.append(bytes(payload)[BATCH_HEAD.size:])
        elif kind == Kind.STREAM_SKIPPED:
            skipped += json.loads(bytes(payload))["skipped"]
    return out, skipped


def _exported_starts(c: Client) -> list[int]:
    return sorted(int(r["start"]) for r in c.export())


def _starts(frames: list[bytes]) -> list[int]:
    return sorted(int(s) for f in frames for s in np.frombuffer(f, RECORD_DTYPE)["start"])


def test_a_binary_stream_client_that_reads_late_gets_exactly_the_batches_sent(tmp_path):
    """Its socket full, its queue holds views of the agent's kept block while the flush
    (every 0.1 s) stores them and the agent keeps sending: the block must not be rewritten
    under it. Every batch it receives is one the agent sent, whole, in order; with those
    skipped (counted) they are all; and storage has every record."""
    with running(str(tmp_path)) as d:
        tail = Client(d.socket)
        tail.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        tail.send_json(Kind.STREAM, {"filter": {}, "format": "records-v1"})
        time.sleep(0.3)  # the STREAM started (no reply: frames follow)
        a = agent(d.socket, names=_NAMES)
        sent = [_frame(seq, 2000) for seq in range(60)]  # 6.7 MB: past the kernel's buffers
        for i, f in enumerate(sent):
            a.sock.sendall(encode(Kind.BATCH, f))
            if i % 6 == 5:
                time.sleep(0.12)  # flushes between frames
        time.sleep(0.5)
        got = bytearray()
        tail.sock.settimeout(1.0)
        try:
            while True:
                chunk = tail.sock.recv(1 << 20)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            pass
        batches, skipped = _stream_batches(bytes(got))
        # 6.7 MB is within the client's stream_buffer (8 MiB): nothing skipped, every batch
        # as the agent sent it (a block rewritten under a queued view would show here)
        assert skipped == 0 and len(batches) == len(sent)
        assert batches == sent
        c = Client(d.socket)
        assert _exported_starts(c) == _starts(sent)
        a.close()
        tail.close()
        c.close()


def test_agents_whose_large_reads_are_cut_keep_their_frames_while_others_read(tmp_path):
    """Three agents each send 300 small BATCH frames at once (~340 KB: read in place, from a
    pooled buffer); each connection's slice of a turn ends after 64 frames, so its other
    frames wait in its buffer while the others read into theirs. Every record arrives, is
    counted and stored as sent (a buffer rewritten under waiting frames would garble them)."""
    with running(str(tmp_path)) as d:
        agents = [agent(d.socket, names=_NAMES, pid=100 + i) for i in range(3)]
        sent = {i: [_frame(1000 * i + s, 20) for s in range(300)] for i in range(3)}
        blobs = {i: b"".join(encode(Kind.BATCH, f) for f in sent[i]) for i in range(3)}
        assert all(len(b) > (1 << 20) // 16 for b in blobs.values())
        for i, a in enumerate(agents):
            a.sock.sendall(blobs[i])
        c = Client(d.socket)
        want = _starts([f for i in range(3) for f in sent[i]])
        deadline = time.monotonic() + 15
        got: list[int] = []
        while time.monotonic() < deadline:
            got = _exported_starts(c)
            if len(got) >= len(want):
                break
            time.sleep(0.2)
        assert got == want
        for a in agents:
            assert not a.closed_by_peer(0.1)  # no protocol error ended any of them
            a.close()
        c.close()


def test_an_agent_that_leaves_mid_second_has_all_it_sent_stored(tmp_path):
    with running(str(tmp_path), flush_interval="30") as d:
        a = agent(d.socket, names=_NAMES)
        sent = [_frame(seq, 300) for seq in range(25)]
        for f in sent:
            a.sock.sendall(encode(Kind.BATCH, f))
        a.close()  # before any flush: its records are stored as its connection closes
        c = Client(d.socket)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(_exported_starts(c)) < 25 * 300:
            time.sleep(0.1)
        assert _exported_starts(c) == _starts(sent)
        c.close()


def test_a_failed_storage_write_loses_only_its_records_and_the_block_goes_on(tmp_path, monkeypatch):
    """In-process: the write of one flush fails (a full disk); its records are counted
    lost, the connection's pending records are dropped with their views, and the kept
    block is rewritten for the next frames, which are stored whole."""
    from aclprofd.aggregate.keys import KeySource
    from aclprofd.config import Settings
    from aclprofd.server import Daemon
    from aclprofd.storage import Storage

    root = str(tmp_path)
    d = Daemon(Settings(socket=os.path.join(root, "s"), data_dir=os.path.join(root, "data")))
    d.storage = storage = Storage(os.path.join(root, "data"))
    s1, s2 = socket.socketpair()
    try:
        conn = Conn(s1, "a")
        conn.role, conn.pid, conn.host, conn.service = "agent", 5, "h", "svc"
        conn.keysrc = KeySource("h", 5, "svc")
        conn.names, conn.names_order = dict(_NAMES), list(_NAMES.items())
        for seq in range(4):
            d._handle(conn, Kind.BATCH, memoryview(_frame(seq, 100)))
        real = storage._append

        def full(parts: list[bytes]) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(storage, "_append", full)
        d.persist.store(conn)
        assert storage.records_lost == 400 and not conn.pending_store and conn.pending_bytes == 0
        monkeypatch.setattr(storage, "_append", real)
        blocks = conn.keep.blocks
        for seq in range(4, 8):
            d._handle(conn, Kind.BATCH, memoryview(_frame(seq, 100)))
        assert conn.keep.blocks == blocks  # the block was rewound after the failed write
        d.persist.store(conn)
        stored = [c.records for c in storage.read()]
        got = np.concatenate(stored) if stored else np.zeros(0, RECORD_DTYPE)
        assert got.tobytes() == b"".join(_frame(s, 100) for s in range(4, 8))
        assert d.counters.records_total == 800
    finally:
        storage.close()
        s1.close()
        s2.close()


@pytest.mark.parametrize("size", [1, 100, 3000])
def test_conn_held_charges_the_kept_blocks_spare_room(size):
    a, b = socket.socketpair()
    try:
        c = Conn(a, "x")
        base = c.held()
        v = c.keep.keep(memoryview(b"\0" * size))
        c.pending_store.append((0.0, v))
        c.pending_bytes += len(v)
        assert c.held() == base + c.keep.capacity  # the records and the rest of their block
    finally:
        a.close()
        b.close()
