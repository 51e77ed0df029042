"""The aggregates' sliding windows (10 s and 1 min by default): one sparse slot per second.

A slot holds, for the keys that saw records in its second, count, total, min and max, and
the histogram counts of the (key, bin) pairs that occurred: 36 bytes per key and 8 bytes
per pair (for 10 000 busy keys of ~20 bins each, ~11 MB per slot at most, x 60 slots for
the 1-minute window). Records count in the second the daemon received them (the agents'
clocks are not comparable to the daemon's).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from .quantiles import I64, NBINS, group_stats, group_sum, narrow

__all__ = ["Slot", "SlotBuffer", "SlidingWindows", "window_name", "WindowFigures"]

#: keys, count, total, min, max, then the sparse histogram: key, bin, count
WindowFigures = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                      np.ndarray]

_COLUMNS = ("keys", "count", "total", "min", "max", "codes", "hcount")
#: a slot merges its parts once they hold this many histogram rows (a few ms of work), or as
#: many as it holds merged already
COMPACT_ROWS = 1 << 15


class SlotBuffer:
    """Rows the newest slot was given in C (``aclprof.protocol._batchgroup.ingest_frame``, one
    call per agent frame) and has not merged yet: ``groups`` holds per group key, count,
    total, min, max (5 rows, ``gfill`` columns used), ``codes`` the (key * NBINS + bin) codes
    and their counts (2 rows, ``hfill`` columns used). Preallocated and reused from second to
    second (:meth:`SlidingWindows.slot_for` hands it to the next slot): a frame appends to it
    instead of adding a part of seven new arrays to a list, and the slot merges it once it is
    full (:meth:`Slot.compact`), as it merged its parts once they held COMPACT_ROWS rows."""

    __slots__ = ("groups", "codes", "gfill", "hfill")

    def __init__(self, cap: int) -> None:
        # np.empty: pages the kernel gives as the columns are first written
        self.groups = np.empty((5, cap), I64)
        self.codes = np.empty((2, cap), I64)
        self.gfill = self.hfill = 0

    @property
    def cap(self) -> int:
        return self.codes.shape[1]

    def rows(self) -> tuple[np.ndarray, ...]:
        """The rows written (views: copy before the buffer is written again), as Slot.add's
        arguments."""
        g, h = self.groups[:, :self.gfill], self.codes[:, :self.hfill]
        return g[0], g[1], g[2], g[3], g[4], h[0], h[1]


class Slot:
    """One second of records, sparse: per key (count, total, min, max) and per (key, bin) counts."""

    __slots__ = ("second", "keys", "count", "total", "min", "max", "codes", "hcount", "_parts", "_rows", "buf")

    def __init__(self, second: int) -> None:
        self.second = second
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._rows = 0  # histogram rows in _parts
        #: the rows written in C since the last compaction (the newest slot's only; None
        #: until the first frame written so, and for every older slot)
        self.buf: SlotBuffer | None = None
        self.keys = self.count = self.total = self.min = self.max = np.zeros(0, I64)
        self.codes = self.hcount = np.zeros(0, I64)

    def add(self, keys: np.ndarray, count: np.ndarray, total: np.ndarray, mn: np.ndarray, mx: np.ndarray,
            codes: np.ndarray, hcount: np.ndarray) -> None:
        """Add one batch's figures (merged lazily, by :meth:`compact`, at the latest once
        the parts hold :data:`COMPACT_ROWS` histogram rows: a merge costs O(rows log rows),
        so a second of 500 k records/s is merged in pieces, not in one sort at the next
        second's first batch, which held the loop 50-70 ms of CPU: issue 19)."""
        self._parts.append((keys, count, total, mn, mx, codes, hcount))
        self._rows += len(codes)
        if self._rows >= max(COMPACT_ROWS, len(self.codes)):  # amortised: O(n log n) in all
            self.compact()

    def compact(self) -> Slot:
        """Merge the parts added since the last compaction, and the rows of its buffer
        (duplicate keys combined; the buffer is empty after it)."""
        buf = self.buf
        filled = buf is not None and (buf.gfill or buf.hfill)
        if not self._parts and not filled:
            return self
        parts = self._parts
        if filled:
            assert buf is not None
            parts.append(buf.rows())  # views, copied by the concatenations below
        self._parts, self._rows = [], 0
        cols = [np.concatenate([getattr(self, n)] + [p[i] for p in parts]) for i, n in enumerate(_COLUMNS)]
        if buf is not None:
            buf.gfill = buf.hfill = 0
        self.keys, self.count, self.total, self.min, self.max = group_stats(*cols[:5])
        codes, hcount = group_sum(cols[5], cols[6])
        # kept for the longest window (60 of them): 4-byte codes and counts when they fit
        self.codes = narrow(codes)
        self.hcount = narrow(hcount)
        self.keys = narrow(self.keys)
        return self


