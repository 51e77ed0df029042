"""Deterministic unit tests of the aggregates' newer code, written against the survivors of
the mutation run of 2026-12-02 evening (tests/bench/MUTATION.md): issue 19's key age-out
(the idle cutoff, the counters, the renumbering of every table that holds key numbers, the
Prometheus and fine counts a gone key leaves in its series) on a fake clock, no daemon."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from aclprofd.aggregate.aggregator import Aggregator, KeySource
from aclprofd.detector.state import CellStore

from aclprof.protocol.wire import RECORD_DTYPE

T0 = 1_000_000.0
NAMES = {1: "T"} | {i: f"op{i}" for i in range(2, 12)}


class Clock:
    """The aggregator's clock, set by the test."""

    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def records(names: list[int], n_each: int = 3, duration: int = 1000, device: int = 0) -> np.ndarray:
    """``n_each`` records of op type 1 ("T") per op name id, model 1."""
    r = np.zeros(len(names) * n_each, RECORD_DTYPE)
    r["model_id"], r["op_type"], r["device_id"] = 1, 1, device
    r["op_name"] = np.repeat(names, n_each)
    r["duration"] = duration
    return r


def nobody(_owner: object) -> bool:
    return False


def test_a_key_stays_for_the_longest_window_and_at_exactly_the_cutoff() -> None:
    """The cutoff is ``now - max(idle_s, longest window)``: with windows (10, 60, 300) and an
    idle timeout of 1 s, a key fed at T0 stays until T0 + 300 (the 60 s window is not the
    longest), is still there at exactly T0 + 300 (fed *at* the cutoff is not before it) and
    leaves just after."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60, 300), clock=clock)
    agg.ingest(KeySource("h", 1, "svc", owner=(0, 1)), records([2]), NAMES)
    assert agg.age_out(T0 + 200, 1, nobody) == 0
    assert agg.age_out(T0 + 300, 1, nobody) == 0
    assert agg.age_out(T0 + 300.5, 1, nobody) == 1


def test_ageing_counts_add_up_over_passes_and_a_kept_keys_age_survives_renumbering(tmp_path: Path) -> None:
    """Two passes: the counters add up (keys and their records), the key kept by the first
    pass (renumbered) still ages by when it was fed and goes in the second; each pass
    leaves the aggregates to be saved again (``dirty``)."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    src = KeySource("h", 1, "svc", owner=(0, 1))
    agg.ingest(src, records([2], n_each=3), NAMES)
    agg.save(str(tmp_path / "a.npz"))
    assert not agg.dirty
    clock.t = T0 + 100
    agg.ingest(src, records([3], n_each=4), NAMES)
    assert agg.age_out(T0 + 150, 100, nobody) == 1  # op2, fed at T0 (cutoff T0 + 50)
    assert (agg.aged_out, agg.aged_out_records) == (1, 3)
    assert agg.dirty
    agg.save(str(tmp_path / "a.npz"))
    assert agg.age_out(T0 + 190, 100, nobody) == 0  # op3 fed at T0 + 100: cutoff T0 + 90
    assert agg.age_out(T0 + 250, 100, nobody) == 1
    assert (agg.aged_out, agg.aged_out_records) == (2, 7)
    assert agg.dirty and agg.nkeys == 1  # the "other" key only


