"""Device time -> host ``CLOCK_MONOTONIC``, for billing op records to requests (issue 25).

An op record's start/end are the device's counter (fidelity audit row 11), a clock with an
unknown offset to the host's and a small rate error (drift, ppm). What the host knows is
when each batch *arrived*: a record that ended at device time ``end`` and arrived at host
time ``arrival`` gives ``D = device - host >= end - arrival`` (it cannot arrive before it
ended). The subscription's :class:`~aclprof.api.subscription.stats.LagClock` keeps the
best such bound for ever, which is right for a fixed offset; with drift the bound of a
minute ago is stale. This map keeps the best bound per arrival bucket (``bucket_ns``, the
newest ``buckets`` of them), fits the drift as the slope of the line above every bound that
is lowest on average (the upper hull's edge over the bounds' mean: late deliveries, which
only lower bounds, cannot tilt it), and lifts the line until it is above every bound (so it
is the tightest line of that slope that the data allow).

Accuracy (what the tests prove on the mock): every bound is below the true ``D``, so the
mapped host time of a record is never earlier than the truth by more than the slope's error
over the buckets' span, and it is later than the truth by at most the fastest delivery
seen in the touching bucket (a read of the pipe right after the write: tens of
microseconds on the mock; on CANN, whatever its uploader adds, UNVERIFIED). Attribution
therefore allows ops to map a little after a request's end (``late_ns`` in
:mod:`aclprof.agent.bills`) and hardly before its start.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["ClockMap"]

_MAX_SLOPE = 1e-3  # 1000 ppm: a larger fitted drift is noise, not a clock


class ClockMap:
    """Fit of ``D(device) = device - host`` from batch arrivals (host ns units throughout;
    ``factor`` converts the library's unit, 1000 for µs)."""

    __slots__ = ("factor", "bucket_ns", "buckets", "_bounds", "_fit", "notes")

    def __init__(self, factor: int = 1, *, bucket_ns: int = 250_000_000, buckets: int = 16):
        if factor not in (1, 1000):
            raise ValueError(f"ClockMap: factor must be 1 (ns) or 1000 (us), got {factor!r}")
        if bucket_ns <= 0 or buckets < 1:
            raise ValueError(f"ClockMap: bucket_ns and buckets must be positive, got {bucket_ns}, {buckets}")
        self.factor = factor
        self.bucket_ns = bucket_ns
        self.buckets = buckets
        # arrival bucket -> (best bound end - arrival, that record's end), host ns units
        self._bounds: dict[int, tuple[int, int]] = {}
        self._fit: tuple[float, int, int] | None = None  # (slope, reference end, D at it)
        self.notes = 0

    @property
    def ready(self) -> bool:
        return bool(self._bounds)

    def note(self, newest_end: int, arrival: int) -> None:
        """A batch whose newest record ended at ``newest_end`` (library units) arrived at
        host time ``arrival``."""
        end = int(newest_end) * self.factor
        if end == 0:
            return  # no time info
        bound = end - arrival
        b = arrival // self.bucket_ns
        old = self._bounds.get(b)
        if old is None or bound > old[0]:
            self._bounds[b] = (bound, end)
            if old is None and len(self._bounds) > self.buckets:
                del self._bounds[min(self._bounds)]
            self._fit = None
        self.notes += 1

    def _refit(self) -> tuple[float, int, int]:
        pts = list(self._bounds.values())
        ref = pts[-1][1]
        slope = 0.0
        if len(pts) >= 3:
            slope = max(-_MAX_SLOPE, min(_MAX_SLOPE, _envelope_slope([(e - ref, d) for d, e in pts])))
        d_ref = max(d - round(slope * (e - ref)) for d, e in pts)
        self._fit = (slope, ref, d_ref)
        return self._fit

    def offset_at(self, device: int) -> int:
        """``D`` at a device time (host ns units)."""
        slope, ref, d_ref = self._fit or self._refit()
        return d_ref + round(slope * (device - ref))

    def to_host(self, device: np.ndarray) -> np.ndarray:
        """Host ns of device times (library units), as int64."""
        if not self._bounds:
            raise RuntimeError("ClockMap.to_host: no batch noted yet (call note() first)")
        slope, ref, d_ref = self._fit or self._refit()
        dev = device.astype(np.int64) * self.factor
        return dev - (d_ref + np.round(slope * (dev - ref)).astype(np.int64))

    def to_device(self, host: int) -> int:
        """The device time (host ns units, as records' ``start`` times ``factor``) of a host
        time: the inverse of :meth:`to_host` (one fixed-point step; the slope is at most
        1e-3, so the step's error is below a nanosecond per 10^6 ns of offset change)."""
        if not self._bounds:
            raise RuntimeError("ClockMap.to_device: no batch noted yet (call note() first)")
        slope, ref, d_ref = self._fit or self._refit()
        dev = host + d_ref + round(slope * (host + d_ref - ref))
        return host + d_ref + round(slope * (dev - ref))


def _envelope_slope(points: list[tuple[int, int]]) -> float:
    """The slope of the line above every ``(x, bound)`` point that is lowest on average
    over them (the linear program of Moon, Skelly and Towsley's clock-skew estimator): the
    upper convex hull's edge over the points' mean x.

    Why not least squares through the bounds (as this map did): every bound is the truth
    minus a delivery delay, and delays are not noise around a mean. A stretch where every
    read came late (a GC pause, a reader descheduled on a busy host, a process under
    coverage) lowers a few buckets' bounds by milliseconds, and a least-squares line tilts
    towards them: over 16 buckets of 250 ms the slope reached the 1000 ppm clamp and ops
    mapped 2-4 ms off, enough to leave a third of a test's ops outside their requests
    (CI, 2026-12-03). The hull is set by the fastest deliveries only; late ones below it
    change nothing."""
    best: dict[int, int] = {}
    for x, y in points:
        best[x] = max(y, best.get(x, y))
    pts = sorted(best.items())
    if len(pts) < 2:
        return 0.0
    hull: list[tuple[int, int]] = []
    for p in pts:
        # pop the last point while it lies on or below the segment from its predecessor to
        # p (exact in Python ints: x and y are ns, their products stay exact)
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (p[1] - hull[-2][1])
                                  - (hull[-1][1] - hull[-2][1]) * (p[0] - hull[-2][0])) >= 0:
            hull.pop()
        hull.append(p)
    mean_x = sum(x for x, _ in pts) / len(pts)
    for (x0, y0), (x1, y1) in itertools.pairwise(hull):
        if x1 >= mean_x:
            return (y1 - y0) / (x1 - x0)
    (x0, y0), (x1, y1) = hull[-2], hull[-1]
    return (y1 - y0) / (x1 - x0)
