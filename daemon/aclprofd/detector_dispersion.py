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
over ``S - 1`` degrees of freedom, divided by them), so detection on a clean stream is
barely changed. The same ``phi`` is applied to the baseline: it is the same process, and
cluster noise does not average out over a longer baseline (its variance grows with ``n``
like the binomial one).
"""

from __future__ import annotations

import numpy as np

from aclprof.protocol.quantshift import NBINS

__all__ = ["WindowSeconds", "dispersion"]


class WindowSeconds:
    """The window's per-second group histograms as one flat sparse table: ``second`` (0..S-1),
    ``group``, ``bin`` and ``count`` per entry; built once a tick, read for every quantile."""

    def __init__(self, seconds: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """``seconds``: ``(group * NBINS + bin codes, counts)`` of each second in the window."""
        self.nseconds = len(seconds)
        if seconds:
            codes = np.concatenate([c for c, _ in seconds])
            self.count = np.concatenate([n for _, n in seconds]).astype(np.float64)
            self.second = np.repeat(np.arange(len(seconds)), [len(c) for c, _ in seconds])
        else:
            codes, self.count, self.second = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
        self.group = codes // NBINS
        self.bin = codes % NBINS


def dispersion(win: WindowSeconds, hist: np.ndarray, cum: np.ndarray, q: float) -> np.ndarray:
    """Per group (rows of ``hist``, the window's histograms, ``cum`` their cumulative sums):
    the overdispersion factor ``phi >= 1`` of the fraction of calls below the window's
    ``q``-quantile estimate; 1 where it cannot be estimated (fewer than 2 seconds, an empty
    row)."""
    g = len(hist)
    phi = np.ones(g)
    if g == 0 or win.nseconds < 2 or len(win.count) == 0:
        return phi
    n = cum[:, -1]
    rank = n * q
    # the estimate's position, as quantile_ci reads it: its bin and the fraction of that bin below it
    b = np.minimum((cum < rank[:, None]).sum(axis=1), NBINS - 1)
    rows = np.arange(g)
    in_bin = hist[rows, b]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(in_bin > 0, (rank - (cum[rows, b] - in_bin)) / in_bin, 0.0)
    frac = np.clip(frac, 0.0, 1.0)
    ok = win.group < g  # groups registered after this tick's histograms: none, but be exact
    grp, bins, cnt, sec = win.group[ok], win.bin[ok], win.count[ok], win.second[ok]
    below = cnt * ((bins < b[grp]) + frac[grp] * (bins == b[grp]))
    cell = grp * win.nseconds + sec  # (group, second) pairs
    m = np.bincount(cell, weights=below, minlength=g * win.nseconds).reshape(g, win.nseconds)
    ns = np.bincount(cell, weights=cnt, minlength=g * win.nseconds).reshape(g, win.nseconds)
    s = win.nseconds
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = ((m - q * ns) ** 2).sum(axis=1) / (n * q * (1.0 - q)) * (s / (s - 1))
    good = np.isfinite(ratio) & (n > 0)
    phi[good] = np.maximum(ratio[good], 1.0)
    return phi
