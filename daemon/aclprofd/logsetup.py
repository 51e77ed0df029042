"""structlog configuration for the daemon, done once at start (and again on SIGHUP).

Console renderer when the output is a terminal, JSON lines otherwise (``log_format``
overrides); level filtering with ``make_filtering_bound_logger``. Logs go to stderr or,
with ``log_file``, to a file that :func:`reopen` reopens (SIGHUP, after logrotate moved it).
Loggers are not cached on first use, so a reconfiguration (new level) applies at once; the
daemon logs per connection, never per record, so the cost does not matter.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import IO, Any

import structlog

__all__ = ["configure", "reopen"]

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
