"""aclprof.agent.buffer.RecordBuffer's accounting, exactly (issue 13: the agent suites run it
through processes and daemons, where off-by-one trims and wake-up thresholds go unseen)."""

from __future__ import annotations

import os
import select

import numpy as np
import pytest

from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.items import Batch, Watch

W = object()  # stands in for a Watched: the buffer only carries it


def recs(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n)


@pytest.fixture
def buf():
    b = RecordBuffer(10)
    yield b
    b.close()


def woken(b: RecordBuffer) -> bool:
    return bool(select.select([b.wake_r], [], [], 0)[0])


def test_bound_must_be_positive():
    with pytest.raises(ValueError, match=r"^buffer_records must be at least 1$"):
        RecordBuffer(0)
    b = RecordBuffer(1)
    assert b.bound == 1
    assert b.native is None  # agent mode (the C queue) only when asked for
    b.close()


def test_empty_batch_is_ignored(buf):
    buf.add_batch(W, recs(0), None)
    assert buf.empty() and buf.records_in == 0 and buf.buffered == 0


def test_up_to_the_bound_nothing_is_dropped(buf):
    buf.add_batch(W, recs(6), "n1")
    buf.add_batch(W, recs(4, 6), "n2")
    assert (buf.buffered, buf.records_in, buf.dropped) == (10, 10, 0)
    assert [type(it) for it in buf.items] == [Batch, Batch]
    first = buf.items[0]
    assert isinstance(first, Batch) and first.watched is W and first.names == "n1"


def test_trim_drops_the_oldest_exactly(buf):
    buf.add_batch(W, recs(6), None)
    buf.items.append(Watch(W))
    buf.add_batch(W, recs(3, 6), None)
    buf.add_batch(W, recs(4, 9), None)  # 13 > 10: drop 3 of the first batch
    assert (buf.buffered, buf.records_in, buf.dropped) == (10, 13, 3)
    assert data(buf.items[0]) == [3, 4, 5]
    buf.add_batch(W, recs(5, 13), None)  # 15 > 10: the rest of the first (3), 2 of the next
    assert (buf.buffered, buf.dropped) == (10, 8)
    assert [type(it) for it in buf.items] == [Watch, Batch, Batch, Batch]  # control item kept
    assert data(buf.items[1]) == [8]
    assert lost(buf) == 8


def data(item: object) -> list[int]:
    """A buffered batch's records (a control item where a batch belongs fails here)."""
    assert isinstance(item, Batch)
    return list(item.data)


def lost(b: RecordBuffer) -> int:
    return b.lost_total()


def test_trim_skips_control_items_and_empty_batches():
    b = RecordBuffer(2)
    b.items.append(Watch(W))
    b.items.append(Batch(W, recs(0), None))
    b.add_batch(W, recs(3), None)
    assert (b.buffered, b.dropped) == (2, 1)
    assert data(b.items[-1]) == [1, 2]
    b.close()


def test_fully_trimmed_head_batches_are_removed():
    b = RecordBuffer(3)
    b.add_batch(W, recs(2), None)
    b.add_batch(W, recs(2, 2), None)
    b.add_batch(W, recs(3, 4), None)  # 7 > 3: the first two batches go entirely
    assert len(b.items) == 1 and data(b.items[0]) == [4, 5, 6]
    assert (b.buffered, b.dropped) == (3, 4)
    b.close()


def test_take_respects_max_but_always_gives_the_first_batch(buf):
    buf.add_batch(W, recs(4), None)
    buf.items.append(Watch(W))
    buf.add_batch(W, recs(3, 4), None)
    buf.add_batch(W, recs(2, 7), None)
    taken, n = buf.take(7)
    assert n == 7 and [type(it) for it in taken] == [Batch, Watch, Batch]
    assert buf.buffered == 2
    taken, n = buf.take(1)  # first batch (2 records) even though it exceeds 1
    assert n == 2 and len(taken) == 1 and buf.buffered == 0 and buf.empty()
    assert buf.take(5) == ([], 0)


def test_take_stops_before_a_batch_that_would_exceed(buf):
    buf.add_batch(W, recs(3), None)
    buf.add_batch(W, recs(3, 3), None)
    taken, n = buf.take(5)
    assert n == 3 and len(taken) == 1 and buf.buffered == 3
    taken, n = buf.take(3)  # exactly max: taken
    assert n == 3 and len(taken) == 1


def test_take_zero_takes_nothing(buf):
    buf.add_batch(W, recs(3), None)
    assert buf.take(0) == ([], 0)
    assert buf.buffered == 3


def test_discard_all_counts_the_leftover(buf):
    buf.add_batch(W, recs(7), None)
    buf.items.append(["unwatch", W, None, None])
    assert buf.discard_all() == 7
    assert (buf.buffered, buf.dropped) == (0, 7) and buf.empty()


