"""Loggers for library modules, created lazily and quiet until the application decides.

Libraries only get loggers; configuration happens once, at the entry points (the CLI and
the daemon). Two facts shape this module:

- importing structlog costs ~45 ms, most of ``import aclprof``'s budget, so nothing is
  imported until a message is actually logged;
- aclprof runs inside someone else's service, and an *unconfigured* structlog prints to
  stdout, which may be that service's own output channel. So a message goes through
  structlog only once the application (or aclprof's own entry points) configured it, and
  otherwise through stdlib ``logging`` (silent below WARNING unless the application says
  otherwise).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["get_logger"]

# The lazy import of structlog runs on whichever thread logs first, often a background one
# (the agent's sender, a subscription reader). A fork() in the middle of it leaves the
# child a partially initialised module and its import lock held by a thread the child does
# not have: the child's first log message then hangs or fails (issue 9: children that
# started an agent hung). The import therefore runs under a lock that fork() waits for.
_import_lock = threading.Lock()
_structlog_module: Any = None


def _structlog() -> Any:
    global _structlog_module
    if _structlog_module is None:
        with _import_lock:
            import structlog

            _structlog_module = structlog
    return _structlog_module


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_import_lock.acquire, after_in_parent=_import_lock.release,
                        after_in_child=_import_lock.release)


class _LazyLogger:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, level: str) -> Callable[..., None]:
        structlog = _structlog()
        if structlog.is_configured():
            # A new proxy per message, not one kept for the module's life: with
            # cache_logger_on_first_use a kept proxy stays bound to the logger (and output
            # file) of the configuration it first met, so an application that configures
            # structlog again (or a test that restores it) would keep writing to the old one.
            # Messages are rare; the proxy costs a microsecond or two.
            bound: Callable[..., None] = getattr(structlog.get_logger(self._name), level)
            return bound
        method = getattr(logging.getLogger(self._name), level)

        def emit(event: str, *args: Any, **kw: Any) -> None:
            exc_info = kw.pop("exc_info", level == "exception")
            fields = " ".join(f"{k}={v!r}" for k, v in kw.items())
            if fields:
                method("%s %s", event, fields, exc_info=exc_info)
            else:
                method("%s", event, exc_info=exc_info)

        return emit


def get_logger(name: str) -> Any:
    """A logger for ``name``: structlog once configured, stdlib logging until then."""
    return _LazyLogger(name)
