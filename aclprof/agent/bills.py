"""Per-request op bills (issue 25): which ops, by type, made a request slow.

Inputs: the request windows of :mod:`aclprof.api.requests` (request, kernel tid, host
``CLOCK_MONOTONIC`` start/end) and op batches with their arrival times. An op belongs to
the request whose window is on the op record's ``threadId`` (in CANN the kernel tid of the
host thread that submitted the op's task, README "Request bills"; the mock stamps it with
``aclprof.mock.set_stamp_thread``) and whose span holds the op's start mapped to the host
clock (:class:`~aclprof.agent.clockmap.ClockMap`). The mapped time is never much earlier
than the truth and later by up to the delivery delay, so a window matches from
``start - early_ns`` to ``end + late_ns``. An op that no window matches, or that two windows
match (overlapping requests on one thread, as asyncio tasks sharing a loop thread), is
*unattributed and counted*, never guessed.

Ops are attributed ``hold_ns`` after their batch arrived, with the clock the batches of
that time made (a batch slow to arrive alone would map late). A request's bill closes
``grace_ns`` (host) after its last window ended, so that ops delivered late still count;
an op mapped into a window already closed is counted as ``late``. Memory is bounded: at
most ``max_open`` open windows (the oldest is evicted, counted, its bill marked
incomplete), ``max_held_ops`` ops waiting for the clock (the oldest are attributed early)
and ``max_bills`` finished bills waiting to be taken (the oldest dropped, counted).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclprof.agent.clockmap import ClockMap
from aclprof.api.requests import START, Request, RequestEvent
from aclprof.protocol.wire import REQUEST_BILL_MAX_WINDOWS

__all__ = ["Bill", "BillBook", "BillStats"]


_OPEN = 1 << 62  # the end of a window still open (later than any host time)


def _group_starts(columns: tuple[np.ndarray, ...]) -> np.ndarray:
    """Where each run of equal rows (over ``columns``, sorted) starts. (Not ``np.r_``: its
    first use imports numpy.ma, ~80 ms holding the GIL in the agent's sender.)"""
    n = len(columns[0])
    brk = np.zeros(n, bool)
    if n:
        brk[0] = True
        for c in columns:
            brk[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(brk)


def _start(w: list[Any]) -> int:
    return int(w[0])


@dataclass(frozen=True)
class Bill:
    """One request's bill. ``by_type`` maps op type to (device ns, op count); ``by_name``
    likewise per op name when the book keeps names. ``wall_ns`` spans the request's
    windows; ``device_share`` is ``device_ns / wall_ns``. ``complete`` is False when a
    window was evicted or its start or end event was lost."""

    request_id: str
    key: int
    attrs: dict[str, str]
    traceparent: str | None
    start_ns: int
    end_ns: int
    device_ns: int
    ops: int
    by_type: dict[str, tuple[int, int]]
    slowest: tuple[str, str, int] | None  # (op type, op name, device ns)
    models: tuple[int, ...]
    complete: bool = True
    by_name: dict[str, tuple[int, int]] | None = None
    #: the request's windows for the trace exports: (host thread id, start, end) in the op
    #: records' clock and units (mapped with the book's clock map; empty without a clock);
    #: the first ``wire.REQUEST_BILL_MAX_WINDOWS``, the rest counted in ``windows_cut``
    windows: tuple[tuple[int, int, int], ...] = ()
    windows_cut: int = 0
    #: (early, late): how far before/after a window an op still counted (the book's
    #: early_ns/late_ns in the records' units), so a trace links the ops the bill counted
    window_margin: tuple[int, int] = (0, 0)

    @property
    def wall_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def device_share(self) -> float:
        return self.device_ns / self.wall_ns if self.wall_ns else 0.0

    def top_types(self, n: int = 3) -> list[tuple[str, int, int]]:
        """The ``n`` op types with the most device time: (type, ns, count)."""
        return sorted(((t, ns, c) for t, (ns, c) in self.by_type.items()), key=lambda x: -x[1])[:n]


@dataclass
class BillStats:
    """Counters; ``ops_seen == ops_attributed + unattributed_*`` always."""

    ops_seen: int = 0
    ops_attributed: int = 0
    unattributed_no_window: int = 0
    unattributed_ambiguous: int = 0
    unattributed_late: int = 0
    unattributed_no_clock: int = 0
    requests_billed: int = 0
    requests_without_ops: int = 0
    windows_evicted: int = 0
    orphan_ends: int = 0
    bills_dropped: int = 0

    @property
    def unattributed(self) -> int:
        return (self.unattributed_no_window + self.unattributed_ambiguous + self.unattributed_late
                + self.unattributed_no_clock)


@dataclass
class _Acc:
    request: Request | None
    key: int
    start: int
    end: int = 0
    open_windows: int = 0
    live_windows: int = 0  # open, or closed less than grace_ns ago
    complete: bool = True
    device_ns: int = 0
    ops: int = 0
    by_type: dict[str, list[int]] = field(default_factory=dict)
    by_name: dict[str, list[int]] | None = None
    slowest: tuple[str, str, int] | None = None
    models: set[int] = field(default_factory=set)
    windows: list[tuple[int, list[Any]]] = field(default_factory=list)  # (tid, window), the first few
    windows_cut: int = 0


class BillBook:
    """Attribution and bills of one process (fed by the agent, or by hand in tests)."""

    def __init__(self, *, factor: int = 1, early_ns: int = 100_000, late_ns: int = 1_000_000,
                 grace_ns: int = 2_000_000_000, max_open: int = 65_536, max_bills: int = 4096,
                 by_name: bool = False, clock: ClockMap | None = None, hold_ns: int = 250_000_000,
                 max_held_ops: int = 1 << 20):
        for name, v in (("early_ns", early_ns), ("late_ns", late_ns), ("grace_ns", grace_ns),
                        ("hold_ns", hold_ns)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"BillBook: {name} must be an int >= 0, got {v!r}")
        if grace_ns < hold_ns:
            raise ValueError(f"BillBook: grace_ns ({grace_ns}) must be >= hold_ns ({hold_ns}): a window "
                             "must stay open until the ops it held are attributed")
        if max_open < 1 or max_bills < 1:
            raise ValueError(f"BillBook: max_open and max_bills must be >= 1, got {max_open}, {max_bills}")
        self.clock = clock if clock is not None else ClockMap(factor)
        self.early_ns, self.late_ns, self.grace_ns = early_ns, late_ns, grace_ns
        self.max_open, self.by_name = max_open, by_name
        self.hold_ns, self.max_held_ops = hold_ns, max_held_ops
        self._held: deque[tuple[int, np.ndarray, Callable[[int], Any]]] = deque()  # (arrival, ops, names_of)
        self._held_ops = 0
        self.stats = BillStats()
        self._accs: dict[int, _Acc] = {}
        # tid -> windows [start, end or None, key]; few per thread, so lists are enough
        self._windows: dict[int, list[list[Any]]] = {}
        self._open: dict[tuple[int, int], list[Any]] = {}  # (key, tid) -> window, oldest first
        self._closing: deque[tuple[int, int, list[Any]]] = deque()  # (end, tid, window)
        self._horizon: dict[int, int] = {}  # tid -> newest end of a window already closed
        self._overlapped: set[int] = set()  # threads that had two windows open at once
        self._open_on: dict[int, int] = {}  # tid -> windows open on it now
        self._bills: deque[Bill] = deque(maxlen=max_bills)

    # --- request windows ------------------------------------------------------------------

    def feed_events(self, events: Iterable[RequestEvent | tuple[int, int, int, int, Request | None]]) -> None:
        """Take request events in the order they were recorded."""
        for kind, key, tid, t, req in events:
            if kind == START:
                acc = self._accs.get(key)
                if acc is None:
                    acc = self._accs[key] = _Acc(req, key, t)
                    if self.by_name:
                        acc.by_name = {}
                elif req is not None and acc.request is None:
                    acc.request = req
                acc.start = min(acc.start, t)
                acc.open_windows += 1
                acc.live_windows += 1
                if len(self._open) >= self.max_open:
                    self._evict_oldest()
                w: list[Any] = [t, None, key]
                if len(acc.windows) < REQUEST_BILL_MAX_WINDOWS:
                    acc.windows.append((tid, w))
                else:
                    acc.windows_cut += 1
                ws = self._windows.setdefault(tid, [])
                if self._open_on.get(tid, 0) or (ws and ws[-1][0] > t):
                    self._overlapped.add(tid)  # nested/interleaved (or out of order): full scans
                self._open_on[tid] = self._open_on.get(tid, 0) + 1
                ws.append(w)
                self._open[(key, tid)] = w
            else:
                closed = self._open.pop((key, tid), None)
                if closed is None:
                    self.stats.orphan_ends += 1  # its start was dropped or evicted
                    acc = self._accs.get(key)
                    if acc is not None:
                        acc.complete = False
                    continue
                closed[1] = t
                self._open_on[tid] -= 1
                self._closing.append((t, tid, closed))
                acc = self._accs[key]
                acc.end = max(acc.end, t)
                acc.open_windows -= 1

    def _evict_oldest(self) -> None:
        (key, tid), w = next(iter(self._open.items()))
        del self._open[(key, tid)]
        self._open_on[tid] -= 1
        self.stats.windows_evicted += 1
        acc = self._accs[key]
        acc.complete = False
        acc.open_windows -= 1
        w[1] = w[0]  # closes at its start: nothing more is attributed to it
        acc.end = max(acc.end, w[0])
        self._closing.append((w[0], tid, w))

    # --- ops ------------------------------------------------------------------------------

    def feed_batch(self, data: np.ndarray, names: Any, arrival_ns: int | None = None) -> None:
        """Take a batch (``OpBatch.data``/``.names``) that arrived at ``arrival_ns``.

        Its arrival tightens the clock at once; its ops are attributed ``hold_ns`` later
        (in :meth:`collect`), with the clock as good as the batches of that time made it:
        a batch that was slow to arrive maps late, and attributed at once it could land in
        the thread's next request.
        """
        if arrival_ns is None:
            arrival_ns = time.monotonic_ns()
        ops = data[~data["keypoint"]] if "keypoint" in (data.dtype.names or ()) else data
        if len(data):
            self.clock.note(int(data["end"].max()), arrival_ns)
        self._hold(arrival_ns, ops, lambda _slot: names)

    def feed_columns(self, ops: np.ndarray, notes: np.ndarray, names_of: Callable[[int], Any],
                     arrival_ns: int | None = None) -> None:
        """Take what the agent's C tap gathered (:class:`aclprof.binding.billtap.BillTap`):
        ``ops`` (fields start, end, thread_id, model_id, op_type, op_name, slot; keypoints
        already left out) and the reads' clock ``notes`` (arrival, newest_end).
        ``names_of(slot)`` gives the name table the slot's ids index. The ops are held
        from the newest note's arrival (or ``arrival_ns``)."""
        for arrival, end in zip(notes["arrival"].tolist(), notes["newest_end"].tolist()):
            self.clock.note(end, arrival)
        if arrival_ns is None:
            arrival_ns = int(notes["arrival"].max()) if len(notes) else time.monotonic_ns()
        self._hold(arrival_ns, ops, names_of)

    def _hold(self, arrival_ns: int, ops: np.ndarray, names_of: Callable[[int], Any]) -> None:
        n = len(ops)
        self.stats.ops_seen += n
        if not n:
            return
        self._held.append((arrival_ns, ops, names_of))
        self._held_ops += n
        while self._held_ops > self.max_held_ops:  # bounded: settle the oldest early
            self._settle_one()

    def settle_one(self, now_ns: int | None = None) -> bool:
        """Attribute the oldest held chunk of ops if its hold is over; False if none is due.
        (The agent settles chunk by chunk, giving the GIL away between them.)"""
        if now_ns is None:
            now_ns = time.monotonic_ns()
        if not self._held or self._held[0][0] + self.hold_ns > now_ns:
            return False
        self._settle_one()
        return True

    def _settle(self, now_ns: int) -> None:
        while self._held and self._held[0][0] + self.hold_ns <= now_ns:
            self._settle_one()

    def _settle_one(self) -> None:
        _, ops, names_of = self._held.popleft()
        self._held_ops -= len(ops)
        if not self.clock.ready:
            self.stats.unattributed_no_clock += len(ops)
            return
        host = self.clock.to_host(ops["start"])
        dur = (ops["end"].astype(np.int64) - ops["start"].astype(np.int64)) * self.clock.factor
        keys = self._window_keys(ops["thread_id"], host)
        att = np.flatnonzero(keys)
        if not len(att):
            return
        self.stats.ops_attributed += len(att)
        slots = ops["slot"][att] if "slot" in (ops.dtype.names or ()) else np.zeros(len(att), np.uint32)
        k, s, m = keys[att], slots, ops["model_id"][att]
        t, nm, d = ops["op_type"][att], ops["op_name"][att], dur[att]
        # one group per (request, slot, model, op type), its ops by device time: the group's
        # last op is its slowest; Python then runs once per group, not per op
        order = np.lexsort((d, t, m, s, k))
        k, s, m, t, nm, d = k[order], s[order], m[order], t[order], nm[order], d[order]
        firsts = _group_starts((k, s, m, t))
        lasts = np.append(firsts[1:], len(k)) - 1
        sums = np.add.reduceat(d, firsts).tolist()
        counts = (lasts - firsts + 1).tolist()
        accs = self._accs
        tables: dict[int, Any] = {}
        for key, slot, model, typ, ns, c, top, top_name in zip(
                k[firsts].tolist(), s[firsts].tolist(), m[firsts].tolist(), t[firsts].tolist(), sums, counts,
                d[lasts].tolist(), nm[lasts].tolist()):
            acc = accs[key]
            names = tables.get(slot)
            if names is None:
                names = tables[slot] = names_of(slot)
            op_type = names[typ]
            entry = acc.by_type.get(op_type)
            if entry is None:
                acc.by_type[op_type] = [ns, c]
            else:
                entry[0] += ns
                entry[1] += c
            acc.device_ns += ns
            acc.ops += c
            acc.models.add(model)
            if acc.slowest is None or top > acc.slowest[2]:
                acc.slowest = (op_type, names[top_name], top)
        if self.by_name:
            self._by_name(k, s, nm, d, names_of)

    def _by_name(self, k: np.ndarray, s: np.ndarray, nm: np.ndarray, d: np.ndarray,
                 names_of: Callable[[int], Any]) -> None:
        order = np.lexsort((nm, s, k))
        k, s, nm, d = k[order], s[order], nm[order], d[order]
        firsts = _group_starts((k, s, nm))
        counts = np.diff(np.append(firsts, len(k))).tolist()
        tables: dict[int, Any] = {}
        for key, slot, name, ns, c in zip(k[firsts].tolist(), s[firsts].tolist(), nm[firsts].tolist(),
                                          np.add.reduceat(d, firsts).tolist(), counts):
            acc = self._accs[key]
            if acc.by_name is None:
                continue
            names = tables.get(slot)
            if names is None:
                names = tables[slot] = names_of(slot)
            e = acc.by_name.setdefault(names[name], [0, 0])
            e[0] += ns
            e[1] += c

    def _window_keys(self, tids: np.ndarray, host: np.ndarray) -> np.ndarray:
        """Per op, the key of the one request window that holds it (0: none, counted)."""
        keys = np.zeros(len(tids), np.int64)
        st = self.stats
        early, late = self.early_ns, self.late_ns
        order = np.sort(tids)  # not np.unique: its first use imports numpy.ma (see _group_starts)
        for tid in order[_group_starts((order,))].tolist():
            sel = np.flatnonzero(tids == tid)
            hs = host[sel]
            ws = self._windows.get(tid)
            if ws and tid in self._overlapped:  # nested windows: the full scan, op by op
                for j, h in zip(sel.tolist(), hs.tolist()):
                    acc = self._match(tid, h)
                    if acc is not None:
                        keys[j] = acc.key
                continue
            if ws:
                # The thread's windows are disjoint and in start order, so their ends are in
                # order too (only the last may be open): the windows holding an op are those
                # from the first whose end (+late) reaches it to the last that starts (-early)
                # before it; _match's walk, for all the thread's ops at once.
                starts = np.fromiter((w[0] for w in ws), np.int64, len(ws))
                ends = np.fromiter((_OPEN if w[1] is None else w[1] + late for w in ws), np.int64, len(ws))
                last = np.searchsorted(starts, hs + early, "right") - 1
                near = np.maximum(0, last - np.searchsorted(ends, hs, "left") + 1)
                one = near == 1
                wkeys = np.fromiter((w[2] for w in ws), np.int64, len(ws))
                keys[sel[one]] = wkeys[last[one]]
                st.unattributed_ambiguous += int(np.count_nonzero(near > 1))
                hs = hs[near == 0]
            if len(hs):
                n_late = int(np.count_nonzero(hs <= self._horizon.get(tid, -1) + late))
                st.unattributed_late += n_late
                st.unattributed_no_window += len(hs) - n_late
        return keys

    def _match(self, tid: int, hs: int) -> _Acc | None:
        # A thread's windows are in start order (one thread records them one after the
        # other): skip those that start after the op, then walk back. While the thread never
        # had two windows open at once its windows are disjoint, so the walk stops at the
        # first closed window that ended (with late_ns) before the op: cost ~O(log n) at
        # thousands of requests per second per thread, not O(windows within the grace).
        ws = self._windows.get(tid)
        found: list[Any] | None = None
        near = 0
        if ws:
            early, late = self.early_ns, self.late_ns
            disjoint = tid not in self._overlapped
            for i in range(bisect_right(ws, hs + early, key=_start) - 1, -1, -1):
                w = ws[i]
                end = w[1]
                if end is None or hs <= end + late:
                    near += 1
                    found = w
                elif disjoint:
                    break
        if near == 1 and found is not None:
            return self._accs[found[2]]
        if near > 1:
            self.stats.unattributed_ambiguous += 1
        elif hs <= self._horizon.get(tid, -1) + self.late_ns:
            self.stats.unattributed_late += 1
        else:
            self.stats.unattributed_no_window += 1
        return None

    # --- bills ----------------------------------------------------------------------------

    def collect(self, now_ns: int | None = None) -> list[Bill]:
        """Close the windows that ended ``grace_ns`` before ``now_ns`` (host); return and
        forget the bills finished so far."""
        if now_ns is None:
            now_ns = time.monotonic_ns()
        self._settle(now_ns)
        closing = self._closing
        while closing and closing[0][0] + self.grace_ns <= now_ns:
            end, tid, w = closing.popleft()
            ws = self._windows.get(tid)
            if ws is not None:
                ws.remove(w)
                if not ws:
                    del self._windows[tid]
            self._horizon[tid] = max(self._horizon.get(tid, 0), end)
            acc = self._accs[w[2]]
            acc.live_windows -= 1
            if acc.live_windows == 0:
                del self._accs[acc.key]
                self._finish(acc)
        out = list(self._bills)
        self._bills.clear()
        return out

    def _finish(self, acc: _Acc) -> None:
        req = acc.request
        if acc.ops == 0:
            self.stats.requests_without_ops += 1
        self.stats.requests_billed += 1
        if len(self._bills) == self._bills.maxlen:
            self.stats.bills_dropped += 1
        self._bills.append(Bill(
            request_id=req.id if req is not None else f"#{acc.key}",
            key=acc.key, attrs=dict(req.attrs) if req is not None else {},
            traceparent=req.traceparent if req is not None else None,
            start_ns=acc.start, end_ns=acc.end, device_ns=acc.device_ns, ops=acc.ops,
            by_type={t: (v[0], v[1]) for t, v in acc.by_type.items()}, slowest=acc.slowest,
            models=tuple(sorted(acc.models)), complete=acc.complete and req is not None,
            by_name=None if acc.by_name is None else {n: (v[0], v[1]) for n, v in acc.by_name.items()},
            **self._windows_of(acc)))

    def _windows_of(self, acc: _Acc) -> dict[str, Any]:
        """Bill.windows/windows_cut: the windows that closed, in the records' clock."""
        if not self.clock.ready:
            return {"windows_cut": len(acc.windows) + acc.windows_cut}
        to_device, factor = self.clock.to_device, self.clock.factor  # records count in 1/factor ns
        done = [(tid, w) for tid, w in acc.windows if w[1] is not None]
        return {"windows": tuple((tid, to_device(w[0]) // factor, -(-to_device(w[1]) // factor)) for tid, w in done),
                "windows_cut": acc.windows_cut + len(acc.windows) - len(done),
                "window_margin": (-(-self.early_ns // factor), -(-self.late_ns // factor))}

    def pending(self) -> dict[str, int]:
        """Sizes of what the book holds now (all bounded)."""
        return {"held_ops": self._held_ops, "requests": len(self._accs), "open_windows": len(self._open),
                "closing_windows": len(self._closing), "bills": len(self._bills)}