def test_keys_registered_after_ageing_start_from_zero() -> None:
    """The arrays rebuilt by age_out start the room beyond the kept keys empty: a new key of
    zero-length ops (end == start) shows total, max and both Prometheus sums of 0."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    src = KeySource("h", 1, "svc", owner=(0, 1))
    agg.ingest(src, records([2, 3]), NAMES)
    clock.t = T0 + 200
    assert agg.age_out(clock.t, 100, nobody) == 2
    agg.ingest(src, records([4], n_each=5, duration=0), NAMES)
    (row,) = agg.snapshot("all", "name")["rows"]
    assert (row["key"], row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == ("op4", 5, 0, 0, 0)
    assert [(lab[-1], count, total) for lab, _, count, total in agg.prometheus_view()] == [("T", 5, 0)]
    fine, _ = agg.prometheus_fine_series()
    assert [(count, total) for _, _, count, total in fine] == [(5, 0)]


def test_records_beyond_the_key_cap_still_count_as_other_after_ageing() -> None:
    """After a pass renumbered the keys, a full table sends new ops to "(other)", and the
    aggregator still counts them there (other_records)."""
    clock = Clock()
    agg = Aggregator(max_keys=2, windows=(10, 60), clock=clock)
    old, new = KeySource("h", 1, "a", owner=(0, 1)), KeySource("h", 2, "b", owner=(0, 2))
    agg.ingest(old, records([2]), NAMES)
    clock.t = T0 + 200
    agg.ingest(new, records([3]), NAMES)
    assert agg.age_out(clock.t, 100, {new.owner}.__contains__, [new]) == 1
    agg.ingest(new, records([4, 5, 6], n_each=2), NAMES)  # room for one: op4; op5, op6 are "other"
    assert agg.other_records == 4
    rows = {r["key"]: r["count"] for r in agg.snapshot("all", "name")["rows"]}
    assert rows == {"op3": 3, "op4": 2, "(other)": 4}


def test_a_gone_keys_cells_do_not_take_a_kept_keys_number_in_the_detector() -> None:
    """The detector's key -> cell table follows the renumbering: a kept key registered before
    a gone one keeps its own cell (a gone key is -1 in the remap, never a key number)."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    reg = agg.keys
    cells = CellStore(lambda k: None if k == reg.other else ("svc", "m", reg.type[k], reg.name[k]), 30, 60)
    agg.observer = cells.observe
    agg.on_renumber = cells.renumber_keys
    live = KeySource("h", 1, "svc", owner=(0, 1))
    gone = KeySource("h", 2, "svc", owner=(0, 2))
    agg.ingest(live, records([2]), NAMES)   # key of op2: kept
    agg.ingest(gone, records([3]), NAMES)   # key of op3 (after it): goes
    clock.t = T0 + 200
    agg.ingest(live, records([2]), NAMES)
    assert agg.age_out(clock.t, 100, {live.owner}.__contains__, [live]) == 1
    agg.ingest(live, records([2], n_each=5), NAMES)
    cells.roll(clock.t)
    hist = dict(zip(cells.cells, cells.cur.sum(axis=1).tolist()))
    assert hist[("svc", "m", "T", "op2")] == 3 + 3 + 5 and hist.get(("svc", "m", "T", "op3"), 0) == 3


def _by_name_and_fine(agg: Aggregator) -> tuple[dict, dict]:
    prom = {lab: (c, s) for lab, _, c, s in agg.prometheus_view(by_name=True)}
    fine, _ = agg.prometheus_fine_series(by_name=True)
    return prom, {lab: (c, s) for lab, _, c, s in fine}


def test_with_series_by_op_name_a_gone_keys_counts_stay_in_its_own_series_only() -> None:
    """With /metrics by op name (``prom_by_name``), a gone key's counts move only to a kept key
    of the same op name: here a gone process's op2 and op3, a live one's op2 (same service,
    model, type). op2's series gains the gone op2's counts (power-of-two and fine), op3's
    series goes stale, and no count of op3 lands in op2's series."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    agg.prom_by_name = True
    old, new = KeySource("h", 1, "svc", owner=(0, 1)), KeySource("h", 2, "svc", owner=(0, 2))
    agg.ingest(old, records([2, 3], n_each=3), NAMES)
    agg.ingest(new, records([2], n_each=4), NAMES)
    clock.t = T0 + 200
    assert agg.age_out(clock.t, 100, {new.owner}.__contains__, [new]) == 2
    prom, fine = _by_name_and_fine(agg)
    assert prom == {("svc", "0", "1", "T", "op2"): (7, 7000)}
    assert fine == {("svc", "1", "T", "op2"): (7, 7000)}


def test_without_series_by_op_name_a_gone_keys_fine_counts_move_to_its_op_types_series() -> None:
    """The same gone op3 with /metrics by op type (the default): its fine counts and _sum move
    to the kept op2 key of the same service, model and type (one fine series)."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    old, new = KeySource("h", 1, "svc", owner=(0, 1)), KeySource("h", 2, "svc", owner=(0, 2))
    agg.ingest(old, records([3], n_each=3), NAMES)
    agg.ingest(new, records([2], n_each=4), NAMES)
    clock.t = T0 + 200
    assert agg.age_out(clock.t, 100, {new.owner}.__contains__, [new]) == 1
    fine, _ = agg.prometheus_fine_series()
    assert {lab: (c, s) for lab, _, c, s in fine} == {("svc", "1", "T"): (7, 7000)}
    assert {lab: (c, s) for lab, _, c, s in agg.prometheus_view()} == {("svc", "0", "1", "T"): (7, 7000)}


