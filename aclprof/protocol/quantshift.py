"""Quantile shifts between two log histograms, with distribution-free confidence intervals.

Shared by the daemon's live regression detector (``aclprofd.detector.engine``) and ``aclprof diff``,
so both judge a shift the same way. Pure numpy; no state.

The histogram is the aggregator's (``aclprofd.aggregate.quantiles``, asserted equal by a
test): bin 0 holds durations of 0, bin ``b >= 1`` holds ``(2**((b-1)/8), 2**(b/8)]`` ns
(upper-inclusive, like a Prometheus bucket's ``le``; bin 1 also holds 1 ns), the last bin
everything above ``2**40`` ns. :func:`bin_index` applies it exactly to integer nanoseconds.

Method, per histogram row and quantile q:

- the quantile is read from the histogram's CDF, interpolated log-linearly inside the bin
  (a bin is 9 % wide; smooth latency distributions make the interpolated value far more
  precise than the bin, and the same interpolation on both sides cancels in a ratio);
- its confidence interval is the order-statistic (binomial) one: the ranks
  ``n*q -/+ z*sqrt(n*q*(1-q))`` read through the same CDF. It assumes independent samples
  and needs no distribution shape; ``n`` of a decayed (weighted) histogram is its weight sum,
  which is conservative (the Kish effective size of an exponentially decayed stream is ~2x);
- the shift ratio is ``cur/base`` with the conservative bounds ``cur_lo/base_hi`` and
  ``cur_hi/base_lo`` (the intervals must be disjoint for a bound to exclude 1).

With millions of samples such intervals get very narrow, so :func:`judge` also requires a
minimum effect size and the caller a minimum count and persistence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BINS_PER_OCTAVE", "NBINS", "QUANTILES", "BIN_UPPER_NS", "bin_index", "quantile_ci", "Shift", "shift",
           "shifts", "judge", "REGRESSION", "IMPROVEMENT", "NONE"]

BINS_PER_OCTAVE = 8
NBINS = BINS_PER_OCTAVE * 40 + 2  # bin 0 (zero) + 8 per octave up to 2**40 ns + overflow: the daemon's histogram
QUANTILES = (0.5, 0.99)
REGRESSION, IMPROVEMENT, NONE = 1, -1, 0


def _root8_floor(x: int) -> int:
    """``floor(x ** (1/8))`` exactly: nested integer square roots (``isqrt(isqrt(n)) ==
    floor(n ** (1/4))`` for integers), no float rounding."""
    return math.isqrt(math.isqrt(math.isqrt(x)))


#: the largest integer duration (ns) of each bin: 0 for bin 0, ``floor(2**(b/8))`` for the
#: bins up to ``2**40`` ns. An integer ``d`` lies in bin ``b`` iff ``BIN_UPPER_NS[b-1] < d <=
#: BIN_UPPER_NS[b]`` (the overflow bin has no upper bound): for an integer ``d``,
#: ``d <= 2**(b/8)`` iff ``d <= floor(2**(b/8))``, and ``d > x`` iff ``d > floor(x)``.
BIN_UPPER_NS = np.array([0] + [_root8_floor(2 ** b) for b in range(1, NBINS - 1)], np.int64)
BIN_UPPER_NS.setflags(write=False)
# The same bounds as floats (exact: all are below 2**53), the overflow bin's +inf appended:
# bin b is the first whose bound a duration does not exceed. Float64 holds integers exactly up
# to 2**53; above that the rounding cannot bring a duration down to 2**40 ns, the top bound.
_UPPER_F = np.append(BIN_UPPER_NS.astype(np.float64), np.inf)
#: an estimate of ``8*log2(d)`` this close to an integer is re-checked exactly. The estimate
#: is float32 (half the memory traffic of the float64 rule it replaced, the ingest hot path):
#: converting d to float32 moves ``8*log2(d)`` by < 7e-7, and float32 ``log2`` below 2**64 is
#: a few ulp (3e-5 each, after the factor 8) from the truth; 2e-3 leaves a wide margin. About
#: 0.4 % of durations (and every power of two and 1 ns) take the exact path.
_NEAR = 2e-3


def _as_float_ns(d: np.ndarray) -> np.ndarray:
    """A new float64 array of the integer nanoseconds in ``d`` (floats rounded to the
    nearest ns), negative durations as 0."""
    kind = d.dtype.kind
    if kind == "f":
        f = np.rint(d.astype(np.float64, copy=False))
        if np.isnan(f).any():
            raise ValueError("bin_index: a duration is NaN (durations are nanoseconds)")
    elif kind in "iu":
        f = d.astype(np.float64)
    else:
        raise TypeError(f"bin_index: durations must be integer or float nanoseconds, not {d.dtype}")
    np.maximum(f, 0.0, out=f)
    return f


def bin_index(durations: np.ndarray) -> np.ndarray:
    """Histogram bin of each duration (ns), vectorised: the one rule of the daemon's
    aggregates (``aclprofd.aggregate.quantiles``), its baselines and ``aclprof diff``.

    Bins are upper-inclusive: ``2**k`` ns is in bin ``8k``, whose upper edge is the
    Prometheus bucket ``le=2**k`` ns. Exact for every integer (any signed or unsigned numpy
    integer type, up to ``2**64 - 1``); a duration <= 0 is bin 0. Floats (``aclprof diff``
    reads an Ascend CSV's microseconds) are first rounded to the nearest integer ns; NaN is a
    ValueError; any other dtype a TypeError. Hot path: ``ceil(8*log2(d))`` in float32, in
    place; the few durations whose estimate lies within :data:`_NEAR` of an edge (where
    rounding may put it one bin off) are looked up in :data:`BIN_UPPER_NS` instead."""
    arr = np.asarray(durations)
    d = arr.reshape(-1)  # a view: one flat index for the exact re-check, any shape (0-d too) back
    # float32 straight from integers (the aggregator's int64); floats rounded and checked first
    y = d.astype(np.float32) if d.dtype.kind in "iu" else _as_float_ns(d).astype(np.float32)
    np.maximum(y, np.float32(0.0), out=y)  # negative durations are bin 0, with 0
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log2(y, out=y)
        y *= np.float32(BINS_PER_OCTAVE)
        c = np.ceil(y)  # the bin of d >= 2, but for rounding next to an edge
        np.subtract(c, y, out=y)  # in [0, 1): 0 on an edge; NaN for 0 and +inf (never near)
        np.subtract(y, np.float32(0.5), out=y)
        np.abs(y, out=y)
    near = np.flatnonzero(y >= np.float32(0.5 - _NEAR))
    del y
    np.clip(c, 0, NBINS - 1, out=c)
    b = c.astype(np.int64)
    if len(near):
        b[near] = np.searchsorted(_UPPER_F, _as_float_ns(d[near]), side="left")
    return b.reshape(arr.shape)


#: rows x ranks x bins booleans _inverse_cdf builds at most at once (4096 groups x 3 ranks of
#: one quantile, as before several quantiles shared a pass): larger inputs go in row chunks.
_INVERSE_CHUNK = 4096 * 3 * NBINS


def _inverse_cdf(hist: np.ndarray, cum: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The values (ns) at ``rank`` (rows x k, 0 < rank <= n of the row), log-linear inside the bin
    (from its lower edge ``2**((b-1)/8)`` to its upper edge ``2**(b/8)``: which edge a bin
    includes does not matter to a continuous reading)."""
    step = max(1, _INVERSE_CHUNK // max(1, rank.shape[1] * hist.shape[1]))
    if len(rank) > step:  # each row is read alone: chunks give the same values
        return np.concatenate([_inverse_cdf(hist[i:i + step], cum[i:i + step], rank[i:i + step])
                               for i in range(0, len(rank), step)])
    b = (cum[:, None, :] >= rank[:, :, None]).argmax(axis=2)
    rows = np.arange(len(rank))[:, None]
    in_bin = hist[rows, b]
    before = cum[rows, b] - in_bin
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(in_bin > 0, (rank - before) / in_bin, 0.0)
    frac = np.minimum(np.maximum(frac, 0.0), 1.0)
    value = np.exp2((b - 1 + frac) / BINS_PER_OCTAVE)
    return np.where(b == 0, 0.0, value)


def _ranks(n: np.ndarray, q: float, z: float | np.ndarray) -> np.ndarray:
    """Rows x 3: the ranks of the interval's low end, the estimate and the high end."""
    half = z * np.sqrt(np.maximum(n * q * (1.0 - q), 0.0))
    tiny = np.maximum(n * 1e-12, 1e-12)
    ranks = np.stack([n * q - half, n * q, n * q + half], axis=1)
    out: np.ndarray = np.minimum(np.maximum(ranks, tiny[:, None]), np.maximum(n, tiny)[:, None])
    return out


def _check_q(q: float, where: str) -> None:
    if not 0.0 < q < 1.0:
        raise ValueError(f"{where}: q must be in (0, 1), not {q}")


def quantile_ci(hist: np.ndarray, q: float, z: float | np.ndarray,
                cum: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(low, estimate, high, n)`` of quantile ``q`` for each row of ``hist`` (rows x NBINS
    counts or weights); values in ns, NaN for an empty row. ``z``: one half-width (in
    standard errors of the rank) for every row, or one per row (the detector widens rows
    whose samples are not independent). ``cum``: the rows' cumulative sums when the caller
    has them (several quantiles of one histogram)."""
    _check_q(q, "quantile_ci")
    hist = np.atleast_2d(np.asarray(hist, dtype=np.float64))
    cum = np.cumsum(hist, axis=1) if cum is None else cum
    n = cum[:, -1]
    v = _inverse_cdf(hist, cum, _ranks(n, q, z))
    v[n <= 0] = np.nan
    return v[:, 0], v[:, 1], v[:, 2], n


@dataclass(frozen=True)
class Shift:
    """Per row: the quantile in each histogram with its interval, and the ratio cur/base."""

    q: float
    base: np.ndarray
    base_lo: np.ndarray
    base_hi: np.ndarray
    n_base: np.ndarray
    cur: np.ndarray
    cur_lo: np.ndarray
    cur_hi: np.ndarray
    n_cur: np.ndarray
    ratio: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def shift(base: np.ndarray, cur: np.ndarray, q: float, z: float | np.ndarray,
          cums: tuple[np.ndarray, np.ndarray] | None = None) -> Shift:
    """The shift of quantile ``q`` from ``base`` to ``cur`` (two histograms of equal shape),
    row by row. A ratio whose denominator is 0 (or a row that is empty) is NaN. ``cums``:
    both histograms' cumulative sums along the bins, when already computed."""
    b_lo, b, b_hi, nb = quantile_ci(base, q, z, None if cums is None else cums[0])
    c_lo, c, c_hi, nc = quantile_ci(cur, q, z, None if cums is None else cums[1])
    return _shift_of(q, (b_lo, b, b_hi, nb), (c_lo, c, c_hi, nc))


def shifts(base: np.ndarray, cur: np.ndarray, qs: Sequence[float], zs: Sequence[float | np.ndarray],
           cums: tuple[np.ndarray, np.ndarray] | None = None) -> list[Shift]:
    """``[shift(base, cur, q, z, cums) for q, z in zip(qs, zs)]``, the same values bit for
    bit, from one inverse-CDF pass over both histograms and every quantile: the detector
    judges two quantiles a second, and four passes of ~20 numpy calls on a handful of rows
    were most of its tick (issue 21). ``zs``: one half-width per quantile (a number, or one
    per row)."""
    for q in qs:
        _check_q(q, "shifts")
    if len(zs) != len(qs):
        raise ValueError(f"shifts: {len(qs)} quantiles but {len(zs)} half-widths")
    base = np.atleast_2d(np.asarray(base, dtype=np.float64))
    cur = np.atleast_2d(np.asarray(cur, dtype=np.float64))
    if base.shape != cur.shape:
        raise ValueError(f"shifts: base {base.shape} and cur {cur.shape} differ in shape")
    g = len(base)
    hist = np.concatenate([base, cur])
    cum = np.cumsum(hist, axis=1) if cums is None else np.concatenate(cums)
    n = cum[:, -1]
    # a row's z is the same on both sides, as shift() passes it to both quantile_ci calls
    ranks = np.concatenate([_ranks(n, q, z if np.ndim(z) == 0 else np.concatenate([z, z]))
                            for q, z in zip(qs, zs)], axis=1)
    v = _inverse_cdf(hist, cum, ranks)
    v[n <= 0] = np.nan
    nb, nc = n[:g], n[g:]
    return [_shift_of(q, (v[:g, 3 * j], v[:g, 3 * j + 1], v[:g, 3 * j + 2], nb),
                      (v[g:, 3 * j], v[g:, 3 * j + 1], v[g:, 3 * j + 2], nc))
            for j, q in enumerate(qs)]


def _shift_of(q: float, base: tuple[np.ndarray, ...], cur: tuple[np.ndarray, ...]) -> Shift:
    """The Shift of two ``(low, estimate, high, n)`` readings of quantile ``q``."""
    b_lo, b, b_hi, nb = base
    c_lo, c, c_hi, nc = cur
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, c / b, np.nan)
        lower = np.where(b_hi > 0, c_lo / b_hi, np.nan)
        upper = np.where(b_lo > 0, c_hi / b_lo, np.nan)
    return Shift(q, b, b_lo, b_hi, nb, c, c_lo, c_hi, nc, ratio, lower, upper)


def judge(s: Shift, min_effect: float, min_count: float) -> np.ndarray:
    """Per row REGRESSION (slower), IMPROVEMENT (faster) or NONE: the interval excludes 1,
    the estimate moved by at least ``min_effect`` (0.05 = 5 %), and both sides hold at least
    ``min_count`` samples and at least 20 beyond the quantile (a p99 on 100 samples is its
    maximum: no interval can be read from it)."""
    tail = min(s.q, 1.0 - s.q)
    enough = ((s.n_base >= min_count) & (s.n_cur >= min_count)
              & (s.n_base * tail >= 20) & (s.n_cur * tail >= 20))
    with np.errstate(invalid="ignore"):
        up = enough & (s.lower > 1.0) & (s.ratio >= 1.0 + min_effect)
        down = enough & (s.upper < 1.0) & (s.ratio <= 1.0 / (1.0 + min_effect))
    return np.where(up, REGRESSION, np.where(down, IMPROVEMENT, NONE)).astype(np.int8)
