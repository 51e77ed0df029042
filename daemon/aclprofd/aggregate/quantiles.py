"""The aggregates' log-scale histogram and the quantiles read from it.

Bin 0 holds durations of 0; bin ``b >= 1`` holds ``(2**((b-1)/8), 2**(b/8)]`` ns (upper-inclusive,
as Prometheus's ``le``; bin 1 also holds 1 ns), 8 bins per power of two, up to 2**40 ns (~18 min;
longer durations land in the last bin). A quantile
is reported as the bin's geometric midpoint, clamped to the group's exact ``[min, max]``,
so its relative error is at most ``2**(1/16) - 1`` = 4.4 %.

Also the vectorised grouping steps the aggregator and the sliding windows share: rows of
equal keys combined with ``np.unique``/``reduceat``, never a Python loop over records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aclprof.protocol._batchgroup import merge_stats as _merge_stats
from aclprof.protocol._batchgroup import sum_codes as _sum_codes
from aclprof.protocol.quantshift import BINS_PER_OCTAVE, NBINS, bin_index

__all__ = ["BINS_PER_OCTAVE", "NBINS", "PROM_EXPONENTS", "NPROM", "FINE_EIGHTHS", "NFINE", "I64", "BIG",
           "bin_index", "bin_value", "prom_bucket", "fine_bucket", "group_stats", "group_sum", "narrow", "grouped_rows"]

# The histogram's layout (bin 0 for zero, 8 bins per octave up to 2**40 ns, overflow) is
# defined once, in aclprof.protocol.quantshift: saved baselines and `aclprof diff` read it too.
#: Prometheus buckets are whole powers of two of nanoseconds, so that they fall exactly on
#: histogram bin edges: le = 2**k ns for k in PROM_EXPONENTS (128 ns .. ~17 s), then +Inf. Bins
#: are upper-inclusive like ``le``, so bin 8k (top 2**k) is the last one in bucket ``le=2**k``.
PROM_EXPONENTS = tuple(range(7, 35))
NPROM = len(PROM_EXPONENTS) + 1  # Prometheus buckets per key, +Inf included
#: The fine Prometheus histogram (what the fleet view, the recording rules and the dashboards'
#: quantiles read): one bucket per histogram bin over the same range, le = 2**(j/8) ns for j in
#: FINE_EIGHTHS (128 ns .. ~17 s, 217 edges), then +Inf. Edges are the bins' own, so each count
#: is exact, and histogram_quantile interpolates inside a bucket 9 % wide instead of 100 %
#: (daemon/README.md "Fine buckets": p99 within 5 % on lognormal and bimodal streams).
FINE_EIGHTHS = tuple(range(PROM_EXPONENTS[0] * BINS_PER_OCTAVE, PROM_EXPONENTS[-1] * BINS_PER_OCTAVE + 1))
NFINE = len(FINE_EIGHTHS) + 1  # fine buckets per series, +Inf included

I64 = np.int64
BIG = np.iinfo(np.int64).max  # the "no minimum yet" of an empty key

_QS = (0.5, 0.9, 0.99)


def bin_value(bins: np.ndarray) -> np.ndarray:
    """Representative duration (ns) of each bin: its geometric midpoint (0 for bin 0)."""
    bins = np.asarray(bins, dtype=np.float64)
    out = np.exp2((bins - 0.5) / BINS_PER_OCTAVE)
    out[bins <= 0] = 0.0
    return out


def prom_bucket(bins: np.ndarray) -> np.ndarray:
    """The Prometheus bucket of each histogram bin: the smallest k with upper bin edge <= 2**k."""
    return np.clip(-(-bins // BINS_PER_OCTAVE) - PROM_EXPONENTS[0], 0, NPROM - 1)


def fine_bucket(bins: np.ndarray) -> np.ndarray:
    """The fine Prometheus bucket of each histogram bin: bin b (upper edge 2**(b/8) ns) is in
    bucket ``le = 2**(b/8)``; bins below the first edge in the first bucket, above the last in +Inf."""
    return np.clip(np.asarray(bins) - FINE_EIGHTHS[0], 0, NFINE - 1)


def narrow(a: np.ndarray) -> np.ndarray:
    """4-byte integers when the values fit (slots are kept for the longest window: 60 of them)."""
    return a.astype(np.int32) if a.size == 0 or (a.max() < 2**31 and a.min() >= 0) else a


def group_sum(codes: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Sum the counts of equal codes (``counts`` None: each counts 1): (sorted unique codes,
    their int64 sums). One hash pass in C and a radix sort of the distinct codes only
    (``aclprof.protocol._batchgroup.sum_codes``): np.unique's argsort of every row made the
    detector's and the windows' merges ~2.5 ms of loop CPU per 37 k rows (issue 21)."""
    codes = np.ascontiguousarray(codes, dtype=I64)
    if counts is not None:
        counts = np.ascontiguousarray(counts, dtype=I64)
    out = np.empty((2, len(codes)), I64)
    m = _sum_codes(codes, counts, out[0], out[1])
    return out[0, :m].copy(), out[1, :m].copy()


