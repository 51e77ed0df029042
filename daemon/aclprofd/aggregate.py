"""Per-operator aggregates: counts, totals, extremes and latency quantiles, vectorised.

A *key* is ``(host, pid, device, model, op_type, op_name)``. For every key the aggregator
keeps, since start (or since the last :meth:`Aggregator.reset`): count, total, min, max and
a fixed log-scale histogram of durations; and, for the sliding windows (10 s and 1 min by
default), per-second *slots* holding the same figures sparsely (only the keys and histogram
bins that saw records in that second). Records are attributed to the second in which the
daemon received them (agents' clocks are not comparable to the daemon's).

Histogram: bin 0 holds durations of 0; bin ``b >= 1`` holds ``[2**((b-1)/8), 2**(b/8))`` ns,
8 bins per power of two, up to 2**40 ns (~18 min; longer durations land in the last bin).
A quantile is reported as the bin's geometric midpoint, clamped to the group's exact
``[min, max]``, so its relative error is at most ``2**(1/16) - 1`` = 4.4 %.

Memory is bounded: at most ``max_keys`` keys (further keys share one "other" key whose
records are counted), dense since-start arrays of ``max_keys x 322`` int64 (~26 MB at the
default 10 000 keys), and per-second slots holding 36 bytes per key and 8 bytes per
(key, bin) pair that saw records in that second (for 10 000 busy keys of ~20 bins each,
~11 MB per slot at most, x 60 slots for the 1-minute window).

Ingestion never loops over records in Python: a batch is grouped with ``np.unique`` and
``np.bincount``; the only Python loop is over key combinations a connection has never sent
before (typically once per op for the connection's lifetime).

Persistence: :meth:`Aggregator.save` writes the since-start figures (not the windows, not
the Prometheus series) to an ``.npz`` file atomically, :meth:`Aggregator.load` continues
from one (format ``STATE_VERSION``, documented in daemon/README.md).
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from aclprof.protocol.wire import FLAG_KEYPOINT

__all__ = ["Aggregator", "KeySource", "NBINS", "BINS_PER_OCTAVE", "bin_index", "bin_value",
           "PROM_EXPONENTS", "OTHER", "STATE_FORMAT", "STATE_VERSION"]

BINS_PER_OCTAVE = 8
_MAX_EXP = 40
NBINS = BINS_PER_OCTAVE * _MAX_EXP + 2  # bin 0 (zero) + 8 per octave up to 2**40 ns + overflow
#: Prometheus buckets are whole powers of two of nanoseconds, so that they fall exactly on
#: histogram bin edges: le = 2**k ns for k in PROM_EXPONENTS (128 ns .. ~17 s), then +Inf.
PROM_EXPONENTS = tuple(range(7, 35))
_NPB = len(PROM_EXPONENTS) + 1
OTHER = "(other)"
STATE_FORMAT = "aclprofd-aggregates"
STATE_VERSION = 1

_I64 = np.int64
_BIG = np.iinfo(np.int64).max


def bin_index(durations: np.ndarray) -> np.ndarray:
    """Histogram bin of each duration (ns), vectorised."""
    d = durations.astype(np.float64)
    with np.errstate(divide="ignore"):
        b = np.floor(np.log2(d) * BINS_PER_OCTAVE) + 1
    b[d < 1] = 0
    np.clip(b, 0, NBINS - 1, out=b)
    return b.astype(_I64)


def bin_value(bins: np.ndarray) -> np.ndarray:
    """Representative duration (ns) of each bin: its geometric midpoint (0 for bin 0)."""
    bins = np.asarray(bins, dtype=np.float64)
    out = np.exp2((bins - 0.5) / BINS_PER_OCTAVE)
    out[bins <= 0] = 0.0
    return out


@dataclass
class KeySource:
    """The identity of one sender (an agent connection) that keys are built from."""

    host: str
    pid: int
    service: str | None
    #: (device, model) -> (sorted codes, global key per code); code = name << 32 | type
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class _Slot:
    """One second of records, sparse: per key (count, total, min, max) and per (key, bin) counts."""

    __slots__ = ("second", "keys", "count", "total", "min", "max", "codes", "hcount", "_parts")

    def __init__(self, second: int):
        self.second = second
        self._parts: list[tuple[np.ndarray, ...]] = []
        self.keys = self.count = self.total = self.min = self.max = np.zeros(0, _I64)
        self.codes = self.hcount = np.zeros(0, _I64)

    def add(self, keys, count, total, mn, mx, codes, hcount) -> None:
        self._parts.append((keys, count, total, mn, mx, codes, hcount))

    def compact(self) -> "_Slot":
        """Merge the parts added since the last compaction (duplicate keys combined)."""
        if not self._parts:
            return self
        parts = self._parts
        self._parts = []
        cols = [np.concatenate([getattr(self, n)] + [p[i] for p in parts])
                for i, n in enumerate(("keys", "count", "total", "min", "max", "codes", "hcount"))]
        self.keys, self.count, self.total, self.min, self.max = _group_stats(*cols[:5])
        codes, hcount = _group_sum(cols[5], cols[6])
        # kept for the longest window (60 of them): 4-byte codes and counts when they fit
        self.codes = _narrow(codes)
        self.hcount = _narrow(hcount)
        self.keys = _narrow(self.keys)
        return self


def _narrow(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int32) if a.size == 0 or (a.max() < 2**31 and a.min() >= 0) else a


def _group_sum(codes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, inv = np.unique(codes, return_inverse=True)
    return u, np.bincount(inv, weights=counts, minlength=len(u)).astype(_I64)


def _group_stats(keys, count, total, mn, mx):
    """Combine rows with equal keys: sums of count/total, min of min, max of max."""
    if len(keys) == 0:
        return keys, count, total, mn, mx
    order = np.argsort(keys, kind="stable")
    keys, count, total, mn, mx = keys[order], count[order], total[order], mn[order], mx[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return (keys[starts], np.add.reduceat(count, starts), np.add.reduceat(total, starts),
            np.minimum.reduceat(mn, starts), np.maximum.reduceat(mx, starts))


class Aggregator:
    """Aggregates of op durations per key, since start and over sliding windows.

    Thread safety: ingestion, reset and snapshots run on the daemon's loop thread; the
    Prometheus scrape thread calls :meth:`prometheus_view`, so every method takes a lock
    (held for a few hundred microseconds per batch).
    """

    def __init__(self, max_keys: int = 10_000, windows: Sequence[int] = (10, 60),
                 clock: Callable[[], float] = time.time):
        self.max_keys = max(1, int(max_keys))
        self.windows = tuple(sorted(int(w) for w in windows))
        self._clock = clock
        self._lock = threading.Lock()
        self.started_ts = clock()
        # key registry (never shrinks; keys survive a reset so connection caches stay valid)
        self._key_index: dict[tuple, int] = {}
        self.key_host: list[str] = []
        self.key_service: list[str | None] = []
        self.key_type: list[str] = []
        self.key_name: list[str] = []
        self._cap = 0
        self.key_pid = np.zeros(0, _I64)
        self.key_device = np.zeros(0, _I64)
        self.key_model = np.zeros(0, _I64)
        self._alloc_stats(min(64, self.max_keys + 1))
        self.other_key = self._new_key(_OTHER_IDENTITY, None)
        self.other_records = 0
        self._changes = 0   # ingestions and resets; save() remembers the count it wrote
        self._saved_changes = 0
        self.reset()
        self._saved_changes = self._changes  # nothing to save until something happens

    # ---- keys ---------------------------------------------------------------------------
    def _alloc_stats(self, cap: int) -> None:
        old = self._cap
        def grow(arr, shape, fill=0):
            new = np.full(shape, fill, dtype=_I64)
            if old:
                new[:old] = arr[:old]
            return new
        self.key_pid = grow(self.key_pid, cap)
        self.key_device = grow(self.key_device, cap)
        self.key_model = grow(self.key_model, cap)
        if old:
            self.count = grow(self.count, cap)
            self.total = grow(self.total, cap)
            self.min = grow(self.min, cap, _BIG)
            self.max = grow(self.max, cap)
            self.hist = grow(self.hist, (cap, NBINS))
            self.prom = grow(self.prom, (cap, _NPB))
            self.prom_sum = grow(self.prom_sum, cap)
        self._cap = cap

    def _new_key(self, key: tuple, service: str | None) -> int:
        idx = len(self.key_host)
        if idx >= self._cap:
            self._alloc_stats(min(max(64, 2 * self._cap), self.max_keys + 1))
        host, pid, device, model, op_type, op_name = key
        self.key_host.append(host)
        self.key_service.append(service)
        self.key_type.append(op_type)
        self.key_name.append(op_name)
        self.key_pid[idx], self.key_device[idx], self.key_model[idx] = pid, device, model
        self._key_index[key] = idx
        return idx

    @property
    def nkeys(self) -> int:
        return len(self.key_host)

    def _resolve(self, src: KeySource, device: int, model: int, codes: np.ndarray,
                 names: dict[int, str]) -> np.ndarray:
        """Global key of each (name << 32 | type) code of one (device, model); new codes
        go through the registry (the only per-key Python loop)."""
        dm = (model << 32) | device
        known_codes, known_keys = src.cache.get(dm, (np.zeros(0, np.uint64), np.zeros(0, _I64)))
        pos = np.searchsorted(known_codes, codes)
        pos_c = np.minimum(pos, max(len(known_codes) - 1, 0))
        hit = (pos < len(known_codes)) & (known_codes[pos_c] == codes) if len(known_codes) else np.zeros(len(codes), bool)
        out = np.empty(len(codes), _I64)
        out[hit] = known_keys[pos_c[hit]]
        miss = np.flatnonzero(~hit)
        if len(miss):
            new_keys = np.empty(len(miss), _I64)
            for j, code in enumerate(codes[miss].tolist()):
                name = names.get(code >> 32)
                op_type = names.get(code & 0xFFFFFFFF)
                if name is None or op_type is None:
                    raise KeyError(code >> 32 if name is None else code & 0xFFFFFFFF)
                key = (src.host, src.pid, device, model, op_type, name)
                idx = self._key_index.get(key)
                if idx is None:
                    idx = self._new_key(key, src.service) if self.nkeys <= self.max_keys else self.other_key
                new_keys[j] = idx
            out[miss] = new_keys
            all_codes = np.concatenate([known_codes, codes[miss]])
            all_keys = np.concatenate([known_keys, new_keys])
            order = np.argsort(all_codes)
            src.cache[dm] = (all_codes[order], all_keys[order])
        return out

    # ---- ingestion ----------------------------------------------------------------------
    def ingest(self, src: KeySource, records: np.ndarray, names: dict[int, str],
               now: float | None = None) -> None:
        """Add one batch (RECORD_DTYPE) from ``src``, leaving out step keypoint records
        (``FLAG_KEYPOINT``). Raises KeyError(id) if a record uses a name id that ``names``
        does not define (the caller treats it as a protocol error)."""
        # Step keypoint records are step boundaries, not ops: no aggregate of their own, and
        # their "duration" (a whole step) would swamp the op figures.
        keypoint = (records["flag"] & np.uint32(FLAG_KEYPOINT)) != 0
        if keypoint.any():
            records = records[~keypoint]
        if len(records) == 0:
            return
        now = self._clock() if now is None else now
        dev = records["device_id"]
        mod = records["model_id"]
        if (dev == dev[0]).all() and (mod == mod[0]).all():
            groups = [(int(dev[0]), int(mod[0]), records)]
        else:
            dm = (mod.astype(np.uint64) << np.uint64(32)) | dev.astype(np.uint64)
            u, inv = np.unique(dm, return_inverse=True)
            groups = [(int(c) & 0xFFFFFFFF, int(c) >> 32, records[inv == i]) for i, c in enumerate(u.tolist())]
        with self._lock:
            slot = self._slot_for(int(now))
            for device, model, recs in groups:
                self._ingest_group(src, device, model, recs, names, slot)
            self._changes += 1

    def _ingest_group(self, src, device, model, recs, names, slot) -> None:
        codes = (recs["op_name"].astype(np.uint64) << np.uint64(32)) | recs["op_type"].astype(np.uint64)
        ucodes, inv = np.unique(codes, return_inverse=True)
        gkeys = self._resolve(src, device, model, ucodes, names)
        dur = recs["duration"].astype(_I64)
        n = len(ucodes)
        count = np.bincount(inv, minlength=n).astype(_I64)
        total = np.bincount(inv, weights=dur, minlength=n).astype(_I64)
        order = np.argsort(inv, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0])
        sd = dur[order]
        mn = np.minimum.reduceat(sd, starts)
        mx = np.maximum.reduceat(sd, starts)
        bins = bin_index(dur)
        hcodes, hcount = np.unique(gkeys[inv] * NBINS + bins, return_counts=True)
        hcount = hcount.astype(_I64)
        # since start (duplicates in gkeys only for the "other" key: ufunc.at handles them)
        np.add.at(self.count, gkeys, count)
        np.add.at(self.total, gkeys, total)
        np.minimum.at(self.min, gkeys, mn)
        np.maximum.at(self.max, gkeys, mx)
        np.add.at(self.hist.reshape(-1), hcodes, hcount)
        # Prometheus (never reset): bucket = smallest k with upper bin edge <= 2**k
        pk, pb = np.divmod(hcodes, NBINS)
        pbucket = np.clip(-(-pb // BINS_PER_OCTAVE) - PROM_EXPONENTS[0], 0, _NPB - 1)
        np.add.at(self.prom, (pk, pbucket), hcount)
        np.add.at(self.prom_sum, gkeys, total)
        if (gkeys == self.other_key).any():
            self.other_records += int(count[gkeys == self.other_key].sum())
        slot.add(gkeys, count, total, mn, mx, hcodes, hcount)

    def _slot_for(self, second: int) -> _Slot:
        slots = self._slots
        if not slots or slots[-1].second < second:
            if slots:
                slots[-1].compact()
            slots.append(_Slot(second))
            horizon = second - self.windows[-1]
            while slots and slots[0].second <= horizon:
                slots.popleft()
            return slots[-1]
        if slots[-1].second == second:
            return slots[-1]
        # the wall clock stepped back: keep adding to the newest slot
        return slots[-1]

    def reset(self) -> None:
        """Start the aggregates again (since-start and windows; Prometheus series continue)."""
        with getattr(self, "_lock", threading.Lock()):
            cap = self._cap
            self.count = np.zeros(cap, _I64)
            self.total = np.zeros(cap, _I64)
            self.min = np.full(cap, _BIG, _I64)
            self.max = np.zeros(cap, _I64)
            self.hist = np.zeros((cap, NBINS), _I64)
            if not hasattr(self, "prom"):
                self.prom = np.zeros((cap, _NPB), _I64)
                self.prom_sum = np.zeros(cap, _I64)
            self._slots: collections.deque[_Slot] = collections.deque()
            self.reset_ts = self._clock()
            self._changes += 1  # other_records is a lifetime counter (Prometheus): kept

    # ---- persistence --------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """Something changed since the last :meth:`save` (or :meth:`load`)."""
        return self._changes != self._saved_changes

    def save(self, path: str) -> None:
        """Write the since-start aggregates to ``path`` atomically: a temporary file in the
        same directory, fsync, rename, fsync of the directory. A reader (or a daemon
        restarted after ``kill -9``) sees the previous file or this one, never a mix."""
        with self._lock:
            changes = self._changes
            n = self.nkeys
            hk, hb = np.nonzero(self.hist[:n])
            arrays = {"count": self.count[:n].copy(), "total": self.total[:n].copy(),
                      "min": self.min[:n].copy(), "max": self.max[:n].copy(),
                      "hist_key": hk.astype(np.int32), "hist_bin": hb.astype(np.int16),
                      "hist_count": self.hist[:n][hk, hb]}
            keys = [[self.key_host[k], int(self.key_pid[k]), int(self.key_device[k]), int(self.key_model[k]),
                     self.key_type[k], self.key_name[k], self.key_service[k]] for k in range(n)]
            meta = {"format": STATE_FORMAT, "version": STATE_VERSION, "nbins": NBINS,
                    "bins_per_octave": BINS_PER_OCTAVE, "since_ts": self.reset_ts, "saved_ts": self._clock(),
                    "other_records": self.other_records, "keys": keys}
        arrays["meta"] = np.frombuffer(json.dumps(meta, separators=(",", ":")).encode(), np.uint8)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_dir(os.path.dirname(path) or ".")
        self._saved_changes = changes

    def load(self, path: str) -> dict[str, Any]:
        """Continue from a file :meth:`save` wrote (call before any ingestion). Keys beyond
        ``max_keys`` (the cap was lowered) join the "other" key. Raises FileNotFoundError,
        or ValueError/KeyError for a file of another format or version. Returns a summary
        for the log."""
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            if meta.get("format") != STATE_FORMAT or meta.get("version") != STATE_VERSION:
                raise ValueError(f"not {STATE_FORMAT} version {STATE_VERSION}")
            if meta.get("nbins") != NBINS or meta.get("bins_per_octave") != BINS_PER_OCTAVE:
                raise ValueError("histogram layout differs")
            a = {k: np.asarray(z[k], dtype=_I64) for k in ("count", "total", "min", "max",
                                                           "hist_key", "hist_bin", "hist_count")}
        keys = meta["keys"]
        if not all(len(a[k]) == len(keys) for k in ("count", "total", "min", "max")):
            raise ValueError("key arrays and key list differ in length")
        with self._lock:
            # one Python step per saved key (at most max_keys + 1), at start only
            index = np.empty(len(keys), _I64)
            for i, (host, pid, device, model, op_type, op_name, service) in enumerate(keys):
                key = (host, int(pid), int(device), int(model), op_type, op_name)
                idx = self._key_index.get(key)
                if idx is None:
                    idx = self._new_key(key, service) if self.nkeys <= self.max_keys else self.other_key
                index[i] = idx
            np.add.at(self.count, index, a["count"])
            np.add.at(self.total, index, a["total"])
            np.minimum.at(self.min, index, a["min"])
            np.maximum.at(self.max, index, a["max"])
            np.add.at(self.hist, (index[a["hist_key"]], a["hist_bin"]), a["hist_count"])
            folded = (index == self.other_key) & (np.asarray([tuple(k[:6]) != _OTHER_IDENTITY for k in keys], bool)
                                                  if keys else np.zeros(0, bool))
            self.other_records = int(meta.get("other_records", 0)) + int(a["count"][folded].sum())
            self.reset_ts = float(meta["since_ts"])
            self._saved_changes = self._changes
        return {"keys": len(keys), "records": int(a["count"].sum()), "since_ts": self.reset_ts}

    # ---- queries ------------------------------------------------------------------------
    def key_mask(self, flt: Any) -> np.ndarray:
        """Keys matching a filter (``aclprofd.filters.Filter``; min_duration_ns is ignored:
        aggregates do not keep single records)."""
        n = self.nkeys
        mask = np.ones(n, bool)
        if flt is None:
            return mask
        if flt.model is not None:
            mask &= self.key_model[:n] == flt.model
        if flt.pid is not None:
            mask &= self.key_pid[:n] == flt.pid
        for attr, values in (("host", self.key_host), ("service", self.key_service)):
            want = getattr(flt, attr)
            if want is not None:
                mask &= np.fromiter((v == want for v in values), bool, n)
        for rx, values in ((flt.type_re, self.key_type), (flt.name_re, self.key_name)):
            if rx is not None:
                cache: dict[str, bool] = {}
                mask &= np.fromiter((cache.setdefault(v, bool(rx.search(v))) if v not in cache else cache[v]
                                     for v in values), bool, n)
        return mask

    def snapshot(self, window: str = "all", group_by: str = "type", flt: Any = None,
                 now: float | None = None) -> dict[str, Any]:
        """The SNAPSHOT_REPLY payload (daemon/PROTOCOL.md)."""
        now = self._clock() if now is None else now
        if group_by not in ("type", "name"):
            raise ValueError(f"group_by must be 'type' or 'name', not {group_by!r}")
        with self._lock:
            n = self.nkeys
            if window == "all":
                keys = np.arange(n)
                count, total, mn, mx = self.count[:n], self.total[:n], self.min[:n], self.max[:n]
                hk, hb = np.nonzero(self.hist[:n])
                hc = self.hist[:n][hk, hb]
            else:
                seconds = self.window_seconds(window)
                sel = [s.compact() for s in self._slots if s.second > int(now) - seconds]
                if sel:
                    keys, count, total, mn, mx = _group_stats(*(np.concatenate([getattr(s, a) for s in sel])
                                                                 for a in ("keys", "count", "total", "min", "max")))
                    codes, hc = _group_sum(np.concatenate([s.codes for s in sel]),
                                           np.concatenate([s.hcount for s in sel]))
                    hk, hb = np.divmod(codes, NBINS)
                else:
                    keys = count = total = mn = mx = hk = hb = hc = np.zeros(0, _I64)
            mask = self.key_mask(flt)
            labels = self.key_type if group_by == "type" else self.key_name
            names = [labels[k] for k in range(n)]
        rows = _grouped_rows(names, mask, keys, count, total, mn, mx, hk, hb, hc)
        total_ns = int(sum(r["total_ns"] for r in rows))
        for r in rows:
            r["pct_time"] = round(100.0 * r["total_ns"] / total_ns, 3) if total_ns else 0.0
        return {"window": window, "group_by": group_by, "generated_ts": now, "total_ns": total_ns,
                "rows": rows}

    def window_seconds(self, window: str) -> int:
        for w in self.windows:
            if window == window_name(w):
                return w
        raise ValueError(f"unknown window {window!r} (one of {', '.join(self.window_names())}, all)")

    def window_names(self) -> list[str]:
        return [window_name(w) for w in self.windows]

    def prometheus_view(self, by_name: bool = False) -> list[tuple[tuple, np.ndarray, int, int]]:
        """Per (device, model, op_type[, op_name]): cumulative bucket counts (len(PROM_EXPONENTS)
        + 1, the last is +Inf), count and sum in ns. Never reset."""
        with self._lock:
            n = self.nkeys
            prom = self.prom[:n].copy()
            psum = self.prom_sum[:n].copy()
            labels = [(str(self.key_device[k]), str(self.key_model[k]), self.key_type[k])
                      + ((self.key_name[k],) if by_name else ()) for k in range(n)]
        groups: dict[tuple, list[int]] = {}
        for k, lab in enumerate(labels):
            groups.setdefault(lab, []).append(k)
        out = []
        for lab, ks in groups.items():
            b = prom[ks].sum(axis=0)
            if b.sum() == 0:
                continue
            out.append((lab, np.cumsum(b), int(b.sum()), int(psum[ks].sum())))
        return out


_OTHER_IDENTITY = ("", 0, -1, -1, OTHER, OTHER)


def _fsync_dir(directory: str) -> None:
    """Make a rename durable (best effort: some file systems refuse a directory fsync)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def window_name(seconds: int) -> str:
    """10 -> "10s", 60 -> "1m", 3600 -> "1h" (the names SNAPSHOT accepts)."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


_QS = (0.5, 0.9, 0.99)


def _grouped_rows(names, mask, keys, count, total, mn, mx, hk, hb, hc) -> list[dict[str, Any]]:
    """Rows of a snapshot: stats per group label over the selected keys."""
    if len(keys) == 0:
        return []
    labels, key_group = np.unique(np.asarray(names, dtype=object), return_inverse=True) if names else (np.zeros(0), np.zeros(0, _I64))
    key_group = np.asarray(key_group, dtype=_I64)
    sel = mask[keys] & (count > 0)
    keys, count, total, mn, mx = keys[sel], count[sel], total[sel], mn[sel], mx[sel]
    if len(keys) == 0:
        return []
    g = key_group[keys]
    gs, ginv = np.unique(g, return_inverse=True)
    m = len(gs)
    gcount = np.bincount(ginv, weights=count, minlength=m).astype(_I64)
    gtotal = np.bincount(ginv, weights=total, minlength=m).astype(_I64)
    gmin = np.full(m, _BIG, _I64)
    np.minimum.at(gmin, ginv, mn)
    gmax = np.zeros(m, _I64)
    np.maximum.at(gmax, ginv, mx)
    # histogram per group: rows of keys outside the selection are dropped
    hsel = mask[hk]
    hgrp = np.searchsorted(gs, key_group[hk[hsel]])
    valid = (hgrp < m)
    valid[valid] = gs[hgrp[valid]] == key_group[hk[hsel]][valid]
    dense = np.zeros((m, NBINS), _I64)
    np.add.at(dense, (hgrp[valid], hb[hsel][valid]), hc[hsel][valid])
    cum = np.cumsum(dense, axis=1)
    hist_total = cum[:, -1]
    quant = {}
    for q in _QS:
        target = np.maximum(np.ceil(q * hist_total), 1)
        b = (cum >= target[:, None]).argmax(axis=1)
        v = np.clip(np.rint(bin_value(b)).astype(_I64), gmin, gmax)
        quant[q] = v
    rows = []
    for i in np.argsort(-gtotal, kind="stable").tolist():
        c = int(gcount[i])
        rows.append({"key": str(labels[gs[i]]), "count": c, "total_ns": int(gtotal[i]),
                     "mean_ns": int(round(gtotal[i] / c)) if c else 0,
                     "min_ns": int(gmin[i]), "max_ns": int(gmax[i]),
                     "p50_ns": int(quant[0.5][i]), "p90_ns": int(quant[0.9][i]),
                     "p99_ns": int(quant[0.99][i])})
    return rows
