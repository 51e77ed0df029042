"""Request bills as OTLP trace spans, for services traced with OpenTelemetry: what
``aclprof otlp --traces`` (:mod:`aclprof.cli.otlp`) pushes (issue 25). Optional: it needs the
``otlp`` extra (``pip install 'aclprof[otlp]'``); nothing else imports it.

The SDK builds and encodes the spans (no protobuf written here): one ``TracerProvider`` per
process that sent bills (its resource: ``service.name``, ``host.name``, ``process.pid``), the
``ALWAYS_ON`` sampler (every bill asked for is pushed, whatever the parent's sampled flag),
and ``OTLPSpanExporter`` in requests of at most :data:`BATCH_SPANS` spans.

One span per bill (README "Request bills in OpenTelemetry traces" has the table):

- name :data:`SPAN_NAME`, kind INTERNAL, start ``start_unix_ns`` (the request's first window on
  the agent host's unix clock), end ``start + wall_ns``;
- parent: the request's W3C ``traceparent`` (:mod:`aclprof.protocol.traceparent`) as a remote
  parent, so the span sits in the service's own trace under the span that made the request;
  without one, the span is the root of a trace of its own;
- ids derived from the bill (a hash of host, pid, service, request id and start), not random:
  a bill pushed twice (overlapping windows, a retried timer run) is the same span, which a
  backend keeps once; a trace id without a traceparent comes from the same hash;
- attributes ``aclprof.request.*``: ``id``, ``service``, ``models`` (int array), ``device_ns``,
  ``device_share`` (device time / wall time), ``ops``, ``complete``, the slowest op
  (``slowest_op.type``, ``.name``, ``.device_ns``), and each of the request's own attributes as
  ``aclprof.request.attr.<name>``;
- one event :data:`EVENT_NAME` per op type of the bill (most device time first; the agent
  folds types past the 16th into ``"(other)"``) with ``aclprof.op_type``,
  ``aclprof.op_type.device_ns`` and ``aclprof.op_type.count``, stamped at the span's end.
  Events, not child spans: a bill has each type's summed device time, not when it ran, and a
  child span would draw an interval that never happened.

A bill whose traceparent does not parse (an older agent checked less) still becomes a span, in a
trace of its own, with the parse error in ``aclprof.request.traceparent_error`` (counted). A
bill without ``start_unix_ns`` (an agent older than the field) cannot be placed in time: it is
not pushed and is counted in :attr:`Spans.no_start`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aclprof.protocol import traceparent as w3c
from aclprof.protocol.version import __version__

__all__ = ["SPAN_NAME", "EVENT_NAME", "BATCH_SPANS", "Spans", "spans", "push_spans", "span_ids", "require"]

SPAN_NAME = "aclprof.request"
EVENT_NAME = "aclprof.op_type"
BATCH_SPANS = 512  # spans per request (a span with 17 events is ~2 KB: ~1 MB, under receivers' 4 MiB)
_MASK64 = (1 << 64) - 1


@dataclass
class Spans:
    """The SDK's finished spans of some bills, ready to push, and what could not be one."""

    spans: list[Any] = field(default_factory=list)  # opentelemetry.sdk.trace.ReadableSpan
    no_start: int = 0  # bills without start_unix_ns: not pushed
    bad_traceparent: int = 0  # bills pushed as their own trace, the parse error in an attribute


def span_ids(bill: Mapping[str, Any]) -> tuple[int, int]:
    """(trace id, span id) derived from the bill: the trace id is used only when the bill has
    no valid traceparent. Never zero (zero means invalid in OpenTelemetry)."""
    key = json.dumps([bill.get(k) for k in ("host", "pid", "service", "id", "start_unix_ns")])  # unambiguous
    h = hashlib.blake2b(key.encode(), digest_size=24).digest()
    trace_id = int.from_bytes(h[:16], "big") or 1
    span_id = int.from_bytes(h[16:], "big") & _MASK64 or 1
    return trace_id, span_id


class _BillIds:
    """The provider's id generator: hands out the ids :func:`span_ids` derived for the bill
    whose span starts next (the SDK asks once per started span)."""

    def __init__(self) -> None:
        self.trace_id = self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id

    def is_trace_id_random(self) -> bool:
        return False


def _sdk() -> Any:
    from aclprof.exportfmt.otlp import OtlpUnavailable

    try:
        from opentelemetry import trace as api
        from opentelemetry.sdk import trace as sdk
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk.trace.id_generator import IdGenerator
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    except ImportError as exc:
        raise OtlpUnavailable(f"the OpenTelemetry SDK is not installed ({exc}): pip install 'aclprof[otlp]'") from None
    IdGenerator.register(_BillIds)
    return api, sdk, Resource, SimpleSpanProcessor, InMemorySpanExporter, ALWAYS_ON


