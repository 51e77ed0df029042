"""aclprof.api.subscription.queue.BatchQueue, exactly (issue 13: the subscription suites check
the queue through the reader thread and the mock, where a drop count off by a slice or a
wait that never ends on close go unseen)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from aclprof.api.records import OpBatch
from aclprof.api.subscription.queue import ON_FULL_POLICIES, BatchQueue

NAMES = ["a", "b"]


def batch(start: int, n: int) -> OpBatch:
    return OpBatch(np.arange(start, start + n), NAMES)


def contents(q: BatchQueue) -> list[int]:
    return [int(x) for b in q._batches for x in b.data]


class SpyCondition(threading.Condition):
    """Records every wait's timeout and makes the queue's 0.5 s polls long: a wait that
    ends early ends because it was notified, whatever the machine's load."""

    def __init__(self):
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout=None):
        self.timeouts.append(timeout)
        return super().wait(timeout if timeout is None or timeout < 0.5 else 30)


def spied(q: BatchQueue) -> SpyCondition:
    q.cond = SpyCondition()
    return q.cond


def check_invariant(q: BatchQueue, put: int) -> None:
    assert put == q.delivered + q.dropped_full + q.queued
    assert q.queued == len(contents(q))


def test_policies_and_bad_policy():
    assert ON_FULL_POLICIES == ("drop_oldest", "drop_newest", "block")
    with pytest.raises(ValueError, match=r"^on_full must be one of \('drop_oldest', 'drop_newest', 'block'\), "
                                         r"got 'x'$"):
        BatchQueue(4, "x")
    q = BatchQueue(4, "block")
    assert (q.capacity, q.on_full, q.queued, q.delivered, q.dropped_full, q.reader_done) == (4, "block", 0, 0, 0, False)


@pytest.mark.parametrize("policy", ON_FULL_POLICIES)
def test_up_to_capacity_nothing_drops(policy):
    q = BatchQueue(5, policy)
    q.put(batch(0, 3))
    q.put(batch(3, 2))  # exactly full
    assert contents(q) == [0, 1, 2, 3, 4] and q.dropped_full == 0
    check_invariant(q, 5)


def test_drop_newest_keeps_what_fits():
    q = BatchQueue(5, "drop_newest")
    q.put(batch(0, 3))
    q.put(batch(3, 4))  # 2 fit
    assert contents(q) == [0, 1, 2, 3, 4] and q.dropped_full == 2
    q.put(batch(7, 1))  # nothing fits: dropped whole, nothing appended
    assert contents(q) == [0, 1, 2, 3, 4] and q.dropped_full == 3 and len(q._batches) == 2
    check_invariant(q, 8)
    assert q._batches[1].names is NAMES


def test_drop_oldest_trims_and_pops():
    q = BatchQueue(5, "drop_oldest")
    q.put(batch(0, 2))
    q.put(batch(2, 2))
    q.put(batch(4, 3))  # 7 > 5: the first batch (2) goes whole
    assert contents(q) == [2, 3, 4, 5, 6] and q.dropped_full == 2 and len(q._batches) == 2
    q.put(batch(7, 1))  # 6 > 5: one record of the oldest batch
    assert contents(q) == [3, 4, 5, 6, 7] and q.dropped_full == 3
    assert q._batches[0].names is NAMES
    check_invariant(q, 8)


def test_drop_oldest_batch_alone_over_capacity_keeps_its_tail():
    q = BatchQueue(3, "drop_oldest")
    q.put(batch(0, 2))
    q.put(batch(10, 5))  # alone more than 3: everything queued and the head of this one go
    assert contents(q) == [12, 13, 14] and q.dropped_full == 2 + 2 and q.queued == 3
    check_invariant(q, 7)
    q2 = BatchQueue(3, "drop_oldest")
    q2.put(batch(0, 1))
    q2.put(batch(10, 3))  # exactly the capacity: the queue is emptied, the batch kept whole
    assert contents(q2) == [10, 11, 12] and q2.dropped_full == 1
    assert q2._batches[0].names is NAMES


def test_get_delivers_in_order_and_counts():
    q = BatchQueue(10, "drop_oldest")
    q.put(batch(0, 2))
    q.put(batch(2, 3))
    assert list(q.get().data) == [0, 1]
    assert (q.queued, q.delivered) == (3, 2)
    q.reader_finished()
    assert list(next(iter(q)).data) == [2, 3, 4]  # drained before None
    assert q.get() is None and q.get(timeout=5) is None
    check_invariant(q, 5)


def test_get_timeout_waits_the_remaining_time():
    q = BatchQueue(2, "block")
    cond = spied(q)
    t0 = time.monotonic()
    assert q.get(timeout=0.2) is None
    assert time.monotonic() - t0 >= 0.2
    assert cond.timeouts and all(t is not None and 0 < t <= 0.2 for t in cond.timeouts)
    cond.timeouts.clear()
    assert q.get(timeout=0) is None
    assert cond.timeouts == []  # no time left: no wait at all


def test_get_without_timeout_wakes_on_put_and_on_finish():
    q = BatchQueue(2, "block")
    spied(q)
    got = []
    t = threading.Thread(target=lambda: got.extend(q))
    t.start()
    q.put(batch(0, 1))
    q.reader_finished()
    t.join(5)
    assert not t.is_alive() and [list(b.data) for b in got] == [[0]]


def test_block_waits_for_room_then_puts():
    q = BatchQueue(3, "block")
    spied(q)
    q.put(batch(0, 3))
    done = threading.Event()
    t = threading.Thread(target=lambda: (q.put(batch(3, 2)), done.set()))
    t.start()
    assert not done.wait(0.1)  # full: waits
    q.get()
    assert done.wait(5)
    t.join(5)
    assert contents(q) == [3, 4] and q.dropped_full == 0


def test_block_on_empty_queue_takes_an_oversized_batch():
    q = BatchQueue(2, "block")
    q.put(batch(0, 5))  # nothing queued: waiting would never end
    assert contents(q) == [0, 1, 2, 3, 4]


def test_closing_releases_a_blocked_put():
    q = BatchQueue(1, "block")
    spied(q)
    q.put(batch(0, 1))
    done = threading.Event()
    t = threading.Thread(target=lambda: (q.put(batch(1, 1)), done.set()))
    t.start()
    assert not done.wait(0.1)
    q.closing()
    assert done.wait(10)  # woken by closing (the spy made the poll 30 s)
    t.join(5)
    assert contents(q) == [0, 1]  # put after closing: queued over capacity, not dropped


def test_drop_oldest_counts_accumulate_over_pops_slices_and_oversized_batches():
    q = BatchQueue(6, "drop_oldest")
    q.put(batch(0, 1))    # a
    q.put(batch(1, 4))    # b
    q.put(batch(5, 3))    # 8 > 6: a popped (1), then 1 sliced off b
    assert contents(q) == [2, 3, 4, 5, 6, 7] and (q.queued, q.dropped_full) == (6, 2)
    q.put(batch(8, 2))    # 2 more sliced off b
    assert (q.queued, q.dropped_full) == (6, 4)
    q.put(batch(10, 1))   # the last record of b popped
    assert contents(q) == [5, 6, 7, 8, 9, 10] and (q.queued, q.dropped_full) == (6, 5)
    q.put(batch(20, 7))   # alone over capacity: 6 queued + 1 of its head dropped
    assert contents(q) == [21, 22, 23, 24, 25, 26] and q.dropped_full == 12
    check_invariant(q, 18)