def test_lost_total_sums_the_three_counters(buf):
    buf.dropped, buf.dropped_subscription, buf.dropped_unread = 1, 20, 300
    assert buf.lost_total() == 321


def test_arm_and_wake_threshold(buf):
    assert buf.arm(wake_at=3, now_if_items=False) is True
    buf.add_batch(W, recs(2), None)
    assert not woken(buf)  # 2 < 3
    buf.add_batch(W, recs(1), None)
    assert woken(buf)      # 3 >= 3: exactly at the threshold
    buf.drain_wake()
    assert not woken(buf)
    buf.add_batch(W, recs(1), None)
    assert not woken(buf)  # woken once: no longer sleeping


def test_arm_refuses_when_work_is_there(buf):
    buf.add_batch(W, recs(2), None)
    assert buf.arm(wake_at=5, now_if_items=True) is False
    assert buf.arm(wake_at=2, now_if_items=False) is False  # 2 buffered >= 2
    assert buf.arm(wake_at=3, now_if_items=False) is True   # 2 < 3: sleep
    buf.add_batch(W, recs(1), None)
    assert woken(buf)


def test_arm_on_empty_buffer_sleeps_even_if_now_if_items(buf):
    assert buf.arm(wake_at=1, now_if_items=True) is True
    buf.add_batch(W, recs(1), None)
    assert woken(buf)


def test_disarm_stops_wake_ups(buf):
    buf.arm(wake_at=1, now_if_items=False)
    buf.disarm()
    buf.add_batch(W, recs(5), None)
    assert not woken(buf)


def test_wake_survives_a_full_pipe_and_drain_empties_it(buf):
    for _ in range(70000):  # more than a pipe holds
        buf.wake()
    buf.drain_wake()
    assert not woken(buf)
    buf.drain_wake()  # nothing to read: no error


def test_close_closes_both_fds_once():
    b = RecordBuffer(1)
    r, w = b.wake_r, b.wake_w
    b.close()
    assert (b.wake_r, b.wake_w) == (-1, -1)
    for fd in (r, w):
        with pytest.raises(OSError):
            os.fstat(fd)
    b.close()  # again: harmless


def test_a_sender_that_never_armed_is_never_woken(buf):
    buf.add_batch(W, recs(5), None)
    assert not woken(buf)


# -- put_back and agent mode (issue 21's C queue beside the Python items) -------------------

def test_put_back_returns_items_to_the_front_in_order_and_counts_their_records(buf):
    buf.add_batch(W, recs(2), None)
    buf.add_batch(W, recs(3, 2), None)
    taken, n = buf.take(100)
    assert n == 5 and buf.buffered == 0
    buf.add_batch(W, recs(1, 5), None)  # arrived while the taken ones were out
    ctl = Watch(W)
    assert buf.put_back([taken[0], ctl, taken[1]]) == 5  # the control item has no records
    assert buf.buffered == 6
    assert list(buf.items)[:3] == [taken[0], ctl, taken[1]]
    assert data(buf.items[3]) == [5]
    assert buf.put_back([]) == 0 and buf.buffered == 6


def rows(n: int) -> np.ndarray:
    from aclprof.api.records import OP_DTYPE
    d = np.zeros(n, OP_DTYPE)
    d["start"] = np.arange(n)
    return d


@pytest.fixture
def nbuf():
    from aclprof.agent.watched import Watched
    b = RecordBuffer(5, native=True)
    sink = b.sink(Watched(1, 0, {}))
    yield b, sink
    b.close()


def test_wake_pipe_is_non_blocking_and_not_inherited(buf):
    for fd in (buf.wake_r, buf.wake_w):
        assert os.get_blocking(fd) is False
        assert os.get_inheritable(fd) is False


def test_native_queue_has_the_buffers_bound_and_wakes_through_its_pipe(nbuf):
    b, sink = nbuf
    assert b.arm(wake_at=1, now_if_items=True) is True
    sink.push(rows(7), None)  # bound 5: the 2 oldest dropped in the queue
    assert woken(b)
    with b.lock:
        assert b.totals() == (7, 2, 5)
    assert b.lost_total() == 2


def test_seq_is_the_queues_tail_or_zero_without_it(buf, nbuf):
    assert buf.seq() == 0
    buf.add_batch(W, recs(3), None)
    assert buf.seq() == 0  # Python batches have no sequence
    b, sink = nbuf
    assert b.seq() == 0
    sink.push(rows(3), None)
    assert b.seq() == 3
    b.native.take(10)
    assert b.seq() == 3  # the tail, not what is held


