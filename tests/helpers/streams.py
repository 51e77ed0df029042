"""Synthetic op-duration streams replayed through the regression detector faster than real
time (tests/test_detector_replay.py and tests/bench/bench_detector.py share them).

Each op type has lognormal durations (``mu`` = ln of the median in ns, ``sigma``) and a
Poisson number of calls per second. Because the detector only sees per-second histogram
counts, a second is drawn directly as ``multinomial(Poisson(rate), bin probabilities)``: the
exact distribution of binning that many independent lognormal samples, at a cost
independent of the rate (24 h at 10k calls/s replay in seconds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from aclprofd.detector.dispersion import MIN_SECONDS, WindowIndex, dispersion

from aclprof.protocol.quantshift import BINS_PER_OCTAVE, NBINS

__all__ = ["Op", "bin_probabilities", "Replay", "Z99", "dispersion_and_definition"]

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


@dataclass(frozen=True)
class Op:
    op_type: str
    rate: float          # calls per second
    median_ns: float
    sigma: float         # of ln(duration)


def bin_probabilities(median_ns: float, sigma: float) -> np.ndarray:
    """P(duration falls in each histogram bin) for a lognormal."""
    mu = math.log(median_ns)
    edges = [2.0 ** (b / BINS_PER_OCTAVE) for b in range(NBINS)]  # upper edge of bin b (b >= 0)
    cdf = np.array([0.5 * (1 + math.erf((math.log(e) - mu) / (sigma * math.sqrt(2)))) for e in edges])
    p = np.diff(np.concatenate([[0.0], cdf]))
    p[-1] += 1.0 - p.sum()  # the overflow bin takes the rest
    return np.clip(p, 0.0, None) / np.clip(p, 0.0, None).sum()


class Replay:
    """Feeds a detector second by second: key i is op type ``ops[i]`` of one service. Ops of
    one op type are replicas (processes) of one op: one cell, a mixture of their
    distributions, each replica's share set by its rate (``second(rate_factor)`` per op)."""

    def __init__(self, ops: list[Op], seed: int, service: str = "svc", model: str = "m") -> None:
        self.ops = ops
        self.rng = np.random.default_rng(seed)
        self.probs = [bin_probabilities(o.median_ns, o.sigma) for o in ops]
        # ops of one op type share a cell: they are replicas (pids) of the same op
        self.cells = [(service, model, o.op_type, o.op_type.lower() + "_0") for o in ops]

    def identity(self, key: int) -> tuple[str, str, str, str]:
        return self.cells[key]

    def set_op(self, i: int, median_ns: float | None = None, sigma: float | None = None) -> None:
        """Change op i's distribution from the next second on (a regression)."""
        o = self.ops[i]
        self.ops[i] = Op(o.op_type, o.rate, median_ns or o.median_ns, sigma or o.sigma)
        self.probs[i] = bin_probabilities(self.ops[i].median_ns, self.ops[i].sigma)

    def second(self, rate_factor: float | Sequence[float] = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """One second of every op: ``(key * NBINS + bin, count)`` like the aggregator's.
        ``rate_factor``: one factor for every op, or one per op (replicas of one op type
        whose shares of the load vary)."""
        factors = [float(rate_factor)] * len(self.ops) if np.isscalar(rate_factor) else list(rate_factor)
        if len(factors) != len(self.ops):
            raise ValueError(f"Replay.second: {len(factors)} rate factors for {len(self.ops)} ops")
        codes, counts = [], []
        for k, (o, p) in enumerate(zip(self.ops, self.probs)):
            n = self.rng.poisson(o.rate * factors[k])
            c = self.rng.multinomial(n, p)
            nz = np.flatnonzero(c)
            codes.append(k * NBINS + nz)
            counts.append(c[nz])
        return np.concatenate(codes).astype(np.int64), np.concatenate(counts).astype(np.int64)


def dispersion_and_definition(dense_seconds: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """dispersion() of per-second dense histograms (seconds x groups x NBINS), and the same
    number computed directly from its definition."""
    hist = dense_seconds.sum(axis=0)
    cum = np.cumsum(hist, axis=1)
    seconds = []
    for sec in dense_seconds:
        codes = np.flatnonzero(sec.reshape(-1))
        seconds.append((codes, sec.reshape(-1)[codes]))
    got = dispersion(WindowIndex(seconds, hist.shape[0]), hist, cum, q)
    want = []
    for g in range(hist.shape[0]):
        n = hist[g].sum()
        b = int(np.argmax(cum[g] >= n * q))
        frac = (n * q - (cum[g, b] - hist[g, b])) / hist[g, b]
        below = dense_seconds[:, g, :b].sum(axis=1) + frac * dense_seconds[:, g, b]
        ns = dense_seconds[:, g].sum(axis=1)
        s = len(dense_seconds)
        phi = ((below - q * ns) ** 2).sum() / (n * q * (1 - q)) * s / (s - 1) if s >= MIN_SECONDS else 1.0
        want.append(max(1.0, phi))
    return got, np.array(want)
