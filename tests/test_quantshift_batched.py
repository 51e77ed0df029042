"""The detector's one-pass readings against the per-quantile functions they replace in its
tick (issue 21): ``quantshift.shifts`` must give what ``shift`` gives quantile by quantile,
and ``dispersions`` what ``dispersion`` gives, bit for bit (NaN where NaN), on drawn
histograms with empty rows, per-row half-widths and a subset of groups; and the inverse CDF
read in row chunks must equal the one read at once."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from aclprofd.detector.dispersion import MIN_SECONDS, WindowIndex, dispersion, dispersions
from hypothesis import given, settings
from hypothesis import strategies as st

from aclprof.protocol import quantshift
from aclprof.protocol.quantshift import NBINS, QUANTILES, shift, shifts

_qs = st.lists(st.floats(0.001, 0.999), min_size=1, max_size=3).map(tuple) | st.just(QUANTILES)


def _hists(rng: np.random.Generator, rows: int, dense: bool) -> np.ndarray:
    """Rows of counts (or decayed weights) over a few clustered bins; some rows empty."""
    h = np.zeros((rows, NBINS))
    for r in range(rows):
        if rng.random() < 0.2:
            continue  # an empty row: NaN readings
        centre = int(rng.integers(1, NBINS - 1))
        bins = np.clip(centre + rng.integers(-6, 7, size=int(rng.integers(1, 40))), 0, NBINS - 1)
        np.add.at(h[r], bins, rng.integers(1, 5000, size=len(bins)))
    return h * rng.random() if not dense else h


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a, b, equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 9), qs=_qs, per_row=st.booleans(),
       given_cums=st.booleans(), counts=st.booleans())
def test_shifts_equal_shift_quantile_by_quantile(seed, rows, qs, per_row, given_cums, counts):
    rng = np.random.default_rng(seed)
    base, cur = _hists(rng, rows, counts), _hists(rng, rows, True)
    zs = [rng.uniform(0.5, 9.0, rows) if per_row else float(rng.uniform(0.5, 9.0)) for _ in qs]
    cums = (np.cumsum(base, axis=1), np.cumsum(cur, axis=1)) if given_cums else None
    got = shifts(base, cur, qs, zs, cums)
    assert len(got) == len(qs)
    for q, z, s in zip(qs, zs, got):
        want = shift(base, cur, q, z, cums)
        for f in dataclasses.fields(want):
            a, b = getattr(s, f.name), getattr(want, f.name)
            assert _same(np.asarray(a), np.asarray(b)), (q, f.name, a, b)


def test_shifts_refuses_what_shift_refuses():
    h = np.ones((2, NBINS))
    with pytest.raises(ValueError, match="shifts: q must be in"):
        shifts(h, h, (0.5, 1.0), (4.0, 4.0))
    with pytest.raises(ValueError, match="2 quantiles but 1 half-widths"):
        shifts(h, h, (0.5, 0.99), (4.0,))
    with pytest.raises(ValueError, match="differ in shape"):
        shifts(h, np.ones((3, NBINS)), (0.5,), (4.0,))


def test_the_inverse_cdf_read_in_row_chunks_equals_one_read(monkeypatch):
    rng = np.random.default_rng(7)
    hist = _hists(rng, 50, True)
    cum = np.cumsum(hist, axis=1)
    n = cum[:, -1]
    ranks = np.concatenate([quantshift._ranks(n, q, 4.0) for q in QUANTILES], axis=1)
    whole = quantshift._inverse_cdf(hist, cum, ranks)
    monkeypatch.setattr(quantshift, "_INVERSE_CHUNK", 6 * NBINS * 7)  # 7 rows a chunk: 8 chunks, the last short
    chunked = quantshift._inverse_cdf(hist, cum, ranks)
    assert _same(chunked, whole) and chunked.shape == (50, 6)


def _window(rng: np.random.Generator, seconds: int, groups: int) -> tuple[WindowIndex, np.ndarray]:
    """A window of per-second sparse (group * NBINS + bin codes, counts), and its histograms."""
    dense = np.zeros((seconds, groups, NBINS))
    for t in range(seconds):
        for g in range(groups):
            if rng.random() < 0.15:
                continue  # a group idle this second
            centre = 40 + 3 * g
            bins = np.clip(centre + rng.integers(-5, 6, size=int(rng.integers(1, 30))), 0, NBINS - 1)
            np.add.at(dense[t, g], bins, rng.integers(1, 200, size=len(bins)))
    secs = []
    for sec in dense:
        codes = np.flatnonzero(sec.reshape(-1))
        secs.append((codes, sec.reshape(-1)[codes]))
    return WindowIndex(secs, groups), dense.sum(axis=0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), seconds=st.integers(MIN_SECONDS - 2, MIN_SECONDS + 25),
       groups=st.integers(1, 7), qs=_qs, subset=st.booleans())
def test_dispersions_equal_dispersion_quantile_by_quantile(seed, seconds, groups, qs, subset):
    rng = np.random.default_rng(seed)
    win, hist = _window(rng, seconds, groups)
    rows = np.flatnonzero(rng.random(groups) < 0.6) if subset else None
    if rows is not None:
        hist = hist[rows]
    cum = np.cumsum(hist, axis=1)
    got = dispersions(win, hist, cum, qs, rows)
    assert len(got) == len(qs)
    for q, phi in zip(qs, got):
        assert _same(phi, dispersion(win, hist, cum, q, rows)), q
        assert phi.shape == (len(hist),) and (phi >= 1.0).all()
