"""aclprof.cli.fleet.data: the PromQL of `aclprof fleet`, the parsing of Prometheus replies,
the fleet rows and the robust z-score of host p99s (properties checked with hypothesis)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aclprof.cli.fleet.data import (
    FleetDataError,
    Thresholds,
    build_rows,
    outliers,
    parse_vector,
    promql_string,
    queries,
    robust_z,
    selector,
    sort_rows,
    to_json,
)

p99s = st.floats(min_value=1e-7, max_value=10.0, allow_nan=False, allow_infinity=False)


# -- robust z ---------------------------------------------------------------------------------

def test_robust_z_by_hand() -> None:
    # median 101, |dev| = 1, 0, 99 -> MAD 1, floor 5 % of 101 = 5.05 wins
    z = robust_z([100.0, 101.0, 200.0], mad_floor=0.05)
    assert z[1] == 0.0
    assert z[0] == pytest.approx(0.6745 * -1 / 5.05)
    assert z[2] == pytest.approx(0.6745 * 99 / 5.05)
    # without the floor the MAD (1) is the scale
    assert robust_z([100.0, 101.0, 200.0], mad_floor=0.0)[2] == pytest.approx(0.6745 * 99)


def test_robust_z_identical_hosts_are_zero_and_one_off_host_is_finite() -> None:
    assert robust_z([5e-5] * 7) == [0.0] * 7
    z = robust_z([5e-5] * 6 + [2e-4])  # MAD 0: the floor keeps the score finite
    assert math.isfinite(z[-1]) and z[-1] == pytest.approx(0.6745 * 1.5e-4 / (0.05 * 5e-5))


def test_robust_z_needs_values() -> None:
    with pytest.raises(ValueError, match="at least one"):
        robust_z([])


@given(st.lists(p99s, min_size=1, max_size=30), st.floats(min_value=1e-3, max_value=1e3))
def test_robust_z_is_scale_free(values: list[float], c: float) -> None:
    assume(all(v * c >= 1e-9 for v in values))  # clear of the absolute floor
    for a, b in zip(robust_z(values), robust_z([v * c for v in values])):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-6)


@given(st.lists(p99s, min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_robust_z_does_not_depend_on_host_order(values: list[float], rnd: random.Random) -> None:
    shuffled = list(range(len(values)))
    rnd.shuffle(shuffled)
    z = robust_z(values)
    zs = robust_z([values[i] for i in shuffled])
    for j, i in enumerate(shuffled):
        assert zs[j] == pytest.approx(z[i], rel=1e-9, abs=1e-12)


@given(st.lists(p99s, min_size=2, max_size=30))
def test_robust_z_keeps_the_order_of_the_values(values: list[float]) -> None:
    z = robust_z(values)
    for i in range(len(values)):
        for j in range(len(values)):
            if values[i] < values[j]:
                assert z[i] <= z[j]


@given(st.floats(min_value=1e-6, max_value=1.0), st.lists(st.floats(min_value=-0.1, max_value=0.1),
                                                          min_size=3, max_size=40))
def test_a_fleet_within_ten_percent_has_no_outlier(base: float, spreads: list[float]) -> None:
    # |v - median| <= 0.2 * base and scale >= 0.05 * median >= 0.045 * base: |z| <= 0.6745 * 0.2 / 0.045 < 3.5
    values = [base * (1 + s) for s in spreads]
    assert all(abs(z) < 3.5 for z in robust_z(values))


@given(st.floats(min_value=1e-6, max_value=1.0), st.lists(st.floats(min_value=-0.01, max_value=0.01),
                                                          min_size=2, max_size=40),
       st.floats(min_value=1.5, max_value=100.0), st.integers(min_value=0, max_value=40))
def test_one_slow_host_is_flagged_and_only_it(base: float, spreads: list[float], factor: float, at: int) -> None:
    values = [base * (1 + s) for s in spreads]
    at = at % (len(values) + 1)
    values.insert(at, base * factor)
    z = robust_z(values)
    assert z[at] >= 3.5
    assert all(abs(x) < 3.5 for i, x in enumerate(z) if i != at)


@given(st.lists(p99s, min_size=1, max_size=31).filter(lambda v: len(v) % 2 == 1))
def test_the_median_host_scores_zero(values: list[float]) -> None:
    z = robust_z(values)
    m = sorted(values)[len(values) // 2]
    assert z[values.index(m)] == 0.0


# -- PromQL -----------------------------------------------------------------------------------

def test_queries_group_by_the_host_label_and_merge_buckets_for_the_fleet() -> None:
    q = queries("30s", "instance", selector("llm", "Mat.*"))
    sel = '{service="llm",op_type=~"Mat.*"}'
    assert q["calls"] == ("sum by (instance, service, op_type) "
                          f"(rate(aclprofd_op_duration_fine_seconds_count{sel}[30s]))")
    assert q["p99"] == ("histogram_quantile(0.99, sum by (instance, service, op_type, le) "
                        f"(rate(aclprofd_op_duration_fine_seconds_bucket{sel}[30s])))")
    assert q["fleet_p99"] == ("histogram_quantile(0.99, sum by (service, op_type, le) "
                              f"(rate(aclprofd_op_duration_fine_seconds_bucket{sel}[30s])))")
    assert set(q) == {"calls", "count", "device", "p50", "p99", "fleet_p50", "fleet_p99"}


def test_rule_queries_read_the_recorded_series() -> None:
    q = queries("10m", sel='{service="llm"}', rules=True)
    assert q["p99"] == 'host_service_op_type:aclprofd_op_duration_seconds:p99_10m{service="llm"}'
    assert q["count"] == 'host_service_op_type:aclprofd_op_calls:rate10m{service="llm"} * 600'
    assert q["fleet_p50"] == 'service_op_type:aclprofd_op_duration_seconds:p50_10m{service="llm"}'
    assert set(q) == set(queries("1m"))
    for window, label in (("5m", "host"), ("1m", "instance")):
        with pytest.raises(ValueError, match="recording rules have windows 1m and 10m"):
            queries(window, label, rules=True)


@pytest.mark.parametrize("window", ["", "1", "0m", "1d", "5m)) or vector(1", "1m ", "-1m", "1.5m"])
def test_queries_refuse_a_bad_window(window: str) -> None:
    with pytest.raises(ValueError, match="window"):
        queries(window)


@pytest.mark.parametrize("label", ["", "1host", "host)", "a-b", "host,le"])
def test_queries_refuse_a_bad_host_label(label: str) -> None:
    with pytest.raises(ValueError, match="label"):
        queries("1m", label)


def test_promql_strings_are_escaped() -> None:
    assert promql_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert selector() == ""
    assert selector(service='x"}) or vector(1) #') == '{service="x\\"}) or vector(1) #"}'


# -- replies ----------------------------------------------------------------------------------

def _reply(*samples: tuple[dict, str]) -> dict:
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [1.0, v]} for m, v in samples]}}


def test_parse_vector_reads_numbers_nan_and_inf() -> None:
    out = parse_vector(_reply(({"host": "a"}, "1.5"), ({"host": "b"}, "NaN"), ({"host": "c"}, "+Inf")))
    assert out[0] == ({"host": "a"}, 1.5)
    assert math.isnan(out[1][1]) and out[2][1] == math.inf


@pytest.mark.parametrize("reply, what", [
    ([], "not an object"),
    ({"status": "error"}, "not 'success'"),
    ({"status": "success"}, "no 'data'"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "not 'vector'"),
    ({"status": "success", "data": {"resultType": "vector", "result": {}}}, "not a list"),
    ({"status": "success", "data": {"resultType": "vector", "result": [1]}}, r"result\[0\] is not"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"a": 1}, "value": [0, "1"]}]}},
     "metric"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, 1]}]}}, "value"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "x"]}]}},
     "not a number"),
])
def test_parse_vector_names_what_is_wrong(reply: object, what: str) -> None:
    with pytest.raises(FleetDataError, match=what):
        parse_vector(reply)


# -- rows -------------------------------------------------------------------------------------

def _fleet(p99: dict[str, float], count: float = 1000.0) -> dict:
    """Replies of a fleet whose MatMul p99 per host is ``p99``; Relu identical everywhere."""
    s: dict[str, list] = {k: [] for k in ("calls", "count", "device", "p50", "p99", "fleet_p50", "fleet_p99")}
    for host, v in p99.items():
        for op, p in (("MatMul", v), ("Relu", 3e-6)):
            m = {"host": host, "service": "llm", "op_type": op}
            s["calls"].append((m, count / 60))
            s["count"].append((m, count))
            s["device"].append((m, count / 60 * p / 2))
            s["p50"].append((m, p / 2))
            s["p99"].append((m, p))
    for op in ("MatMul", "Relu"):
        s["fleet_p50"].append(({"service": "llm", "op_type": op}, 1e-5))
        s["fleet_p99"].append(({"service": "llm", "op_type": op}, 2e-5))
    return s


def test_rows_flag_the_slow_host_and_op_type() -> None:
    rows = build_rows(_fleet({"a": 1e-4, "b": 1.02e-4, "c": 4e-4}))
    by_op = {r.op_type: r for r in rows}
    mm = by_op["MatMul"]
    assert [h.host for h in mm.outliers] == ["c"] and mm.hosts_reporting == 3 and mm.scored_hosts == 3
    assert not by_op["Relu"].outliers
    assert mm.calls_per_s == pytest.approx(50.0) and mm.p99_s == 2e-5
    assert mm.share + by_op["Relu"].share == pytest.approx(1.0) and mm.share > 0.9
    flat = outliers(rows)
    assert [(o["host"], o["op_type"], o["direction"]) for o in flat] == [("c", "MatMul", "slow")]
    assert flat[0]["median_host_p99_s"] == 1.02e-4
    doc = to_json(sort_rows(rows, "outlier"), window="1m")
    assert doc["hosts"] == ["a", "b", "c"] and doc["rows"][0]["outliers"] == ["c"] and doc["window"] == "1m"


def test_rows_need_min_hosts_and_min_count() -> None:
    rows = build_rows(_fleet({"a": 1e-4, "c": 4e-4}))
    mm = next(r for r in rows if r.op_type == "MatMul")
    assert not mm.outliers and mm.scored_hosts == 2 and all(h.z is None for h in mm.hosts)
    rows = build_rows(_fleet({"a": 1e-4, "b": 1e-4, "c": 4e-4}, count=99))  # 99 < min_count 100
    assert not any(r.outliers for r in rows)
    rows = build_rows(_fleet({"a": 1e-4, "b": 1e-4, "c": 4e-4}, count=99), thresholds=Thresholds(min_count=50))
    assert [h.host for r in rows for h in r.outliers] == ["c"]


def test_rows_skip_nan_quantiles_and_keep_json_valid() -> None:
    s = _fleet({"a": 1e-4, "b": 1e-4, "c": 1e-4})
    s["p99"][0] = (s["p99"][0][0], math.nan)  # histogram_quantile of an idle series
    rows = build_rows(s)
    mm = next(r for r in rows if r.op_type == "MatMul")
    assert mm.scored_hosts == 2
    import json

    text = json.dumps(to_json(rows), allow_nan=False)  # NaN would be invalid JSON
    assert '"p99_s": null' in text


def test_rows_without_the_host_label_fall_into_one_unnamed_host() -> None:
    rows = build_rows(_fleet({"a": 1e-4}), host_label="nodename")
    assert {h.host for r in rows for h in r.hosts} == {""}
