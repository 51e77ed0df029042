"""Prometheus metrics of the daemon: /metrics on 127.0.0.1:9464 by default.

:class:`DaemonCollector` reads, at scrape time, the counters snapshot the loop publishes
(:mod:`aclprofd.status`; STATUS reports the same object), the aggregator's histograms and
the detector's and flight recorder's published figures, so ingestion never calls
``observe()`` per record and the HTTP thread never walks the loop's live connections.
:class:`Metrics` serves them: its own listener (:mod:`aclprofd.httpd`: one thread,
timeouts, a connection cap), its access rule (:mod:`aclprofd.metrics_access`) and a text
rendered within the series budget and the memory budget (:mod:`aclprofd.promtext`;
daemon/README.md "Prometheus series budget"). Series:

Series:

- ``aclprofd_op_duration_seconds`` histogram, labels host (the daemon's
  ``prometheus_host_label``: one daemon is one host), service (the agent's, "" if none),
  device, model (the model label the service gave in WATCH, else the model id as text),
  op_type (and op_name with ``prometheus_op_name``); pid is no label (label budget:
  daemon/README.md). Buckets are powers of two of nanoseconds (128 ns .. ~17 s), exact bin
  edges of the aggregator's histograms, the same on every host. Never reset (``RESET``
  only resets the aggregates that ``aclprof top`` shows).
- ``aclprofd_op_duration_fine_seconds`` histogram, labels host, service, model, op_type (and
  op_name): the same records with the devices summed, 8 buckets per power of two (every bin
  edge of the aggregates, 128 ns .. ~17 s): what the fleet view, the recording rules and the
  dashboards' quantiles read (histogram_quantile within 5 %; daemon/README.md "Fine buckets").
- ``aclprofd_request_device_seconds`` histogram, labels host, service, model (the labels of
  the models the request ran joined by "+", "" for a request without ops): the device time of
  each request bill (issue 25), the op histogram's buckets; at most
  aclprofd.bills.MAX_HIST_SETS label sets, each charged to its agent's share like the op ones.
- ``aclprofd_records_total``, ``aclprofd_agent_dropped_records_total{pid,service}``,
  ``aclprofd_connected_agents``, ``aclprofd_agent_lag_seconds{pid,service}``,
  ``aclprofd_storage_bytes``, ``aclprofd_stream_skipped_records_total``,
  ``aclprofd_protocol_errors_total``, ``aclprofd_aggregate_keys``,
  ``aclprofd_aggregate_other_records_total``, ``aclprofd_storage_write_errors_total``,
  ``aclprofd_records_rejected_total{reason}`` (impossible values refused at ingest),
  ``aclprofd_memory_budget_bytes``, ``aclprofd_memory_used_bytes``, ``aclprofd_memory_own_bytes``,
  ``aclprofd_memory_clients_share_bytes``, ``aclprofd_memory_refused_total{what}`` (requests
  refused by the memory budget),
  ``aclprofd_internal_errors_total``, ``aclprofd_connections_refused_total``,
  ``aclprofd_control_idle_closed_total``, ``aclprofd_accept_errors_total``,
  ``aclprofd_connections_peer_gone_total`` (peers that left before reading their replies:
  no protocol error), ``aclprofd_connections_open``, ``aclprofd_names_truncated_total``,
  ``aclprofd_storage_corrupt_chunks_total``,
  ``aclprofd_storage_records_lost_total``, ``aclprofd_storage_names_skipped_total``,
  ``aclprofd_reply_items_truncated_total{what}`` (items replies left out to fit their
  frame: STATUS ``replies_truncated``), ``aclprofd_loop_stalls_total{step}`` (loop turns of
  100 ms or more by their longest step: :mod:`aclprofd.stalls`)
  (the hardening counters; STATUS reports the same numbers).
- the endpoint's own: ``aclprofd_metrics_series``, ``aclprofd_metrics_series_refused{reason}``
  (left out by the series budget: ``agent_share``, ``total``, ``bytes``),
  ``aclprofd_metrics_agents_over_share``, ``aclprofd_metrics_bytes``,
  ``aclprofd_metrics_render_seconds``, ``aclprofd_metrics_requests_total`` and
  ``aclprofd_metrics_requests_refused_total{reason}`` (STATUS ``metrics`` has them too).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol, cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from .aggregate.aggregator import PROM_EXPONENTS, Aggregator
from .capture.metrics import capture_families
from .config import Settings
from .detector.engine import DetectorView
from .detector.metrics import detector_families
from .httpd import HttpServer, Request, Response
from .limits_metrics import by_label, limit_families
from .loopjobs import JobNotDone, LoopJobs
from .memory import Memory
from .metrics_access import Access, AccessError, check_bind
from .promtext import FINE_LE, Budget, Rendering, TextBuilder, family_text, histogram_steps
from .status import CountersSnapshot

__all__ = ["Metrics", "DaemonCollector", "HISTOGRAM", "FINE_HISTOGRAM", "histogram_labels", "fine_labels", "FRESH_S",
           "CONTENT_TYPE"]

#: a rendering serves the scrapes that arrive within this of its end
FRESH_S = 1.0
#: a scrape waits this long at most for the loop to render (then 503 render_not_done)
RENDER_TIMEOUT_S = 30.0
#: bytes kept under the /metrics share for the endpoint's own few lines
OWN_BYTES = 4 << 10
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HISTOGRAM = "aclprofd_op_duration_seconds"
HISTOGRAM_DOC = "Op durations by service, device, model and op type"
#: 8 buckets per power of two (the aggregates' own bin edges), devices summed: the fleet
#: view, the recording rules and the dashboards' quantiles read it (daemon/README.md "Fine buckets")
FINE_HISTOGRAM = "aclprofd_op_duration_fine_seconds"
FINE_DOC = "Op durations by service, model and op type (devices summed), 8 buckets per power of two"
#: request bills (issue 25): each bill's device time, by service and the models it ran
REQUEST_HISTOGRAM = "aclprofd_request_device_seconds"
REQUEST_DOC = "Device time of the requests agents billed (aclprof.request), by service and the models they ran"
REQUEST_LABELS = ["host", "service", "model"]


def histogram_labels(by_name: bool) -> list[str]:
    return ["host", "service", "device", "model", "op_type"] + (["op_name"] if by_name else [])


def fine_labels(by_name: bool) -> list[str]:
    return ["host", "service", "model", "op_type"] + (["op_name"] if by_name else [])

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
    def publish(self) -> CountersSnapshot: ...
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
        """Every family, unbounded (``prometheus_client``'s registry API: tests, embedding);
        the endpoint renders the same families within the series budget (:meth:`Metrics.render`)."""
        s = self.daemon.published  # one attribute read: a consistent snapshot
        yield from self.fixed_families(s)
        by_name = self.by_name  # one read: SIGHUP may change it meanwhile
        hist = HistogramMetricFamily(HISTOGRAM, HISTOGRAM_DOC, labels=histogram_labels(by_name))
        for lab, cum, count, sum_ns in self.daemon.aggregator.prometheus_view(by_name):
            buckets = [(le, float(v)) for le, v in zip(_LE[:-1], cum[:-1].tolist())] + [("+Inf", float(count))]
            hist.add_metric([self.host_label, *lab], buckets, sum_ns / 1e9)
        yield hist
        fine = HistogramMetricFamily(FINE_HISTOGRAM, FINE_DOC, labels=fine_labels(by_name))
        for lab, cum, count, sum_ns in self.daemon.aggregator.prometheus_fine_series(by_name)[0]:
            buckets = [(le, float(v)) for le, v in zip(FINE_LE[:-1], cum[:-1].tolist())] + [("+Inf", float(count))]
            fine.add_metric([self.host_label, *lab], buckets, sum_ns / 1e9)
        yield fine
        req = HistogramMetricFamily(REQUEST_HISTOGRAM, REQUEST_DOC, labels=REQUEST_LABELS)
        for lab, cum, count, sum_ns in s.request_hist[0]:
            buckets = [(le, float(v)) for le, v in zip(_LE[:-1], cum[:-1].tolist())] + [("+Inf", float(count))]
            req.add_metric([self.host_label, *lab], buckets, sum_ns / 1e9)
        yield req
        yield from detector_families(self.daemon.detection.published)
        yield from capture_families(getattr(self.daemon, "captures", None))

    def fixed_families(self, s: CountersSnapshot) -> Iterator[Any]:
        """The families of the counters snapshot: their series are bounded by the
        connection limits (one or two per agent connection) and a few reasons."""
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
        yield by_label(CounterMetricFamily, "aclprofd_records_rejected",
                       "Records refused at ingest for impossible values", "reason", s.records_rejected)
        yield GaugeMetricFamily("aclprofd_memory_budget_bytes", "The memory_budget setting", value=s.memory_budget)
        yield GaugeMetricFamily("aclprofd_memory_used_bytes",
                                "Bytes held for clients (queued replies, name tables, unstored records)",
                                value=s.memory_used)
        own = dict(s.memory_own)
        yield GaugeMetricFamily("aclprofd_memory_own_bytes", "Bytes of memory_budget the daemon holds itself "
                                "(its base at start and its aggregate and detector tables)",
                                value=own.get("base_bytes", 0) + own.get("tables_bytes", 0))
        yield GaugeMetricFamily("aclprofd_memory_clients_share_bytes", "Bytes of memory_budget clients may make "
                                "the daemon hold (the budget less its own and an eighth for allocator slack)",
                                value=own.get("clients_share_bytes", 0))
        yield by_label(CounterMetricFamily, "aclprofd_memory_refused",
                       "Requests refused by the memory budget, by what they would have grown", "what",
                       s.memory_refused)
        yield by_label(CounterMetricFamily, "aclprofd_reply_items_truncated",
                       "Items replies left out to fit their frame (status.agents, snapshot.rows, baseline.rows, ...)",
                       "what", (s.replies_truncated.get("items") or {}).items())
        for name, doc, value in (
                ("aclprofd_internal_errors", "Connections closed for an exception while serving them (a bug)",
                 s.internal_errors),
                ("aclprofd_connections_refused", "Connections refused or evicted by the connection limits",
                 s.connections_refused),
                ("aclprofd_control_idle_closed", "Control connections closed for idling", s.idle_closed),
                ("aclprofd_accept_errors", "Failed accept() calls (accepting paused)", s.accept_errors),
                ("aclprofd_connections_peer_gone", "Connections whose peer left before reading its replies "
                 "(not a protocol error)", s.peer_gone),
                ("aclprofd_loop_slices_cut", "Connections whose slice of a loop turn ended with frames left "
                 "for the next turn (one client's many frames wait, the others are served)", s.slices_cut),
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
        yield by_label(CounterMetricFamily, "aclprofd_loop_stalls", "Event loop turns of 100 ms or more, by their "
                       "longest step (STATUS loop.stalls)", "step", sorted(s.loop_stalls.get("by_step", {}).items()))
        yield from limit_families(s)  # per-reason refusals, agents, shared tables (issue 19)
        yield from failure_families(s.failures)


def failure_families(f: dict[str, Any]) -> Iterator[Any]:
    """AI Core exceptions agents reported (issue 24): one series per (service, device, model,
    op type, code), at most aclprofd.failures.MAX_KEYS of them (later keys: "(other)")."""
    fam = CounterMetricFamily("aclprofd_op_failures", "Op failures (AI Core exceptions) agents reported",
                              labels=["service", "device", "model", "op_type", "code"])
    for service, device, model, op_type, code, n in f.get("by_key", []):
        fam.add_metric([service, str(device), model, op_type, str(code)], n)
    yield fam
    yield CounterMetricFamily("aclprofd_op_failures_unresolved",
                              "Op failures whose model and op type the daemon could not find",
                              value=f.get("unresolved", 0))


class Metrics:
    """The /metrics endpoint: the listener (:class:`aclprofd.httpd.HttpServer`, one thread),
    the access rule (:mod:`aclprofd.metrics_access`) and the rendering within the series
    budget (:mod:`aclprofd.promtext`).

    One rendering serves every scrape that arrives within ``FRESH_S`` of its end. It is
    rendered by the event loop, a slice per turn (:meth:`render_steps`, :mod:`aclprofd.loopjobs`:
    no second thread holds the GIL for the whole rendering while the loop waits); the
    listener is one thread and waits for it, so scrapes that arrive meanwhile share it
    (N parallel scrapes: one rendering, sent N times from the same chunks). The rendering,
    and an older one still being sent, are counted in the memory budget (:meth:`held`).
    Constructing binds (OSError) and checks the access settings (AccessError)."""

    def __init__(self, daemon: MetricsSource, settings: Settings, wake: Callable[[], None]):
        self.daemon = daemon
        #: the renderings run on the event loop in slices (its turns call jobs.pump)
        self.jobs = LoopJobs(wake)
        self.settings = settings
        self.collector = DaemonCollector(daemon, settings.prometheus_op_name, settings.prometheus_host_label)
        self.access = Access(settings)
        self._memory: Memory | None = getattr(daemon, "memory", None)
        self._cache: Rendering | None = None
        self._building: TextBuilder | None = None
        self.renders = 0
        self.last: Rendering | None = None  # the newest rendering (its figures: STATUS)
        self.server = HttpServer(settings.prometheus_host, settings.prometheus_port, self._respond,
                                 max_connections=settings.prometheus_max_connections,
                                 read_timeout=settings.prometheus_read_timeout_s,
                                 write_timeout=settings.prometheus_write_timeout_s)
        try:
            check_bind(settings, self.server.address[0])
        except AccessError:
            self.server.close()
            raise
        self.port = self.server.address[1]
        if self._memory is not None:
            self._memory.holders.append(self.held)
        self.server.start()

    @property
    def by_name(self) -> bool:
        return self.collector.by_name

    @by_name.setter
    def by_name(self, value: bool) -> None:
        self.collector.by_name = value

    def budget(self) -> Budget:
        s = self.settings
        share = self._memory.metrics_share() if self._memory is not None else s.memory_budget_bytes // 4
        return Budget(s.prometheus_max_series, s.prometheus_max_series_per_agent, share)

    # ---- rendering (the event loop, in slices) -------------------------------------------
    def render(self) -> Rendering:
        """A new rendering in one piece, on the calling thread (tests, benchmarks)."""
        steps = self.render_steps()
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                return cast(Rendering, stop.value)

    def _scrape_steps(self) -> Generator[None, None, Rendering]:
        """A scrape's rendering on the event loop: a counters snapshot published now first
        (the loop's own publishing is once a second, aclprofd.status.PUBLISH_S), so a
        scrape shows the counters as they are when its rendering begins."""
        self.daemon.publish()
        return (yield from self.render_steps())

    def render_steps(self) -> Generator[None, None, Rendering]:
        """A new rendering of every family within the budget (see :mod:`aclprofd.promtext`),
        in steps of a family or of promtext.LINES_PER_STEP histogram lines: the event
        loop runs them a slice per turn (:mod:`aclprofd.loopjobs`), its other work between."""
        started = time.monotonic()
        b = self.budget()
        # the endpoint's own lines are always shown (forced): room is kept for them, since a
        # large histogram label set (a fine one: 220 lines) can fill the text to the cap
        out = self._building = TextBuilder(dataclasses.replace(b, max_bytes=max(b.max_bytes - OWN_BYTES, 0)))
        try:
            col = self.collector
            for fam in col.fixed_families(self.daemon.published):
                family_text(out, fam)
                yield
            by_name = col.by_name
            agg = self.daemon.aggregator
            # each histogram family has its own per-agent share (of the same size); the
            # total and the bytes bound them together (daemon/README.md "Fine buckets")
            agents_over: set[tuple[str, int]] = set()
            series, owners = agg.prometheus_series(by_name)
            yield
            yield from histogram_steps(out, HISTOGRAM, HISTOGRAM_DOC, histogram_labels(by_name), col.host_label,
                                       series, owners, over=agents_over)
            series, owners = agg.prometheus_fine_series(by_name)
            yield
            yield from histogram_steps(out, FINE_HISTOGRAM, FINE_DOC, fine_labels(by_name), col.host_label, series,
                                       owners, les=FINE_LE, over=agents_over)
            series, owners = self.daemon.published.request_hist
            yield from histogram_steps(out, REQUEST_HISTOGRAM, REQUEST_DOC, REQUEST_LABELS, col.host_label, series,
                                       owners, over=agents_over)
            over = len(agents_over)
            del series, owners
            for fam in detector_families(self.daemon.detection.published):
                family_text(out, fam)
                yield
            for fam in capture_families(getattr(self.daemon, "captures", None)):
                family_text(out, fam)
            yield
            for fam in self._own_families(out, over, started):
                family_text(out, fam, force=True)
            r = out.finish(started, over)
        finally:
            self._building = None
        self.renders += 1
        self.last = r
        return r

    def _own_families(self, out: TextBuilder, over: int, started: float) -> Iterator[Any]:
        """The endpoint's own figures (always shown: a few series)."""
        yield GaugeMetricFamily("aclprofd_metrics_series", "Series in this /metrics rendering (before these)",
                                value=out.series)
        yield by_label(GaugeMetricFamily, "aclprofd_metrics_series_refused",
                       "Series left out of this rendering by the series budget, by reason", "reason",
                       out.refused.items())
        yield GaugeMetricFamily("aclprofd_metrics_agents_over_share",
                                "Agents (host, pid) with op duration series left out for their share", value=over)
        yield GaugeMetricFamily("aclprofd_metrics_bytes", "Bytes of this rendering (before these lines)",
                                value=out.size)
        yield GaugeMetricFamily("aclprofd_metrics_render_seconds", "Time to render this text (before these lines)",
                                value=round(time.monotonic() - started, 6))
        yield by_label(CounterMetricFamily, "aclprofd_metrics_requests_refused",
                       "HTTP requests to /metrics refused or timed out, by reason", "reason",
                       sorted(dict(self.server.refused).items()))
        yield CounterMetricFamily("aclprofd_metrics_requests", "HTTP requests to /metrics answered 200",
                                  value=self.server.served)

    def _respond(self, req: Request) -> Response:
        decision = self.access.decide(req.headers.get("authorization"), req.peer, req.local)
        if decision.status != 200:
            extra = {"WWW-Authenticate": 'Bearer realm="aclprofd"'} if decision.status == 401 else {}
            why = {"bad_token": "wrong bearer token", "no_token": "a bearer token is needed from another host",
                   "unknown_peer": "cannot tell which user connected",
                   "forbidden_user": "this user may not read /metrics (daemon/README.md \"Security model\")"}
            body = (why.get(decision.reason, decision.reason) + "\n").encode()
            return Response(decision.status, (body,), len(body),
                            {"Content-Type": "text/plain; charset=utf-8", **extra}, reason=decision.reason)
        r = self._cache
        if r is None or r.started + r.seconds < req.arrived - FRESH_S:
            self._cache = None  # an older one not being sent is garbage now, not held beside the new one
            try:
                r = self._cache = self.jobs.run(self._scrape_steps, RENDER_TIMEOUT_S)
            except JobNotDone as exc:
                body = f"the rendering of /metrics did not end: {exc}\n".encode()
                return Response(503, (body,), len(body), {"Content-Type": "text/plain; charset=utf-8"},
                                reason="render_not_done")
            self._retire(r)
        return Response(200, r.chunks, r.size, {"Content-Type": CONTENT_TYPE}, owner=r)

    def _retire(self, newest: Rendering) -> None:
        """Older renderings still being sent to slow scrapers stay while all of them together
        hold at most twice the /metrics share; beyond it the scrapers of the oldest are closed
        (counted ``superseded``): a few never-reading clients cannot pin one rendering each."""
        limit = 2 * self.budget().max_bytes
        while self.held() > limit:
            olds = [r for r in self.server.held() if r is not newest]
            if not olds:
                return
            self.server.drop_owner(min(olds, key=lambda r: r.started), "superseded")

    def held(self) -> int:
        """Bytes of the renderings held now (cached, being sent, being built): any thread."""
        seen = {id(r): r.size for r in (self._cache, *self.server.held()) if r is not None}
        building = self._building
        return sum(seen.values()) + (building.size if building is not None else 0)

    def stats(self) -> dict[str, Any]:
        """STATUS ``metrics`` (beside host and port): the newest rendering and the listener."""
        r = self.last
        return {"series": r.series if r else 0, "series_refused": dict(r.refused) if r else {},
                "agents_over_share": r.agents_over_share if r else 0, "bytes": r.size if r else 0,
                "render_s": round(r.seconds, 6) if r else 0.0, "renders": self.renders,
                "held_bytes": self.held(), "requests": self.server.served,
                "requests_refused": dict(self.server.refused), "connections_open": len(self.server.conns),
                "max_series": self.settings.prometheus_max_series,
                "max_series_per_agent": self.settings.prometheus_max_series_per_agent}

    def close(self) -> None:
        self.jobs.close()  # a scrape waiting for a rendering is answered 503 (the loop has ended)
        if self._memory is not None and self.held in self._memory.holders:
            self._memory.holders.remove(self.held)
        self.server.close()
        self._cache = self.last = None