class SlidingWindows:
    """The slots of the last ``max(windows)`` seconds, and the figures of one window."""

    def __init__(self, windows: Sequence[int]) -> None:
        self.seconds = tuple(sorted(int(w) for w in windows))
        self.slots: collections.deque[Slot] = collections.deque()

    def clear(self) -> None:
        self.slots = collections.deque()

    def slot_for(self, second: int) -> Slot:
        """The slot of ``second``; a new second compacts the previous slot and drops the
        slots older than the longest window."""
        slots = self.slots
        if not slots or slots[-1].second < second:
            new = Slot(second)
            if slots:
                prev = slots[-1].compact()
                new.buf, prev.buf = prev.buf, None  # the buffer (empty now) serves the newest slot
            slots.append(new)
            horizon = second - self.seconds[-1]
            while slots and slots[0].second <= horizon:
                slots.popleft()
            return slots[-1]
        # the same second, or the wall clock stepped back: keep adding to the newest slot
        return slots[-1]

    def buffer(self, slot: Slot) -> SlotBuffer:
        """The newest ``slot``'s buffer for the rows of the next frame, with room for at
        least as many histogram rows as the slot holds merged (so that merges stay amortised
        O(n log n), as Slot.add's COMPACT_ROWS rule keeps them): the buffer is merged first
        when it is full (:meth:`Slot.compact`), or made anew larger."""
        buf = slot.buf
        if buf is None:
            buf = slot.buf = SlotBuffer(max(COMPACT_ROWS, len(slot.codes)))
        elif buf.gfill or buf.hfill:
            slot.compact()
        if buf.cap < len(slot.codes):
            buf = slot.buf = SlotBuffer(len(slot.codes))
        return buf

    def spare(self) -> SlotBuffer:
        """An empty buffer for the first frame of a new second: the newest slot's, merged into
        it and taken from it (it is given no more rows), or a new one."""
        slot = self.slots[-1] if self.slots else None
        if slot is None or slot.buf is None:
            return SlotBuffer(COMPACT_ROWS)
        buf = slot.compact().buf
        slot.buf = None
        assert buf is not None
        return buf

    def renumber(self, remap: np.ndarray) -> None:
        """The keys were renumbered (``remap``: old -> new, -1 for a key gone, which no slot
        holds: it was not fed within the longest window); the order of the kept keys is
        unchanged, so the slots stay sorted."""
        for slot in self.slots:
            slot.compact()
            keep = remap[slot.keys] >= 0
            if not keep.all():
                slot.keys, slot.count, slot.total, slot.min, slot.max = (
                    a[keep] for a in (slot.keys, slot.count, slot.total, slot.min, slot.max))
            slot.keys = narrow(remap[slot.keys])
            hk, hb = np.divmod(slot.codes.astype(I64), NBINS)
            new = remap[hk]
            ok = new >= 0
            slot.codes = narrow(new[ok] * NBINS + hb[ok])
            slot.hcount = slot.hcount[ok]

    def names(self) -> list[str]:
        """The window names SNAPSHOT accepts besides "all" ("10s", "1m", ...)."""
        return [window_name(w) for w in self.seconds]

    def seconds_of(self, window: str) -> int:
        """The length of a named window; ValueError for an unknown name."""
        for w in self.seconds:
            if window == window_name(w):
                return w
        raise ValueError(f"unknown window {window!r} (one of {', '.join(self.names())}, all)")

    def figures(self, window: str, now: float) -> WindowFigures:
        """Per-key figures and sparse histogram over the last seconds of ``window`` before ``now``."""
        seconds = self.seconds_of(window)
        sel = [s.compact() for s in self.slots if s.second > int(now) - seconds]
        if not sel:
            z = np.zeros(0, I64)
            return z, z, z, z, z, z, z, z
        keys, count, total, mn, mx = group_stats(*(np.concatenate([getattr(s, a) for s in sel])
                                                   for a in ("keys", "count", "total", "min", "max")))
        codes, hc = group_sum(np.concatenate([s.codes for s in sel]), np.concatenate([s.hcount for s in sel]))
        hk, hb = np.divmod(codes, NBINS)
        return keys, count, total, mn, mx, hk, hb, hc


def window_name(seconds: int) -> str:
    """10 -> "10s", 60 -> "1m", 3600 -> "1h" (the names SNAPSHOT accepts)."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
