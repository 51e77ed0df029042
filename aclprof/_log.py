"""Loggers for library modules, created lazily.

Libraries only get loggers; configuration happens once, at the entry points (the CLI and
the daemon). Importing structlog costs ~45 ms, most of ``import aclprof``'s budget, so a
module-level logger here is a proxy that imports structlog on its first use, which for a
healthy program may be never.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_logger"]


class _LazyLogger:
    __slots__ = ("_name", "_logger")

    def __init__(self, name: str):
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            import structlog

            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attr)


def get_logger(name: str) -> Any:
    """A structlog logger for ``name`` that imports structlog only when first used."""
    return _LazyLogger(name)
