"""aclprofd.promtext.histogram_text: the agents over their share counted once across the
histograms of one rendering, and a histogram's own bucket bounds (the fine histogram's).
Written against the survivors of the mutation run of 2026-12-02 night (tests/bench/MUTATION.md)."""

from __future__ import annotations

import numpy as np
from aclprofd.promtext import Budget, TextBuilder, histogram_steps, histogram_text


def test_an_agent_over_its_share_in_two_histograms_is_counted_once():
    les = ("0.5", "+Inf")
    rows = [(("a",), np.array([1, 2], np.int64), 2, 10), (("b",), np.array([1, 2], np.int64), 2, 10)]
    owners = [(1, "h", 7), (2, "h", 7)]
    per_set = len(les) + 2
    over: set[tuple[str, int]] = set()
    for name in ("m1", "m2"):
        out = TextBuilder(Budget(max_series=10**6, per_agent=per_set, max_bytes=1 << 30))
        for _ in histogram_steps(out, name, "d", ("host", "op_type"), "x", rows, owners, les=les, over=over):
            pass
        assert over == {("h", 7)}  # the second histogram finds it there: one agent, counted once


def test_a_histogram_is_written_with_its_own_bucket_bounds():
    les = ("0.5", "+Inf")
    out = TextBuilder(Budget(max_series=10**6, per_agent=10**6, max_bytes=1 << 30))
    histogram_text(out, "m", "d", ("host", "op_type"), "x", [(("a",), np.array([3, 7], np.int64), 7, 2_000)],
                   [(1, "h", 7)], les=les)
    got = b"".join(out.finish(0.0, 0).chunks)
    assert b'm_bucket{host="x",le="0.5",op_type="a"} 3.0\n' in got
    assert b'm_bucket{host="x",le="+Inf",op_type="a"} 7.0\n' in got
