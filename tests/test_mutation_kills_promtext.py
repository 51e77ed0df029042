"""The /metrics text writer (``aclprofd/promtext.py``) as in-process unit tests (issue 20,
mutation run): byte for byte what ``prometheus_client.generate_latest`` writes for the same
families (its own parser reads ours back with the same values), and the series budget's
accounting at its edges: the total, the bytes, one agent's share of both, the order that
decides who is left out, and the chunking of the text.

tests/test_hostile2_metrics.py checks the same through HTTP on in-process daemons.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from aclprofd.aggregate.quantiles import NPROM, PROM_EXPONENTS
from aclprofd.promtext import (
    CHUNK,
    REFUSAL_REASONS,
    SERIES_PER_HISTOGRAM,
    Budget,
    TextBuilder,
    _header,
    escape,
    family_text,
    histogram_lines,
    histogram_text,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

BIG = Budget(max_series=10**6, per_agent=10**6, max_bytes=1 << 30)


def theirs(*families) -> bytes:
    class Fixed:
        def collect(self):
            return iter(families)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fixed())
    return generate_latest(reg)


def text(out: TextBuilder) -> bytes:
    return b"".join(out.finish(0.0, 0).chunks)


def test_escape_writes_backslash_newline_and_quote_as_the_text_format_does():
    assert escape('a\\b\nc"d') == 'a\\\\b\\nc\\"d'
    assert escape("plain é") == "plain é"


def test_the_constants():
    assert SERIES_PER_HISTOGRAM == NPROM + 2 == len(PROM_EXPONENTS) + 3
    assert CHUNK == 65536
    assert REFUSAL_REASONS == ("agent_share", "total", "bytes")


# ---- the budget ---------------------------------------------------------------------------------

def test_an_agents_share_of_the_bytes_is_its_share_of_the_series():
    assert Budget(max_series=100, per_agent=30, max_bytes=1000).agent_bytes == 300
    assert Budget(max_series=100, per_agent=33, max_bytes=1000).agent_bytes == 330
    assert Budget(max_series=3, per_agent=1, max_bytes=1000).agent_bytes == 333  # rounded down
    assert Budget(max_series=100, per_agent=500, max_bytes=1000).agent_bytes == 1000  # never above all


def test_admit_at_the_edges_of_the_series_and_the_bytes():
    out = TextBuilder(Budget(max_series=10, per_agent=10, max_bytes=100))
    out.add(b"x" * 60, 6)
    assert out.admit(4, 40) is None  # exactly at both limits
    assert out.refused == {"agent_share": 0, "total": 0, "bytes": 0}
    assert out.admit(5, 10) == "total"  # one series above
    assert out.admit(4, 41) == "bytes"  # one byte above
    assert out.admit(5, 41) == "total"  # both: the series are counted first
    assert out.refused == {"agent_share": 0, "total": 10, "bytes": 4}
    assert (out.series, out.size) == (6, 60)  # a refusal adds nothing


def test_lines_are_cut_into_chunks_of_at_least_CHUNK_bytes_and_finish_cuts_the_rest():
    out = TextBuilder(BIG)
    out.add(b"a" * (CHUNK - 1), 1)
    assert out.chunks == []
    out.add(b"b", 1)  # reaches CHUNK: cut
    assert out.chunks == [b"a" * (CHUNK - 1) + b"b"]
    out.add(b"c" * (CHUNK - 6), 0)  # a new chunk counts from 0: one byte short of CHUNK
    out.add(b"d" * 5, 2)
    assert len(out.chunks) == 1
    started = time.monotonic()
    r = out.finish(started=started, agents_over_share=3)
    elapsed = time.monotonic() - started
    assert r.chunks == (b"a" * (CHUNK - 1) + b"b", b"c" * (CHUNK - 6) + b"d" * 5)
    assert (r.size, r.series, r.agents_over_share, r.started) == (2 * CHUNK - 1, 4, 3, started)
    assert 0 <= r.seconds <= elapsed  # the rendering's own duration
    assert r.refused == {"agent_share": 0, "total": 0, "bytes": 0}
    out.refused["total"] += 1
    assert r.refused["total"] == 0  # the rendering keeps its own copy


def test_finish_of_nothing_has_no_chunk():
    r = TextBuilder(BIG).finish(0.0, 0)
    assert (r.chunks, r.size, r.series) == ((), 0, 0)


# ---- counters and gauges ------------------------------------------------------------------------

def families():
    c = CounterMetricFamily("aclprofd_records", "Records received\\with a backslash\nand a newline",
                            labels=["service", "host"])
    c.add_metric(['s"q', "h\\1"], 12)
    c.add_metric(["line\nbreak", "h2"], 3.5)
    g = GaugeMetricFamily("aclprofd_agents", "Connected agents", value=2)
    e = GaugeMetricFamily("aclprofd_empty", "No samples", labels=["x"])
    return [c, g, e]


def test_counters_and_gauges_are_prometheus_clients_text_byte_for_byte():
    out = TextBuilder(BIG)
    for fam in families():
        family_text(out, fam)
    mine = text(out)
    assert mine == theirs(*families())
    assert out.series == 3  # the HELP and TYPE lines are no series
    assert out.size == len(mine)
    parsed = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(mine.decode()) for s in f.samples}
    assert parsed == {("aclprofd_records_total", (("host", "h\\1"), ("service", 's"q'))): 12.0,
                      ("aclprofd_records_total", (("host", "h2"), ("service", "line\nbreak"))): 3.5,
                      ("aclprofd_agents", ()): 2.0}


def test_samples_beyond_the_budget_are_left_out_and_counted_unless_forced():
    out = TextBuilder(Budget(max_series=1, per_agent=1, max_bytes=10**6))
    family_text(out, families()[0])
    assert out.series == 1 and out.refused["total"] == 1
    assert text(out).count(b"aclprofd_records_total{") == 1
    forced = TextBuilder(Budget(max_series=1, per_agent=1, max_bytes=10**6))
    family_text(forced, families()[0], force=True)
    assert forced.series == 2 and forced.refused == {"agent_share": 0, "total": 0, "bytes": 0}
    bytes_out = TextBuilder(Budget(max_series=10, per_agent=10, max_bytes=10**6))
    full = theirs(families()[0])
    first = full[:full.index(b"\n", full.index(b"aclprofd_records_total{")) + 1]  # HELP, TYPE, 1st sample
    bytes_out.size = 10**6 - len(first)  # room for exactly the header and the first line
    family_text(bytes_out, families()[0])
    assert bytes_out.refused["bytes"] == 1 and bytes_out.series == 1


# ---- histograms ----------------------------------------------------------------------------------

LE = [floatToGoString(2.0**k * 1e-9) for k in PROM_EXPONENTS] + ["+Inf"]


def their_histogram(name: str, labels: dict[str, str], cum: list[int], count: int, sum_s: float) -> bytes:
    h = HistogramMetricFamily(name, "doc", labels=list(labels))
    h.add_metric(list(labels.values()), buckets=[(le, v) for le, v in zip(LE[:-1], cum[:-1])] + [("+Inf", count)],
                 sum_value=sum_s)
    t = theirs(h)
    return t[t.index(b"\n", t.index(b"# TYPE")) + 1:]


CUM = [0] * 3 + [1, 1, 4] + [7] * (NPROM - 6)


@pytest.mark.parametrize("labels", [
    {"device": "0", "host": "h", "model": 'm"1', "op_type": "Mat\\Mul", "service": "s\nx"},  # both sides of le
    {"device": "1", "host": "h"},   # before le only
    {"op_type": "Add", "service": "s"},  # after le only
    {},
], ids=["around le", "before le", "after le", "no labels"])
def test_histogram_lines_are_prometheus_clients_byte_for_byte(labels):
    mine = histogram_lines("aclprofd_op_duration_seconds", labels, CUM, 7, 0.001234)
    assert mine == their_histogram("aclprofd_op_duration_seconds", labels, CUM, 7, 0.001234)
    assert mine.count(b"\n") == SERIES_PER_HISTOGRAM


def series(lab: tuple[str, ...], count: int, sum_ns: int):
    return lab, np.array([*CUM[:-1], count], dtype=np.int64), count, sum_ns


def test_histogram_text_admits_label_sets_by_their_first_key_and_charges_their_agent():
    """Agent A's three label sets and agent B's one; A may have two. The sets come unordered:
    they are taken by their first key, so A's oldest two stay, whatever order they came in."""
    names = ("host", "service", "op_type")
    rows = [series(("s", "A3"), 7, 3_000), series(("s", "B1"), 7, 4_000), series(("s", "A1"), 7, 1_000),
            series(("s", "A2"), 7, 2_000)]
    owners = [(30, "hostA", 1), (5, "hostB", 1), (10, "hostA", 1), (20, "hostA", 1)]
    out = TextBuilder(Budget(max_series=10**6, per_agent=2 * SERIES_PER_HISTOGRAM, max_bytes=1 << 30))
    over = histogram_text(out, "op_seconds", "Op durations", names, "hl", rows, owners)
    assert over == 1
    assert out.refused == {"agent_share": SERIES_PER_HISTOGRAM, "total": 0, "bytes": 0}
    assert out.series == 3 * SERIES_PER_HISTOGRAM
    got = text(out)
    assert got.startswith(b"# HELP op_seconds Op durations\n# TYPE op_seconds histogram\n")
    sums = [(s.labels["op_type"], s.value) for f in text_string_to_metric_families(got.decode())
            for s in f.samples if s.name == "op_seconds_sum"]
    assert sums == [("B1", 4e-6), ("A1", 1e-6), ("A2", 2e-6)]  # in first-key order; A3 left out
    assert b'op_seconds_count{host="hl",op_type="A1",service="s"} 7.0\n' in got


