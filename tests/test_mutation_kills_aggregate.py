"""The daemon's aggregate modules piece by piece (issue 13: mutants of aggregate_windows.py,
aggregate_file.py, aggregate_quantiles.py and aggregate.py that the daemon unit, quantile and
format tests let survive: window boundaries, slot bookkeeping, dtypes, state-file checks)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from aclprofd.aggregate import npzfile as aggregate_file
from aclprofd.aggregate.aggregator import Aggregator, KeySource
from aclprofd.aggregate.quantiles import (
    BINS_PER_OCTAVE,
    I64,
    NBINS,
    NPROM,
    PROM_EXPONENTS,
    group_stats,
    group_sum,
    narrow,
    prom_bucket,
)
from aclprofd.aggregate.windows import SlidingWindows, Slot, window_name
from helpers.records import make_records

from aclprof.protocol.wire import FLAG_KEYPOINT


def add(slot: Slot, keys, count, total, mn, mx, codes=(), hcount=()) -> None:
    a = [np.asarray(x, dtype=I64) for x in (keys, count, total, mn, mx, codes, hcount)]
    slot.add(*a)


# ---- window names and lookup ---------------------------------------------------------------

@pytest.mark.parametrize("seconds, name", [(10, "10s"), (60, "1m"), (120, "2m"), (90, "90s"), (3600, "1h"),
                                           (7200, "2h"), (3601, "3601s"), (5400, "90m")])
def test_window_name(seconds, name):
    assert window_name(seconds) == name


def test_seconds_of_and_unknown_window():
    w = SlidingWindows([60, 10])
    assert w.seconds == (10, 60) and w.names() == ["10s", "1m"]
    assert w.seconds_of("1m") == 60
    with pytest.raises(ValueError, match=r"^unknown window '5s' \(one of 10s, 1m, all\)$"):
        w.seconds_of("5s")


# ---- slots ---------------------------------------------------------------------------------

def test_new_slot_is_empty_and_integer():
    s = Slot(5)
    for col in ("keys", "count", "total", "min", "max", "codes", "hcount"):
        arr = getattr(s, col)
        assert len(arr) == 0 and arr.dtype.kind == "i", col
    assert s.compact() is s


def test_compact_merges_parts_and_accepts_more():
    s = Slot(1)
    add(s, [2, 1], [1, 1], [10, 5], [10, 5], [10, 5], [2 * NBINS + 3, NBINS + 1], [1, 1])
    add(s, [2], [2], [30], [7], [20], [2 * NBINS + 3], [2])
    s.compact()
    assert s.keys.tolist() == [1, 2] and s.count.tolist() == [1, 3] and s.total.tolist() == [5, 40]
    assert s.min.tolist() == [5, 7] and s.max.tolist() == [5, 20]
    assert s.codes.tolist() == [NBINS + 1, 2 * NBINS + 3] and s.hcount.tolist() == [1, 3]
    assert s.keys.dtype.kind == "i" and s.codes.dtype == np.int32
    add(s, [1], [1], [1], [1], [1], [NBINS + 1], [1])  # after a compaction, parts are taken again
    s.compact()
    assert s.count.tolist() == [2, 3] and s.hcount.tolist() == [2, 3]


def test_slot_for_the_same_second_is_the_same_slot():
    w = SlidingWindows([10, 60])
    a = w.slot_for(100)
    assert w.slot_for(100) is a and len(w.slots) == 1
    assert w.slot_for(99) is a  # the clock stepped back
    b = w.slot_for(101)
    assert b is not a and len(w.slots) == 2


def test_slots_older_than_the_longest_window_are_dropped():
    w = SlidingWindows([10, 60, 3600])
    for second in (0, 1, 2):
        w.slot_for(second)
    w.slot_for(3600)  # horizon 0: slot 0 goes, 1 and 2 stay
    assert [s.second for s in w.slots] == [1, 2, 3600]
    w.slot_for(3602)  # horizon 2: 1 and 2 go
    assert [s.second for s in w.slots] == [3600, 3602]


def test_figures_window_boundary():
    w = SlidingWindows([10, 60])
    for second, key in ((90, 1), (91, 2), (100, 3)):
        add(w.slot_for(second), [key], [1], [5], [5], [5], [key * NBINS], [1])
    keys = w.figures("10s", now=100.5)[0]
    assert keys.tolist() == [2, 3]  # 91..100: the second 90 is exactly 10 s old, out
    keys, count, total, mn, mx, hk, hb, hc = w.figures("1m", now=100.0)
    assert keys.tolist() == [1, 2, 3] and hk.tolist() == [1, 2, 3] and hb.tolist() == [0, 0, 0]
    assert hc.tolist() == [1, 1, 1] and count.tolist() == [1, 1, 1] and total.tolist() == [5, 5, 5]
    assert mn.tolist() == mx.tolist() == [5, 5, 5]


def test_figures_of_an_empty_window_are_empty_integers():
    w = SlidingWindows([10])
    figures = w.figures("10s", now=50)
    assert len(figures) == 8
    assert all(len(f) == 0 and f.dtype == I64 for f in figures)


# ---- quantile helpers ------------------------------------------------------------------------

def test_narrow_only_when_values_fit():
    assert narrow(np.array([0, 2**31 - 1], dtype=I64)).dtype == np.int32
    assert narrow(np.array([2**31], dtype=I64)).dtype == I64
    assert narrow(np.array([-1], dtype=I64)).dtype == I64
    assert narrow(np.zeros(0, I64)).dtype == np.int32


def test_group_helpers():
    u, s = group_sum(np.array([5, 3, 5]), np.array([1, 2, 4]))
    assert u.tolist() == [3, 5] and s.tolist() == [2, 5] and s.dtype == I64
    keys, count, total, mn, mx = group_stats(*(np.array(x) for x in ([2, 1, 2], [1, 1, 1], [4, 5, 6],
                                                                    [4, 5, 3], [4, 5, 6])))
    assert keys.tolist() == [1, 2] and count.tolist() == [1, 2] and total.tolist() == [5, 10]
    assert mn.tolist() == [5, 3] and mx.tolist() == [5, 6]


# ---- the state file --------------------------------------------------------------------------

def arrays(n: int, dtype=I64) -> dict[str, np.ndarray]:
    return {k: np.arange(n, dtype=dtype) for k in aggregate_file.ARRAYS}


def test_state_round_trip_as_int64(tmp_path):
    path = str(tmp_path / "agg.npz")
    aggregate_file.write_state(path, arrays(2, np.int32), {"keys": [["a"], ["b"]]})
    meta, got = aggregate_file.read_state(path)
    assert meta["keys"] == [["a"], ["b"]] and meta["version"] == aggregate_file.STATE_VERSION
    assert all(v.dtype == I64 for v in got.values()) and got["total"].tolist() == [0, 1]


def test_state_file_is_synced_in_its_directory(tmp_path, monkeypatch):
    synced = []
    from aclprofd import atomicfile

    monkeypatch.setattr(atomicfile, "fsync_dir", synced.append)
    aggregate_file.write_state(str(tmp_path / "a.npz"), arrays(0), {"keys": []})
    monkeypatch.chdir(tmp_path)
    aggregate_file.write_state("b.npz", arrays(0), {"keys": []})
    assert synced == [str(tmp_path), "."]


def test_state_file_checks(tmp_path):
    path = str(tmp_path / "agg.npz")
    aggregate_file.write_state(path, arrays(2), {"keys": [["a"]]})
    with pytest.raises(ValueError, match=r"^key arrays and key list differ in length$"):
        aggregate_file.read_state(path)
    aggregate_file.write_state(path, arrays(0), {"keys": [], "nbins": NBINS + 1})
    with pytest.raises(ValueError, match=r"^histogram layout differs$"):
        aggregate_file.read_state(path)
    aggregate_file.write_state(path, arrays(0), {"keys": [], "version": 99})
    with pytest.raises(ValueError, match=f"^not {aggregate_file.STATE_FORMAT} version 1 or 2$"):
        aggregate_file.read_state(path)
    with np.load(path) as z:
        json.loads(bytes(z["meta"]).decode())  # the meta member is plain JSON


# ---- the Aggregator ----------------------------------------------------------------------------

NAMES = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "mm1"}


def per_key(agg: Aggregator) -> dict[tuple, tuple[int, int, int, int]]:
    """(device, model, type, name) -> (count, total, min, max) of every key with records."""
    k = agg.keys
    return {(int(k.device[i]), int(k.model[i]), k.type[i], k.name[i]):
            (int(agg.count[i]), int(agg.total[i]), int(agg.min[i]), int(agg.max[i]))
            for i in range(agg.nkeys) if agg.count[i]}


def test_keypoint_records_are_left_out():
    agg = Aggregator(clock=lambda: 1000.0)
    recs = make_records(3, types=(1,), names=(3,), durations=[10, 20, 30])
    recs["flag"][1] = FLAG_KEYPOINT
    agg.ingest(KeySource("h", 1, None), recs, NAMES)
    assert per_key(agg) == {(0, 1, "Conv2D", "conv1"): (2, 40, 10, 30)}
    only_kp = make_records(1, types=(1,), names=(3,))
    only_kp["flag"] = FLAG_KEYPOINT | 1
    agg.ingest(KeySource("h", 1, None), only_kp, NAMES)
    assert per_key(agg)[(0, 1, "Conv2D", "conv1")][0] == 2


@pytest.mark.parametrize("devices, models", [((0, 0, 1, 1), (5, 5, 5, 5)), ((2, 2, 2, 2), (5, 6, 5, 6)),
                                             ((0, 1, 0, 1), (5, 6, 6, 5)), ((3, 3, 3, 3), (7, 7, 7, 7))])
def test_records_of_several_devices_and_models_go_to_their_keys(devices, models):
    agg = Aggregator(clock=lambda: 1000.0)
    recs = make_records(4, types=(1,), names=(3,), durations=[1, 2, 4, 8])
    recs["device_id"] = devices
    recs["model_id"] = models
    agg.ingest(KeySource("h", 1, None), recs, NAMES)
    expected: dict[tuple, list[int]] = {}
    for d, m, dur in zip(devices, models, [1, 2, 4, 8]):
        expected.setdefault((d, m, "Conv2D", "conv1"), []).append(dur)
    assert per_key(agg) == {k: (len(v), sum(v), min(v), max(v)) for k, v in expected.items()}


def test_many_keys_grow_every_array():
    agg = Aggregator(clock=lambda: 1000.0)
    names = {i: f"n{i}" for i in range(1, 302)}
    recs = make_records(300, types=(1,) * 300, names=tuple(range(2, 302)), durations=np.arange(1, 301) * 1000)
    agg.ingest(KeySource("h", 1, None), recs, {**names, 1: "T"})
    got = per_key(agg)
    assert len(got) == 300 and agg.keys.capacity >= 301
    assert got[(0, 1, "T", "n301")] == (1, 300_000, 300_000, 300_000)
    assert got[(0, 1, "T", "n2")] == (1, 1000, 1000, 1000)
    n = agg.nkeys
    for arr in (agg.count, agg.total, agg.min, agg.max, agg.prom_sum):
        assert len(arr) == agg.keys.capacity
    assert agg.hist.shape == (agg.keys.capacity, NBINS) and agg.prom.shape == (agg.keys.capacity, NPROM)
    assert int(agg.hist[:n].sum()) == 300 and int(agg.prom[:n].sum()) == 300
    assert int(agg.prom_sum[:n].sum()) == sum(range(1, 301)) * 1000
    assert (agg.min[n:] == np.iinfo(np.int64).max).all() and not agg.count[n:].any()


def test_dirty_counts_each_ingest_and_save(tmp_path):
    agg = Aggregator(clock=lambda: 1000.0)
    assert not agg.dirty
    agg.ingest(KeySource("h", 1, None), make_records(2), NAMES)
    assert agg.dirty
    agg.save(str(tmp_path / "a.npz"))
    assert not agg.dirty
    agg.ingest(KeySource("h", 1, None), make_records(1), NAMES)
    assert agg.dirty


def test_prom_bucket_edges():
    # bucket k holds bins whose upper edge is <= 2**PROM_EXPONENTS[k]; bins below the first
    # edge go to bucket 0, beyond the last to +Inf (NPROM - 1).
    first = PROM_EXPONENTS[0] * BINS_PER_OCTAVE
    bins = np.array([0, 1, first, first + 1, first + BINS_PER_OCTAVE, first + BINS_PER_OCTAVE + 1, NBINS - 1])
    assert prom_bucket(bins).tolist() == [0, 0, 0, 1, 1, 2, NPROM - 1]


def test_prometheus_view_by_type_then_by_name():
    agg = Aggregator(clock=lambda: 1000.0)
    recs = make_records(4, types=(1, 1), names=(3, 4), durations=[100, 200, 300, 400])
    recs["device_id"] = 2
    recs["model_id"] = 9
    agg.ingest(KeySource("h", 1, None), recs, NAMES)
    (series,) = agg.prometheus_view()
    labels, buckets, count, total = series
    assert labels == ("", "2", "9", "Conv2D") and count == 4 and total == 1000
    # cumulative: 100 ns <= 128, 200 ns <= 256, 300 and 400 ns <= 512, then all 4 up to +Inf
    assert len(buckets) == NPROM and buckets.tolist() == [1, 2] + [4] * (NPROM - 2)
    by_name = {lab: (c, t) for lab, _, c, t in agg.prometheus_view(by_name=True)}
    assert by_name == {("", "2", "9", "Conv2D", "conv1"): (2, 400), ("", "2", "9", "Conv2D", "mm1"): (2, 600)}
