"""Prometheus metrics of the daemon, served by ``prometheus_client`` on 127.0.0.1 by default.

One custom collector in a dedicated ``CollectorRegistry`` (never the global one: embedding
or testing two daemons in one process must not collide) reads, at scrape time, the
counters snapshot the loop publishes (:mod:`aclprofd.status`; STATUS reports the same
object), so ingestion never calls ``observe()`` per record and the HTTP thread never walks
the loop's live connections. Series:

- ``aclprofd_op_duration_seconds`` histogram, labels host (the daemon's
  ``prometheus_host_label``: one daemon is one host), service (the agent's, "" if none),
  device, model (the model label the service gave in WATCH, else the model id as text),
  op_type (and op_name with ``prometheus_op_name``); pid is no label (label budget:
  daemon/README.md). Buckets are powers of two of nanoseconds (128 ns .. ~17 s), exact bin
  edges of the aggregator's histograms, the same on every host. Never reset (``RESET``
  only resets the aggregates that ``aclprof top`` shows).
- ``aclprofd_records_total``, ``aclprofd_agent_dropped_records_total{pid,service}``,
  ``aclprofd_connected_agents``, ``aclprofd_agent_lag_seconds{pid,service}``,
  ``aclprofd_storage_bytes``, ``aclprofd_stream_skipped_records_total``,
  ``aclprofd_protocol_errors_total``, ``aclprofd_aggregate_keys``,
  ``aclprofd_aggregate_other_records_total``, ``aclprofd_storage_write_errors_total``,
  ``aclprofd_records_rejected_total{reason}`` (impossible values refused at ingest),
  ``aclprofd_memory_budget_bytes``, ``aclprofd_memory_used_bytes``,
  ``aclprofd_memory_refused_total{what}`` (requests refused by the memory budget),
  ``aclprofd_internal_errors_total``, ``aclprofd_connections_refused_total``,
  ``aclprofd_control_idle_closed_total``, ``aclprofd_accept_errors_total``,
  ``aclprofd_connections_peer_gone_total`` (peers that left before reading their replies:
  no protocol error), ``aclprofd_connections_open``, ``aclprofd_names_truncated_total``,
  ``aclprofd_storage_corrupt_chunks_total``,
  ``aclprofd_storage_records_lost_total``, ``aclprofd_storage_names_skipped_total``,
  ``aclprofd_reply_items_truncated_total{what}`` (items replies left out to fit their
  frame: STATUS ``replies_truncated``)
  (the hardening counters; STATUS reports the same numbers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from .aggregate.aggregator import PROM_EXPONENTS, Aggregator
from .capture.metrics import capture_families
from .detector.engine import DetectorView
from .detector.metrics import detector_families
from .limits_metrics import limit_families
from .status import CountersSnapshot

__all__ = ["Metrics", "DaemonCollector"]

_LE = [floatToGoString(2.0**k * 1e-9) for k in PROM_EXPONENTS] + ["+Inf"]


class _DetectorViews(Protocol):
    @property
    def published(self) -> DetectorView: ...


class MetricsSource(Protocol):
    """What /metrics reads of the daemon (:class:`aclprofd.server.Daemon`), each one
    immutable or locked: the published counters snapshot, the aggregator's histograms, the
    detector's published view; and the flight recorder's counters (``captures``, optional)."""

    @property
    def published(self) -> CountersSnapshot: ...
    @property
    def aggregator(self) -> Aggregator: ...
    @property
    def detection(self) -> _DetectorViews: ...


class DaemonCollector:
    """Reads, at scrape time on the HTTP server's thread, the counters snapshot the daemon's
    loop last published (one immutable object: the same numbers STATUS reports) and the
    aggregator's histograms (under the aggregator's own lock)."""

    def __init__(self, daemon: MetricsSource, by_name: bool = False, host_label: str = ""):
        self.daemon = daemon
        self.by_name = by_name
        self.host_label = host_label

    def describe(self) -> list[Any]:
        return []  # no registration-time collect (the daemon may not be running yet)

    def collect(self) -> Iterator[Any]:
        s = self.daemon.published  # one attribute read: a consistent snapshot
        yield CounterMetricFamily("aclprofd_records", "Op records received from agents", value=s.records_total)
        drops = CounterMetricFamily("aclprofd_agent_dropped_records",
                                    "Records agents reported lost (LOSS frames)", labels=["pid", "service"])
        for (pid, service), n in s.drops_by_agent:
            drops.add_metric([str(pid), service], n)
        yield drops
        yield GaugeMetricFamily("aclprofd_connected_agents", "Connected agent processes", value=len(s.agents))
        lag = GaugeMetricFamily("aclprofd_agent_lag_seconds",
                                "Receive time minus the newest op end time of the agent's last batch",
                                labels=["pid", "service"])
        for a in s.agents:
            if a.lag_ns is not None:
                lag.add_metric([str(a.pid), a.service or ""], a.lag_ns / 1e9)
        yield lag
        st = s.storage or {}
        yield GaugeMetricFamily("aclprofd_storage_bytes", "Bytes in segment files", value=st.get("bytes", 0))
        yield CounterMetricFamily("aclprofd_storage_write_errors", "Failed segment writes",
                                  value=st.get("write_errors", 0))
        yield CounterMetricFamily("aclprofd_stream_skipped_records",
                                  "Records not sent to slow STREAM clients", value=s.stream_skipped_total)
        yield CounterMetricFamily("aclprofd_protocol_errors", "Connections closed for a protocol error",
                                  value=s.protocol_errors)
        yield GaugeMetricFamily("aclprofd_aggregate_keys", "Aggregate keys in use", value=s.aggregate_keys)
        yield CounterMetricFamily("aclprofd_aggregate_other_records",
                                  "Records aggregated under '(other)' (key cap reached)",
                                  value=s.aggregate_other_records)
        rejected = CounterMetricFamily("aclprofd_records_rejected",
                                       "Records refused at ingest for impossible values", labels=["reason"])
        for reason, n in s.records_rejected:
            rejected.add_metric([reason], n)
        yield rejected
        yield GaugeMetricFamily("aclprofd_memory_budget_bytes", "The memory_budget setting", value=s.memory_budget)
        yield GaugeMetricFamily("aclprofd_memory_used_bytes",
                                "Bytes held for clients (queued replies, name tables, unstored records)",
                                value=s.memory_used)
        refused = CounterMetricFamily("aclprofd_memory_refused",
                                      "Requests refused by the memory budget, by what they would have grown",
                                      labels=["what"])
        for what, n in s.memory_refused:
            refused.add_metric([what], n)
        yield refused
        cut = CounterMetricFamily("aclprofd_reply_items_truncated",
                                  "Items replies left out to fit their frame (status.agents, snapshot.rows, "
                                  "baseline.rows, ...)", labels=["what"])
        for what, n in (s.replies_truncated.get("items") or {}).items():
            cut.add_metric([what], n)
        yield cut
        for name, doc, value in (
                ("aclprofd_internal_errors", "Connections closed for an exception while serving them (a bug)",
                 s.internal_errors),
                ("aclprofd_connections_refused", "Connections refused or evicted by the connection limits",
                 s.connections_refused),
                ("aclprofd_control_idle_closed", "Control connections closed for idling", s.idle_closed),
                ("aclprofd_accept_errors", "Failed accept() calls (accepting paused)", s.accept_errors),
                ("aclprofd_connections_peer_gone", "Connections whose peer left before reading its replies "
                 "(not a protocol error)", s.peer_gone),
                ("aclprofd_names_truncated", "Op names/types cut to the name length limit at ingest",
                 s.names_truncated),
                ("aclprofd_storage_corrupt_chunks", "Damaged segment chunks met while reading (rest of file skipped)",
                 st.get("corrupt_chunks", 0)),
                ("aclprofd_storage_records_lost", "Records not stored because a segment write failed",
                 st.get("records_lost", 0)),
                ("aclprofd_storage_names_skipped", "Segment file names skipped because something else had them",
                 st.get("names_skipped", 0))):
            yield CounterMetricFamily(name, doc, value=value)
        yield GaugeMetricFamily("aclprofd_connections_open", "Client connections open now",
                                value=s.open_connections)
        # aclprof trace routing (issue 19): agents matched but not asked, answers not believed
        tr = dict(s.traces)
        not_asked = CounterMetricFamily("aclprofd_trace_agents_not_asked",
                                        "Agents a TRACE matched but did not ask, by why", labels=["reason"])
        for reason, key in (("not_owner", "impostors_excluded"), ("silent", "silent_excluded"),
                            ("busy", "busy_excluded")):
            not_asked.add_metric([reason], tr.get(key, 0))
        yield not_asked
        yield CounterMetricFamily("aclprofd_trace_stragglers_cut", "Traced agents reported silent after "
                                  "trace_straggler_grace", value=tr.get("stragglers_cut", 0))
        yield CounterMetricFamily("aclprofd_trace_dirs_refused", "TRACE_DONE directories not believed "
                                  "(not the replying uid's session directories)", value=tr.get("dirs_refused", 0))
        yield from limit_families(s)  # per-reason refusals, agents, shared tables (issue 19)
        by_name = self.by_name  # one read: SIGHUP may change it meanwhile
        labels = ["host", "service", "device", "model", "op_type"] + (["op_name"] if by_name else [])
        hist = HistogramMetricFamily("aclprofd_op_duration_seconds",
                                     "Op durations by service, device, model and op type", labels=labels)
        for lab, cum, count, sum_ns in self.daemon.aggregator.prometheus_view(by_name):
            buckets = [(le, float(v)) for le, v in zip(_LE[:-1], cum[:-1].tolist())] + [("+Inf", float(count))]
            hist.add_metric([self.host_label, *lab], buckets, sum_ns / 1e9)
        yield hist
        yield from detector_families(self.daemon.detection.published)
        yield from capture_families(getattr(self.daemon, "captures", None))


class Metrics:
    """The HTTP endpoint (a daemon thread of prometheus_client); :meth:`close` stops it."""

    def __init__(self, daemon: MetricsSource, host: str, port: int, by_name: bool = False, host_label: str = ""):
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = DaemonCollector(daemon, by_name, host_label)
        self.registry.register(self.collector)
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = self._server.server_address[1]

    @property
    def by_name(self) -> bool:
        return self.collector.by_name

    @by_name.setter
    def by_name(self, value: bool) -> None:
        self.collector.by_name = value

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