def test_the_same_pid_on_two_hosts_are_two_agents():
    rows = [series(("a",), 1, 1), series(("b",), 1, 1)]
    owners = [(1, "h1", 7), (2, "h2", 7)]
    out = TextBuilder(Budget(max_series=10**6, per_agent=SERIES_PER_HISTOGRAM, max_bytes=1 << 30))
    assert histogram_text(out, "m", "d", ("host", "op_type"), "x", rows, owners) == 0
    assert out.series == 2 * SERIES_PER_HISTOGRAM


def test_an_agents_byte_share_leaves_out_its_later_sets():
    rows = [series(("a" * 50,), 1, 1), series(("b" * 50,), 1, 1), series(("c",), 1, 1)]
    owners = [(1, "h", 1), (2, "h", 1), (3, "g", 2)]
    one = len(histogram_lines("m", {"host": "x", "op_type": "a" * 50}, CUM, 1, 1e-9))
    # room for exactly one long set per agent: the share is max_bytes * per_agent // max_series
    b = Budget(max_series=100 * SERIES_PER_HISTOGRAM, per_agent=10 * SERIES_PER_HISTOGRAM, max_bytes=one * 10)
    assert b.agent_bytes == one
    out = TextBuilder(b)
    assert histogram_text(out, "m", "d", ("host", "op_type"), "x", rows, owners) == 1
    assert out.refused["agent_share"] == SERIES_PER_HISTOGRAM
    assert out.series == 2 * SERIES_PER_HISTOGRAM