def test_empty_looks_at_the_items_and_the_queue(nbuf):
    b, sink = nbuf
    assert b.empty() is True
    sink.push(rows(1), None)
    assert b.empty() is False  # no Python item, one row held in C
    b.native.take(10)
    assert b.empty() is True
    b.items.append(Watch(W))
    assert b.empty() is False


def test_discard_all_counts_both_halves(nbuf):
    b, sink = nbuf
    b.add_batch(W, recs(2), None)
    sink.push(rows(3), None)
    assert b.discard_all() == 5
    assert b.dropped == 2  # the queue's 3 are counted in the queue
    assert b.lost_total() == 5 and b.empty()
    assert b.discard_all() == 0 and b.lost_total() == 5


def test_lost_total_adds_the_queues_drops_to_the_three_counters(nbuf):
    b, sink = nbuf
    sink.push(rows(8), None)  # 3 dropped by the queue
    b.dropped, b.dropped_subscription, b.dropped_unread = 1, 20, 300
    assert b.lost_total() == 324


def test_arm_asks_the_queue_for_wake_at_records(nbuf):
    b, sink = nbuf
    sink.push(rows(2), None)
    assert b.arm(wake_at=3, now_if_items=False) is True  # 2 < 3 held in C
    assert not woken(b)
    sink.push(rows(1), None)
    assert woken(b)  # the queue woke it at exactly 3


def test_arm_with_rows_in_the_queue_refuses_and_disarms_both_halves(nbuf):
    b, sink = nbuf
    sink.push(rows(1), None)
    assert b.arm(wake_at=4, now_if_items=True) is False  # one row is work: no sleep
    b.add_batch(W, recs(4), None)
    sink.push(rows(4), None)
    assert not woken(b)  # neither half was left armed
    b.native.take(10)
    b.take(10)
    sink.push(rows(2), None)
    assert b.arm(wake_at=2, now_if_items=False) is False  # 2 held >= 2
    sink.push(rows(3), None)
    assert not woken(b)


def test_arm_with_python_items_does_not_arm_the_queue(nbuf):
    b, sink = nbuf
    b.add_batch(W, recs(1), None)
    assert b.arm(wake_at=5, now_if_items=True) is False
    sink.push(rows(5), None)
    assert not woken(b)


def test_close_detaches_the_queue_from_the_pipe_it_closes(nbuf):
    """After close() a reader's push must write its wake-up to no descriptor: not to
    the closed pipe's numbers (reused by the next open) and not to stdout."""
    b, sink = nbuf
    b.close()
    r, w = os.pipe2(os.O_NONBLOCK)  # may reuse the closed descriptors' numbers
    out_r, out_w = os.pipe2(os.O_NONBLOCK)
    stdout = os.dup(1)
    try:
        os.dup2(out_w, 1)
        assert b.native.arm(1) is True
        sink.push(rows(1), None)
    finally:
        os.dup2(stdout, 1)
        os.close(stdout)
    try:
        for fd in (r, out_r):
            with pytest.raises(BlockingIOError):
                os.read(fd, 10)  # the queue wrote to neither
    finally:
        for fd in (r, w, out_r, out_w):
            os.close(fd)


def test_close_in_a_forked_child_does_not_call_into_the_queue(nbuf, monkeypatch):
    b, _ = nbuf

    def locked(fd: int) -> None:
        raise AssertionError("the queue's mutex may be held by a reader of the parent")

    monkeypatch.setattr(b.native, "set_wake_fd", locked)
    b.close(in_child=True)
    assert (b.wake_r, b.wake_w) == (-1, -1)


def test_frames_past_the_limit_are_counted_in_the_newest_waiting_frame(buf):
    from aclprof.protocol.wire import Kind

    assert buf.add_frames(Kind.OP_FAILURE, [{"n": i, "dropped_before": 0} for i in range(3)], 3) == 0
    assert buf.add_frames(Kind.REQUEST_BILL, [{"b": 0, "dropped_before": 0}], 3) == 0  # another kind: its own limit
    assert buf.add_frames(Kind.OP_FAILURE, [{"n": 3}, {"n": 4}], 3) == 2
    frames = [it.payload for it in buf.items]
    assert frames == [{"n": 0, "dropped_before": 0}, {"n": 1, "dropped_before": 0}, {"n": 2, "dropped_before": 2},
                      {"b": 0, "dropped_before": 0}]
    assert woken(buf)
    taken, _ = buf.take(10)
    assert len(taken) == 4 and not buf.items
    # the waiting ones were taken: the next frame is queued again, not folded into a taken one
    assert buf.add_frames(Kind.OP_FAILURE, [{"n": 5, "dropped_before": 0}], 3) == 0
    assert [it.payload for it in buf.items] == [{"n": 5, "dropped_before": 0}]
    with pytest.raises(ValueError, match=r"^limit must be at least 1$"):
        buf.add_frames(Kind.OP_FAILURE, [{}], 0)
