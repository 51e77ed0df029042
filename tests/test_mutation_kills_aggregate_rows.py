"""Deterministic unit tests of the aggregates' snapshot rows and Prometheus series, written
against the survivors of the mutation run of 2026-12-02 evening (tests/bench/MUTATION.md):
combined filters, quantiles of the selected keys only, the overflow bin, the mean, the
order of rows (ties too), zero-length ops, rounding of rates and shares."""

from __future__ import annotations

import numpy as np
import pytest
from aclprofd.aggregate.aggregator import Aggregator, KeySource
from aclprofd.aggregate.groups import Groupings
from aclprofd.filters import Filter

from aclprof.protocol.wire import RECORD_DTYPE

T0 = 1000.0
NAMES = {1: "T", 2: "U"} | {i: f"op{i}" for i in range(3, 60)}


def records(durations: list[int], name: int = 3, model: int = 1, device: int = 0, op_type: int = 1) -> np.ndarray:
    r = np.zeros(len(durations), RECORD_DTYPE)
    r["model_id"], r["device_id"], r["op_type"], r["op_name"] = model, device, op_type, name
    r["duration"] = durations
    return r


def fleet() -> Aggregator:
    """pid 1: models 1 and 2 on device 0; pid 2: model 1 on devices 0 and 1; each (pid,
    model, device) with a count of its own so that a row's count tells which keys it holds."""
    agg = Aggregator(clock=lambda: T0)
    a, b = KeySource("h", 1, "a"), KeySource("h", 2, "b")
    agg.ingest(a, records([1000] * 1, model=1), NAMES)
    agg.ingest(a, records([1000] * 2, model=2), NAMES)
    agg.ingest(b, records([1000] * 4, model=1, device=0), NAMES)
    agg.ingest(b, records([1000] * 8, model=1, device=1), NAMES)
    return agg


@pytest.mark.parametrize(("flt", "count"), [
    ({"model": 1, "pid": 1}, 1), ({"model": 2, "pid": 2}, 0),
    ({"pid": 2, "device": 0}, 4), ({"pid": 1, "device": 1}, 0),
    ({"device": 1, "service": "b"}, 8), ({"device": 1, "service": "a"}, 0),
    ({"model": 1, "service": "b"}, 12), ({"pid": 1, "service": "b"}, 0),
])
def test_filter_fields_combine_with_and(flt: dict, count: int) -> None:
    snap = fleet().snapshot("all", "type", Filter.parse(flt))
    assert sum(r["count"] for r in snap["rows"]) == count


def test_quantiles_come_from_the_selected_keys_only() -> None:
    """Two processes' keys of one op type: a filter by pid gives that process's quantiles,
    not those of the type's other keys (whose histogram rows are left out)."""
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([1000] * 6 + [4000] * 4), NAMES)
    agg.ingest(KeySource("h", 2, "a"), records([3000] * 30), NAMES)
    (row,) = agg.snapshot("all", "type", Filter.parse({"pid": 1}))["rows"]
    assert (row["count"], row["min_ns"], row["max_ns"]) == (10, 1000, 4000)
    assert row["p50_ns"] < 1100 and row["p90_ns"] > 3500
    (both,) = agg.snapshot("all", "type")["rows"]
    assert 2900 < both["p50_ns"] < 3100


def test_ops_in_the_overflow_bin_count_in_the_quantiles() -> None:
    """Ops beyond 2**40 ns (18 minutes: a hung kernel) land in the histogram's overflow bin;
    they count for the quantiles like any other (p50 here is one of them)."""
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([1000] + [2**41] * 9), NAMES)
    (row,) = agg.snapshot("all", "type")["rows"]
    assert row["p50_ns"] > 2**40 and (row["min_ns"], row["max_ns"]) == (1000, 2**41)


def test_mean_min_max_of_a_row_are_exact() -> None:
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([1000, 2000, 4000, 2**53 + 1]), NAMES)
    (row,) = agg.snapshot("all", "type")["rows"]
    assert (row["min_ns"], row["max_ns"]) == (1000, 2**53 + 1)
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([1000, 2000, 4000]), NAMES)
    (row,) = agg.snapshot("all", "type")["rows"]
    assert (row["count"], row["total_ns"], row["mean_ns"]) == (3, 7000, 2333)


