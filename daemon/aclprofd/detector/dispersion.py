"""How much more a window's quantile wanders than independent samples would let it: the
detector's overdispersion factor, per group, from the window's own seconds.

The quantile interval (:func:`aclprof.protocol.quantshift.quantile_ci`) is the binomial one:
it holds when a window's calls are independent draws. A group often breaks that. Its calls
come from several replicas (pids of one service, merged into one group) whose shares of
the load vary from second to second (a load balancer's split, agent batches, a scheduler
on shared cores), and a replica may be slower than the others. The group's distribution
is then a mixture whose weights wander; where a quantile sits between two populations
(the p50 of two replicas, one 1.4x slower) a 2 % change of one replica's share moves it by
40 %, far beyond a binomial interval of 300,000 samples, and a steady load is flagged and
cleared over and over.

The correction is the batch-means (cluster-robust) variance with the window's seconds as
clusters. With ``m_s`` the calls of second ``s`` below the window's quantile estimate and
``n_s`` all its calls, the fraction below has variance ``sum_s (m_s - q n_s)**2 / n**2``
(times ``S / (S - 1)`` for ``S`` seconds), against ``q (1 - q) / n`` for independent
calls. Their ratio ``phi`` (at least 1) widens both intervals: the half-width in ranks
becomes ``z * sqrt(phi * n q (1 - q))``. Independent calls give ``phi`` near 1 (a chi-square
over ``S - 1`` degrees of freedom, divided by them: within 1.5 nineteen times in twenty
for the default 30 s window), so detection on a clean stream is barely changed; a window
of fewer than ``MIN_SECONDS`` seconds gives no estimate (phi = 1). The same ``phi`` is
applied to the baseline: it is the same process, and cluster noise does not average out
over a longer baseline (its variance grows with ``n`` like the binomial one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aclprof.protocol.quantshift import NBINS

__all__ = ["MIN_SECONDS", "WindowIndex", "dispersion", "dispersions"]

#: Fewer seconds in the window than this (a short ``detector_window``, or the daemon's first
#: seconds) give no estimate (phi = 1): with ``S`` seconds phi is a chi-square over ``S - 1``
#: degrees of freedom, and over a handful it is as likely to be 3 as 1 on a clean stream.
MIN_SECONDS = 10


class WindowIndex:
    """The window's seconds as one sorted array, built once a tick for both quantiles: each
    second's sorted unique ``group * NBINS + bin`` codes offset by ``second * span``, and
    the running count along them (with a leading 0), so any group's calls below any bin in
    any second are two binary searches away."""

    def __init__(self, seconds: list[tuple[np.ndarray, np.ndarray]], groups: int) -> None:
        """``seconds``: ``(codes, counts)`` of each second in the window
        (:meth:`aclprofd.detector.state.CellStore.window_seconds`); ``groups``: how many."""
        self.seconds = len(seconds)
        self.span = np.int64((groups + 1) * NBINS)  # one second's codes and the last group's end
        if seconds:
            self.keys = np.concatenate([codes + i * self.span for i, (codes, _) in enumerate(seconds)])
            counts = np.concatenate([c for _, c in seconds])
        else:
            self.keys, counts = np.zeros(0, np.int64), np.zeros(0)
        self.running = np.concatenate([[0.0], np.cumsum(counts, dtype=np.float64)])


def dispersion(win: WindowIndex, hist: np.ndarray, cum: np.ndarray, q: float,
               groups: np.ndarray | None = None) -> np.ndarray:
    """Per group (rows of ``hist``, the window's histograms, ``cum`` their cumulative sums):
    the overdispersion factor ``phi >= 1`` of the fraction of calls below the window's
    ``q``-quantile estimate; 1 where it cannot be estimated (fewer than :data:`MIN_SECONDS`
    seconds, an empty row). ``groups``: the group number of each row (default: row i is
    group i), when only some groups are evaluated."""
    return dispersions(win, hist, cum, (q,), groups)[0]


def dispersions(win: WindowIndex, hist: np.ndarray, cum: np.ndarray, qs: Sequence[float],
                groups: np.ndarray | None = None) -> list[np.ndarray]:
    """:func:`dispersion` of each quantile in ``qs``, in one pass: the detector's tick needs
    two, and the numpy calls, not the rows, were its cost (issue 21). Each quantile's row is
    computed with the same operations, summed in the same order, as alone: the same bits."""
    g, s, k = len(hist), win.seconds, len(qs)
    if g == 0 or s < MIN_SECONDS:
        return [np.ones(g) for _ in range(k)]
    q = np.asarray(qs, np.float64)[:, None]  # quantiles down, groups across
    n = cum[:, -1]
    rank = n * q
    # the estimate's position, as quantile_ci reads it: its bin and the fraction of that bin below it
    b = np.minimum((cum[None, :, :] < rank[:, :, None]).sum(axis=2), NBINS - 1)
    every = np.arange(g)
    in_bin = hist[every, b]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(in_bin > 0, (rank - (cum[every, b] - in_bin)) / in_bin, 0.0)
    frac = np.clip(frac, 0.0, 1.0)
    # each group's first code, its quantile's bin, the next one, its end
    first = np.broadcast_to((every if groups is None else np.asarray(groups, np.int64)) * NBINS, (k, g))
    at = first + b
    edges = np.stack([first, at, at + 1, first + NBINS], axis=1)  # quantile x edge x group
    needles = (edges[None] + win.span * np.arange(s)[:, None, None, None]).reshape(-1)
    c = win.running[np.searchsorted(win.keys, needles)].reshape(s, k, 4, g)  # calls before each edge
    lo, mid, hi, end = c[:, :, 0], c[:, :, 1], c[:, :, 2], c[:, :, 3]
    below = (mid - lo) + frac * (hi - mid)
    dev = (below - q * (end - lo)) ** 2
    # summed per quantile from a contiguous (seconds x groups) array, as alone: numpy's
    # summation order (pairwise or running) follows the memory layout, and the same layout
    # keeps every phi identical to the last bit
    sq = np.stack([np.ascontiguousarray(dev[:, j]).sum(axis=0) for j in range(k)])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = sq / (n * q * (1.0 - q)) * (s / (s - 1))
    good = np.isfinite(ratio) & (n > 0)
    phi = np.ones((k, g))
    phi[good] = np.maximum(ratio[good], 1.0)
    return list(phi)