def test_the_total_budget_leaves_out_later_sets_of_any_agent_without_charging_them():
    rows = [series((str(i),), 1, 1) for i in range(4)]
    owners = [(i, "h", i) for i in range(4)]
    out = TextBuilder(Budget(max_series=2 * SERIES_PER_HISTOGRAM + 1, per_agent=10**6, max_bytes=1 << 30))
    assert histogram_text(out, "m", "d", ("host", "op_type"), "x", rows, owners) == 0
    assert out.refused == {"agent_share": 0, "total": 2 * SERIES_PER_HISTOGRAM, "bytes": 0}
    assert out.series == 2 * SERIES_PER_HISTOGRAM


def test_a_refused_set_is_not_charged_to_its_agent():
    """The byte budget refuses A's first (long) set; its second, short one still fits, and A is not over its share."""
    long_, short = series(("x" * 400,), 1, 1), series(("y",), 1, 1)
    n_short = len(histogram_lines("m", {"host": "x", "op_type": "y"}, CUM, 1, 1e-9))
    out = TextBuilder(Budget(max_series=10**6, per_agent=10**6, max_bytes=10**6))
    out.size = 10**6 - len(_header("m", "", "histogram")) - n_short  # only a short set still fits
    assert histogram_text(out, "m", "", ("host", "op_type"), "x", [long_, short], [(1, "h", 1), (2, "h", 1)]) == 0
    assert out.refused["bytes"] == SERIES_PER_HISTOGRAM
    assert out.series == SERIES_PER_HISTOGRAM


def test_every_set_left_out_for_a_share_is_counted_and_every_agent_over_it_too():
    """Agents A and B each over their share of series (two sets each), C within it; A's and
    B's refused sets come before C's, which is still admitted."""
    rows, owners = [], []
    for key, (host, pid) in enumerate([("a", 1), ("b", 2), ("a", 1), ("b", 2), ("a", 1), ("b", 2), ("a", 1),
                                       ("c", 3)]):
        rows.append(series((f"t{key}",), 1, 1))
        owners.append((key, host, pid))
    out = TextBuilder(Budget(max_series=10**6, per_agent=2 * SERIES_PER_HISTOGRAM, max_bytes=1 << 30))
    assert histogram_text(out, "m", "d", ("host", "op_type"), "x", rows, owners) == 2
    assert out.refused == {"agent_share": 3 * SERIES_PER_HISTOGRAM, "total": 0, "bytes": 0}
    got = text(out)
    assert [f'op_type="t{k}"' in got.decode() for k in range(8)] == [True] * 4 + [False] * 3 + [True]


def test_every_set_left_out_for_a_byte_share_is_counted_and_every_agent_over_it_too():
    long_ = [series(("x" * 200 + str(k),), 1, 1) for k in range(5)]
    owners = [(0, "a", 1), (1, "b", 2), (2, "a", 1), (3, "b", 2), (4, "a", 1)]
    one = len(histogram_lines("m", {"host": "x", "op_type": "x" * 200 + "0"}, CUM, 1, 1e-9))
    b = Budget(max_series=100 * SERIES_PER_HISTOGRAM, per_agent=10 * SERIES_PER_HISTOGRAM, max_bytes=one * 10 + 9)
    out = TextBuilder(b)
    assert histogram_text(out, "m", "d", ("host", "op_type"), "x", long_, owners) == 2
    assert out.refused["agent_share"] == 3 * SERIES_PER_HISTOGRAM
    assert out.series == 2 * SERIES_PER_HISTOGRAM
