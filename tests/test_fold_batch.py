"""``fold_batch`` (issue 21): the aggregator's per-batch fold in one C call gives exactly what
the steps it replaced gave (tests/helpers/aggregate_reference.py): on the same random
batches every since-start array, the "other" key's record count, the detector's input, the
window slots, the snapshot rows and quantiles and the Prometheus series are equal, through
new keys mid-batch, the key cap reached, zero-length ops, keypoints and window rollovers;
and a bad index is refused with nothing written."""

from __future__ import annotations

import numpy as np
import pytest
from aclprofd.aggregate.aggregator import _FINE_OF_BIN, _PROM_OF_BIN, GROUP_BY, Aggregator
from aclprofd.aggregate.keys import KeySource
from aclprofd.aggregate.quantiles import NBINS, NFINE, NPROM
from helpers.aggregate_reference import ReferenceAggregator
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aclprof.protocol._batchgroup import fold_batch
from aclprof.protocol.quantshift import BIN_UPPER_NS
from aclprof.protocol.wire import FLAG_KEYPOINT, RECORD_DTYPE

_T0 = 1_700_000_000.0
_ARRAYS = ("count", "total", "min", "max", "hist", "prom", "prom_sum", "fine", "fine_sum", "last_fed")
_NAMES = {i: f"op{i}" for i in range(1, 9)}
#: durations that sit on, just past and far from the histogram's edges; 0 (bin 0), an int64
#: that is negative (bin 0, like the numpy path) and past the last edge (the overflow bin)
_EDGY = [0, 1, 2, int(BIN_UPPER_NS[5]), int(BIN_UPPER_NS[5]) + 1, int(BIN_UPPER_NS[-1]),
         int(BIN_UPPER_NS[-1]) + 1, (1 << 64) - 3, 12_345]

batches = st.lists(st.tuples(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(1, 8), st.integers(1, 8),
                       st.sampled_from(_EDGY) | st.integers(0, 1 << 40), st.booleans()), max_size=60),
    st.sampled_from([0.0, 0.2, 1.0, 3.5, 11.0, 61.0]),  # the clock between batches: same second, rollovers
    st.integers(0, 1),                                 # which of two senders
    st.sampled_from([None, "", "resnet"])), min_size=1, max_size=12)  # a relabel before the batch


def _records(rows: list[tuple[int, int, int, int, int, bool]]) -> np.ndarray:
    recs = np.zeros(len(rows), RECORD_DTYPE)
    for i, (model, dev, name, typ, dur, keypoint) in enumerate(rows):
        recs[i] = (model, name, typ, FLAG_KEYPOINT if keypoint else 0, 1, dev, 0, dur, dur, 0)
    return recs


def _pair(max_keys: int) -> tuple[Aggregator, Aggregator]:
    return (Aggregator(max_keys=max_keys, windows=(10, 60), clock=lambda: _T0),
            ReferenceAggregator(max_keys=max_keys, windows=(10, 60), clock=lambda: _T0))


