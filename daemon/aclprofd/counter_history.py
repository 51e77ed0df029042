"""How much the daemon's fault and drop counters grew over its recent windows (STATUS
``recent``), so that every client shows the same figures for a window, whenever it
connected: ``aclprof top --once`` and the live ``top`` agree, and neither needs to watch
for a window before it can say what happened in it.

The loop adds one sample of the since-start counters per second at most (at its
publishing, which runs at least every second), keeping samples for the longest window
asked; a window's growth is the newest counters minus the newest sample at least that
old (or the first, zeros at the start, while the daemon is younger than the window), with
the span it really covers.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

__all__ = ["CounterHistory", "RECENT_COUNTERS", "SAMPLE_EVERY_S"]

#: the counters kept (STATUS names); all count since the daemon started
RECENT_COUNTERS = ("dropped_by_agents", "stream_skipped", "protocol_errors", "storage_write_errors",
                   "storage_records_lost", "memory_refused", "internal_errors")
SAMPLE_EVERY_S = 1.0


class CounterHistory:
    """Samples of the since-start counters (loop thread only)."""

    def __init__(self, started: float, keep_s: float) -> None:
        self.keep_s = max(float(keep_s), SAMPLE_EVERY_S)
        # parallel lists (times ascending): a window's base is found by bisection, however
        # long the longest window (an hour is 3,600 samples; STATUS may be asked for many times a second)
        self.times: list[float] = [started]
        self.values: list[dict[str, int]] = [dict.fromkeys(RECENT_COUNTERS, 0)]

    @property
    def samples(self) -> list[tuple[float, dict[str, int]]]:
        return list(zip(self.times, self.values))

    def add(self, now: float, counters: Mapping[str, int]) -> None:
        """A sample at ``now`` (time.monotonic()), kept if the last is a second old."""
        if now - self.times[-1] < SAMPLE_EVERY_S:
            return
        self.times.append(now)
        self.values.append({k: int(counters.get(k, 0)) for k in RECENT_COUNTERS})
        # keep one sample older than the longest window: it is that window's base
        drop = bisect.bisect_right(self.times, now - self.keep_s - SAMPLE_EVERY_S) - 1
        if drop > 0:
            del self.times[:drop], self.values[:drop]

    def growth(self, now: float, seconds: float, counters: Mapping[str, int]) -> dict[str, float]:
        """The counters' growth over the last ``seconds`` (``counters``: their values now),
        with ``span_s``: the time it covers (shorter than ``seconds`` only while the daemon is
        younger; a second longer at most otherwise)."""
        i = max(0, bisect.bisect_right(self.times, now - seconds) - 1)  # the newest at least that old
        base_t, base = self.times[i], self.values[i]
        out: dict[str, float] = {k: max(0, int(counters.get(k, 0)) - base[k]) for k in RECENT_COUNTERS}
        out["span_s"] = round(max(0.0, now - base_t), 3)
        return out

    def recent(self, now: float, windows: Iterable[tuple[str, float]],
               counters: Mapping[str, int]) -> dict[str, dict[str, float]]:
        """STATUS ``recent``: the growth per named window."""
        return {name: self.growth(now, seconds, counters) for name, seconds in windows}