def _window(agg: Aggregator, now: float) -> dict[str, tuple[int, int, int]]:
    return {r["key"]: (r["count"], r["p50_ns"], r["max_ns"]) for r in agg.snapshot("10s", "name", now=now)["rows"]}


def test_renumbering_keeps_the_other_keys_window_figures_and_every_keys_quantiles() -> None:
    """Records of "(other)" (key 0) and of a kept key in the 10 s window survive the ageing
    pass's renumbering of the window slots: counts and the quantiles read from the slots'
    histogram codes (each key's bins moved with it)."""
    clock = Clock()
    agg = Aggregator(max_keys=2, windows=(10, 60), clock=clock)
    old, new = KeySource("h", 1, "a", owner=(0, 1)), KeySource("h", 2, "b", owner=(0, 2))
    agg.ingest(old, records([2]), NAMES)      # key 1 (goes)
    agg.ingest(new, records([3]), NAMES)      # key 2 (kept: renumbered 1)
    clock.t = T0 + 200
    slow = records([3], n_each=4, duration=5000)
    slow["duration"][0] = 40_000
    agg.ingest(new, slow, NAMES)
    other = records([4], n_each=3, duration=90_000)  # the table is full: "(other)"
    other["duration"][0] = 300
    agg.ingest(new, other, NAMES)
    before = _window(agg, clock.t)
    # quantiles inside (min, max): read from the histogram, not clipped to an extreme
    assert before["op3"][0] == 4 and 4900 < before["op3"][1] < 5100 and before["op3"][2] == 40_000
    assert before["(other)"][0] == 3 and 80_000 < before["(other)"][1] < 90_001 and before["(other)"][2] == 90_000
    assert agg.age_out(clock.t, 100, {new.owner}.__contains__, [new]) == 1
    assert _window(agg, clock.t) == before
    assert agg.keys.shares.largest() == 1  # b's one key keeps its share; a's was given back


def test_keys_beyond_the_first_64_grow_the_tables_without_losing_the_first_ones() -> None:
    """The per-key tables grow at 64 keys (then 128): the first keys keep their histogram
    (quantiles), their fine buckets and _sum, and when they were last fed (they age out on
    time, the later ones stay)."""
    clock = Clock()
    agg = Aggregator(max_keys=200, windows=(10, 60), clock=clock)
    names = {1: "T"} | {i: f"op{i}" for i in range(2, 102)}
    src = KeySource("h", 1, "svc", owner=(0, 1))
    first = records(list(range(2, 42)), n_each=3, duration=9000)  # 40 keys: 1000, 9000, 9000 ns each
    first["duration"][::3] = 1000
    agg.ingest(src, first, names)
    clock.t = T0 + 100
    agg.ingest(src, records(list(range(42, 102)), n_each=1, duration=2000), names)  # 60 more: grows
    rows = {r["key"]: (r["count"], r["p50_ns"], r["total_ns"]) for r in agg.snapshot("all", "name")["rows"]}
    # the median from the histogram (inside min..max, not clipped to the minimum)
    assert rows["op2"][0] == 3 and 8000 < rows["op2"][1] <= 9000 and rows["op2"][2] == 19000
    assert rows["op101"] == (1, 2000, 2000)
    fine, _ = agg.prometheus_fine_series(by_name=True)
    per_op = {lab[-1]: (c, s, int(cum[-1])) for lab, cum, c, s in fine}
    assert per_op["op2"] == (3, 19000, 3) and per_op["op41"] == (3, 19000, 3) and per_op["op42"] == (1, 2000, 1)
    assert agg.age_out(T0 + 150, 100, nobody) == 40  # fed at T0 (cutoff T0 + 50); the 60 stay