def _same_arrays(new: Aggregator, ref: Aggregator) -> None:
    n = new.nkeys
    assert n == ref.nkeys and new.keys.capacity == ref.keys.capacity
    assert [new.keys.identity(k) for k in range(n)] == [ref.keys.identity(k) for k in range(n)]
    for name in _ARRAYS:
        a, b = getattr(new, name), getattr(ref, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert new.other_records == ref.other_records


def _same_views(new: Aggregator, ref: Aggregator, now: float) -> None:
    """What the clients read: snapshot rows of every window and grouping, Prometheus series."""
    for window in ("all", *new.window_names()):
        for group_by in GROUP_BY:
            assert new.snapshot(window, group_by, now=now) == ref.snapshot(window, group_by, now=now)
    for by_name in (False, True):
        for series in ("prometheus_series", "prometheus_fine_series"):
            got, want = getattr(new, series)(by_name), getattr(ref, series)(by_name)
            assert got[1] == want[1]
            assert [(s[0], s[1].tolist(), s[2], s[3]) for s in got[0]] == \
                   [(s[0], s[1].tolist(), s[2], s[3]) for s in want[0]]


def _run(steps: list, max_keys: int) -> tuple[Aggregator, Aggregator]:
    new, ref = _pair(max_keys)
    seen: list[list[tuple[np.ndarray, np.ndarray]]] = [[], []]
    new.observer = lambda c, n: seen[0].append((c, n))
    ref.observer = lambda c, n: seen[1].append((c, n))
    srcs = [(KeySource("h", 10 + i, f"svc{i}"), KeySource("h", 10 + i, f"svc{i}")) for i in range(2)]
    now = _T0
    for rows, step, who, label in steps:
        now += step
        if label is not None:
            for s in srcs[who]:
                s.set_label(1, label)
        recs = _records(rows)
        new.ingest(srcs[who][0], recs, _NAMES, now)
        ref.ingest(srcs[who][1], recs, _NAMES, now)
        assert len(seen[0]) == len(seen[1])
        if seen[0]:  # the detector's input: the same codes and counts, in the same order
            (c, k), (rc, rk) = seen[0][-1], seen[1][-1]
            assert c.dtype == rc.dtype == k.dtype == rk.dtype == np.int64
            assert c.tolist() == rc.tolist() and k.tolist() == rk.tolist()
        _same_arrays(new, ref)
    _same_views(new, ref, now)
    return new, ref


@settings(max_examples=30)
@given(batches, st.sampled_from([1, 3, 6, 10_000]))
@example([([(0, 0, 1, 1, 0, False)] * 3 + [(1, 1, 2, 3, 7, False), (2, 0, 8, 8, 5, False)], 0.0, 0, None),
          ([(1, 1, 2, 3, 9, False), (0, 1, 4, 4, 0, False)], 1.0, 1, "resnet")], 3)
def test_fold_batch_gives_what_the_replaced_steps_gave(steps, max_keys):
    _run(steps, max_keys)


def test_new_keys_mid_batch_past_the_cap_count_as_other_in_both():
    rows = [(0, 0, 1, 1, 100, False), (0, 0, 2, 2, 200, False), (0, 0, 3, 3, 0, False),
            (0, 0, 1, 1, 300, False), (0, 0, 4, 4, 50, False)]
    new, _ = _run([(rows, 0.0, 0, None)], max_keys=2)
    # keys: "other", then two of the four pairs; the other two pairs' 2 records are "other"'s
    assert new.nkeys == 3 and new.other_records == 2
    assert int(new.count[new.other_key]) == 2 and int(new.hist[new.other_key, 0]) == 1  # its zero-length op


def test_window_rollover_between_batches_keeps_the_slots_equal():
    rows = [(0, 0, 1, 1, 1000, False), (0, 0, 1, 1, 0, False), (0, 0, 1, 1, 1 << 45, True)]
    new, _ = _run([(rows, 0.0, 0, None), (rows, 0.5, 0, None), (rows, 1.0, 0, None), (rows, 70.0, 0, None)],
                  max_keys=10)
    assert [s.second for s in new.sliding.slots] == [int(_T0 + 71.5)]  # the older seconds dropped
    assert int(new.count[1]) == 8  # keypoints left out


def _args(g: int = 2, n: int = 3, cap: int = 4) -> list:
    keys = np.array([1, 3][:g], np.int64)
    inv = np.array([0, 1, 0][:n], np.int64)
    bins = np.array([0, 5, NBINS - 1][:n], np.int64)
    count, total = np.array([2, 1][:g], np.int64), np.array([40, 7][:g], np.int64)
    mn, mx = np.array([10, 7][:g], np.int64), np.array([30, 7][:g], np.int64)
    return [keys, inv, bins, count, total, mn, mx, np.zeros(cap, np.int64), np.zeros(cap, np.int64),
            np.full(cap, 1 << 62, np.int64), np.zeros(cap, np.int64), np.zeros(cap * NBINS, np.int64),
            np.zeros(cap * NPROM, np.int64), np.zeros(cap, np.int64), _PROM_OF_BIN,
            np.zeros(cap * NFINE, np.int64), np.zeros(cap, np.int64), _FINE_OF_BIN, np.zeros(cap),
            5.5, 3, np.empty(n, np.int64), np.empty(n, np.int64)]


def test_fold_batch_adds_each_figure_and_counts_the_other_keys_records():
    a = _args()
    m, other = fold_batch(*a)
    assert (m, other) == (3, 1)
    assert a[21][:3].tolist() == sorted([1 * NBINS + 0, 3 * NBINS + 5, 1 * NBINS + NBINS - 1])
    assert a[22][:3].tolist() == [1, 1, 1]
    assert a[7].tolist() == [0, 2, 0, 1] and a[8].tolist() == [0, 40, 0, 7] and a[13].tolist() == [0, 40, 0, 7]
    assert a[9].tolist() == [1 << 62, 10, 1 << 62, 7] and a[10].tolist() == [0, 30, 0, 7]
    assert a[18].tolist() == [0.0, 5.5, 0.0, 5.5] and a[16].tolist() == [0, 40, 0, 7]
    assert int(a[11].sum()) == int(a[12].sum()) == int(a[15].sum()) == 3
    assert a[12].reshape(4, NPROM)[1, _PROM_OF_BIN[NBINS - 1]] == 1


def test_fold_batch_of_no_ops_writes_nothing():
    a = _args(g=0, n=0)
    assert fold_batch(*a) == (0, 0)
    assert not a[7].any() and not a[11].any() and not a[18].any()


@pytest.mark.parametrize("bad", ["key", "inv", "bin", "table", "short", "lengths"])
def test_fold_batch_refuses_a_bad_index_and_writes_nothing(bad):
    a = _args()
    if bad == "key":
        a[0][1] = 4
    elif bad == "inv":
        a[1][2] = 2
    elif bad == "bin":
        a[2][0] = NBINS
    elif bad == "table":
        a[17] = _FINE_OF_BIN.copy()
        a[17][3] = NFINE
    elif bad == "short":
        a[22] = np.empty(2, np.int64)
    else:
        a[3] = a[3][:1]
    before = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
    with pytest.raises(ValueError, match="fold_batch"):
        fold_batch(*a)
    for i in (7, 8, 9, 10, 11, 12, 13, 15, 16, 18):
        assert np.array_equal(a[i], before[i]), i
