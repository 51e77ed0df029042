"""The aclprof host daemon (``aclprofd``): collects per-operator timings from the inference
processes of a host over a Unix socket (daemon/PROTOCOL.md), aggregates them, keeps the raw
records in rotating segment files, serves the ``aclprof`` CLI and Prometheus.

Modules: :mod:`aclprofd.config` (settings), :mod:`aclprofd.server` (the event loop),
:mod:`aclprofd.aggregate` (per-op statistics), :mod:`aclprofd.storage` (segment files),
:mod:`aclprofd.filters` (request filters), :mod:`aclprofd.sockets` (socket set-up, sd_notify), :mod:`aclprofd.metrics` (Prometheus),
:mod:`aclprofd.logsetup` (structlog), :mod:`aclprofd.main` (the ``aclprofd`` command).
"""

from aclprof._version import __version__

__all__ = ["__version__"]
