"""The aclprof host daemon (``aclprofd``): collects per-operator timings from the inference
processes of a host over a Unix socket (daemon/PROTOCOL.md), aggregates them, keeps the raw
records in rotating segment files, serves the ``aclprof`` CLI and Prometheus.

Modules, and why the seams are where they are. How they depend on each other: each part
gets what it uses, never the whole daemon: explicit collaborators (the ``Transport``, which
is the ``Outbox`` the parts answer clients through, ``Memory``, ``Persistence``, ``Fanout``,
``Counters``, ...) or, where it reads
settings a SIGHUP replaces or the storage the daemon opens later, the daemon seen through
the part's own small :class:`typing.Protocol` beside it (``FanoutHost``, ``TraceHost``,
``CaptureHost``, ``ControlHost``, ...: the attributes it reads, typed with classes of the
layers below).
No part imports :mod:`aclprofd.server`, none reads another's private attributes, and the
modules form layers without a cycle: ``[tool.importlinter]`` in pyproject.toml lists them
(``lint-imports`` checks it in CI; ``tests/helpers/importgraph.py`` prints the graph).

- :mod:`aclprofd.server`: the event loop and the lifecycle (start, run, the flush timer,
  signals and reload, stop: drain, GOODBYE, END). The one place that decides *when* things
  happen; it composes the parts below and owns no protocol details.
- :mod:`aclprofd.memory` (the memory budget over :meth:`aclprofd.conn.Conn.held`, heap
  trimming), :mod:`aclprofd.socketfile` (the socket file: listen, recreate when removed,
  remove only if ours) and :mod:`aclprofd.reload` (SIGHUP: logs and live config; the signal handlers): the loop's
  own concerns, apart so that the loop reads as the composition it is.
- :mod:`aclprofd.transport`: sockets and frames (accept, read budgets, non-blocking send
  within the memory budget, ERROR-then-close for a protocol error), a part the daemon owns
  and hands the frames' handler to. Apart from the loop so that the rules that keep one
  client from hurting the others are in one small module; with
  :mod:`aclprofd.connlimits`, the connection limits per role (anonymous, control, agents:
  shares, per uid, idle) and :mod:`aclprofd.limits_metrics` (their /metrics series).
- :mod:`aclprofd.shares`: the per-agent shares of the shared tables (aggregate keys,
  detector cells), one rule for both.
- :mod:`aclprofd.conn`: one connection's state (socket, frame reader, outgoing buffer, the
  agent and stream fields). A plain data holder: closing a connection drops everything.
- :mod:`aclprofd.handshake`: HELLO/WELCOME and ``PROTOCOL_VERSION``: the only frame both
  roles send, before a role's dispatch table applies.
- :mod:`aclprofd.ingest`: agent frames (BATCH, NAMES, LOSS, WATCH, UNWATCH), a dispatch
  table by kind. The hot path; its copy rule (a view for the aggregates, one owned copy
  for storage and streams) is stated there.
- :mod:`aclprofd.control`: control requests (STATUS, SNAPSHOT, STREAM, EXPORT, RESET), a
  dispatch table by kind; a kind not in it closes that connection only.
- :mod:`aclprofd.fanout`: records out to control clients (STREAM fan-out with bounded
  buffers and skip counting, EXPORT from storage a frame at a time, END); the part that
  must never make ingestion wait.
- :mod:`aclprofd.records`: the record format between daemon and CLI (JSON Lines), in one
  place for both STREAM and EXPORT.
- :mod:`aclprofd.persist`: records into segment files, the since-start aggregates file.
- :mod:`aclprofd.status`: the counters, their one immutable snapshot (which STATUS and
  /metrics both read), health problems, the STATUS reply.
- :mod:`aclprofd.aggregate` (per-op statistics; a folder: ``aggregator``, ``keys``,
  ``windows``, ``quantiles``, ``groups``, ``npzfile``), :mod:`aclprofd.detector` (regression
  flags; a folder: ``engine``, ``state``, ``dispersion``, ``service``, ``metrics``),
  :mod:`aclprofd.storage` (segment files),
  :mod:`aclprofd.filters` (request filters), :mod:`aclprofd.sockets` (socket set-up,
  sd_notify), :mod:`aclprofd.metrics` (Prometheus: with :mod:`aclprofd.httpd`, its
  listener, :mod:`aclprofd.metrics_access`, who may read it, and :mod:`aclprofd.promtext`,
  the text within the series budget), :mod:`aclprofd.config` (settings),
  :mod:`aclprofd.logsetup` (structlog), :mod:`aclprofd.main` (the ``aclprofd`` command).
- :mod:`aclprofd.ratelimit`: the one rate limit of log lines (at most a burst per period
  and event, and how many were left out), behind both the parts' ``LogLimiter`` and the
  log's last guard (``logsetup.LineGuard``).

- :mod:`aclprofd.capture`, a folder: ``recorder`` (the flight recorder: captures around new
  regression flags), with :mod:`aclprofd.capture.store` (the captures directory and its bounds),
  :mod:`aclprofd.capture.proc` and :mod:`aclprofd.capture.writer` (the child process that
  formats and writes one capture).

Everything runs on the loop's thread except the Prometheus HTTP thread, which reads only
the published snapshot and the aggregator (under its lock), and the capture worker thread,
which waits for a capture writer child and keeps the captures directory.
"""

from aclprof.protocol.version import __version__

__all__ = ["__version__"]
