"""The agent's bounded record buffer, between the subscriptions' callbacks and the sender.

Producers (the subscriptions' reader threads) only append under a lock; when more than
``bound`` records are held the *oldest* are dropped and counted, so the newest are kept
and a slow or absent daemon never blocks the service. The buffer also keeps the agent's
loss counters under the same lock (``stats()`` reads them as one consistent set) and the
wake-up pipe through which a producer wakes the sleeping sender.

Agent mode (``native=True``, issue 21): the records themselves live in a C queue
(:class:`aclprof.binding.agentpath.AgentQueue`) that the subscriptions' readers fill
without the GIL; this object then holds the control items (each with the queue's sequence
number at the moment it was queued, which orders it among the records), the counters of
what was lost after the queue (a broken connection, a GOODBYE), and adds the queue's own
counts to its totals. Batches added in Python (:meth:`add_batch`) still work beside it.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Iterable
from typing import Any

from aclprof.agent.items import Batch, Item, JsonFrame
from aclprof.agent.watched import Watched
from aclprof.binding.agentpath import AgentQueue, Pump, QueueSink, SlotNames
from aclprof.protocol import wire

__all__ = ["RecordBuffer"]


class RecordBuffer:
    """Items (:mod:`aclprof.agent.items`) in arrival order: :class:`~aclprof.agent.items.Batch`
    items carry OP_DTYPE records, the control items are kept in order with them (a WATCH
    must precede the model's first records on the wire).

    Counters (all under :attr:`lock`): ``records_in`` (delivered by the subscriptions),
    ``dropped`` (trimmed, never sent, or lost with a broken connection),
    ``dropped_unread`` (written, but a GOODBYE said unread), ``dropped_subscription``
    (the subscriptions' own drops)."""

    def __init__(self, bound: int, native: bool = False):
        if bound < 1:
            raise ValueError("buffer_records must be at least 1")
        self.bound = int(bound)
        self.lock = threading.Lock()
        self.items: collections.deque[Item] = collections.deque()
        self.buffered = 0
        self.records_in = 0
        self.dropped = 0
        self.dropped_unread = 0
        #: JSON control frames still buffered when the sender exited, by kind (an OP_FAILURE
        #: that never reached a daemon is a lost failure: the agent's stats count it)
        self.frames_discarded: dict[int, int] = {}
        self.dropped_subscription = 0
        self._sleeping = False
        self._wake_at = 1  # buffered records that wake a sleeping sender
        self.wake_r, self.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        #: agent mode: the C record queue, and which Watched each of its slots is
        self.native: AgentQueue | None = AgentQueue(self.bound, self.wake_w) if native else None
        #: agent mode: the sender's C loop over the queue (aclprof.agent.sender)
        self.pump: Pump | None = Pump(self.native) if self.native is not None else None
        self.slots: dict[int, Watched] = {}

    # -- agent mode (the C queue) --------------------------------------------------------
    def sink(self, w: Watched) -> QueueSink:
        """A new slot of the C queue for ``w``'s subscription (``w.slot`` is set)."""
        assert self.native is not None
        slot = self.native.add_slot()
        with self.lock:
            self.slots[slot] = w
        w.slot = slot
        w.native_names = SlotNames(self.native, slot)
        w.queue = self.native
        w.announced = w.announced  # the C slot learns the sender's view of it
        return QueueSink(self.native, slot)

    def seq(self) -> int:
        """Where a control item queued now goes among the C queue's records; call with
        :attr:`lock` held and append the item before releasing it: the C queue holds back
        the records from there on (its barrier) until the sender has taken the item."""
        return 0 if self.native is None else self.native.mark()

    def remove_item(self, item: Item) -> None:
        """Take back an item queued but not to be sent (a watch that failed); call with
        :attr:`lock` held."""
        try:
            self.items.remove(item)
        except ValueError:
            pass
        self._sync_barrier_locked()

    def _sync_barrier_locked(self) -> None:
        """The C queue's barrier at the oldest control item still buffered (under lock):
        the sender framing in C stops there and hands over to Python."""
        native = self.native
        if native is None:
            return
        for item in self.items:
            if not isinstance(item, Batch):
                native.set_barrier(item.seq)
                return
        native.set_barrier(None)

    def add_frames(self, kind: wire.Kind, payloads: Iterable[dict[str, Any]], limit: int) -> int:
        """Append JSON frames of ``kind`` while fewer than ``limit`` of that kind wait in the
        buffer; returns how many payloads were dropped instead.

        A dropped payload is counted in the newest waiting frame of its kind (its
        ``dropped_before`` grows by one), not in the next frame queued: the count then reaches
        the daemon with a frame that is already on its way, even when no later frame comes
        (a storm's last failures dropped would otherwise never be counted by the daemon)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        dropped = 0
        with self.lock:
            waiting = [it for it in self.items if isinstance(it, JsonFrame) and it.kind == kind]
            count, newest = len(waiting), (waiting[-1] if waiting else None)
            for payload in payloads:
                if count >= limit and newest is not None:
                    newest.payload["dropped_before"] = newest.payload.get("dropped_before", 0) + 1
                    dropped += 1
                    continue
                newest = JsonFrame(kind, payload, self.seq())
                self.items.append(newest)
                count += 1
        self.wake()
        return dropped

    def totals(self) -> tuple[int, int, int]:
        """``(records_in, dropped, buffered)`` of both halves, one snapshot each; call
        with :attr:`lock` held."""
        if self.native is None:
            return self.records_in, self.dropped, self.buffered
        n_in, n_dropped, n_held, _ = self.native.totals()
        return self.records_in + n_in, self.dropped + n_dropped, self.buffered + n_held

    # -- producers ---------------------------------------------------------------------------
    def add_batch(self, w: Watched, data: Any, names: Any) -> None:
        """The subscriptions' batch_callback: append, trim, wake. Cheap: no copy, no I/O
        unless the sender sleeps and the wake-up threshold is reached."""
        n = len(data)
        if not n:
            return
        with self.lock:
            self.records_in += n
            self.items.append(Batch(w, data, names))
            self.buffered += n
            if self.buffered > self.bound:
                self._trim_locked()
            if self._sleeping and self.buffered >= self._wake_at:
                self._sleeping = False
                self.wake()

    def _trim_locked(self) -> None:
        """Drop the oldest buffered records until the bound holds (keeps control items)."""
        excess = self.buffered - self.bound
        items = self.items
        for item in items:
            if excess <= 0:
                break
            if not isinstance(item, Batch):
                continue
            n = len(item.data)
            if n == 0:
                continue
            k = min(n, excess)
            item.data = item.data[k:]  # a view: the dropped head is freed with the batch
            excess -= k
            self.buffered -= k
            self.dropped += k
        while items and isinstance(head := items[0], Batch) and len(head.data) == 0:
            items.popleft()

    # -- the sender --------------------------------------------------------------------------
    def take(self, max_records: int) -> tuple[list[Item], int]:
        """Remove items from the front: up to ``max_records`` records (at least the first
        batch, whatever its size), with the control items among them."""
        taken: list[Item] = []
        records = 0
        with self.lock:
            items = self.items
            if self.buffered < max_records:
                # everything fits (the usual case), so the loop below would take every item:
                # no Python step per item under the lock the subscriptions' readers also
                # take (issue 12: the GIL per wake-up)
                taken, records = list(items), self.buffered
                items.clear()
                self.buffered = 0
                self._sync_barrier_locked()
                return taken, records
            while items and records < max_records:
                item = items[0]
                if isinstance(item, Batch):
                    n = len(item.data)
                    if records and records + n > max_records:
                        break
                    self.buffered -= n
                    records += n
                items.popleft()
                taken.append(item)
            self._sync_barrier_locked()
        return taken, records

    def put_back(self, items: list[Item]) -> int:
        """Return ``items`` (taken, not handled) to the front, in order; their records."""
        records = sum(len(it.data) for it in items if isinstance(it, Batch))
        with self.lock:
            self.items.extendleft(reversed(items))
            self.buffered += records
            self._sync_barrier_locked()
        return records

    def empty(self) -> bool:
        with self.lock:
            if self.items:
                return False
        return self.native is None or self.native.totals()[2] == 0

    def discard_all(self) -> int:
        """At the sender's exit: everything still buffered is lost (counted)."""
        with self.lock:
            leftover = self.buffered
            self.dropped += leftover
            self.buffered = 0
            for item in self.items:
                if isinstance(item, JsonFrame):
                    self.frames_discarded[item.kind] = self.frames_discarded.get(item.kind, 0) + 1
            self.items.clear()
            self._sync_barrier_locked()
        if self.native is not None:
            leftover += self.native.discard()  # counted in the queue's own dropped
        return leftover

    def lost_total(self) -> int:
        with self.lock:
            lost = self.dropped + self.dropped_subscription + self.dropped_unread
        if self.native is not None:
            lost += self.native.totals()[1]
        return lost

    def arm(self, wake_at: int, now_if_items: bool) -> bool:
        """Before the sender sleeps: False if there is work already (any item when
        ``now_if_items``, else ``wake_at`` records); otherwise producers wake it once
        ``wake_at`` records are buffered."""
        with self.lock:
            if self.items and (now_if_items or self.buffered >= wake_at):
                return False
            self._wake_at = wake_at
            self._sleeping = True
        native = self.native
        if native is not None and not native.arm(1 if now_if_items else wake_at):
            self.disarm()
            return False
        return True

    def disarm(self) -> None:
        with self.lock:
            self._sleeping = False
        if self.native is not None:
            self.native.disarm()

    def wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass  # the pipe is full: a wake-up is pending anyway

    def drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except OSError:
            pass

    def close(self, in_child: bool = False) -> None:
        """Close the wake pipe (the C queue stops writing to it first; not in a forked
        child, where a reader of the parent may have held the queue's mutex at the fork)."""
        if self.native is not None and not in_child:
            self.native.set_wake_fd(-1)
        if self.pump is not None:
            self.pump.close()
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.wake_r = self.wake_w = -1
