"""``merge_stats`` (issue 21): a window slot's merge of its batches' per-key figures in one C
call gives exactly what the numpy steps it replaced gave (sorted keys, wrapping int64 sums,
least min, largest max, each output of its input's dtype), and refuses bad arguments with
nothing written."""

from __future__ import annotations

import numpy as np
import pytest
from aclprofd.aggregate.quantiles import group_stats
from hypothesis import given, settings
from hypothesis import strategies as st

from aclprof.protocol._batchgroup import merge_stats

_I64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _reference(keys: np.ndarray, count: np.ndarray, total: np.ndarray, mn: np.ndarray,
               mx: np.ndarray) -> tuple[np.ndarray, ...]:
    """The steps group_stats took before merge_stats."""
    order = np.argsort(keys, kind="stable")
    keys, count, total, mn, mx = keys[order], count[order], total[order], mn[order], mx[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return (keys[starts], np.add.reduceat(count, starts), np.add.reduceat(total, starts),
            np.minimum.reduceat(mn, starts), np.maximum.reduceat(mx, starts))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40) | _I64, _I64, _I64, _I64, _I64), min_size=1, max_size=200),
       st.sampled_from([np.int64, np.int32]))
def test_group_stats_is_what_the_numpy_steps_gave(rows: list[tuple[int, ...]], key_dtype: type) -> None:
    cols = [np.array([r[i] for r in rows], np.int64) for i in range(5)]
    if key_dtype is np.int32:  # a slot's narrowed keys (SlidingWindows.figures concatenates them)
        cols[0] = (cols[0] % 1000).astype(np.int32)
    got, want = group_stats(*cols), _reference(*cols)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)
        assert g.base is None or g.base.size == g.size  # not a view of the call's scratch rows


def test_bad_arguments_are_refused_with_nothing_written() -> None:
    keys = np.array([3, 1, 3], np.int64)
    out = np.full((5, 3), 7, np.int64)
    with pytest.raises(ValueError, match="argument 2"):
        merge_stats(keys, keys[:2], keys, keys, keys, *out)
    with pytest.raises(ValueError, match="argument 7"):
        merge_stats(keys, keys, keys, keys, keys, out[0], out[1, :2], out[2], out[3], out[4])
    with pytest.raises(TypeError, match="10 arguments"):
        merge_stats(keys, keys)
    assert (out == 7).all()
    assert merge_stats(keys, keys, keys, keys, keys, *out) == 2
    assert out[:, :2].tolist() == [[1, 3], [1, 6], [1, 6], [1, 3], [1, 3]]
