"""Where a subscription without callbacks keeps its records: a bounded queue of batches.

Bounded in records, not batches, with three policies when full: ``drop_oldest`` and
``drop_newest`` (both count exactly what they drop, down to a slice of a batch) and
``block`` (the reader waits; the library's own queue then fills up). Counts are exact:
``put`` records == delivered + dropped_full + queued at every moment the lock is free.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator

from aclprof.api.records import OpBatch

__all__ = ["BatchQueue", "ON_FULL_POLICIES"]

ON_FULL_POLICIES = ("drop_oldest", "drop_newest", "block")


class BatchQueue:
    """A bounded FIFO of :class:`OpBatch` between the reader thread and the consumer.

    The reader calls :meth:`put` and, at EOF, :meth:`reader_finished`; the consumer calls
    :meth:`get` (None once the reader finished and the queue is empty). :meth:`closing`
    releases a ``block``-ed reader so that close never waits on a consumer.
    """

    def __init__(self, capacity: int, on_full: str):
        if on_full not in ON_FULL_POLICIES:
            raise ValueError(f"on_full must be one of {ON_FULL_POLICIES}, got {on_full!r}")
        self.capacity = capacity
        self.on_full = on_full
        self.cond = threading.Condition()
        self._batches: collections.deque[OpBatch] = collections.deque()
        self.queued = 0  # records in the queue
        self.delivered = 0  # records handed to the consumer
        self.dropped_full = 0
        self._closing = False
        self.reader_done = False

    def put(self, batch: OpBatch) -> None:
        """Queue ``batch``, dropping (and counting) or waiting as the policy says."""
        with self.cond:
            n = len(batch)
            cap = self.capacity
            if self.on_full == "block":
                while self.queued + n > cap and self.queued and not self._closing:
                    self.cond.wait(0.5)
            elif self.queued + n > cap:
                if self.on_full == "drop_newest":
                    keep = max(cap - self.queued, 0)
                    self.dropped_full += n - keep
                    if keep == 0:
                        return
                    batch = OpBatch(batch.data[:keep], batch.names)
                    n = keep
                else:
                    batch, n = self._drop_oldest(batch, n)
            self._batches.append(batch)
            self.queued += n
            self.cond.notify_all()

    def _drop_oldest(self, batch: OpBatch, n: int) -> tuple[OpBatch, int]:
        """Make room for ``n`` new records by dropping the oldest (the new batch's own head
        if it alone exceeds the capacity); returns what is left of the batch."""
        cap = self.capacity
        if n >= cap:
            self.dropped_full += n - cap + self.queued
            self._batches.clear()
            self.queued = 0
            return OpBatch(batch.data[n - cap:], batch.names), cap
        while self.queued + n > cap:
            oldest = self._batches[0]
            excess = self.queued + n - cap
            if len(oldest) <= excess:
                self._batches.popleft()
                self.queued -= len(oldest)
                self.dropped_full += len(oldest)
            else:
                self._batches[0] = OpBatch(oldest.data[excess:], oldest.names)
                self.queued -= excess
                self.dropped_full += excess
        return batch, n

    def get(self, timeout: float | None = None) -> OpBatch | None:
        """The next batch; None after ``timeout`` or once the reader finished and drained."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while not self._batches:
                if self.reader_done:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self.cond.wait(remaining if remaining is not None else 0.5)
            batch = self._batches.popleft()
            self.queued -= len(batch)
            self.delivered += len(batch)
            self.cond.notify_all()
            return batch

    def closing(self) -> None:
        """The subscription is closing: stop a ``block``-ed :meth:`put` from waiting."""
        with self.cond:
            self._closing = True
            self.cond.notify_all()

    def reader_finished(self) -> None:
        """No more :meth:`put`: :meth:`get` returns None once the queue is empty."""
        with self.cond:
            self.reader_done = True
            self.cond.notify_all()

    def __iter__(self) -> Iterator[OpBatch]:
        while (batch := self.get()) is not None:
            yield batch