def group_stats(keys: np.ndarray, count: np.ndarray, total: np.ndarray, mn: np.ndarray,
                mx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Combine rows with equal keys: sums of count/total, min of min, max of max; the keys
    ascending, each output of its input's dtype. One C call (a hash pass and a radix sort of
    the distinct keys: ``aclprof.protocol._batchgroup.merge_stats``): the argsort, gathers and
    four ``reduceat`` it replaced were ~3 % of the loop's CPU at 100 k ops/s, a window slot
    merging its batches (issue 21); tests/test_merge_stats.py keeps them for the identity."""
    if len(keys) == 0:
        return keys, count, total, mn, mx
    cols = (keys, count, total, mn, mx)
    out = np.empty((5, len(keys)), I64)
    m = _merge_stats(*(np.ascontiguousarray(c, dtype=I64) for c in cols), *out)
    # copies of m values: a view would keep all 5 x n rows alive (a window slot keeps them a minute)
    k, c, t, lo, hi = (row[:m].astype(col.dtype) for row, col in zip(out, cols))
    return k, c, t, lo, hi


def grouped_rows(key_group: np.ndarray, labels: Sequence[str], mask: np.ndarray, keys: np.ndarray,
                 count: np.ndarray, total: np.ndarray, mn: np.ndarray, mx: np.ndarray, hk: np.ndarray,
                 hb: np.ndarray, hc: np.ndarray) -> list[dict[str, Any]]:
    """Rows of a snapshot: stats and quantiles per group over the selected keys.

    ``key_group[k]`` is key k's group number, ``labels[g]`` group g's label (the row's
    ``key``), ``mask[k]`` whether the filter selects key k; ``keys`` with ``count``..``mx``
    are per-key figures, ``(hk, hb, hc)`` sparse histogram counts (key, bin, count). Each
    row also has ``group``: its group number. Rows are sorted by total time, largest first.
    """
    if len(keys) == 0:
        return []
    key_group = np.asarray(key_group, dtype=I64)
    sel = mask[keys] & (count > 0)
    keys, count, total, mn, mx = keys[sel], count[sel], total[sel], mn[sel], mx[sel]
    if len(keys) == 0:
        return []
    g = key_group[keys]
    gs, ginv = np.unique(g, return_inverse=True)
    m = len(gs)
    # exact integer sums (bincount's weights are float64: a total beyond 2**53 ns, ~104 days
    # of summed op time, came out rounded); every group in 0..m-1 has a key, so the sums align
    gcount = group_sum(ginv, count)[1]
    gtotal = group_sum(ginv, total)[1]
    gmin = np.full(m, BIG, I64)
    np.minimum.at(gmin, ginv, mn)
    gmax = np.zeros(m, I64)
    np.maximum.at(gmax, ginv, mx)
    # histogram per group: rows of keys outside the selection are dropped
    hsel = mask[hk]
    hgrp = np.searchsorted(gs, key_group[hk[hsel]])
    valid = (hgrp < m)
    valid[valid] = gs[hgrp[valid]] == key_group[hk[hsel]][valid]
    dense = np.zeros((m, NBINS), I64)
    np.add.at(dense, (hgrp[valid], hb[hsel][valid]), hc[hsel][valid])
    cum = np.cumsum(dense, axis=1)
    hist_total = cum[:, -1]
    quant = {}
    for q in _QS:
        target = np.maximum(np.ceil(q * hist_total), 1)
        b = (cum >= target[:, None]).argmax(axis=1)
        v = np.clip(np.rint(bin_value(b)).astype(I64), gmin, gmax)
        quant[q] = v
    rows = []
    for i in np.argsort(-gtotal, kind="stable").tolist():
        c = int(gcount[i])
        rows.append({"key": labels[gs[i]], "group": int(gs[i]), "count": c, "total_ns": int(gtotal[i]),
                     "mean_ns": int(round(gtotal[i] / c)) if c else 0,  # noqa: RUF046 (a numpy float)
                     "min_ns": int(gmin[i]), "max_ns": int(gmax[i]),
                     "p50_ns": int(quant[0.5][i]), "p90_ns": int(quant[0.9][i]),
                     "p99_ns": int(quant[0.99][i])})
    return rows
