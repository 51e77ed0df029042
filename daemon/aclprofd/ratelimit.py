"""The daemon's one rate limit for log lines: at most ``burst`` lines per ``period_s`` for
one kind of event, and how many were left out.

Peers decide how often many events happen (bad frames, refused connections, truncated
names, a flapping disk), so no event may become a flood of log lines. :class:`RateWindow`
is the rule, used by both places that apply it: :class:`LogLimiter` (a logger for one
part's events, which says ``suppressed=n`` on the next line of the same event) and
:class:`aclprofd.logsetup.LineGuard` (the last guard on every line of the daemon's log).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import structlog

__all__ = ["RateWindow", "LogLimiter"]

_log = structlog.get_logger("aclprofd")

_MAX_KEYS = 10_000  # events are the daemon's own messages; bounded all the same


class RateWindow:
    """At most ``burst`` per ``period_s`` for each key (fixed windows that start with the
    first event after the previous one ended); counts what it refused. Thread-safe."""

    def __init__(self, burst: int, period_s: float, clock: Callable[[], float] | None = None) -> None:
        self.burst, self.period_s = burst, period_s
        self._clock = clock  # None: time.monotonic (looked up at each call)
        self._lock = threading.Lock()
        self._state: dict[Hashable, list[float]] = {}  # key -> [window start, allowed, refused]

    def allow(self, key: Hashable) -> int | None:
        """None if one more ``key`` is refused now; else how many were refused in its
        previous window (0 mostly)."""
        now = self._clock() if self._clock is not None else time.monotonic()
        with self._lock:
            st = self._state.get(key)
            refused = 0
            if st is None or now - st[0] >= self.period_s:
                if st is None and len(self._state) >= _MAX_KEYS:
                    self._state.clear()
                refused = int(st[2]) if st is not None else 0
                st = self._state[key] = [now, 0, 0]
            if st[1] >= self.burst:
                st[2] += 1
                return None
            st[1] += 1
            return refused


class LogLimiter:
    """At most ``burst`` log lines per ``every`` seconds for one kind of event; the next
    line after a quiet spell says how many were suppressed. A flood of bad clients (or of
    accept errors) must not become a flood of log lines."""

    def __init__(self, burst: int = 5, every: float = 10.0, clock: Callable[[], float] | None = None) -> None:
        self.burst, self.every = burst, every
        self._window = RateWindow(burst, every, clock)

    def allow(self, event: str) -> int | None:
        """None if a line for ``event`` is suppressed now, else how many were suppressed
        since the last line that was written."""
        return self._window.allow(event)

    def log(self, level: str, event: str, **kw: Any) -> None:
        suppressed = self.allow(event)
        if suppressed is None:
            return
        if suppressed:
            kw["suppressed"] = suppressed
        getattr(_log, level)(event, **kw)
