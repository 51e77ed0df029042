"""LagClock's arithmetic, exactly (issue 13: mutants of subscription/stats.py that survived the
subscription suites, which only check the lag's sign and rough size)."""

from __future__ import annotations

import numpy as np
import pytest

from aclprof.api.subscription import stats
from aclprof.api.subscription.stats import LagClock, SubscriptionStats


@pytest.fixture
def now(monkeypatch):
    """Pins ``time.monotonic_ns()`` as the stats module sees it."""
    clock = {"ns": 0}
    monkeypatch.setattr(stats.time, "monotonic_ns", lambda: clock["ns"])
    return clock


def test_no_timed_record_yet_is_none_none(now):
    lag = LagClock("ns", "calibrated")
    assert lag.lag() == (None, None)
    lag.note(np.array([0, 0], dtype=np.uint64), arrival=5_000)  # time_info off: ends are 0
    assert lag.lag() == (None, None)


def test_first_end_of_one_counts(now):
    lag = LagClock("ns", "calibrated")
    lag.note(np.array([1], dtype=np.uint64), arrival=10)
    now["ns"] = 30
    assert lag.lag() == (30 - 1 - (10 - 1), "calibrated")


def test_calibrated_keeps_newest_end_and_smallest_gap(now):
    lag = LagClock("ns", "calibrated")
    lag.note(np.array([40, 100], dtype=np.uint64), arrival=1_000)  # gap 900
    lag.note(np.array([50], dtype=np.uint64), arrival=3_000)        # older end, gap 2950
    now["ns"] = 5_000
    assert lag.lag() == (5_000 - 100 - 900, "calibrated")
    lag.note(np.array([2_000], dtype=np.uint64), arrival=2_500)     # newer end, gap 500
    now["ns"] = 6_000
    assert lag.lag() == (6_000 - 2_000 - 500, "calibrated")


def test_microsecond_ends_are_scaled(now):
    lag = LagClock("us", "calibrated")
    lag.note(np.array([3], dtype=np.uint64), arrival=10_000)  # 3000 ns, gap 7000
    now["ns"] = 20_000
    assert lag.lag() == (20_000 - 3_000 - 7_000, "calibrated")


def test_host_mode_scales_microseconds(now):
    lag = LagClock("us", "host")
    lag.note(np.array([2], dtype=np.uint64), arrival=0)
    now["ns"] = 5_000
    assert lag.lag() == (3_000, "host")


def test_host_mode_is_now_minus_end(now):
    lag = LagClock("ns", "host")
    assert lag.mode == "host"
    lag.note(np.array([700], dtype=np.uint64), arrival=100_000)
    now["ns"] = 1_000
    assert lag.lag() == (300, "host")


def test_dropped_sums_every_reason():
    st = SubscriptionStats(bytes_read=0, records_read=0, records_decoded=0, delivered=0, queued=0,
                           dropped_queue_full=1, dropped_corrupt=20, dropped_callback_error=300,
                           dropped_decode_error=4000, callback_errors=0, names_missing=0,
                           names_overflowed=0, truncated_bytes=0, reader_lag_ns=None)
    assert st.dropped == 4321


def test_merge_folds_in_a_state_kept_elsewhere_newest_end_and_smallest_gap(now):
    """The agent mode's C loop keeps its own (newest end, smallest arrival - end), in host
    ns, and the reader folds it in with ``merge``: the same rule as ``note``, whichever
    came first."""
    lag = LagClock("us", "calibrated")
    lag.merge(100_000, 900)  # host ns already: not scaled by the time unit
    now["ns"] = 200_000
    assert lag.lag() == (200_000 - 100_000 - 900, "calibrated")
    lag.merge(50_000, 2_950)  # an older end and a larger gap change nothing
    assert lag.lag() == (200_000 - 100_000 - 900, "calibrated")
    lag.merge(150_000, 500)  # a newer end and a smaller gap, both taken
    assert lag.lag() == (200_000 - 150_000 - 500, "calibrated")
    lag.merge(160_000, 700)  # the end only
    lag.merge(10_000, 100)   # the gap only
    assert lag.lag() == (200_000 - 160_000 - 100, "calibrated")
    lag.note(np.array([170], dtype=np.uint64), arrival=170_050)  # 170 us: a newer end, gap 50, by note
    assert lag.lag() == (200_000 - 170_000 - 50, "calibrated")
    after_note = LagClock("ns", "host")
    after_note.note(np.array([1_000], dtype=np.uint64), arrival=1_200)
    after_note.merge(900, 0)
    assert after_note.lag() == (200_000 - 1_000, "host")
