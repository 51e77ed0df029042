"""``aclprof otlp`` (issue 23 item 6): op durations pushed with the OpenTelemetry SDK's
``OTLPMetricExporter`` as exponential histograms, received by PyPI ``oteltap`` (pinned 1.0.0):
bucket for bucket our histogram (``aclprof.protocol.quantshift.bin_index``), with count, sum,
min, max and attributes, on randomised workloads; and the command against a real daemon."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers.workloads import examples, workload
from hypothesis import given, settings

pytest.importorskip("opentelemetry.sdk", reason="the otlp extra is not installed (pip install -e '.[otlp]')")
pytest.importorskip("oteltap", reason="oteltap is not installed (pip install -e '.[interop]')")

from helpers.otlpreceiver import Tap, as_bins

from aclprof.exportfmt.otlp import BATCH_POINTS, MAX_SIZE, METRIC, SCALE, OtlpPushFailed, collect, push
from aclprof.protocol.quantshift import NBINS, bin_index

pytestmark = pytest.mark.timeout(120)

_Key = tuple[str, str, int, int, int, str]


@pytest.fixture(scope="module")
def tap() -> Any:
    with Tap() as t:
        yield t


def ours(records: list[dict[str, Any]]) -> dict[_Key, np.ndarray]:
    """Our histogram (the daemon's bins) of each attribute set's durations."""
    by: dict[_Key, list[int]] = {}
    for r in records:
        if r.get("kind") != "keypoint":
            by.setdefault((r["service"], r["host"], r["pid"], r["device"], r["model"], r["op_type"]), []).append(
                r["duration_ns"])
    return {k: np.bincount(bin_index(np.array(v, np.int64)), minlength=NBINS) for k, v in by.items()}


def _attrs(point: Any) -> _Key:
    a = {kv.key: kv.value for kv in point.attributes}
    return (a["service"].string_value, a["host"].string_value, a["pid"].int_value, a["device"].int_value,
            a["model"].int_value, a["op_type"].string_value)


def received(tap: Tap, records: list[dict[str, Any]]) -> dict[_Key, Any]:
    c = collect([records])
    got = tap.expect(c.series, lambda: push(c, tap.endpoint))
    assert all(m.name == METRIC and m.unit == "ns" and m.exponential_histogram.aggregation_temporality == 1
               for m, _ in got)  # 1: delta
    return {_attrs(p): p for _, p in got}


def test_buckets_at_the_edges_of_our_range(tap: Tap) -> None:
    durations = [0, 0, 1, 2, 3, 255, 256, 257, 1000, 2**39 + 1, 2**40]
    recs = [{"ts": 1.0, "host": "h", "pid": 5, "service": "s", "device": 1, "model": 2, "op_type": "T",
             "duration_ns": d} for d in durations]
    recs.append({"ts": 1.0, "host": "h", "pid": 5, "kind": "keypoint", "duration_ns": 7})
    (key, p), = received(tap, recs).items()
    assert key == ("s", "h", 5, 1, 2, "T")
    assert (p.count, p.sum, p.min, p.max) == (len(durations), sum(durations), 0, 2**40)
    assert list(as_bins(p)) == list(ours(recs)[key])
    assert p.positive.offset == -1  # 1 ns: OTel's bucket -1, our bin 1
    assert MAX_SIZE >= 40 * 2**SCALE + 1  # 1 ns .. 2**40 ns without lowering the scale


@settings(max_examples=examples(100))
@given(workload())
def test_oteltap_receives_our_histogram_bucket_for_bucket(tap: Tap, records: list[dict[str, Any]]) -> None:
    want = ours(records)
    got = received(tap, records)
    assert got.keys() == want.keys()
    disagreements = [k for k in want if list(as_bins(got[k])) != list(want[k])]
    assert disagreements == []
    for k, p in got.items():
        d = [r["duration_ns"] for r in records if r.get("kind") != "keypoint" and (
            r["service"], r["host"], r["pid"], r["device"], r["model"], r["op_type"]) == k]
        assert (p.count, p.sum, p.min, p.max) == (len(d), sum(d), min(d), max(d))


def test_a_refused_push_is_an_error() -> None:
    from helpers.procs import free_port

    c = collect([[{"ts": 1.0, "host": "h", "pid": 1, "op_type": "T", "duration_ns": 3}]])
    with pytest.raises(OtlpPushFailed, match="did not accept"):
        push(c, f"http://127.0.0.1:{free_port()}/v1/metrics", timeout=1.0)


def test_many_series_arrive_in_several_requests_none_folded(tap: Tap) -> None:
    n = BATCH_POINTS * 2 + 7  # three requests; more than the SDK's default cardinality limit (2000)
    recs = [{"ts": 1.0, "host": "h", "pid": 1, "service": "s", "device": 0, "model": i % 4, "op_type": f"T{i}",
             "duration_ns": 1000 + i} for i in range(n)]
    c = collect([recs])
    got = tap.expect(n, lambda: push(c, tap.endpoint))
    assert len({id(m) for m, _ in got}) == 3  # a Metric message per request
    assert len({_attrs(p) for _, p in got}) == n and sorted(p.sum for _, p in got) == [1000 + i for i in range(n)]
