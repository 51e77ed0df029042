"""``aclprof.protocol.quantshift``'s helpers and silent edge cases, in process (issue 20):
the exact integer 8th root behind the bin edges, the float-to-ns conversion's contract, the
NaN error's whole text, and no numpy warning for a quantile of 0 ns or an empty row (the
daemon's detector and ``aclprof diff`` divide such rows every tick). Written against the
survivors of the quantshift mutation run of 2026-12-03 (tests/bench/MUTATION.md)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from aclprof.protocol.quantshift import BIN_UPPER_NS, NBINS, _as_float_ns, _root8_floor, bin_index, quantile_ci, shift


@pytest.mark.parametrize("k", [1, 2, 3, 255, 2**20 + 1, 10**12 + 7, 2**64 + 13])
def test_root8_floor_is_exact_at_and_just_below_every_8th_power(k):
    assert _root8_floor(k**8) == k
    assert _root8_floor(k**8 - 1) == k - 1
    assert _root8_floor(k**8 + 1) == k


def test_root8_floor_of_small_numbers_and_the_bin_edges_it_makes():
    assert [_root8_floor(x) for x in range(0, 260)] == [0] + [1] * 255 + [2] * 4
    # the edges are floor(2**(b/8)): 2**k ns exactly at bin 8k, the overflow bin unbounded
    assert [_root8_floor(2**b) for b in (1, 8, 9, 80, 320)] == [1, 2, 2, 1024, 2**40]
    assert BIN_UPPER_NS.tolist() == [0] + [_root8_floor(2**b) for b in range(1, NBINS - 1)]


def test_as_float_ns_is_a_new_float64_array_of_rounded_ns_with_negatives_as_zero():
    ints = np.array([-3, 0, 5, 2**53], np.int64)
    f = _as_float_ns(ints)
    assert f.dtype == np.float64 and f.tolist() == [0.0, 0.0, 5.0, float(2**53)]
    assert ints.tolist() == [-3, 0, 5, 2**53]
    floats = np.array([-2.4, -0.4, 2.5, 3.5, 1000.4, 7.6], np.float64)
    g = _as_float_ns(floats)
    assert g.dtype == np.float64 and g.tolist() == [0.0, 0.0, 2.0, 4.0, 1000.0, 8.0]  # rint: half to even
    assert floats.tolist() == [-2.4, -0.4, 2.5, 3.5, 1000.4, 7.6]  # the caller's array is not changed
    assert _as_float_ns(np.array([-1.0], np.float32)).tolist() == [0.0]


def test_a_nan_duration_is_refused_with_the_whole_message():
    with pytest.raises(ValueError, match=r"^bin_index: a duration is NaN \(durations are nanoseconds\)$"):
        bin_index(np.array([5.0, math.nan]))


def test_quantiles_of_zero_ns_and_empty_rows_give_nan_ratios_without_a_numpy_warning():
    """Row 0: every call 0 ns on both sides (the ratio 0/0); row 1: the base at 0 ns, the
    current run at bin 40 (x/0); row 2: both empty. All NaN, and silent: numpy's
    RuntimeWarnings would reach the daemon's log and ``aclprof diff``'s stderr."""
    base = np.zeros((3, NBINS))
    cur = np.zeros((3, NBINS))
    base[0, 0] = base[1, 0] = cur[0, 0] = 100
    cur[1, 40] = 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = shift(base, cur, 0.5, 2.0)
        lo, est, hi, n = quantile_ci(base, 0.99, 2.0)
    assert np.isnan(s.ratio).all() and np.isnan(s.lower).all() and np.isnan(s.upper).all()
    assert s.cur[:2].tolist() == [0.0, 2.0 ** ((39 + 0.5) / 8)] and math.isnan(s.cur[2])
    assert n.tolist() == [100.0, 100.0, 0.0]
    for v in (lo, est, hi):
        assert v[:2].tolist() == [0.0, 0.0] and math.isnan(v[2])
