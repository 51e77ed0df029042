"""The histogram's bin rule (``aclprof.protocol.quantshift.bin_index``) at and around every edge.

Bins are upper-inclusive, as Prometheus's ``le``: bin 0 holds 0, bin ``b >= 1`` holds
``(2**((b-1)/8), 2**(b/8)]`` ns (bin 1 also 1 ns), bin 321 everything above ``2**40`` ns. The
reference below decides with exact integer arithmetic (``d**8`` against ``2**b``), so no float
rounding can hide on either side; ``bin_index`` must agree for every integer up to ``2**64 - 1``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aclprof.protocol.quantshift import BIN_UPPER_NS, BINS_PER_OCTAVE, NBINS, bin_index

TOP = NBINS - 2  # the last bounded bin: its upper edge is 2**40 ns


def ref(d: int) -> int:
    """The bin of integer ``d`` ns by exact arithmetic: the smallest ``b`` with ``d <= 2**(b/8)``."""
    if d <= 0:
        return 0
    if d ** BINS_PER_OCTAVE > 2 ** TOP:
        return NBINS - 1
    b = max(1, (d ** BINS_PER_OCTAVE).bit_length() - 1)  # 2**b <= d**8 < 2**(b+1): the bin is b or b+1
    return b if d ** BINS_PER_OCTAVE <= 2 ** b else b + 1


def edge_neighbours(spread: int = 3) -> list[int]:
    """Every bin's largest integer (floor of each 1/8-power edge) and every power of two up
    to 2**64, with ``spread`` integers on each side, within [0, 2**64)."""
    xs = set()
    for b in range(1, TOP + 1):
        u = int(BIN_UPPER_NS[b])
        xs.update(range(u - spread, u + spread + 1))
    for k in range(65):
        xs.update(range(2 ** k - spread, 2 ** k + spread + 1))
    return sorted(x for x in xs if 0 <= x < 2 ** 64)


def bins_of(values: list[int]) -> list[int]:
    """``bin_index`` of Python ints: as int64 where they fit, uint64 above (both paths)."""
    if max(values, default=0) < 2 ** 63:
        return bin_index(np.array(values, dtype=np.int64)).tolist()
    return bin_index(np.array(values, dtype=np.uint64)).tolist()


def test_the_upper_bounds_table_is_the_floor_of_each_edge():
    """``BIN_UPPER_NS[b]`` is the largest integer <= 2**(b/8), checked by exact powers."""
    assert BIN_UPPER_NS[0] == 0 and len(BIN_UPPER_NS) == NBINS - 1
    for b in range(1, TOP + 1):
        u = int(BIN_UPPER_NS[b])
        assert u ** 8 <= 2 ** b < (u + 1) ** 8, b


def test_every_edge_and_its_neighbours_are_binned_exactly():
    xs = edge_neighbours()
    want = [ref(x) for x in xs]
    assert bins_of(xs) == want  # one batch: the estimate and the exact re-check together
    small = [x for x in xs if x < 2 ** 63]
    assert bin_index(np.array(small, dtype=np.int64)).tolist() == [ref(x) for x in small]
    for x, w in zip(xs, want):  # one at a time too: a batch of one takes each path alone
        assert bins_of([x]) == [w], x


@pytest.mark.parametrize("k", range(1, TOP // BINS_PER_OCTAVE + 1))
def test_a_power_of_two_is_the_top_of_its_bin(k):
    """2**k ns is the upper edge of bin 8k (Prometheus ``le=2**k``); 2**k + 1 starts the
    next bin and 2**k - 1 is in bin 8k, once bins are wider than 1 ns (k >= 4)."""
    p = 2 ** k
    got = bins_of([p - 1, p, p + 1])
    assert got[1] == 8 * k
    if k >= 4:
        assert got[0] == 8 * k
        assert got[2] == (8 * k + 1 if k < TOP // BINS_PER_OCTAVE else NBINS - 1)
    else:
        assert got == [ref(p - 1), 8 * k, ref(p + 1)]


def test_zero_one_and_the_ends_of_the_range():
    assert bins_of([0, 1, 2, 3]) == [0, 1, 8, 13]
    assert bin_index(np.array([-5, -1], dtype=np.int64)).tolist() == [0, 0]
    assert bins_of([2 ** 40, 2 ** 40 + 1, 2 ** 63 - 1]) == [TOP, NBINS - 1, NBINS - 1]
    assert bins_of([2 ** 63, 2 ** 64 - 1]) == [NBINS - 1, NBINS - 1]  # uint64: no wrap to a negative


@given(st.lists(st.integers(0, 2 ** 64 - 1), min_size=1, max_size=50))
def test_any_unsigned_64_bit_duration_matches_the_exact_rule(xs):
    assert bin_index(np.array(xs, dtype=np.uint64)).tolist() == [ref(x) for x in xs]


@given(st.lists(st.integers(-(2 ** 63), 2 ** 63 - 1), min_size=1, max_size=50))
def test_any_signed_64_bit_duration_matches_the_exact_rule(xs):
    assert bin_index(np.array(xs, dtype=np.int64)).tolist() == [ref(x) for x in xs]


@given(st.integers(1, TOP), st.integers(-3, 3), st.booleans())
def test_around_any_rounded_edge(b, offset, power_of_two):
    """A 1/8-power edge rounded down to an integer, or an exact power of two, +- 3 ns."""
    base = 2 ** (b // BINS_PER_OCTAVE) if power_of_two else int(BIN_UPPER_NS[b])
    d = max(0, base + offset)
    assert bins_of([d]) == [ref(d)]


@given(st.integers(1, 2 ** 40).flatmap(lambda d: st.tuples(st.just(d), st.floats(-0.49, 0.49))))
def test_a_float_duration_is_binned_as_the_nearest_integer_ns(pair):
    """``aclprof diff`` reads an Ascend CSV's microseconds as float ns: rounded first."""
    d, frac = pair
    assert bin_index(np.array([d + frac])).tolist() == [ref(d)]


