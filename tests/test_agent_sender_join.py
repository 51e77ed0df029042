"""The agent's sender joins a run of small batches with one ``bytes.join`` over their
buffers (issue 12: a uint8 view per batch held the GIL ~0.5 us each): every record goes
out once, in order, byte for byte what one conversion of the concatenated batches gives,
also when a batch is a strided (non-contiguous) view or an empty one; a batch of another
dtype is refused by name."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.connection import Connection
from aclprof.agent.items import Batch, Unwatch, Watch
from aclprof.agent.sender import Sender
from aclprof.agent.watched import Watched
from aclprof.api.records import OP_DTYPE
from aclprof.protocol import wire


def _records(n: int, base: int) -> np.ndarray:
    d = np.zeros(n, OP_DTYPE)
    d["model_id"] = 1
    d["op_name"] = np.arange(n) % 2
    d["start"] = base + np.arange(n)
    d["end"] = d["start"] + 3
    d["duration"] = 3
    return d


def _sent_starts(parts: list[np.ndarray]) -> list[int]:
    buf = RecordBuffer(1 << 16)
    conn = Connection("/nonexistent", buf, service=None, labels={}, connect_timeout=0.1)
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        conn.sock, conn.gen = ours, 1
        conn.names.reset(1)
        w = Watched(1, 0, {})
        w.announced = 1
        sender = Sender(buf, conn, {1: w}, backoff_max=1)
        for p in parts:
            buf.items.append(Batch(w, p, ["n0", "n1"]))
            buf.buffered += len(p)
        assert sender._pump() and not conn.out
        theirs.setblocking(False)
        data = b""
        try:
            while chunk := theirs.recv(1 << 16):
                data += chunk
        except BlockingIOError:
            pass
        starts: list[int] = []
        for kind, payload in wire.FrameReader().feed(data):
            if kind == wire.Kind.BATCH:
                starts += wire.decode_batch(payload)["start"].tolist()
        return starts
    finally:
        ours.close()
        theirs.close()
        buf.close()


def test_a_run_of_batches_with_strided_and_empty_ones_goes_out_in_order():
    wide = _records(40, 1000)
    parts = [_records(35, 0), wide[::2], _records(0, 0), _records(3, 500), wide[1::4]]
    assert not parts[1].flags.c_contiguous
    want = [int(x) for p in parts for x in p["start"]]
    assert _sent_starts(parts) == want and len(want) == 35 + 20 + 3 + 10


def test_a_batch_of_another_dtype_is_refused_by_name():
    other = np.zeros(3, np.dtype([("x", "<u8")] * 1 + [("pad", "V72")]))
    with pytest.raises(TypeError, match="OP_DTYPE"):
        _sent_starts([_records(2, 0), other])


def test_take_of_everything_keeps_the_order_and_the_control_items():
    buf = RecordBuffer(100)
    w = Watched(1, 0, {})
    try:
        buf.add_batch(w, _records(3, 0), None)
        buf.items.append(Watch(w))
        buf.add_batch(w, _records(2, 10), None)
        buf.items.append(Unwatch(w))
        taken, n = buf.take(1 << 15)
        assert n == 5 and [type(it) for it in taken] == [Batch, Watch, Batch, Unwatch]
        assert buf.buffered == 0 and buf.empty() and buf.take(1 << 15) == ([], 0)
        buf.add_batch(w, _records(4, 0), None)
        buf.items.append(Watch(w))
        taken, n = buf.take(4)  # exactly the limit: the item after it waits, as before
        assert n == 4 and [type(it) for it in taken] == [Batch] and len(buf.items) == 1
    finally:
        buf.close()
