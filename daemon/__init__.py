"""The aclprof host daemon (``aclprofd``): collects per-operator timings from the inference
processes of a host over a Unix socket (daemon/PROTOCOL.md), aggregates them, keeps the raw
records in rotating segment files, serves the ``aclprof`` CLI and Prometheus.

Modules: :mod:`daemon.config` (settings), :mod:`daemon.server` (the event loop),
:mod:`daemon.aggregate` (per-op statistics), :mod:`daemon.storage` (segment files),
:mod:`daemon.filters` (request filters), :mod:`daemon.sockets` (socket set-up, sd_notify), :mod:`daemon.metrics` (Prometheus),
:mod:`daemon.logsetup` (structlog), :mod:`daemon.main` (the ``aclprofd`` command).
"""

__version__ = "0.1.0"
