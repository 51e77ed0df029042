"""Per-operator aggregates: counts, totals, extremes and latency quantiles, vectorised.

A *key* is ``(host, pid, device, model, op_type, op_name, model_label)`` (the model label
is what the service called the model in WATCH, "" if it did not). For every key the aggregator
keeps, since start (or since the last :meth:`Aggregator.reset`): count, total, min, max and
a fixed log-scale histogram of durations; and, for the sliding windows (10 s and 1 min by
default), per-second slots holding the same figures sparsely. Records are attributed to the
second in which the daemon received them (agents' clocks are not comparable to the daemon's).

The parts, one module each:

- :mod:`aclprofd.aggregate.keys`: the key registry (at most ``max_keys`` keys, then one
  "other" key whose records are counted) and the connections' name-id caches;
- :mod:`aclprofd.aggregate.groups`: SNAPSHOT's groupings and the Prometheus series;
- :mod:`aclprofd.aggregate.windows`: the per-second slots of the sliding windows;
- :mod:`aclprofd.aggregate.quantiles`: the histogram (8 bins per power of two; quantiles
  within 4.4 %) and the rows of a snapshot;
- :mod:`aclprofd.aggregate.npzfile`: ``aggregates.npz``, the since-start figures across restarts.

Memory is bounded: dense since-start arrays of ``max_keys x 322`` int64 (~26 MB at the
default 10 000 keys) plus the slots (see :mod:`aclprofd.aggregate.windows`).

Ingestion never loops over records in Python: one C pass (:mod:`aclprof.protocol._batchgroup`)
groups a batch by every field of the key (a hash table: O(n) whatever it holds) with each
group's count, total, min and max and each record's histogram bin; then a C cache lookup per
distinct key in the batch, plus a registry step for keys the connection never sent before
(typically once per op for the connection's lifetime); then one more C call adds it all to
the since-start figures (``fold_batch``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, cast

import numpy as np

from aclprof.protocol._batchgroup import fold_batch as _fold_batch
from aclprof.protocol._batchgroup import group as _group
from aclprof.protocol._batchgroup import ingest_frame as _ingest_frame
from aclprof.protocol.quantshift import BIN_UPPER_NS
from aclprof.protocol.wire import RECORD_DTYPE

from .groups import FIELDS, GROUP_BY, Groupings
from .keys import OTHER, OTHER_IDENTITY, KeyRegistry, KeySource, grow
from .npzfile import STATE_FORMAT, STATE_VERSION, read_state, write_state
from .quantiles import (
    BIG,
    BINS_PER_OCTAVE,
    I64,
    NBINS,
    NFINE,
    NPROM,
    PROM_EXPONENTS,
    bin_index,
    bin_value,
    fine_bucket,
    grouped_rows,
    prom_bucket,
)
from .windows import SlidingWindows, window_name

#: the Prometheus bucket of each histogram bin (the C fold's table)
_PROM_OF_BIN = np.ascontiguousarray(prom_bucket(np.arange(NBINS)), dtype=I64)
_FINE_OF_BIN = np.ascontiguousarray(fine_bucket(np.arange(NBINS)), dtype=I64)

__all__ = ["Aggregator", "CellSink", "FrameFacts", "KeySource", "NBINS", "BINS_PER_OCTAVE", "bin_index", "bin_value",
           "PROM_EXPONENTS", "OTHER", "STATE_FORMAT", "STATE_VERSION", "window_name", "GROUP_BY"]

#: (keypoints, device or -1 when the records' devices differ, largest end): what
#: ``batch_facts`` gives of a frame's records
FrameFacts = tuple[int, int, int]
#: ingest_frame's status when it wrote the frame (aclprof/protocol/_batchgroup.c); any other
#: says why it left the frame to the Python path with nothing written
_DONE = 0
_RECORD_SIZE = RECORD_DTYPE.itemsize


class CellSink(Protocol):
    """The detector's side of :meth:`Aggregator.ingest_frame` (its cell store): the key ->
    cell table and the buffer the C call writes a frame's cell rows into."""

    key_cell: np.ndarray
    cell_buf: np.ndarray
    cfill: int

    def fed(self, m: int, untracked: int) -> None:
        """``m`` rows were written into ``cell_buf`` from ``cfill`` on; ``untracked``
        records were of keys not judged."""

    def cell_room(self) -> np.ndarray:
        """``cell_buf`` merged, with room for at least the rows merged so far."""


