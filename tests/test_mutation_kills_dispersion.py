"""aclprofd.detector.dispersion against its definition (helpers.streams): a quantile bin that
holds one call of the whole window, and the rows of only some groups (the detector evaluates
the judged groups only). Written against the survivors of the mutation run of 2026-12-02
night (tests/bench/MUTATION.md)."""

from __future__ import annotations

import numpy as np
from aclprofd.detector.dispersion import MIN_SECONDS, WindowIndex, dispersion
from helpers.streams import dispersion_and_definition

from aclprof.protocol.quantshift import NBINS

S = MIN_SECONDS + 2


def test_a_median_bin_holding_one_call_of_the_window_matches_the_definition():
    """36 calls in bin 40 and 36 in bin 60 over the window (all of a second in one of them,
    alternating), one in bin 50: the median (rank 36.5 of 73) is half of that single call."""
    dense = np.zeros((S, 1, NBINS))
    for t in range(S):
        dense[t, 0, 40] = 6 * (t % 2)
        dense[t, 0, 60] = 6 - 6 * (t % 2)
    dense[0, 0, 50] = 1
    assert dense[:, 0, 40].sum() == 36 and dense[:, 0, 60].sum() == 36
    got, want = dispersion_and_definition(dense, 0.5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert want[0] > 1.0


def test_the_rows_of_some_groups_are_read_at_their_own_codes():
    """Groups 0 and 1 of one window; dispersion of group 1's row alone (``groups=[1]``) is
    group 1's figure, not group 0's."""
    dense = np.zeros((S, 2, NBINS))
    for t in range(S):
        dense[t, 0, 100] = 10                      # steady: phi 1
        dense[t, 1, 80 + 40 * (t % 2)] = 10        # alternating between two bins: phi large
        dense[t, 1, 100] = 10
    hist = dense.sum(axis=0)
    cum = np.cumsum(hist, axis=1)
    seconds = [(np.flatnonzero(sec.reshape(-1)), sec.reshape(-1)[np.flatnonzero(sec.reshape(-1))]) for sec in dense]
    win = WindowIndex(seconds, 2)
    both = dispersion(win, hist, cum, 0.5)
    one = dispersion(win, hist[[1]], cum[[1]], 0.5, np.array([1]))
    assert both[0] == 1.0 and both[1] > 2.0
    assert one.tolist() == [both[1]]
