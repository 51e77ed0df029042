"""Request bills in agent mode (issue 25): the C tap's op columns and the request ring's
windows into a :class:`~aclprof.agent.bills.BillBook`, finished bills to the daemon.

In agent mode op records never reach Python (C reader -> C queue -> C framing). The queue's
readers also fill a :class:`~aclprof.binding.billtap.BillTap` (per op: thread, model, device
start/end, type and name id, slot; per read: one clock note) once a request has been marked
in the process. The sender thread calls :meth:`BillFeeder.pump` on each pass of its loop; at
most every ``every_s`` it takes the tap (one C call), drains the request ring
(:func:`aclprof.api.requests.drain`: the agent owns the ring from then on), feeds the book
vectorised (no Python per op), collects the finished bills and queues them as REQUEST_BILL
frames. Until a request is marked nothing of this runs (one C load per pass) and nothing is
allocated. What the tap had to drop is counted (:attr:`BillFeeder.tap_dropped`), like every
op the book could not attribute (:attr:`BillBook.stats`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

# imported here, at the agent's start on the service's thread: not in the sender thread's
# first feed, where the import (tens of ms on a busy host) would hold the GIL mid-run
from aclprof.agent.bills import BillBook
from aclprof.binding.billtap import BillTap, requests_marked

if TYPE_CHECKING:
    from aclprof.agent.billsend import BillReporter
    from aclprof.agent.buffer import RecordBuffer

__all__ = ["BillFeeder", "EVERY_S", "CHUNK_OPS"]

#: seconds between two feeds of the book (each takes the GIL for the vectorised work)
EVERY_S = 0.1
#: ops attributed per GIL hold (~0.3-0.5 ms on a busy host), and the pause between holds
CHUNK_OPS = 2048
PAUSE_S = 0.0001


class BillFeeder:
    """The sender thread's request-bill work (all its methods run on that thread, but
    :meth:`stats`, a snapshot read from any thread)."""

    def __init__(self, buffer: RecordBuffer, reporter: BillReporter, *, every_s: float = EVERY_S,
                 tap: BillTap | None = None, book_options: dict[str, Any] | None = None):
        if buffer.native is None:
            raise ValueError("BillFeeder: the agent's buffer has no C queue to tap")
        self.buffer = buffer
        self.reporter = reporter
        self.every_s = every_s
        self.tap = tap if tap is not None else BillTap()
        buffer.native.set_tap(self.tap)
        self.book: BillBook | None = None  # made at the first feed after a request was marked
        self._book_options = dict(book_options or {})
        self._next = 0.0
        self.feeds = 0
        self.unfinished_at_stop = 0  # requests still open when the agent stopped: never billed

    def next_due(self, now: float) -> float:
        """When :meth:`pump` next has work (``time.monotonic()``): never until a request is
        marked (the sender's C loop then waits for records alone)."""
        return max(now, self._next) if requests_marked() else float("inf")

    def pump(self, now: float | None = None, *, force: bool = False) -> None:
        """Feed the book and report its finished bills, at most every ``every_s`` (or now
        with ``force``)."""
        if not requests_marked():
            return
        if now is None:
            now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + self.every_s
        from aclprof.api import requests as rq  # the ring: only once requests are marked

        book = self.book
        if book is None:
            book = self.book = BillBook(**self._book_options)
        ops, notes = self.tap.take()
        book.feed_events(rq.drain())
        # in chunks, each attributed on its own with the GIL given away between them: one
        # vectorised pass over 0.1 s of ops at 100 k ops/s held it ~2 ms (a service step
        # waiting for it to return would wait that long)
        for at in range(0, max(1, len(ops)), CHUNK_OPS):
            book.feed_columns(ops[at:at + CHUNK_OPS], notes if at == 0 else notes[:0], self._names_of)
        now_ns = time.monotonic_ns()
        while book.settle_one(now_ns):
            time.sleep(PAUSE_S)
        bills = book.collect(now_ns)
        self.feeds += 1
        if bills:
            self.reporter.submit(bills)

    def finish(self) -> None:
        """The agent stops (its subscriptions are closed): attribute everything the tap
        holds and bill every request whose windows all ended, without waiting for the
        hold and the grace; requests still open are counted (``unfinished_at_stop``)."""
        self.pump(force=True)
        book = self.book
        if book is None:
            return
        bills = book.collect(time.monotonic_ns() + book.hold_ns + book.grace_ns)
        self.unfinished_at_stop = book.pending()["requests"]
        if bills:
            self.reporter.submit(bills)

    def _names_of(self, slot: int) -> Any:
        with self.buffer.lock:
            w = self.buffer.slots.get(slot)
        if w is None or w.native_names is None:  # cannot happen: slots are never removed
            raise RuntimeError(f"aclprof agent: request-bill ops of an unknown queue slot {slot} (a bug)")
        return w.native_names

    @property
    def tap_dropped(self) -> int:
        """Ops the tap dropped (it was full between two feeds)."""
        return self.tap.counts().dropped

    def stats(self) -> dict[str, int]:
        """The tap's and the book's counters (0 before any request was marked)."""
        c = self.tap.counts()
        out = {"bill_ops_tapped": c.ops_in, "bill_ops_dropped": c.dropped, "bill_notes_dropped": c.notes_dropped}
        book = self.book
        if book is not None:
            st = book.stats
            out.update(bill_ops_attributed=st.ops_attributed, bill_ops_unattributed=st.unattributed,
                       bill_windows_evicted=st.windows_evicted, bills_unfinished_at_stop=self.unfinished_at_stop)
        return out
