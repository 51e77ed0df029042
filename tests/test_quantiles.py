"""Exact quantiles of the daemon's log histograms, against an independent computation.

The rule (daemon/README.md): a duration d >= 1 ns falls in the first bin b >= 1 with
d <= 2 ** (b / 8) (upper-inclusive bins; bin 0 for d < 1, the last bin above 2 ** 40 ns),
decided here with exact integers (d ** 8 <= 2 ** b); the q-quantile of n records is the representative
value of the first bin whose cumulative count reaches ceil(q * n) (at least 1): the bin's
geometric midpoint 2 ** ((b - 0.5) / 8), rounded, then clipped to the group's [min, max].
The reference below is plain Python (math, no numpy) so that it shares no code with the
daemon.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aclprof.protocol.wire import RECORD_DTYPE

NBINS = 8 * 40 + 2


def ref_bin(d: int) -> int:
    if d < 1:
        return 0
    return next((b for b in range(1, NBINS - 1) if d ** 8 <= 2 ** b), NBINS - 1)


def ref_quantile(durations: list[int], q: float) -> int:
    n = len(durations)
    counts = [0] * NBINS
    for d in durations:
        counts[ref_bin(d)] += 1
    target = max(math.ceil(q * n), 1)
    cum = 0
    for b, c in enumerate(counts):
        cum += c
        if cum >= target:
            value = 0 if b == 0 else round(2 ** ((b - 0.5) / 8))
            return min(max(value, min(durations)), max(durations))
    raise AssertionError("unreachable")


def snapshot_row(durations: list[int], window: str = "all") -> dict:
    from aclprofd.aggregate.aggregator import Aggregator, KeySource

    agg = Aggregator(clock=lambda: 1000.0)
    recs = np.zeros(len(durations), RECORD_DTYPE)
    recs["op_name"], recs["op_type"] = 1, 2
    recs["duration"] = durations
    agg.ingest(KeySource("h", 1, "svc"), recs, {1: "op", 2: "Type"})
    [row] = agg.snapshot(window, "type")["rows"]
    return row


def check(durations: list[int]) -> None:
    for window in ("all", "10s"):
        row = snapshot_row(durations, window)
        for q, field in ((0.5, "p50_ns"), (0.9, "p90_ns"), (0.99, "p99_ns")):
            assert row[field] == ref_quantile(durations, q), (window, field, durations)
        assert (row["min_ns"], row["max_ns"], row["count"]) == (min(durations), max(durations), len(durations))


def test_reference_bins_at_powers_of_two():
    # exact powers of two end a bin (as Prometheus's le): 2**k lands in bin 8k with 2**k - 1,
    # one more starts bin 8k + 1
    assert [ref_bin(d) for d in (1, 2, 1023, 1024, 1025)] == [1, 8, 80, 80, 81]


@pytest.mark.parametrize("d", [1, 2, 3, 1000, 1024, 123_456_789])
def test_one_sample_is_every_quantile(d):
    row = snapshot_row([d])
    assert row["p50_ns"] == row["p90_ns"] == row["p99_ns"] == d  # clipped to [min, max] = [d, d]


def test_all_samples_in_one_bin_are_clipped_to_min_max():
    # 1030..1060 are all in bin 81 (midpoint ~1069, above the max): every quantile is the max
    durations = list(range(1030, 1061))
    assert len({ref_bin(d) for d in durations}) == 1
    row = snapshot_row(durations)
    assert row["p50_ns"] == row["p99_ns"] == 1060
    # 1025..1028: midpoint above max again; and 1090..1100 (bin 82, midpoint ~1115) likewise
    check([1025, 1026, 1027, 1028])
    # bin 88 spans (1911, 2048]: values near its top make the midpoint fall below the min
    durations = [2040, 2045, 2047]
    assert len({ref_bin(d) for d in durations}) == 1
    row = snapshot_row(durations)
    assert row["p50_ns"] == 2040  # midpoint ~1978 < min


def test_rank_rule_reaches_the_target_inclusively():
    # 50 records in a low bin, 50 in a high one: the median's target is 50, which the low bin
    # reaches exactly (cum >= target); a strict rule would answer from the high bin.
    low, high = [1000] * 50, [100_000] * 50
    row = snapshot_row(low + high)
    assert row["p50_ns"] == ref_quantile(low + high, 0.5)
    assert abs(row["p50_ns"] - 1000) < 50
    assert abs(row["p90_ns"] - 100_000) < 5000


def test_p99_of_a_hundred_uses_the_ninety_ninth_record():
    durations = [500] * 99 + [10**9]
    row = snapshot_row(durations)
    assert row["p99_ns"] == 500 == ref_quantile(durations, 0.99)
    durations = [500] * 98 + [10**9] * 2
    assert snapshot_row(durations)["p99_ns"] == ref_quantile(durations, 0.99) == 10**9


def test_zero_durations_are_bin_zero():
    check([0, 0, 0, 5])
    assert snapshot_row([0, 0, 0])["p50_ns"] == 0


@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=60))
def test_quantiles_match_the_reference(durations):
    check(durations)
