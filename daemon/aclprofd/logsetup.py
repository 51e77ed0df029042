"""structlog configuration for the daemon, done once at start (and again on SIGHUP).

Console renderer when the output is a terminal, JSON lines otherwise (``log_format``
overrides); level filtering with ``make_filtering_bound_logger``. Logs go to stderr or,
with ``log_file``, to a file that :func:`reopen` reopens (SIGHUP, after logrotate moved it).
Loggers are not cached on first use, so a reconfiguration (new level) applies at once; the
daemon logs per connection, never per record, so the cost does not matter.

Peers choose much of what is logged (service, host, loss reasons, error messages), so
every line goes through :class:`LineGuard` first: each value is made safe for a terminal
(:func:`aclprof.protocol.safetext.safe`: no escape sequence, no forged line) and cut to
``VALUE_MAX`` characters, and each event (its message and level) is limited to ``BURST``
lines per ``PERIOD_S``; the lines left out are counted and reported, per event, as
``suppressed`` on the next line that is written. So a line is at most ~``LINE_MAX`` bytes
and the log grows by at most ``BURST`` such lines per event per period, whatever peers send
(daemon/README.md "Logs").
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import IO, Any

import structlog

from aclprof.protocol.safetext import safe, truncate

from .ratelimit import RateWindow

__all__ = ["configure", "reopen", "LineGuard", "VALUE_MAX", "LINE_MAX", "BURST", "PERIOD_S"]

VALUE_MAX = 1000   # characters of one logged value
LINE_MAX = 16_000  # bytes of one line, at most (the values are cut to fit)
BURST = 20         # lines of one event per period
PERIOD_S = 10.0


class LineGuard:
    """A structlog processor: safe, bounded values and a rate limit per event."""

    def __init__(self, burst: int = BURST, period_s: float = PERIOD_S, clock: Any = time.monotonic):
        self.burst, self.period_s = burst, period_s
        self._window = RateWindow(burst, period_s, clock)  # per (level, event)
        self._lock = threading.Lock()
        self._suppressed: dict[str, int] = {}  # event -> lines left out since the last line written

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        name = str(event.get("event", ""))
        allowed = self._window.allow((method, name))
        with self._lock:
            if allowed is None:
                self._suppressed[name] = self._suppressed.get(name, 0) + 1
                raise structlog.DropEvent
            suppressed, self._suppressed = self._suppressed, {}
        budget = LINE_MAX // max(1, len(event) + 1)
        out = {k: self._value(v, min(VALUE_MAX, budget)) for k, v in event.items()}
        if suppressed:
            out["suppressed"] = {safe(truncate(k, 200)): n for k, n in suppressed.items()}
        return out

    @staticmethod
    def _value(v: Any, limit: int) -> Any:
        if v is None or isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, BaseException):  # exc_info is rendered by structlog itself
            return v
        if isinstance(v, (list, tuple)) and len(v) <= 50:
            return [LineGuard._value(x, limit // max(1, len(v))) for x in v]
        if isinstance(v, dict) and len(v) <= 50:
            each = limit // max(1, 2 * len(v))
            return {safe(truncate(str(k), each)): LineGuard._value(x, each) for k, x in v.items()}
        return safe(truncate(v if isinstance(v, str) else repr(v), limit))

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class _ReopenableStream:
    """The file loggers write to; ``reopen`` swaps the file under them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: str | None = None
        self._file: IO[str] = sys.stderr

    def set(self, path: str | None) -> None:
        with self._lock:
            old = self._file
            self._path = path
            self._file = open(path, "a", encoding="utf-8", buffering=1) if path else sys.stderr
            if old is not sys.stderr and old is not self._file:
                old.close()

    def reopen(self) -> None:
        if self._path:
            self.set(self._path)

    def isatty(self) -> bool:
        try:
            return self._file.isatty()
        except (AttributeError, ValueError):
            return False

    def write(self, text: str) -> None:
        with self._lock:
            try:
                self._file.write(text)
            except ValueError:  # closed under us (stderr closed by the test harness)
                pass

    def flush(self) -> None:
        with self._lock:
            try:
                self._file.flush()
            except ValueError:
                pass


_stream = _ReopenableStream()


def configure(level: str = "info", fmt: str = "auto", log_file: str | None = None) -> None:
    """Configure structlog (and route the stdlib's warnings of libraries to the same place)."""
    _stream.set(log_file)
    console = fmt == "console" or (fmt == "auto" and _stream.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        LineGuard(),
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if console:
        renderer: list[Any] = [structlog.dev.ConsoleRenderer(colors=_stream.isatty())]
    else:
        renderer = [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    structlog.configure(
        processors=[*shared, structlog.processors.StackInfoRenderer(), *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=_stream),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=logging.WARNING, stream=_stream, force=True)


def reopen() -> None:
    """Reopen the log file (no-op when logging to stderr)."""
    _stream.reopen()