#: one Prometheus series: labels (service, device, model, op_type[, op_name]), cumulative
#: buckets, count, sum
PromSeries = tuple[tuple[str, ...], np.ndarray, int, int]


class Aggregator:
    """Aggregates of op durations per key, since start and over sliding windows.

    Thread safety: ingestion, reset and snapshots run on the daemon's loop thread; the
    Prometheus scrape thread calls :meth:`prometheus_view`, so every method takes a lock
    (held for a few hundred microseconds per batch).
    """

    def __init__(self, max_keys: int = 10_000, windows: Sequence[int] = (10, 60),
                 clock: Callable[[], float] = time.time, *, max_keys_per_agent: int | None = None,
                 max_keys_per_uid: int | None = None) -> None:
        self.max_keys = max(1, int(max_keys))
        self.sliding = SlidingWindows(windows)
        self.windows = self.sliding.seconds
        self._clock = clock
        self._lock = threading.Lock()
        self.started_ts = clock()
        # keys survive a reset (the connections' caches stay valid); age_out renumbers them
        self.keys = KeyRegistry(self.max_keys, self._grow_stats, max_keys_per_agent, max_keys_per_uid)
        self.other_key = self.keys.other
        self.groupings = Groupings()  # used under the lock
        self.other_records = 0
        self._changes = 0   # ingestions and resets; save() remembers the count it wrote
        self._saved_changes = 0
        cap = self.keys.capacity
        # Prometheus series are never reset (RESET only restarts what `aclprof top` shows)
        self.prom = np.zeros((cap, NPROM), I64)
        self.prom_sum = np.zeros(cap, I64)
        #: per key: when a record last came (the aggregator's clock; loaded keys: the load)
        self.last_fed = np.zeros(cap, np.float64)
        #: keys aged out (age_out) and their since-start records left with them
        self.aged_out = 0
        self.aged_out_records = 0
        #: the Prometheus series /metrics renders are by op name too (the daemon sets it): an
        #: aged-out key's counts stay in a key of the series it fed, so no counter goes back
        self.prom_by_name = False
        #: called (loop thread, under the lock) with ``remap`` (old key -> new, -1 gone)
        #: after age_out renumbered the keys: the detector's key -> cell table
        self.on_renumber: Callable[[np.ndarray], None] | None = None
        #: the fine buckets (FINE_EIGHTHS, +Inf) per key: what the fleet view reads; never reset
        self.fine = np.zeros((cap, NFINE), I64)
        #: the fine series' own _sum per key: an aged-out key's counts move within the fine
        #: grouping (devices summed), which may keep a series the prom grouping does not
        self.fine_sum = np.zeros(cap, I64)
        self._zero_since_start()
        self._saved_changes = self._changes  # nothing to save until something happens
        #: called (loop thread) with each batch's (key * NBINS + bin, count) deltas: the detector
        self.observer: Callable[[np.ndarray, np.ndarray], None] | None = None
        #: what the observer does with them, done in C by :meth:`ingest_frame` instead (the
        #: detector sets both); with an observer and no sink every frame takes :meth:`ingest`.
        #: A weak reference: the detector owns its store (aclprofd.memory.array_bytes counts
        #: the arrays of what each table holds; the aggregator's must not count the store's)
        self._cells: weakref.ref[CellSink] | None = None
        #: frames :meth:`ingest_frame` left to the Python steps (new keys, refused records, a
        #: new second, ...): a test's and a profile's figure
        self.frames_python = 0

    @property
    def cells(self) -> CellSink | None:
        """The detector's cell store that :meth:`ingest_frame` feeds (None: none)."""
        return self._cells() if self._cells is not None else None

    @cells.setter
    def cells(self, sink: CellSink | None) -> None:
        self._cells = weakref.ref(sink) if sink is not None else None

    @property
    def nkeys(self) -> int:
        return len(self.keys)

    def _zero_since_start(self) -> None:
        cap = self.keys.capacity
        self.count = np.zeros(cap, I64)
        self.total = np.zeros(cap, I64)
        self.min = np.full(cap, BIG, I64)
        self.max = np.zeros(cap, I64)
        self.hist = np.zeros((cap, NBINS), I64)
        self.sliding.clear()
        self.reset_ts = self._clock()
        self._changes += 1  # other_records is a lifetime counter (Prometheus): kept

    def _grow_stats(self, old: int, cap: int) -> None:
        """The registry grew: the per-key arrays grow alongside (called under the lock)."""
        self.count = grow(self.count, old, cap)
        self.total = grow(self.total, old, cap)
        self.min = grow(self.min, old, cap, BIG)
        self.max = grow(self.max, old, cap)
        self.hist = grow(self.hist, old, (cap, NBINS))
        self.prom = grow(self.prom, old, (cap, NPROM))
        self.prom_sum = grow(self.prom_sum, old, cap)
        last = np.zeros(cap, np.float64)
        last[:old] = self.last_fed[:old]
        self.last_fed = last
        self.fine = grow(self.fine, old, (cap, NFINE))
        self.fine_sum = grow(self.fine_sum, old, cap)

    # ---- ingestion ----------------------------------------------------------------------
    def ingest(self, src: KeySource, records: np.ndarray, names: dict[int, str],
               now: float | None = None) -> None:
        """Add one batch (RECORD_DTYPE) from ``src``, leaving out step keypoint records
        (``wire.keypoint_mask``). Raises KeyError(id) if a record uses a name id that ``names``
        does not define (the caller treats it as a protocol error)."""
        # Step keypoint records are step boundaries, not ops: no aggregate of their own, and
        # their "duration" (a whole step) would swamp the op figures. One C pass groups the
        # others by (model/device, name/type), first appearance first (grouping by sorting
        # took ~15 numpy calls: ~150 us a batch whatever its size, issue 21).
        if records.dtype != RECORD_DTYPE:
            raise TypeError(f"Aggregator.ingest needs RECORD_DTYPE records, not {records.dtype}")
        n = len(records)
        if n == 0:
            return
        recs = records if records.flags.c_contiguous else np.ascontiguousarray(records)
        out = np.empty((8, n), I64)
        udm, ucode = out[0].view(np.uint64), out[1].view(np.uint64)
        ops, ngroups = _group(recs, BIN_UPPER_NS, udm, ucode, *out[2:])
        if ops == 0:
            return
        now = self._clock() if now is None else now
        gdm, gcode = udm[:ngroups], ucode[:ngroups]
        count, total, mn, mx = (row[:ngroups] for row in out[2:6])
        inv, bins = out[6, :ops], out[7, :ops]
        with self._lock:
            gkeys = self.keys.resolve(src, gdm, gcode, names)
            slot = self.sliding.slot_for(int(now))
            hcodes, hcount = self._fold_batch(gkeys, inv, bins, count, total, mn, mx, now)
            slot.add(gkeys, count, total, mn, mx, hcodes, hcount)
            self._changes += 1
        if self.observer is not None:
            self.observer(hcodes, hcount)

    def ingest_frame(self, src: KeySource, payload: Any, now: float, max_duration: int) -> FrameFacts | None:
        """An agent BATCH payload (whole RECORD_DTYPE records, in place) added as
        :meth:`ingest` adds it, in one C call (``_batchgroup.ingest_frame``), with the
        detector's cell rows (:attr:`cells`) and the records' facts, which it returns. None,
        with nothing changed, when the frame needs the Python steps: a payload of part
        records, a record ``Ingest.rejects`` refuses (``max_duration``), a pair not in
        ``src``'s key cache (new keys; a name id never defined), a key the detector has not
        looked up or an observer other than the detector. Those steps, :meth:`ingest` and its
        callees, stay the reference (tests/test_ingest_frame.py compares the two)."""
        sink = self.cells
        if sink is None and self.observer is not None:
            return None
        second = int(now)
        # room for the frame's rows before the call: a frame of n records writes at most n
        # groups, n histogram rows and n cell rows. The C call refuses a frame it has no room
        # for only after its records pass and cache lookup, and that redid the whole call for
        # ~20 % of the frames of 5,000 records (issue 21); now it refuses only a frame larger
        # than a whole (merged) buffer, which takes the Python steps
        n = memoryview(payload).nbytes // _RECORD_SIZE
        with self._lock:
            sliding = self.sliding
            slot = sliding.slots[-1] if sliding.slots else None
            if slot is not None and slot.second >= second:
                buf = slot.buf
                if buf is None or buf.cap - max(buf.gfill, buf.hfill) < n:
                    buf = sliding.buffer(slot)  # merged when it holds rows: empty now
            else:
                # a new second: the rows go to a buffer that the new slot takes once they are
                # written (a frame of keypoints only, or one left to ingest, rolls nothing here)
                slot = None
                buf = sliding.spare()
            kc: np.ndarray | None = None
            cbuf: np.ndarray | None = None
            cfill = 0
            if sink is not None:
                if sink.cell_buf.shape[1] - sink.cfill < n:
                    sink.cell_room()
                kc, cbuf, cfill = sink.key_cell, sink.cell_buf, sink.cfill
            (status, ops, groups, m, others, untracked, mc, keypoints, device,
             max_end) = _ingest_frame(payload, max_duration, BIN_UPPER_NS, src.hashes, src.dms, src.codes,
                                      src.keys, self.count, self.total, self.min, self.max, self.hist,
                                      self.prom, self.prom_sum, _PROM_OF_BIN, self.fine, self.fine_sum,
                                      _FINE_OF_BIN, self.last_fed, now, self.other_key, buf.groups, buf.gfill,
                                      buf.codes, buf.hfill, kc, cbuf, cfill, src.hash_index())
            if status != _DONE:
                self.frames_python += 1
                return None
            if ops:
                if slot is None:
                    sliding.slot_for(second).buf = buf  # the windows roll (as ingest rolls them)
                buf.gfill += groups
                buf.hfill += m
                self.other_records += others
                self._changes += 1
        if sink is not None and ops:
            sink.fed(mc, untracked)
        return keypoints, device, max_end

    def _fold_batch(self, gkeys: np.ndarray, inv: np.ndarray, bins: np.ndarray, count: np.ndarray,
                    total: np.ndarray, mn: np.ndarray, mx: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """A batch's groups (their keys, count, total, min, max) and ops (their group, their
        bin) into every since-start figure (called under the lock); returns the batch's
        (key * NBINS + bin) codes, ascending, and their counts (the slot's and the detector's
        input). One C call: counts, extremes, histogram, Prometheus and fine buckets, last fed
        and the "other" key's records were seven numpy and C calls and four temporaries a
        batch (issue 21). Duplicates in gkeys, only ever the "other" key, are added like
        ufunc.at adds them. tests/helpers/aggregate_reference.py keeps the steps it replaced."""
        codes = np.empty((2, len(inv)), I64)
        m, other = _fold_batch(gkeys, inv, bins, count, total, mn, mx, self.count, self.total, self.min, self.max,
                               self.hist, self.prom, self.prom_sum, _PROM_OF_BIN, self.fine, self.fine_sum,
                               _FINE_OF_BIN, self.last_fed, float(now), self.other_key, codes[0], codes[1])
        self.other_records += other
        return codes[0, :m].copy(), codes[1, :m].copy()

    def reset(self) -> None:
        """Start the aggregates again (since-start and windows; Prometheus series continue)."""
        with self._lock:
            self._zero_since_start()

    # ---- ageing out -----------------------------------------------------------------------
    def age_out(self, now: float, idle_s: float, live: Callable[[Any], bool],
                sources: Iterable[KeySource] = ()) -> int:
        """Forget the keys that nothing fed for ``idle_s`` (at least the longest window, so
        no slot holds them) and whose owner (:attr:`KeyRegistry.owner`) is not ``live``
        (None, a key loaded from disk, is not); the "other" key stays. Their since-start
        figures go (counted: :attr:`aged_out`, :attr:`aged_out_records`), their Prometheus
        counts move to a kept key of the same series (a series whose keys all went is no
        longer shown: it goes stale, its counters never go back), and the keys are
        renumbered in every table that holds key numbers: the arrays, the window slots, the
        ``sources``' caches (the live senders') and the detector's (:attr:`on_renumber`).
        Returns how many went."""
        cutoff = now - max(idle_s, float(self.windows[-1]))
        with self._lock:
            n = self.nkeys
            stale = np.flatnonzero(self.last_fed[:n] < cutoff)
            owners = self.keys.owner
            gone = [k for k in stale.tolist() if k != self.other_key and (owners[k] is None or not live(owners[k]))]
            if not gone:
                return 0
            drop = np.zeros(n, bool)
            drop[gone] = True
            keep = np.flatnonzero(~drop)
            self._fold_prom(keep, np.asarray(gone, I64))
            remap = np.full(n, -1, I64)
            remap[keep] = np.arange(len(keep), dtype=I64)
            self.aged_out += len(gone)
            self.aged_out_records += int(self.count[gone].sum())
            m = len(keep)
            for attr, fill in (("count", 0), ("total", 0), ("min", BIG), ("max", 0), ("prom_sum", 0),
                               ("fine_sum", 0)):
                new = np.full(self.keys.capacity, fill, I64)
                new[:m] = getattr(self, attr)[keep]
                setattr(self, attr, new)
            for attr in ("hist", "prom", "fine"):
                old = getattr(self, attr)
                new = np.zeros_like(old)
                new[:m] = old[keep]
                setattr(self, attr, new)
            last = np.zeros_like(self.last_fed)
            last[:m] = self.last_fed[keep]
            self.last_fed = last
            self.keys.compact(keep)
            self.other_key = self.keys.other
            self.sliding.renumber(remap)
            for src in sources:
                self.keys.recache(src, remap)
            self.groupings = Groupings()  # rebuilt at the next use (one step per key)
            self._changes += 1
            if self.on_renumber is not None:
                self.on_renumber(remap)
        return len(gone)

    def _fold_prom(self, keep: np.ndarray, gone: np.ndarray) -> None:
        """The Prometheus counts of the keys ``gone`` added to the first kept key of the
        series they fed (the grouping /metrics renders), if any (under the lock); the same for
        the fine histogram in its own grouping."""
        fine = "prom_fine_name" if self.prom_by_name else "prom_fine"
        for grouping, arrays in (("prom_name" if self.prom_by_name else "prom", (self.prom, self.prom_sum)),
                                 (fine, (self.fine, self.fine_sum))):
            of = self.groupings.get(self.keys, grouping).of
            n = len(of)
            first = np.full(int(of.max()) + 1 if n else 0, n, I64)
            np.minimum.at(first, of[keep], keep)
            to = first[of[gone]]
            moved = to < n
            for arr in arrays:
                np.add.at(arr, to[moved], arr[gone[moved]])

    # ---- persistence --------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """Something changed since the last :meth:`save` (or :meth:`load`)."""
        return self._changes != self._saved_changes

    def save(self, path: str) -> None:
        """Write the since-start aggregates (not the windows, not the Prometheus series) to
        ``path`` atomically (:func:`aclprofd.aggregate.npzfile.write_state`)."""
        changes, arrays, meta = self.save_state()
        write_state(path, arrays, meta)
        self.saved(changes)

    def saved(self, changes: int) -> None:
        """The state :meth:`save_state` took at ``changes`` is on disk (loop thread)."""
        self._saved_changes = changes

    def save_state(self) -> tuple[int, dict[str, np.ndarray], dict[str, Any]]:
        """``(changes, arrays, meta)``: copies of what :meth:`save` writes, taken under the
        lock, for :func:`write_state` on any thread (:class:`aclprofd.persist.Persistence`
        writes them off the loop thread); then :meth:`saved` with ``changes``."""
        with self._lock:
            changes = self._changes
            n = self.nkeys
            hk, hb = np.nonzero(self.hist[:n])
            arrays = {"count": self.count[:n].copy(), "total": self.total[:n].copy(),
                      "min": self.min[:n].copy(), "max": self.max[:n].copy(),
                      "hist_key": hk.astype(np.int32), "hist_bin": hb.astype(np.int16),
                      "hist_count": self.hist[:n][hk, hb]}
            meta = {"since_ts": self.reset_ts, "saved_ts": self._clock(), "other_records": self.other_records,
                    "keys": [self.keys.identity(k) for k in range(n)]}
        return changes, arrays, meta

    def load(self, path: str) -> dict[str, Any]:
        """Continue from a file :meth:`save` wrote (call before any ingestion). Keys beyond
        ``max_keys`` (the cap was lowered) join the "other" key. Raises FileNotFoundError,
        or ValueError/KeyError for a file of another format or version. Returns a summary
        for the log."""
        meta, a = read_state(path)
        keys = meta["keys"]
        with self._lock:
            # one Python step per saved key (at most max_keys + 1), at start only
            index = np.empty(len(keys), I64)
            for i, (host, pid, device, model, op_type, op_name, service, *label) in enumerate(keys):
                # version 1 files have no model label: "" (unknown)
                mlabel = label[0] if label and isinstance(label[0], str) else ""
                ident = (host, int(pid), int(device), int(model), op_type, op_name, mlabel)
                index[i] = self.keys.get(ident, service)
            self.last_fed[index] = self._clock()  # a loaded key ages from the start on
            np.add.at(self.count, index, a["count"])
            np.add.at(self.total, index, a["total"])
            np.minimum.at(self.min, index, a["min"])
            np.maximum.at(self.max, index, a["max"])
            np.add.at(self.hist, (index[a["hist_key"]], a["hist_bin"]), a["hist_count"])
            # records of keys folded into "other" now (not the saved "other" key itself)
            folded = (index == self.other_key) & (np.asarray([(*k[:6], "") != OTHER_IDENTITY for k in keys], bool)
                                                  if keys else np.zeros(0, bool))
            self.other_records = int(meta.get("other_records", 0)) + int(a["count"][folded].sum())
            self.reset_ts = float(meta["since_ts"])
            self._saved_changes = self._changes
        return {"keys": len(keys), "records": int(a["count"].sum()), "since_ts": self.reset_ts}

    # ---- queries ------------------------------------------------------------------------
    def snapshot(self, window: str = "all", group_by: str = "type", flt: Any = None,
                 now: float | None = None) -> dict[str, Any]:
        """The SNAPSHOT_REPLY payload (see daemon/PROTOCOL.md): rows grouped by ``group_by``
        (one of GROUP_BY), each with the identity fields constant in its group, and the
        ``summary`` of the window and filter."""
        now = self._clock() if now is None else now
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}, not {group_by!r}")
        with self._lock:
            n = self.nkeys
            if window == "all":
                keys = np.arange(n)
                count, total, mn, mx = self.count[:n], self.total[:n], self.min[:n], self.max[:n]
                hk, hb = np.nonzero(self.hist[:n])
                hc = self.hist[:n][hk, hb]
                span = now - self.reset_ts
            else:
                keys, count, total, mn, mx, hk, hb, hc = self.sliding.figures(window, now)
                span = min(self.sliding.seconds_of(window), now - self.reset_ts)
            mask = self.keys.mask(flt)
            grouping = self.groupings.get(self.keys, group_by)
            key_group, labels = grouping.of, grouping.labels
            rows = grouped_rows(key_group, labels, mask, keys, count, total, mn, mx, hk, hb, hc)
            fields = FIELDS[group_by]
            for r in rows:
                have = grouping.fields[r.pop("group")]
                r.update({f: have.get(f) for f in fields})
            sel = mask[keys] & (count > 0)
            summary = self._summary(keys[sel], count[sel], span)
        total_ns = int(sum(r["total_ns"] for r in rows))
        for r in rows:
            r["pct_time"] = round(100.0 * r["total_ns"] / total_ns, 3) if total_ns else 0.0
        return {"window": window, "group_by": group_by, "generated_ts": now, "total_ns": total_ns,
                "rows": rows, "summary": summary}

    def _summary(self, keys: np.ndarray, count: np.ndarray, span: float) -> dict[str, Any]:
        """SNAPSHOT's ``summary`` of the selected keys with records (called under the lock):
        records, records/s over the window (at least 1 s, at most since the last reset),
        and the processes, services and devices they came from ("other" has none)."""
        records = int(count.sum())
        own = keys[keys != self.other_key]
        procs = np.unique(self.groupings.get(self.keys, "process").of[own])
        svc = self.groupings.get(self.keys, "service")
        services = sum(1 for g in np.unique(svc.of[own]).tolist() if svc.fields[g].get("service") is not None)
        return {"records": records, "records_per_s": round(records / max(1.0, span), 3),
                "processes": len(procs), "services": services,
                "devices": np.unique(self.keys.device[own]).tolist()}

    def window_seconds(self, window: str) -> int:
        """The length of a named window ("10s", "1m", ...); ValueError for an unknown one."""
        return self.sliding.seconds_of(window)

    def window_names(self) -> list[str]:
        """The window names SNAPSHOT accepts besides "all"."""
        return self.sliding.names()

    def prometheus_view(self, by_name: bool = False) -> list[PromSeries]:
        """Per (service, device, model, op_type[, op_name]), ``model`` being the model label
        or else the model id as text: cumulative bucket counts (len(PROM_EXPONENTS) + 1, the
        last is +Inf), count and sum in ns. pid is no label: a process's keys join its
        service's series. Never reset."""
        return self.prometheus_series(by_name)[0]

    def prometheus_series(self, by_name: bool = False) -> tuple[list[PromSeries], list[tuple[int, str, int]]]:
        """:meth:`prometheus_view`, and beside each series its owner: ``(first key, host,
        pid)`` of the lowest key (the first registered) that feeds it, i.e. the agent process
        that created the series (the /metrics series budget charges it to that agent)."""
        return self._series("prom_name" if by_name else "prom", "prom")

    def prometheus_fine_series(self, by_name: bool = False) -> tuple[list[PromSeries], list[tuple[int, str, int]]]:
        """The fine histogram (FINE_EIGHTHS buckets, then +Inf) per (service, model, op_type[,
        op_name]): the devices of a host summed, as the fleet view sums them (series budget:
        daemon/README.md "Fine buckets"); with owners as :meth:`prometheus_series`."""
        return self._series("prom_fine_name" if by_name else "prom_fine", "fine")

    def _series(self, grouping_name: str, which: str) -> tuple[list[PromSeries], list[tuple[int, str, int]]]:
        with self._lock:
            n = self.nkeys
            grouping = self.groupings.get(self.keys, grouping_name)
            key_group = grouping.of[:n]
            m = len(grouping.idents)
            per_key = self.prom if which == "prom" else self.fine
            buckets = np.zeros((m, per_key.shape[1]), I64)
            np.add.at(buckets, key_group, per_key[:n])
            sums = np.zeros(m, I64)
            np.add.at(sums, key_group, (self.prom_sum if which == "prom" else self.fine_sum)[:n])
            idents = cast("list[tuple[str, ...]]", list(grouping.idents))
            first = np.full(m, n, I64)
            np.minimum.at(first, key_group, np.arange(n, dtype=I64))
            hosts, pids = self.keys.host, self.keys.pid
            counts = buckets.sum(axis=1)
            live = np.flatnonzero(counts).tolist()
            owners = [(k, hosts[k], int(pids[k])) for k in first[live].tolist()]
        cum = np.cumsum(buckets, axis=1)
        return [(idents[g], cum[g], int(counts[g]), int(sums[g])) for g in live], owners