def require() -> None:
    """:class:`~aclprof.exportfmt.otlp.OtlpUnavailable` unless the SDK and its OTLP/HTTP
    exporter import (checked before any work, so a missing extra is said first)."""
    from aclprof.exportfmt.otlp import OtlpUnavailable

    _sdk()
    try:
        from opentelemetry.exporter.otlp.proto.http import trace_exporter  # noqa: F401
    except ImportError as exc:
        raise OtlpUnavailable(f"the OTLP/HTTP exporter is not installed ({exc}): pip install 'aclprof[otlp]'") \
            from None


def _attributes(bill: Mapping[str, Any]) -> dict[str, Any]:
    wall, dev = int(bill.get("wall_ns") or 0), int(bill.get("device_ns") or 0)
    a: dict[str, Any] = {
        "aclprof.request.id": str(bill.get("id", "")),
        "aclprof.request.service": str(bill.get("service") or ""),
        "aclprof.request.models": [int(m) for m in bill.get("models") or []],
        "aclprof.request.device_ns": dev,
        "aclprof.request.device_share": dev / wall if wall else 0.0,
        "aclprof.request.ops": int(bill.get("ops") or 0),
        "aclprof.request.complete": bill.get("complete") is True,
    }
    slowest = bill.get("slowest")
    if slowest:
        a["aclprof.request.slowest_op.type"] = str(slowest[0])
        a["aclprof.request.slowest_op.name"] = str(slowest[1])
        a["aclprof.request.slowest_op.device_ns"] = int(slowest[2])
    for k, v in (bill.get("attrs") or {}).items():
        a[f"aclprof.request.attr.{k}"] = str(v)
    return a


def spans(bills: Iterable[Mapping[str, Any]]) -> Spans:
    """The span of each bill (``aclprof requests --json`` objects: a REQUESTS reply's bills),
    made by the SDK as the module docstring says; nothing is sent."""
    api, sdk, resource_cls, processor_cls, memory_cls, always_on = _sdk()
    out = Spans()
    memory = memory_cls()
    ids = _BillIds()
    tracers: dict[tuple[str, str, int], Any] = {}
    providers = []
    try:
        for bill in bills:
            start = bill.get("start_unix_ns")
            if start is None:
                out.no_start += 1
                continue
            proc = (str(bill.get("service") or ""), str(bill.get("host") or ""), int(bill.get("pid") or 0))
            tracer = tracers.get(proc)
            if tracer is None:
                provider = sdk.TracerProvider(
                    sampler=always_on, id_generator=ids,
                    resource=resource_cls.create({"service.name": proc[0] or "unknown_service",
                                                  "host.name": proc[1], "process.pid": proc[2]}))
                provider.add_span_processor(processor_cls(memory))
                providers.append(provider)
                tracer = tracers[proc] = provider.get_tracer("aclprof", __version__)
            ids.trace_id, ids.span_id = span_ids(bill)
            attrs = _attributes(bill)
            context = None
            tp = bill.get("traceparent")
            if tp is not None:
                try:
                    parent = w3c.parse(tp)
                except ValueError as exc:
                    out.bad_traceparent += 1
                    attrs["aclprof.request.traceparent_error"] = str(exc)
                else:
                    context = api.set_span_in_context(api.NonRecordingSpan(api.SpanContext(
                        parent.trace_id, parent.parent_id, is_remote=True, trace_flags=api.TraceFlags(parent.flags))))
            end = int(start) + int(bill.get("wall_ns") or 0)
            span = tracer.start_span(SPAN_NAME, context=context, attributes=attrs, start_time=int(start))
            for t in bill.get("types") or []:
                span.add_event(EVENT_NAME, {"aclprof.op_type": str(t[0]), "aclprof.op_type.device_ns": int(t[1]),
                                            "aclprof.op_type.count": int(t[2])}, timestamp=end)
            span.end(end_time=end)
        out.spans = list(memory.get_finished_spans())
    finally:
        for provider in providers:
            provider.shutdown()
    return out


def push_spans(made: Spans, endpoint: str, headers: Mapping[str, str] | None = None, timeout: float = 10.0) -> None:
    """Send the spans to an OTLP/HTTP (protobuf) traces endpoint with the SDK's
    ``OTLPSpanExporter``, :data:`BATCH_SPANS` per request; :class:`OtlpPushFailed` unless all
    were accepted (saying how many requests were)."""
    from aclprof.exportfmt.otlp import OtlpPushFailed, OtlpUnavailable

    if not made.spans:
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult
    except ImportError as exc:
        raise OtlpUnavailable(f"the OTLP/HTTP exporter is not installed ({exc}): pip install 'aclprof[otlp]'") \
            from None
    # Any: the SDK's shutdown is untyped, and mypy runs without the extra too
    exporter: Any = OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout)
    sent = 0
    try:
        for i in range(0, len(made.spans), BATCH_SPANS):
            batch = made.spans[i:i + BATCH_SPANS]
            if exporter.export(batch) is not SpanExportResult.SUCCESS:
                raise OtlpPushFailed(f"{endpoint} did not accept the spans ({sent:,} of {len(made.spans):,} were "
                                     "accepted before; the exporter's log says why)")
            sent += len(batch)
    finally:
        exporter.shutdown()