def test_other_integer_widths_and_bad_values():
    assert bin_index(np.array([0, 1, 2, 255], dtype=np.uint8)).tolist() == [0, 1, 8, ref(255)]
    assert bin_index(np.array([1024], dtype=np.int32)).tolist() == [80]
    assert bin_index(np.array([1023.6, 1024.4, 1024.6])).tolist() == [80, 80, 81]
    assert bin_index(np.array([np.inf, -np.inf])).tolist() == [NBINS - 1, 0]
    with pytest.raises(ValueError, match="bin_index: a duration is NaN"):
        bin_index(np.array([1.0, np.nan]))
    with pytest.raises(TypeError, match="bin_index: durations must be integer or float"):
        bin_index(np.array(["10"]))
    assert bin_index(np.array([], dtype=np.int64)).tolist() == []
    assert bin_index(np.int64(1024)).shape == () and int(bin_index(np.int64(1024))) == 80
    assert bin_index(np.array([[1, 2], [1024, 1025]])).tolist() == [[1, 8], [80, 81]]


def _previous_rule(d: np.ndarray) -> np.ndarray:
    """The rule before the fix (lower-inclusive ``[2**((b-1)/8), 2**(b/8))``), kept here to
    pin what moved for histograms saved before it (aggregates.npz, baselines, diff inputs)."""
    f = np.asarray(d, dtype=np.float64)
    with np.errstate(divide="ignore"):
        b = np.floor(np.log2(f) * BINS_PER_OCTAVE) + 1
    b[f < 1] = 0
    return np.clip(b, 0, NBINS - 1).astype(np.int64)


def test_only_powers_of_two_moved_and_by_one_bin():
    """The compatibility note (daemon/README.md): a saved histogram differs from today's only
    for durations of exactly 2**k ns (k >= 1), one bin up; everything else is binned alike."""
    xs = [x for x in edge_neighbours() if x <= 2 ** 41]
    rng = np.random.default_rng(7)
    xs += rng.integers(0, 2 ** 41, 200_000).tolist()
    d = np.array(xs, dtype=np.int64)
    new, old = bin_index(d), _previous_rule(d)
    moved = d[new != old]
    assert len(moved) and set(moved.tolist()) == {2 ** k for k in range(1, 41)} & set(xs)
    assert (old[new != old] == new[new != old] + 1).all()


def test_a_saved_sample_at_a_power_of_two_still_reads_within_the_stated_resolution():
    """Read back from its old bin (8k+1), a duration of 2**k ns is the bin's middle: 2**(1/16)
    - 1 = 4.4 % off, the bound the docs state for any quantile."""
    from aclprofd.aggregate.quantiles import bin_value

    for k in range(1, 41):
        assert bin_value(np.array([8 * k + 1]))[0] / 2 ** k - 1 <= 2 ** (1 / 16) - 1 + 1e-12


def test_every_integer_up_to_4m_and_a_million_log_uniform_ones_match_the_table():
    """Dense: the float32 estimate and its exact re-check against a plain lookup in the
    (separately verified) table, for every duration below 2**22 ns and 1 M log-uniform ones
    up to 2**41 ns."""
    dense = np.arange(2 ** 22, dtype=np.int64)
    assert (bin_index(dense) == np.searchsorted(BIN_UPPER_NS, dense, side="left")).all()
    rng = np.random.default_rng(20)
    wide = np.exp2(rng.uniform(0, 41, 1_000_000)).astype(np.int64)
    assert (bin_index(wide) == np.searchsorted(BIN_UPPER_NS, wide, side="left")).all()


def test_the_float32_estimate_is_well_inside_the_margin_that_sends_values_to_the_exact_path():
    """The premise of ``bin_index``'s fast path: float32 ``8*log2(d)`` (conversion included) is
    off by far less than ``_NEAR`` anywhere up to 2**64, so every estimate that could round to
    the wrong side of an edge is re-checked exactly. Measured on this numpy and CPU, so that a
    build with a coarser float32 ``log2`` fails here instead of misbinning in silence."""
    from aclprof.protocol.quantshift import _NEAR

    rng = np.random.default_rng(64)
    d = np.concatenate([np.array([x for x in edge_neighbours() if x > 0], dtype=np.uint64),
                        np.exp2(rng.uniform(0, 63.99, 1_000_000)).astype(np.uint64)])
    est = np.log2(d.astype(np.float32)).astype(np.float64) * BINS_PER_OCTAVE
    exact = np.log2(d.astype(np.float64)) * BINS_PER_OCTAVE  # float64: ~1e-14 off, and d rounds by < 2**-53
    assert np.max(np.abs(est - exact)) < _NEAR / 4