def test_rows_go_by_total_time_largest_first_ties_in_key_order() -> None:
    """Rows are ordered by total time, largest first; equal totals keep the order the keys
    were first seen in (40 ops of one total: a stable order, not the sort's whim)."""
    agg = Aggregator(clock=lambda: T0)
    src = KeySource("h", 1, "a")
    for name in range(3, 43):
        agg.ingest(src, records([1000], name=name), NAMES)
    agg.ingest(src, records([400, 500], name=50), NAMES)
    agg.ingest(src, records([9000], name=51), NAMES)
    keys = [r["key"] for r in agg.snapshot("all", "name")["rows"]]
    assert keys == ["op51", *(f"op{i}" for i in range(3, 43)), "op50"]


def test_zero_length_ops_are_rows_with_no_share_of_time() -> None:
    """Ops whose end equals their start (timing off, or too short): counted, shown, with a
    share of time of 0 when every op has no length (not refused, not 1 %)."""
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([0, 0, 0]), NAMES)
    agg.ingest(KeySource("h", 1, "a"), records([0, 0], op_type=2, name=4), NAMES)
    snap = agg.snapshot("all", "type")
    assert snap["total_ns"] == 0
    assert sorted((r["key"], r["count"], r["pct_time"], r["mean_ns"]) for r in snap["rows"]) == [
        ("T", 3, 0.0, 0), ("U", 2, 0.0, 0)]


def test_rates_and_shares_are_rounded_to_three_decimals() -> None:
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([1000] * 7), NAMES)
    agg.ingest(KeySource("h", 1, "a"), records([1000] * 3, op_type=2, name=4), NAMES)
    snap = agg.snapshot("all", "type", now=T0 + 3)
    assert snap["summary"]["records_per_s"] == 3.333
    assert [(r["key"], r["pct_time"]) for r in snap["rows"]] == [("T", 70.0), ("U", 30.0)]
    agg.ingest(KeySource("h", 1, "a"), records([1000] * 5, op_type=2, name=4), NAMES)
    assert [r["pct_time"] for r in agg.snapshot("all", "type")["rows"]] == [46.667, 53.333][::-1]


def test_keys_without_records_since_a_reset_have_no_row() -> None:
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([1000], name=3), NAMES)
    agg.reset()
    agg.ingest(KeySource("h", 1, "a"), records([1000], name=4), NAMES)
    assert [(r["key"], r["count"]) for r in agg.snapshot("all", "name")["rows"]] == [("op4", 1)]


def test_an_unknown_grouping_is_refused_by_name() -> None:
    agg = Aggregator(clock=lambda: T0)
    with pytest.raises(ValueError, match=r"^group_by must be one of type, name, service, process, device, "
                                         r"model, not 'pid'$"):
        Groupings().get(agg.keys, "pid")


def test_the_other_keys_prometheus_series_has_its_labels() -> None:
    """Records beyond the key cap ("(other)") are a Prometheus series with the usual labels
    (an empty service, its own op type), in both histograms, not a one-label row."""
    agg = Aggregator(max_keys=1, clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), records([1000, 1000], name=3), NAMES)
    agg.ingest(KeySource("h", 1, "a"), records([1000] * 3, name=4), NAMES)
    prom = {lab: c for lab, _, c, _ in agg.prometheus_view()}
    fine = {lab: c for lab, _, c, _ in agg.prometheus_fine_series()[0]}
    assert len(prom) == 2 and all(len(lab) == 4 for lab in prom) and sorted(prom.values()) == [2, 3]
    assert len(fine) == 2 and all(len(lab) == 3 for lab in fine) and sorted(fine.values()) == [2, 3]


