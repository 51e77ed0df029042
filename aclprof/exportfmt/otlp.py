"""Op durations as OTLP metrics (exponential histograms), for users on OpenTelemetry: what
``aclprof otlp`` (:mod:`aclprof.cli.otlp`) pushes. Optional: it needs the ``otlp`` extra
(``pip install 'aclprof[otlp]'``: the OpenTelemetry SDK and its OTLP/HTTP exporter); nothing
else imports it.

The SDK does the aggregation and the encoding (no protobuf written here): every op record is
one ``Histogram.record(duration_ns)`` of the metric :data:`METRIC` (unit ``ns``), with the
attributes ``service``, ``host``, ``pid``, ``device``, ``model`` and ``op_type``, into an
``ExponentialBucketHistogramAggregation(max_size=MAX_SIZE, max_scale=SCALE)`` with delta
temporality (one push is one window of records: a backend adds windows up). Step keypoints are
not ops: not recorded.

Bucket for bucket, the same histogram as the daemon's aggregates
(:mod:`aclprof.protocol.quantshift`, 8 bins per octave): OTel's scale ``s`` has base ``2**(2**-s)``,
and bucket ``i`` holds ``(base**i, base**(i+1)]``; at scale 3 that is ``(2**(i/8), 2**((i+1)/8)]``,
our bin ``b = i + 1`` (``(2**((b-1)/8), 2**(b/8)]``). So our bin ``b`` is the data point's
``positive.bucket_counts[b - 1 - positive.offset]`` for ``b >= 1`` and ``zero_count`` is our bin 0
(durations of 0). Two differences at the ends of our range, both kept as OTel defines them: a
duration of exactly 1 ns is OTel's bucket -1 (``(2**-1/8, 1]``) and our bin 1, and durations above
``2**40`` ns (18 minutes) stay in OTel's own buckets where ours collect them in one overflow bin. A
series whose durations are all 0 has only ``zero_count``, and the SDK sends it with scale 0 (a scale
means nothing without buckets). :data:`MAX_SIZE` buckets cover 1 ns .. ``2**40`` ns at scale 3, so
the SDK never lowers the scale within our range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aclprof.protocol.quantshift import BINS_PER_OCTAVE, NBINS
from aclprof.protocol.safetext import scrub

__all__ = ["METRIC", "SCALE", "MAX_SIZE", "BATCH_POINTS", "OtlpUnavailable", "OtlpPushFailed", "Collected",
           "collect", "push"]

METRIC = "aclprof.op.duration"
SCALE = 3  # 2**SCALE buckets per power of two: our histogram's BINS_PER_OCTAVE
assert 2**SCALE == BINS_PER_OCTAVE
MAX_SIZE = NBINS  # buckets -1 .. 319 (1 ns .. 2**40 ns) at scale 3, with room to spare
_ATTRS = ("service", "host", "pid", "device", "model", "op_type")
BATCH_POINTS = 1000  # data points per request (about 0.4 MB)


class OtlpUnavailable(RuntimeError):
    """The ``otlp`` extra (the OpenTelemetry SDK and its OTLP/HTTP exporter) is not installed."""


class OtlpPushFailed(RuntimeError):
    """The OTLP endpoint did not accept the metrics."""


@dataclass
class Collected:
    """The SDK's metrics of a window of records, ready to push."""

    data: Any  # opentelemetry.sdk.metrics.export.MetricsData (None: no op record)
    records: int  # records read (keypoints included)
    ops: int  # op records recorded
    series: int  # data points (attribute sets)


def _sdk() -> Any:
    try:
        from opentelemetry.sdk import metrics as sdk_metrics
        from opentelemetry.sdk.metrics import export as sdk_export
        from opentelemetry.sdk.metrics import view as sdk_view
        from opentelemetry.sdk.resources import Resource
    except ImportError as exc:
        raise OtlpUnavailable(f"the OpenTelemetry SDK is not installed ({exc}): pip install 'aclprof[otlp]'") from None
    return sdk_metrics, sdk_export, sdk_view, Resource


def collect(batches: Iterable[list[dict[str, Any]]]) -> Collected:
    """Aggregate export records' durations with the SDK's exponential histogram (see the
    module docstring); nothing is sent."""
    sdk_metrics, sdk_export, sdk_view, resource_cls = _sdk()
    groups: dict[tuple[Any, ...], list[int]] = {}
    n = 0
    for records in batches:
        for r in records:
            if r.get("kind") == "keypoint":
                continue
            start = int(r.get("start", 0))
            d = int(r.get("duration_ns", max(0, int(r.get("end", start)) - start)))
            key = (scrub(str(r.get("service") or "")), scrub(str(r.get("host", "?"))), int(r.get("pid", 0)),
                   int(r.get("device", 0)), int(r.get("model", 0)), scrub(str(r.get("op_type", "?"))))
            groups.setdefault(key, []).append(d)
        n += len(records)
    if not groups:
        return Collected(None, n, 0, 0)
    hist_cls = sdk_metrics.Histogram
    reader = sdk_export.InMemoryMetricReader(
        preferred_temporality={hist_cls: sdk_export.AggregationTemporality.DELTA},
        preferred_aggregation={hist_cls: sdk_view.ExponentialBucketHistogramAggregation(
            max_size=MAX_SIZE, max_scale=SCALE)},
        # every attribute set its own point: the SDK's default limit (2000) would fold the rest
        # into one "overflow" point
        cardinality_limits={hist_cls: len(groups) + 1})
    provider = sdk_metrics.MeterProvider(metric_readers=[reader],
                                         resource=resource_cls.create({"service.name": "aclprof"}))
    try:
        hist = provider.get_meter("aclprof").create_histogram(
            METRIC, unit="ns", description="device time of one operator call (CANN operator subscription)")
        ops = 0
        for key, durations in groups.items():
            attrs = dict(zip(_ATTRS, key))
            for d in durations:
                hist.record(d, attrs)
            ops += len(durations)
        data = reader.get_metrics_data()
    finally:
        provider.shutdown()
    return Collected(data, n, ops, len(groups))


def push(collected: Collected, endpoint: str, headers: Mapping[str, str] | None = None,
         timeout: float = 10.0) -> None:
    """Send ``collected`` to an OTLP/HTTP (protobuf) endpoint with the SDK's
    ``OTLPMetricExporter``; :class:`OtlpPushFailed` unless it accepted them."""
    if collected.data is None:
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import MetricExportResult
    except ImportError as exc:
        raise OtlpUnavailable(f"the OTLP/HTTP exporter is not installed ({exc}): pip install 'aclprof[otlp]'") \
            from None
    # requests of at most BATCH_POINTS points: the SDK sends each point's whole bucket array
    # (MAX_SIZE counts), and receivers limit a request's size (4 MiB is common)
    exporter = OTLPMetricExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout,
                                  max_export_batch_size=BATCH_POINTS)
    try:
        result = exporter.export(collected.data, timeout_millis=timeout * 1000)
    finally:
        exporter.shutdown()
    if result is not MetricExportResult.SUCCESS:
        raise OtlpPushFailed(f"{endpoint} did not accept the metrics ({result.name}; the exporter's log says why)")