def test_prometheus_sums_beyond_2_to_the_53_ns_are_exact() -> None:
    """A series' _sum is an int64 count of ns: exact beyond 2**53 (104 days of summed op time,
    a long-lived daemon's busy series), where a float would round to an even number."""
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h", 1, "svc"), records([2], n_each=5, duration=2**51 + 1), NAMES)
    ((_, _, count, total),) = agg.prometheus_view()
    assert (count, total) == (5, 5 * (2**51 + 1))
    ((_, _, count, total),) = agg.prometheus_fine_series()[0]
    assert (count, total) == (5, 5 * (2**51 + 1))


def test_series_owners_and_the_default_grouping_by_op_type() -> None:
    """prometheus_series() groups by op type unless asked by name, and charges each series to
    the (key, host, pid) of the first key that fed it."""
    agg = Aggregator(clock=lambda: T0)
    agg.ingest(KeySource("h1", 7, "svc"), records([2, 3]), NAMES)
    agg.ingest(KeySource("h2", 8, "svc"), records([2]), NAMES)
    series, owners = agg.prometheus_series()
    assert [(lab, c) for lab, _, c, _ in series] == [(("svc", "0", "1", "T"), 9)]
    assert owners == [(1, "h1", 7)]
    series, owners = agg.prometheus_series(by_name=True)
    assert [(lab[-1], c) for lab, _, c, _ in series] == [("op2", 6), ("op3", 3)]
    assert owners == [(1, "h1", 7), (2, "h1", 7)]


def test_a_gone_keys_prometheus_sum_stays_in_its_own_grouping() -> None:
    """A gone process's key on device 1 and a kept one on device 0 (same service, model,
    type): the fine series (devices summed) keeps the gone key's _sum, the power-of-two
    series of device 0 does not take it (each grouping moves its own sums)."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    old, new = KeySource("h", 1, "svc", owner=(0, 1)), KeySource("h", 2, "svc", owner=(0, 2))
    agg.ingest(old, records([2], n_each=3, device=1), NAMES)
    agg.ingest(new, records([2], n_each=4), NAMES)
    clock.t = T0 + 200
    assert agg.age_out(clock.t, 100, {new.owner}.__contains__, [new]) == 1
    assert {lab: (c, s) for lab, _, c, s in agg.prometheus_view()} == {("svc", "0", "1", "T"): (4, 4000)}
    fine, _ = agg.prometheus_fine_series()
    assert {lab: (c, s) for lab, _, c, s in fine} == {("svc", "1", "T"): (7, 7000)}


def test_a_loaded_key_ages_from_the_load_on(tmp_path: Path) -> None:
    """Keys loaded from the aggregates file have no live owner: they age out once nothing fed
    them for the idle timeout after the load."""
    clock = Clock()
    agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    agg.ingest(KeySource("h", 1, "svc", owner=(0, 1)), records([2, 3]), NAMES)
    path = str(tmp_path / "agg.npz")
    agg.save(path)
    clock.t = T0 + 1000
    again = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
    again.load(path)
    assert again.age_out(T0 + 1050, 100, nobody) == 0
    assert again.age_out(T0 + 1101, 100, nobody) == 2 and again.aged_out_records == 6


def test_every_change_after_a_save_leaves_the_aggregates_dirty(tmp_path: Path) -> None:
    """save, then an ingestion and an ageing pass (either order): still something to save
    (each change moves the count forward; none may bring it back to the saved one)."""
    for ingest_first in (True, False):
        clock = Clock()
        agg = Aggregator(max_keys=10, windows=(10, 60), clock=clock)
        src = KeySource("h", 1, "svc", owner=(0, 1))
        agg.ingest(src, records([2]), NAMES)
        clock.t = T0 + 200
        agg.ingest(src, records([3]), NAMES)
        agg.save(str(tmp_path / "a.npz"))
        if ingest_first:
            agg.ingest(src, records([3]), NAMES)
        agg.age_out(clock.t, 100, nobody)
        if not ingest_first:
            agg.ingest(src, records([3]), NAMES)
        assert agg.aged_out == 1 and agg.dirty, ingest_first