def test_a_non_contiguous_batch_is_aggregated_like_its_copy() -> None:
    """A strided view of records (every other one) goes to the C pass as a contiguous copy."""
    agg = Aggregator(clock=lambda: T0)
    recs = np.concatenate([records([1000] * 4, name=3), records([5000] * 4, name=4)])
    view = recs[::2]
    assert not view.flags.c_contiguous
    agg.ingest(KeySource("h", 1, "a"), view, NAMES)
    rows = {r["key"]: (r["count"], r["total_ns"]) for r in agg.snapshot("all", "name")["rows"]}
    assert rows == {"op3": (2, 2000), "op4": (2, 10000)}


def test_an_undefined_name_id_is_named_in_the_error() -> None:
    agg = Aggregator(clock=lambda: T0)
    with pytest.raises(KeyError) as info:
        agg.ingest(KeySource("h", 1, "a"), records([1000], name=77), NAMES)
    assert info.value.args == (77,)


def test_cached_pairs_are_resolved_without_the_registry() -> None:
    """A sender's pairs seen before are found in its cache (one vectorised search): the
    registry is asked only for new pairs, one step each, whichever cache entry they hit
    (the last one too)."""
    agg = Aggregator(clock=lambda: T0)
    src = KeySource("h", 1, "a")
    reg = agg.keys
    asked: list[tuple] = []
    real = reg.get

    def counting(ident, *a, **k):  # type: ignore[no-untyped-def]
        asked.append(ident)
        return real(ident, *a, **k)

    reg.get = counting  # type: ignore[method-assign]
    batch = np.concatenate([records([1000], name=n) for n in range(3, 9)])
    agg.ingest(src, batch, NAMES)
    assert len(asked) == 6
    asked.clear()
    for _ in range(2):
        agg.ingest(src, batch, NAMES)
    assert asked == []
    agg.ingest(src, np.concatenate([batch, records([1000], name=9)]), NAMES)
    assert [ident[5] for ident in asked] == ["op9"]
    assert sum(r["count"] for r in agg.snapshot("all", "name")["rows"]) == 6 * 4 + 1


def test_a_full_registry_looks_up_at_most_full_lookups_uncached_pairs_a_batch() -> None:
    """Registry full (10 keys of 10): a reconnected sender (same process, empty cache) sends
    4200 pairs, its 10 registered ones at positions 4094-4103. FULL_LOOKUPS (4096) of them
    are looked up: the first two registered ones are found, the rest count as "(other)"."""
    from aclprofd.aggregate.keys import FULL_LOOKUPS

    assert FULL_LOOKUPS == 4096
    names = {1: "T"} | {i: f"op{i}" for i in range(3, 4300)}
    agg = Aggregator(max_keys=10, clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "a"), np.concatenate([records([1000], name=n) for n in range(3, 13)]), names)
    order = [*range(100, 100 + 4094), *range(3, 13), *range(4194, 4194 + 96)]
    assert len(order) == 4200 and len(set(order)) == 4200 and max(order) < 4300
    again = KeySource("h", 1, "a")
    agg.ingest(again, _named(order), names)
    rows = {r["key"]: r["count"] for r in agg.snapshot("all", "name")["rows"]}
    assert rows == {"op3": 2, "op4": 2} | {f"op{n}": 1 for n in range(5, 13)} | {"(other)": 4198}


def _named(names: list[int]) -> np.ndarray:
    r = records([1000] * len(names))
    r["op_name"] = names
    return r


def test_a_groups_total_beyond_2_to_the_53_ns_is_exact() -> None:
    """Row totals are integer sums: float weights rounded 2**53 + 1 ns (~104 days) to 2**53."""
    from aclprofd.aggregate.quantiles import grouped_rows

    keys = np.array([0, 1, 2], np.int64)
    count = np.array([1, 1, 3], np.int64)
    total = np.array([2**53, 1, 7], np.int64)
    rows = grouped_rows(np.array([0, 0, 1], np.int64), ["a", "b"], np.ones(3, bool), keys, count, total,
                        np.array([1, 1, 1], np.int64), np.array([2**53, 1, 5], np.int64),
                        np.array([0, 1, 2], np.int64), np.array([10, 10, 10], np.int64),
                        np.array([1, 1, 3], np.int64))
    assert [(r["key"], r["count"], r["total_ns"]) for r in rows] == [("a", 2, 2**53 + 1), ("b", 3, 7)]
