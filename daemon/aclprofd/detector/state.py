"""The regression detector's histograms: a current window and a decayed trailing baseline.

Cells are ``(service, model, op_type, op_name)``: the aggregator's keys with host and pid
merged (one daemon is one host; the processes of a service are replicas of the same work,
so merging them gives more samples and one alert instead of one per pid). The detector
judges groups of cells (:meth:`CellStore.groups`); cells keep op names so that a saved
baseline can be compared by name (``aclprof diff --by name``).

Per cell, dense rows of ``NBINS`` bins:

- ``cur``: counts of the last ``window_s`` seconds, kept exact by a ring of per-second
  sparse deltas: a second that leaves the window is subtracted from ``cur``;
- ``base``: the trailing baseline, what left the window, decayed by ``exp(-dt/tau_s)``, so
  it weighs the minutes before the window (mean age ``tau_s`` beyond it) and never
  overlaps the window it is compared with. Decay is lazy: rows hold ``value / f`` with one
  shared factor ``f = exp(-(now - t0)/tau_s)`` (renormalised when it gets small), so a
  second costs O(new bins), not O(cells x bins).

The same two histograms are kept per group too, updated with the same sparse deltas, so a
judgement reads them without summing cells.

Ingestion only appends the batch's sparse ``(key*NBINS + bin, count)`` pairs (the arrays
the aggregator already computed) to a pending list; :meth:`CellStore.roll`, once a second
on the loop timer, folds them in. Memory is bounded by ``max_cells`` (beyond it records
are counted in ``untracked``, never silently dropped), and by a per-agent share
(``max_per_owner``, :class:`aclprofd.shares.Shares`: one agent's 4096 op names cannot take
the room of another's ops). A cell whose agent is gone (no live connection of its owner)
and that nothing fed for ``table_idle_timeout`` (at least the window) is forgotten by
:meth:`CellStore.age_out`: its baseline leaves its group's, its slot and (once empty) its
group's slot are reused, counted as evicted.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Hashable

import numpy as np

from aclprof.protocol._batchgroup import map_cells as _map_cells
from aclprof.protocol.quantshift import NBINS

from ..aggregate.quantiles import group_sum
from ..shares import Shares

__all__ = ["CellStore", "Cell", "Group", "MAX_CELLS"]

#: (service, model, op_type, op_name); service "" when the agent gave none
Cell = tuple[str, str, str, str]
#: (service, model, op_type)
Group = tuple[str, str, str]
MAX_CELLS = 4096
#: pending deltas are merged once this many rows (or as many as merged already) came in
PENDING_MERGE_ROWS = 1 << 15
#: key_cell codes: not looked up yet, never judged ("(other)"), refused for want of room
#: (looked up again once cells are forgotten)
_UNKNOWN, _UNTRACKED, _FULL = -1, -2, -3


class CellStore:
    """Cells' current-window and trailing-baseline histograms (loop thread only).

    ``identity(key)`` names an aggregator key as a Cell, or None for a key the detector
    must not judge (the aggregator's "(other)" key, which mixes many ops); ``owner(key)``
    the agent whose share a new cell of that key counts against (None: no share)."""

    def __init__(self, identity: Callable[[int], Cell | None], window_s: float, tau_s: float,
                 max_cells: int = MAX_CELLS, *, owner: Callable[[int], Hashable | None] | None = None,
                 max_per_owner: int | None = None, max_per_uid: int | None = None) -> None:
        self.identity = identity
        self.owner = owner
        self.window_s = float(window_s)
        self.tau_s = float(tau_s)
        self.max_cells = max_cells
        self.shares = Shares(max_per_owner or max_cells, max_per_uid)
        self.cells: list[Cell | None] = []  # None: a forgotten cell's slot, free for reuse
        self._cell_index: dict[Cell, int] = {}
        self.cell_owner: list[Hashable | None] = []
        self.live_cells = 0
        self._free: list[int] = []
        self.last_fed = np.zeros(0, np.float64)  # per cell: the last second that fed it (inf: not yet)
        self.refused_full = 0  # cells refused because max_cells were in use
        self.groups: list[Group] = []
        self._group_index: dict[Group, int] = {}
        self.group_cells = np.zeros(0, np.int64)  # cells per group
        self._gfree: list[int] = []
        #: groups emptied by age_out since the detector last looked (it resets their flags)
        self.freed_groups: list[int] = []
        self.cell_group = np.zeros(0, np.int64)
        self.key_cell = np.full(0, _UNKNOWN, np.int64)
        self.cap = 0
        self.cur = np.zeros((0, NBINS), np.int64)
        self.base = np.zeros((0, NBINS), np.float64)
        self.gcap = 0
        self.gcur = np.zeros((0, NBINS), np.int64)
        self.gbase = np.zeros((0, NBINS), np.float64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_rows = 0  # rows in _pending and cell_buf not merged yet (_merge_pending)
        #: pending rows written in C by the aggregator (``_batchgroup.ingest_frame``, one call
        #: per agent frame: :meth:`fed` counts them): cell codes and counts, ``cfill`` columns
        #: used; merged with ``_pending`` (a roll folds both). Empty until the first such frame.
        self.cell_buf = np.empty((2, 0), np.int64)
        self.cfill = 0
        self._merged_rows = 0  # rows of the merged entry (the first of _pending)
        #: (second, cell codes, their counts, group codes, their counts) of the seconds in the
        #: window; codes unique and sorted (a second's group codes run group by group:
        #: detector_dispersion searches them)
        self._ring: collections.deque[tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = \
            collections.deque()
        self._t0: float | None = None  # base rows hold value / exp(-(now - t0) / tau_s)
        self._f = 1.0
        self.untracked = 0  # records of the "(other)" key or beyond max_cells: not judged

    # ---- ingestion (per batch) -----------------------------------------------------------
    def observe(self, hcodes: np.ndarray, hcount: np.ndarray) -> None:
        """One batch's histogram deltas: ``hcodes = key * NBINS + bin`` with their counts."""
        if len(hcodes) == 0:
            return
        hcodes = np.ascontiguousarray(hcodes, dtype=np.int64)
        hcount = np.ascontiguousarray(hcount, dtype=np.int64)
        out = np.empty((2, len(hcodes)), np.int64)
        # one C pass (issue 21: ~12 numpy calls a batch before); -1: a key to register first
        m, untracked = _map_cells(hcodes, hcount, self.key_cell, NBINS, out[0], out[1])
        if m < 0:
            self._learn_keys(hcodes // NBINS)
            m, untracked = _map_cells(hcodes, hcount, self.key_cell, NBINS, out[0], out[1])
        self.untracked += untracked
        self._pending.append((out[0, :m], out[1, :m]))
        self._pending_rows += m
        if self._pending_rows >= max(PENDING_MERGE_ROWS, self._merged_rows):
            self._merge_pending()

    def fed(self, m: int, untracked: int) -> None:
        """The aggregator wrote ``m`` rows of one frame into :attr:`cell_buf` after the
        ``cfill`` first (and counted ``untracked`` records of keys not judged)."""
        self.untracked += untracked
        if m:
            self.cfill += m
            self._pending_rows += m

    def cell_room(self) -> np.ndarray:
        """:attr:`cell_buf` with its rows merged (:meth:`_merge_pending`) and room for at least
        as many rows as the merged entry holds (merges stay amortised, as in :meth:`observe`)."""
        if self.cfill:
            self._merge_pending()
        want = max(PENDING_MERGE_ROWS, self._merged_rows)
        if self.cell_buf.shape[1] < want:
            self.cell_buf = np.empty((2, want), np.int64)
        return self.cell_buf

    def _learn_keys(self, keys: np.ndarray) -> None:
        """The cells of keys not looked up yet (once per key in the daemon's life)."""
        top = int(keys.max())
        if top >= len(self.key_cell):
            grown = np.full(max(top + 1, 2 * len(self.key_cell), 64), _UNKNOWN, np.int64)
            grown[:len(self.key_cell)] = self.key_cell
            self.key_cell = grown
        cells = self.key_cell[keys]
        for k in np.unique(keys[cells == _UNKNOWN]).tolist():
            self.key_cell[k] = self._cell_of(k)

    def _merge_pending(self) -> tuple[np.ndarray, np.ndarray]:
        """The pending deltas as one (sorted unique codes, summed counts) pair, kept as the
        only pending entry. Merged as they come (amortised O(n log n)), not in one sort of a
        whole second's deltas at the tick: 500 k records/s made that sort 30-50 ms of CPU on
        the loop every second (issue 19)."""
        if len(self._pending) == 1 and self._pending_rows == 0:
            return self._pending[0]  # merged already, nothing since
        buf = self.cell_buf[:, :self.cfill]
        codes = np.concatenate([c for c, _ in self._pending] + [buf[0]])
        counts = np.concatenate([n for _, n in self._pending] + [buf[1]])
        merged = group_sum(codes, counts)
        self.cfill = 0
        self._pending, self._pending_rows, self._merged_rows = [merged], 0, len(merged[0])
        return merged

    def _cell_of(self, key: int) -> int:
        ident = self.identity(key)
        if ident is None:
            return _UNTRACKED
        idx = self._cell_index.get(ident)
        if idx is not None:
            return idx
        return self.add_cell(ident, self.owner(key) if self.owner is not None else None)

    def add_cell(self, ident: Cell, owner: Hashable | None = None) -> int:
        """The cell's index, registering it (and its group) if new; -3 when the table or
        ``owner``'s share is full (counted)."""
        idx = self._cell_index.get(ident)
        if idx is not None:
            return idx
        if self.live_cells >= self.max_cells:
            self.refused_full += 1
            return _FULL
        if not self.shares.take(owner):
            return _FULL
        if self._free:
            idx = self._free.pop()
            self.cells[idx], self.cell_owner[idx] = ident, owner
        else:
            idx = len(self.cells)
            if idx >= self.cap:
                self._grow(min(max(64, 2 * self.cap), self.max_cells))
            self.cells.append(ident)
            self.cell_owner.append(owner)
        self.live_cells += 1
        self.last_fed[idx] = math.inf
        self._cell_index[ident] = idx
        g = ident[:3]
        gi = self._group_index.get(g)
        if gi is None:
            if self._gfree:
                gi = self._gfree.pop()
                self.groups[gi] = g
            else:
                gi = len(self.groups)
                self.groups.append(g)
            self._group_index[g] = gi
            if gi >= self.gcap:
                self.gcap = max(64, 2 * self.gcap)
                self.gcur = _grown(self.gcur, self.gcap)
                self.gbase = _grown(self.gbase, self.gcap)
                self.group_cells = _grown(self.group_cells, self.gcap)
        self.cell_group[idx] = gi
        self.group_cells[gi] += 1
        return idx

    def _grow(self, cap: int) -> None:
        self.cur = _grown(self.cur, cap)
        self.base = _grown(self.base, cap)
        self.last_fed = _grown(self.last_fed, cap)
        cg = np.zeros(cap, np.int64)
        cg[:self.cap] = self.cell_group[:self.cap]
        self.cell_group = cg
        self.cap = cap

    def renumber_keys(self, remap: np.ndarray) -> None:
        """The aggregator renumbered its keys (``remap``: old -> new, -1 gone): the key ->
        cell table follows (a gone key's cell stays, for its other keys and its baseline)."""
        old = self.key_cell
        n = min(len(old), len(remap))
        new = np.full(len(old), _UNKNOWN, np.int64)
        idx = np.flatnonzero(remap[:n] >= 0)
        new[remap[idx]] = old[idx]
        self.key_cell = new

    # ---- ageing out (the detector's timer) -----------------------------------------------
    def age_out(self, now: float, idle_s: float, live: Callable[[Hashable | None], bool]) -> int:
        """Forget the cells that nothing fed for ``idle_s`` (at least the window, so none is
        in the ring or pending: call right after :meth:`roll`) and whose owner is not
        ``live``; the number forgotten. Keys that pointed at them, and keys refused for want
        of room, are looked up again at their next records."""
        n = len(self.cells)
        cutoff = now - max(idle_s, self.window_s)
        gone = [c for c in np.flatnonzero(self.last_fed[:n] <= cutoff).tolist() if not live(self.cell_owner[c])]
        for c in gone:
            self._forget(c)
        if gone:
            kc = self.key_cell
            kc[np.isin(kc, np.asarray(gone, np.int64)) | (kc == _FULL)] = _UNKNOWN
            self.shares.evicted += len(gone)
        return len(gone)

    def _forget(self, c: int) -> None:
        ident = self.cells[c]
        assert ident is not None
        del self._cell_index[ident]
        gi = int(self.cell_group[c])
        self.gbase[gi] = np.maximum(self.gbase[gi] - self.base[c], 0.0)  # same 1/f scale
        self.base[c] = 0.0
        self.cur[c] = 0  # already: nothing fed it within the window
        self.shares.give_back(self.cell_owner[c])
        self.cells[c] = self.cell_owner[c] = None
        self.last_fed[c] = math.inf
        self._free.append(c)
        self.live_cells -= 1
        self.group_cells[gi] -= 1
        if not self.group_cells[gi]:
            del self._group_index[self.groups[gi]]
            self.gbase[gi] = 0.0
            self.gcur[gi] = 0
            self._gfree.append(gi)
            self.freed_groups.append(gi)

    @property
    def group_index(self) -> dict[Group, int]:
        """The groups in use and their slots."""
        return self._group_index

    def stats(self) -> dict[str, int]:
        """STATUS ``tables.detector_cells``."""
        return {"cap": self.max_cells, "in_use": self.live_cells, "refused_full": self.refused_full,
                **self.shares.stats()}

    # ---- the timer (once a second) --------------------------------------------------------
    def roll(self, now: float) -> None:
        """Fold the pending deltas in as the second ending at ``now``; move the seconds that
        left the window into the decayed baseline."""
        if self._t0 is None:
            self._t0 = now
        if self._pending or self.cfill:  # deltas from observe, or rows the aggregator wrote in C
            codes, counts = self._merge_pending()
            self._pending, self._pending_rows, self._merged_rows = [], 0, 0
            gcodes, gcounts = group_sum(self.cell_group[codes // NBINS] * NBINS + codes % NBINS, counts)
            # codes and gcodes are unique: plain fancy-index adds (ufunc.at is ~10x slower)
            self.cur.reshape(-1)[codes] += counts
            self.gcur.reshape(-1)[gcodes] += gcounts
            self.last_fed[codes // NBINS] = now  # codes sorted: one write per cell fed
            self._ring.append((now, codes, counts, gcodes, gcounts))
        self._f = math.exp(-max(0.0, now - self._t0) / self.tau_s)
        while self._ring and self._ring[0][0] <= now - self.window_s:
            _, codes, counts, gcodes, gcounts = self._ring.popleft()
            self.cur.reshape(-1)[codes] -= counts
            self.gcur.reshape(-1)[gcodes] -= gcounts
            self.base.reshape(-1)[codes] += counts / self._f
            self.gbase.reshape(-1)[gcodes] += gcounts / self._f
        if self._f < 1e-6:  # every ~14 tau: fold the factor into the rows (O(cells x bins))
            self.base *= self._f
            self.gbase *= self._f
            self._t0, self._f = now, 1.0

    # ---- views -------------------------------------------------------------------------
    def group_hists(self, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(current, trailing baseline) histograms per group, rows in ``groups`` order (of
        the group slots ``rows`` only, when given)."""
        if rows is None:
            rows = np.arange(len(self.groups))
        return self.gcur[rows].astype(np.float64), self.gbase[rows] * self._f

    def group_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(calls in the current window, in the trailing baseline) per group, in ``groups``
        order: which groups have the samples to be judged, without copying their histograms."""
        g = len(self.groups)
        return self.gcur[:g].sum(axis=1), self.gbase[:g].sum(axis=1) * self._f

    def window_seconds(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The seconds of the current window: ``(group * NBINS + bin codes, counts)`` each,
        codes unique and sorted."""
        return [(gcodes, gcounts) for _, _, _, gcodes, gcounts in self._ring]

    def cell_hists(self, which: str) -> tuple[list[Cell], np.ndarray]:
        """Cells and their histograms: ``"current"`` (the window), ``"trailing"`` (the decayed
        baseline) or ``"recent"`` (both: what a saved baseline holds)."""
        n = len(self.cells)
        if which == "current":
            h = self.cur[:n].astype(np.float64)
        elif which == "trailing":
            h = self.base[:n] * self._f
        elif which == "recent":
            h = self.base[:n] * self._f + self.cur[:n]
        else:
            raise ValueError(f"cell_hists: which must be current, trailing or recent, not {which!r}")
        used = [i for i, c in enumerate(self.cells) if c is not None]
        if len(used) == n:
            return list(self.cells), h  # type: ignore[arg-type]  # no forgotten slot
        return [self.cells[i] for i in used], h[used]  # type: ignore[misc]


def _grown(arr: np.ndarray, rows: int) -> np.ndarray:
    """``arr`` with ``rows`` rows (the new ones zero)."""
    out = np.zeros((rows, *arr.shape[1:]), arr.dtype)
    out[:len(arr)] = arr
    return out
