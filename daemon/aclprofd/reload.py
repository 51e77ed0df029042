"""SIGHUP and the daemon's signal handlers: reopen the logs, apply a reloaded config.

:func:`apply_reload` runs on the loop's thread between two turns (a signal handler only
sets a flag): it reopens the log file (logrotate), re-reads the configuration when the
daemon was given a way to, applies the options marked live and logs which changed options
need a restart. :func:`signal_handlers` installs the handlers of ``aclprofd`` for the
duration of :meth:`aclprofd.server.Daemon.run` and restores the previous ones. Kept apart
from :mod:`aclprofd.server` so that the loop only decides *when* a reload happens.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol

import structlog

from .aggregate.aggregator import Aggregator
from .config import Settings, changed
from .detector.service import DetectorService
from .memory import Memory
from .storage import Storage

__all__ = ["apply_reload", "signal_handlers", "ReloadTarget"]

_log = structlog.get_logger("aclprofd")


class _ConnLimits(Protocol):
    """The connection limits (:class:`aclprofd.connlimits.ConnLimits`)."""

    max_control: int
    control_idle_s: float
    agent_idle_s: float
    max_agents_per_uid: int


class _Limited(Protocol):
    @property
    def limits(self) -> _ConnLimits: ...


class ReloadTarget(Protocol):
    """What a reload changes in the daemon (:class:`aclprofd.server.Daemon`): its settings
    and the live copies of them that its parts keep."""

    settings: Settings
    storage: Storage | None
    metrics: Any  # aclprofd.metrics.Metrics (its by_name), None without the endpoint

    @property
    def transport(self) -> _Limited: ...
    @property
    def detection(self) -> DetectorService: ...
    @property
    def memory(self) -> Memory: ...
    @property
    def aggregator(self) -> Aggregator: ...


def apply_reload(d: ReloadTarget, reload: Callable[[], Settings] | None) -> None:
    """Reopen the logs; with ``reload``, apply the live options of the settings it returns."""
    from . import logsetup
    from .config import OPTIONS
    logsetup.reopen()
    if reload is None:
        _log.info("reopened logs")
        return
    try:
        new = reload()
    except Exception as exc:  # a bad config file must not kill a running daemon
        _log.error("config reload failed; keeping the running settings", error=str(exc))
        return
    problem = d.memory.too_small(new.memory_budget_bytes)
    if problem:  # the running budget stays: a smaller one would leave clients too little
        _log.error("config reload: memory_budget refused; keeping the running one", error=problem)
        new = replace(new, memory_budget_bytes=d.memory.budget)
    live, restart = changed(d.settings, new)
    live_fields = {o.field: getattr(new, o.field) for o in OPTIONS if o.live}
    d.settings = applied = replace(d.settings, **live_fields)
    if d.storage is not None:
        d.storage.segment_bytes = applied.segment_bytes
        d.storage.disk_bytes = applied.disk_bytes
        d.storage.max_age_s = d.storage.losses.max_age_s = applied.max_age_s
        d.storage.encode = applied.segment_format == "compact"
    if d.metrics is not None:
        d.metrics.by_name = applied.prometheus_op_name
    d.aggregator.prom_by_name = applied.prometheus_op_name
    limits = d.transport.limits
    limits.max_control, limits.control_idle_s = applied.max_control_connections, applied.control_idle_timeout_s
    limits.agent_idle_s, limits.max_agents_per_uid = applied.agent_idle_timeout_s, applied.max_agent_connections_per_uid
    d.memory.budget = applied.memory_budget_bytes
    d.aggregator.keys.shares.per_owner = applied.max_keys_per_agent
    d.aggregator.keys.shares.per_uid = applied.max_keys_per_uid
    d.detection.reload(applied)
    logsetup.configure(applied.log_level, applied.log_format, applied.log_file)
    _log.info("config reloaded", changed=live, needs_restart=restart)


@contextmanager
def signal_handlers(on_stop: Callable[[], None], on_hup: Callable[[], None], wake_fd: int) -> Iterator[None]:
    """SIGTERM and SIGINT call ``on_stop``, SIGHUP ``on_hup`` (main thread only); a signal
    also writes to ``wake_fd`` so that the loop's select returns. The previous handlers
    and wakeup fd are restored on the way out."""
    def stop(signum: int, frame: Any) -> None:
        on_stop()

    def hup(signum: int, frame: Any) -> None:
        on_hup()
    old_handlers: dict[int, Any] = {}
    for sig, h in ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, hup)):
        old_handlers[sig] = signal.signal(sig, h)
    old_wakeup = signal.set_wakeup_fd(wake_fd, warn_on_full_buffer=False)
    try:
        yield
    finally:
        for signum, old in old_handlers.items():
            signal.signal(signum, old)
        signal.set_wakeup_fd(old_wakeup if old_wakeup is not None else -1)
