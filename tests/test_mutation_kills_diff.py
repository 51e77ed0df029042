"""``aclprof diff``'s direction and ranking (``aclprof.cli.diff.compare``) and the shift
judgement it shares with the detector (``aclprof.protocol.quantshift``), in process
(issue 20): quantiles that move in opposite directions, shifts of different sizes, which
quantile drives the verdict and the order, the sample floor at its edge, and the table."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.streams import bin_probabilities

from aclprof.cli.diff import _table, compare
from aclprof.cli.diff_sources import Histograms
from aclprof.protocol.quantshift import (
    IMPROVEMENT,
    NBINS,
    NONE,
    REGRESSION,
    Shift,
    bin_index,
    judge,
    quantile_ci,
    shift,
)

N = 200_000  # samples per side: intervals of a few tenths of a percent


def _hist(median_ns: float, sigma: float = 0.3, n: int = N) -> np.ndarray:
    """A lognormal's histogram of exactly ``n`` whole samples (the counts at the edges are exact)."""
    h = np.floor(bin_probabilities(median_ns, sigma) * n)
    h[np.argmax(h)] += n - h.sum()
    return h


def _source(spec: str, ops: dict[str, np.ndarray], service: str = "svc") -> Histograms:
    cells = [(service, "m", op, f"{op}_0") for op in ops]
    return Histograms(spec, cells, np.stack(list(ops.values())))


def _rows(a: dict, b: dict, **kw) -> dict[str, dict]:
    return {r["key"]: r for r in compare(_source("A", a), _source("B", b), **kw)["rows"]}


def test_opposite_quantiles_a_slower_p50_with_a_faster_p99_is_slower():
    """The typical bimodal fix gone wrong: most calls got slower, the tail shorter. Any
    slower quantile makes the verdict "slower"; a faster one only counts when none is."""
    a = {"Op": _hist(100_000, sigma=0.6)}
    b = {"Op": _hist(120_000, sigma=0.1)}
    r = _rows(a, b)["Op"]
    assert r["p50"]["shift"] > 1.15 and r["p50"]["lower"] > 1.0
    assert r["p99"]["shift"] < 0.5 and r["p99"]["upper"] < 1.0
    assert r["verdict"] == "slower"
    # and the other way round: the median faster, the tail slower: still "slower"
    r = _rows({"Op": _hist(120_000, sigma=0.1)}, {"Op": _hist(100_000, sigma=0.6)})["Op"]
    assert r["p50"]["shift"] < 0.9 and r["p99"]["shift"] > 2.0
    assert r["verdict"] == "slower"


@pytest.mark.parametrize("b_median,b_sigma,want", [
    (80_000, 0.3, "faster"),    # both quantiles faster
    (100_000, 0.24, "faster"),  # the same median, a shorter tail: p99 faster, p50 unchanged
    (100_000, 0.36, "slower"),  # the same median, a longer tail: p99 alone decides
    (100_000, 0.3, ""),         # nothing moved
    (103_000, 0.3, ""),         # +3 %: a real shift (the interval excludes 1) below --min-effect 5 %
    (106_000, 0.3, "slower"),   # +6 %: above it
])
def test_each_quantile_can_decide_the_verdict(b_median, b_sigma, want):
    r = _rows({"Op": _hist(100_000)}, {"Op": _hist(b_median, sigma=b_sigma)})["Op"]
    assert r["verdict"] == want, r


def test_rows_are_ranked_by_the_p99_shift_largest_first_then_by_name():
    a = {"Big": _hist(100_000), "Small": _hist(100_000), "Faster": _hist(100_000), "Same2": _hist(50_000),
         "Same1": _hist(50_000), "P50only": _hist(100_000, sigma=0.6), "Zero": np.eye(1, NBINS, 0)[0] * N}
    b = {"Big": _hist(150_000), "Small": _hist(110_000), "Faster": _hist(70_000), "Same2": _hist(50_000),
         "Same1": _hist(50_000), "P50only": _hist(150_000, sigma=0.1), "Zero": np.eye(1, NBINS, 0)[0] * N}
    result = compare(_source("A", a), _source("B", b))
    keys = [r["key"] for r in result["rows"]]
    # P50only's median moved +50 % but its p99 fell: the order is the p99's, not the biggest move;
    # Zero (durations of 0: no ratio) comes last
    assert keys == ["Big", "Small", "Same1", "Same2", "Faster", "P50only", "Zero"]
    shifts = [r["p99"]["shift"] for r in result["rows"]]
    assert shifts[0] == pytest.approx(1.5, abs=0.02) and shifts[1] == pytest.approx(1.1, abs=0.01)
    assert shifts[-1] is None
    by_key = {r["key"]: r for r in result["rows"]}
    assert [by_key[k]["verdict"] for k in keys] == ["slower", "slower", "", "", "faster", "slower", ""]
    assert by_key["Zero"]["p50"] == {"a_ns": 0.0, "b_ns": 0.0, "shift": None, "lower": None, "upper": None}


def test_the_sample_floor_at_its_edge_and_ops_on_one_side_only():
    a = {"Edge": _hist(100_000, n=200), "Below": _hist(100_000, n=199), "OnlyA": _hist(1000)}
    b = {"Edge": _hist(300_000, n=200), "Below": _hist(300_000, n=1000), "OnlyB": _hist(1000)}
    result = compare(_source("A", a), _source("B", b), min_count=200)
    by_key = {r["key"]: r for r in result["rows"]}
    assert by_key["Edge"]["verdict"] == "slower"  # exactly --min-count on each side: judged
    assert by_key["Below"]["verdict"] == "too few"  # one sample short on one side
    assert (by_key["Below"]["n_a"], by_key["Below"]["n_b"]) == (199.0, 1000.0)
    assert result["only_in_a"] == ["OnlyA"] and result["only_in_b"] == ["OnlyB"]
    assert {"a": "A", "b": "B", "by": "type", "service": None, "min_effect": 0.05, "min_count": 200,
            "z": 4.0}.items() <= result.items()


def test_min_effect_and_z_are_the_callers():
    a, b = {"Op": _hist(100_000)}, {"Op": _hist(108_000)}
    assert _rows(a, b, min_effect=0.05)["Op"]["verdict"] == "slower"
    assert _rows(a, b, min_effect=0.1)["Op"]["verdict"] == ""
    small_a, small_b = {"Op": _hist(100_000, n=2000)}, {"Op": _hist(108_000, n=2000)}
    assert _rows(small_a, small_b, z=1.0)["Op"]["verdict"] == "slower"
    assert _rows(small_a, small_b, z=6.0)["Op"]["verdict"] == ""  # too wide to call


def test_by_name_and_service_group_the_cells():
    cells = [("svc", "m", "MatMul", "l1/mm"), ("svc", "m", "MatMul", "l2/mm"), ("other", "m", "MatMul", "l1/mm")]
    a = Histograms("A", cells, np.stack([_hist(100_000), _hist(100_000), _hist(100_000)]))
    b = Histograms("B", cells, np.stack([_hist(200_000), _hist(100_000), _hist(100_000)]))
    by_type = compare(a, b)["rows"]
    assert [(r["key"], r["n_a"]) for r in by_type] == [("MatMul", 3 * N)]
    by_name = {r["key"]: r for r in compare(a, b, by="name")["rows"]}
    assert set(by_name) == {"l1/mm", "l2/mm"} and by_name["l1/mm"]["n_a"] == 2 * N
    assert by_name["l2/mm"]["verdict"] == ""
    only_other = compare(a, b, by="name", service="other")
    assert [(r["key"], r["verdict"], r["n_b"]) for r in only_other["rows"]] == [("l1/mm", "", N)]
    assert only_other["service"] == "other"
    svc = {r["key"]: r for r in compare(a, b, by="name", service="svc")["rows"]}
    assert svc["l1/mm"]["p50"]["shift"] == pytest.approx(2.0, abs=0.02) and svc["l1/mm"]["verdict"] == "slower"


def test_the_table_shows_the_verdicts_in_the_ranked_order():
    a = {"Add": _hist(100_000), "MatMul": _hist(100_000), "Gone": _hist(1000)}
    b = {"Add": _hist(70_000), "MatMul": _hist(150_000)}
    text = _table(compare(_source("A", a), _source("B", b)), None)
    lines = text.splitlines()
    assert lines[0].split() == ["OP", "TYPE", "N", "A", "N", "B", "P50", "A", "P50", "B", "P50", "B/A", "[CI]",
                                "P99", "A", "P99", "B", "P99", "B/A", "[CI]", "VERDICT"]
    assert lines[1].startswith("MatMul") and lines[1].endswith("slower")
    assert lines[2].startswith("Add") and lines[2].endswith("faster")
    assert lines[3] == "only in A: Gone"
    assert " 1.500 [" in lines[1] and " 0.700 [" in lines[2]
    assert _table(compare(_source("A", a), _source("B", b)), 1).splitlines()[1:] == [lines[1], lines[3]]
    empty = _table(compare(_source("A", {"X": _hist(1000)}), _source("B", {"Y": _hist(1000)})), None)
    assert empty.splitlines()[1:] == ["(no op present in both)", "only in A: X", "only in B: Y"]
    by_name = _table(compare(_source("A", a), _source("B", b), by="name"), None)
    assert by_name.startswith("OP NAME")
    many = _table(compare(_source("A", {f"op{i:02d}": _hist(1000) for i in range(12)}),
                          _source("B", {"Z": _hist(1000)})), None)
    assert "only in A: op00, op01, op02, op03, op04, op05, op06, op07, op08, op09, ... (12 in all)" in many


# ---- quantshift: the judgement's edges ----------------------------------------------------------

def test_judge_is_symmetric_and_needs_the_effect_the_interval_and_the_counts():
    base = _hist(100_000)[None, :]
    for cur_median, want in ((105_000, REGRESSION), (104_000, NONE), (100_000 / 1.05, IMPROVEMENT),
                             (100_000 / 1.04, NONE)):
        s = shift(base, _hist(cur_median)[None, :], 0.5, 4.0)
        assert judge(s, 0.045, 1000)[0] == want, (cur_median, s.ratio)
    s = shift(base, _hist(150_000)[None, :], 0.5, 4.0)
    assert judge(s, 0.05, N)[0] == REGRESSION       # exactly min_count on both sides
    assert judge(s, 0.05, N + 1)[0] == NONE
    fast = shift(base, _hist(50_000)[None, :], 0.5, 4.0)
    assert judge(fast, 0.05, N)[0] == IMPROVEMENT and judge(fast, 0.05, N + 1)[0] == NONE


def test_a_p99_needs_twenty_samples_beyond_it():
    """A p99 needs 20 samples beyond it: 2,000 samples are judged, 1,999 (19.99 beyond) are not."""
    for n, want in ((2000, REGRESSION), (1999, NONE)):
        s = shift(_hist(100_000, n=n)[None, :], _hist(1_000_000, n=n)[None, :], 0.99, 1.0)
        assert judge(s, 0.05, 1)[0] == want, n
        s50 = shift(_hist(100_000, n=40)[None, :], _hist(1_000_000, n=40)[None, :], 0.5, 1.0)
        assert judge(s50, 0.05, 1)[0] == REGRESSION  # a p50 needs 20 on each side of it: 40 samples


def test_quantile_interval_reads_ranks_on_both_sides_and_nan_for_empty_rows():
    h = np.stack([_hist(100_000), np.zeros(NBINS)])
    lo, est, hi, n = quantile_ci(h, 0.5, 4.0)
    assert n.tolist() == [pytest.approx(N), 0.0]
    assert lo[0] < est[0] < hi[0] and est[0] == pytest.approx(100_000, rel=0.01)
    assert np.isnan(est[1]) and np.isnan(lo[1]) and np.isnan(hi[1])
    lo0, est0, hi0, _ = quantile_ci(h[:1], 0.5, 0.0)
    assert lo0[0] == est0[0] == hi0[0]
    wide = quantile_ci(h[:1], 0.5, np.array([8.0]))
    assert wide[0][0] < lo[0] and wide[2][0] > hi[0]


def _shift_of(ratio, lower, upper, n=1e6, q=0.5):
    """A Shift with the given ratio and bounds (one row), for judge's exact boundaries."""
    one = np.array([1.0])
    return Shift(q, one, one, one, np.array([n]), one, one, one, np.array([n]), np.array([ratio]),
                 np.array([lower]), np.array([upper]))


@pytest.mark.parametrize("ratio,lower,upper,want", [
    (1.05, 1.01, 1.1, REGRESSION),     # exactly min_effect above: slower
    (1.0499, 1.01, 1.1, NONE),
    (1.2, 1.0, 1.4, NONE),             # the interval touches 1: not excluded
    (1.2, 1.0001, 1.4, REGRESSION),
    (1 / 1.05, 0.9, 0.99, IMPROVEMENT),  # exactly min_effect below: faster
    (0.953, 0.9, 0.99, NONE),
    (0.8, 0.6, 1.0, NONE),             # the interval touches 1
    (0.8, 0.6, 1.5, NONE),             # a wide interval: nothing can be said
    (0.8, 0.6, 0.9999, IMPROVEMENT),
    (float("nan"), float("nan"), float("nan"), NONE),
])
def test_judge_boundaries_are_inclusive_for_the_effect_and_exclusive_for_the_interval(ratio, lower, upper, want):
    assert judge(_shift_of(ratio, lower, upper), 0.05, 1000)[0] == want


def test_judge_needs_the_counts_on_each_side_separately():
    base_short = shift(_hist(100_000, n=1999)[None, :], _hist(1_000_000, n=2000)[None, :], 0.99, 1.0)
    cur_short = shift(_hist(100_000, n=2000)[None, :], _hist(1_000_000, n=1999)[None, :], 0.99, 1.0)
    assert judge(base_short, 0.05, 1)[0] == NONE and judge(cur_short, 0.05, 1)[0] == NONE


def test_the_shift_keeps_both_intervals():
    base, cur = _hist(100_000)[None, :], _hist(120_000)[None, :]
    s = shift(base, cur, 0.99, 4.0)
    assert (s.base_lo[0], s.base[0], s.base_hi[0], s.n_base[0]) == tuple(x[0] for x in quantile_ci(base, 0.99, 4.0))
    assert (s.cur_lo[0], s.cur[0], s.cur_hi[0], s.n_cur[0]) == tuple(x[0] for x in quantile_ci(cur, 0.99, 4.0))
    assert s.lower[0] == s.cur_lo[0] / s.base_hi[0] and s.upper[0] == s.cur_hi[0] / s.base_lo[0]
    assert s.q == 0.99


def test_a_base_of_zero_durations_gives_no_ratio_not_infinity():
    zero = np.zeros((1, NBINS))
    zero[0, 0] = 1000  # 1000 ops of 0 ns (timing off)
    s = shift(zero, _hist(100_000)[None, :], 0.5, 4.0)
    assert np.isnan(s.ratio[0]) and np.isnan(s.lower[0]) and np.isnan(s.upper[0])
    assert s.base[0] == 0.0 and s.cur[0] > 0


def test_no_numpy_warning_escapes_on_zero_and_empty_rows():
    """The CLI and the daemon's log would show RuntimeWarnings (log2 of 0, 0/0)."""
    import warnings

    zero = np.zeros((2, NBINS))
    zero[0, 0] = 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # 2 ns = 2^(8/8): the upper edge of bin 8 (bins are upper-inclusive, as Prometheus's le)
        assert bin_index(np.array([0, 1, 2])).tolist() == [0, 1, 8]
        quantile_ci(zero, 0.5, 4.0)
        s = shift(zero, zero[::-1], 0.5, 4.0)
        judge(s, 0.05, 1)


def test_quantile_interval_edges_tiny_counts_fractional_weights_and_the_overflow_bin():
    with pytest.raises(ValueError, match=r"quantile_ci: q must be in \(0, 1\), not 0.0"):
        quantile_ci(np.ones((1, NBINS)), 0.0, 4.0)
    # two samples, bins 50 and 60: ranks 1 -/+ 0.7071 read inside those bins
    two = np.zeros((1, NBINS))
    two[0, 50] = two[0, 60] = 1
    lo, est, hi, n = quantile_ci(two, 0.5, 1.0)
    half = 0.5 ** 0.5
    assert n[0] == 2
    assert lo[0] == pytest.approx(2 ** ((49 + 1 - half) / 8))
    assert est[0] == pytest.approx(2 ** (50 / 8))
    assert hi[0] == pytest.approx(2 ** ((59 + half) / 8))
    # one sample is a quantile too
    one = np.zeros((1, NBINS))
    one[0, 80] = 1
    assert quantile_ci(one, 0.5, 4.0)[1][0] == pytest.approx(2 ** (79.5 / 8))
    # decayed (weighted) histograms: half a sample in a bin is interpolated like a whole one
    w = np.zeros((1, NBINS))
    w[0, 80] = 0.5
    assert quantile_ci(w, 0.5, 4.0)[1][0] == pytest.approx(2 ** (79.5 / 8))
    # samples in the overflow bin count
    over = np.zeros((1, NBINS))
    over[0, 100] = over[0, NBINS - 1] = 10
    assert quantile_ci(over, 0.5, 0.0)[3][0] == 20
    # the upper rank clipped at n: the top of the last occupied bin, not 0
    lo, est, hi, _ = quantile_ci(one, 0.5, 10.0)
    assert hi[0] == pytest.approx(2 ** (80 / 8)) and lo[0] == pytest.approx(2 ** (79 / 8), rel=1e-9)


# ---- the command line: defaults as documented, the table's cells ----------------------------------

def _parse(*argv):
    import argparse

    from aclprof.cli import diff as diff_cmd

    p = argparse.ArgumentParser()
    diff_cmd.add_parser(p.add_subparsers(), argparse.HelpFormatter)
    return p.parse_args(["diff", *argv])


def test_diff_options_default_to_what_their_help_says():
    from aclprof.cli.main import build_parser

    args = _parse("baseline:a", "live:current")
    assert (args.a, args.b, args.by, args.service, args.min_effect, args.min_count, args.z, args.limit, args.json) == (
        "baseline:a", "live:current", "type", None, 0.05, 200, 4.0, None, False)
    assert args.func.__name__ == "cmd_diff"
    text = " ".join(build_parser()._subparsers._group_actions[0].choices["diff"].format_help().split())
    for fact in ("(default 0.05 = 5 %)", "(default 200)", "(default 4)", "rows per op type (default) or name",
                 "--by {type,name}", "--min-effect F", "--min-count N", "--limit N", "--service NAME",
                 "exit codes: 0 done (whatever it found), 1 error, 2 usage error (a malformed input file too) "
                 "or daemon unreachable",
                 "aclprof diff baseline:good-v42 live:current", "show the first N rows",
                 "one JSON object (rows, only_in_a, only_in_b)"):
        assert fact in text, fact
    assert _parse("baseline:a", "baseline:b", "--by", "name", "--limit", "3", "--json").limit == 3
    with pytest.raises(SystemExit):
        _parse("baseline:a", "baseline:b", "--by", "service")


@pytest.mark.parametrize("cell,text", [
    ({"shift": 1.23456, "lower": 1.1, "upper": 1.4}, "1.235 [1.10,1.40]"),
    ({"shift": 0.5, "lower": None, "upper": 0.7}, "0.500 [?,0.70]"),
    ({"shift": 0.5, "lower": 0.3, "upper": None}, "0.500 [0.30,?]"),
    ({"shift": None, "lower": None, "upper": None}, "-"),
])
def test_a_shift_cell_shows_the_ratio_and_its_bounds_or_what_is_unknown(cell, text):
    from aclprof.cli.diff import _shift_cell

    assert _shift_cell(cell) == text


def _small_jsonl(path, ops):
    """An `aclprof export --format jsonl` file: ops = {(op_type, op_name): [durations]}."""
    import json

    with open(path, "w", encoding="utf-8") as f:
        for (t, n), durations in ops.items():
            for d in durations:
                f.write(json.dumps({"service": "svc", "model": 1, "op_type": t, "op_name": n, "duration_ns": d}) + "\n")
    return str(path)


@pytest.fixture
def structlog_as_before():
    """main() configures structlog for the process (cached loggers writing to this test's
    captured stderr): put the configuration back, or later in-process tests log to a
    closed stream and structlog's capture sees nothing."""
    import structlog

    was, saved = structlog.is_configured(), structlog.get_config()
    yield
    structlog.reset_defaults()
    if was:
        structlog.configure(**saved)


def test_cmd_diff_of_two_small_files_prints_the_table_or_json(tmp_path, capsys, structlog_as_before):
    """In process and small (the end-to-end suite's files are too big for the mutation run)."""
    import json

    from aclprof.cli.main import main

    a = _small_jsonl(tmp_path / "a.jsonl", {("MatMul", "fc"): [100_000] * 300, ("Add", "add"): [5_000] * 300})
    b = _small_jsonl(tmp_path / "b.jsonl", {("MatMul", "fc"): [200_000] * 300, ("Add", "add"): [5_000] * 300})
    assert main(["diff", a, b, "--json", "--min-count", "300"]) == 0
    res = json.loads(capsys.readouterr().out)
    rows = [(r["key"], r["verdict"], r["n_a"]) for r in res["rows"]]
    assert rows == [("MatMul", "slower", 300.0), ("Add", "", 300.0)]
    assert (res["a"], res["b"], res["min_count"], res["by"]) == (a, b, 300, "type")
    assert main(["diff", a, b, "--by", "name", "--limit", "1", "--min-count", "301"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("OP NAME") and len(out) == 2 and out[1].startswith("fc") and out[1].endswith("too few")
    assert main(["diff", "-", "-"]) == 2
    assert capsys.readouterr().err.strip().endswith(": A and B cannot both be stdin")
    assert main(["diff", a, b, "--json", "--service", "other", "--z", "0.5", "--min-effect", "0.2"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["service"], res["z"], res["min_effect"], res["rows"]) == ("other", 0.5, 0.2, [])


#: `aclprof diff`'s options as its --help documents them: (flags or dest, help, metavar, default, choices)
DIFF_OPTIONS = [
    ("a", "the reference", "A", None, None),
    ("b", "compared with A", "B", None, None),
    ("--by", "rows per op type (default) or name", None, "type", ("type", "name")),
    ("--service", "only this service's ops", "NAME", None, None),
    ("--min-effect", "smallest shift called slower/faster (default 0.05 = 5 %%)", "F", 0.05, None),
    ("--min-count", "samples needed on each side (default 200)", "N", 200, None),
    ("--z", "interval half-width in standard errors (default 4)", None, 4.0, None),
    ("--limit", "show the first N rows", "N", None, None),
    ("--json", "one JSON object (rows, only_in_a, only_in_b)", None, False, None),
]


def test_diff_help_documents_each_option_its_default_and_the_sources():
    """The command's documented interface, option by option (a reworded help updates this
    table; an option whose default drifts from its help is caught by the test above)."""
    import argparse

    from aclprof.cli import diff as diff_cmd

    p = argparse.ArgumentParser()
    diff_cmd.add_parser(p.add_subparsers(), argparse.RawDescriptionHelpFormatter)
    sp = p._subparsers._group_actions[0].choices["diff"]
    got = [((a.option_strings or [a.dest])[0], a.help, a.metavar, a.default, a.choices) for a in sp._actions
           if a.dest not in ("help", "socket")]
    assert got == DIFF_OPTIONS
    assert sp.description == diff_cmd.__doc__.split("\n\n", 1)[1]
    assert sp.description.startswith("For every op type (--by name: op name) present in both")
    assert sp.epilog == diff_cmd._EXAMPLES
    assert sp.formatter_class is argparse.RawDescriptionHelpFormatter  # the one main() passes
    assert "window:SINCE..UNTIL" in sp.epilog and "FILE.jsonl | -" in sp.epilog
    assert p._subparsers._group_actions[0]._choices_actions[0].help == (
        "op latency shifts between two baselines, exports or windows")


def test_compare_rounds_what_it_reports_and_defaults_to_the_clis_floor():
    """Decayed (weighted) histograms, as live:trailing gives: counts to 0.1, times to 0.1 ns,
    ratios to 4 digits; the default --min-count (200) holds for compare() too."""
    a = {"Op": _hist(100_000, n=200) * 1.00321}
    b = {"Op": _hist(123_457, n=200) * 1.00321}
    res = compare(_source("A", a), _source("B", b))
    row = res["rows"][0]
    assert res["min_count"] == 200 and row["verdict"] != "too few"
    assert row["n_a"] == round(200 * 1.00321, 1) == 200.6 and row["n_b"] == 200.6
    for q, qn in ((0.5, "p50"), (0.99, "p99")):
        s = shift(a["Op"][None, :], b["Op"][None, :], q, 4.0)
        assert row[qn]["a_ns"] == round(float(s.base[0]), 1) and row[qn]["b_ns"] == round(float(s.cur[0]), 1)
        assert row[qn]["shift"] == round(float(s.ratio[0]), 4) and row[qn]["lower"] == round(float(s.lower[0]), 4)
        assert row[qn]["upper"] == round(float(s.upper[0]), 4)


def test_compare_by_service_filters_both_sides():
    cells = [("svc", "m", "Op", "x"), ("other", "m", "Op", "x")]
    a = Histograms("A", cells, np.stack([_hist(100_000), _hist(500_000)]))
    b = Histograms("B", cells, np.stack([_hist(100_000), _hist(500_000)]))
    row = compare(a, b, service="svc")["rows"][0]
    assert (row["n_a"], row["n_b"], row["verdict"]) == (N, N, "")
    assert row["p50"]["shift"] == pytest.approx(1.0, abs=0.001)


def test_the_table_aligns_its_columns_under_their_headers():
    a = {"AVeryLongOpTypeName": _hist(100_000), "B": _hist(100_000)}
    b = {"AVeryLongOpTypeName": _hist(150_000), "B": _hist(100_000)}
    lines = _table(compare(_source("A", a), _source("B", b)), None).splitlines()
    head, first = lines[0], lines[1]
    assert first.startswith("AVeryLongOpTypeName  ")  # the first column is left-aligned, as wide as its longest
    assert head.startswith("OP TYPE" + " " * (len("AVeryLongOpTypeName") - len("OP TYPE")) + "  ")
    # the numbers are right-aligned: each ends where its header ends
    end_n_a = head.index("N A") + len("N A")
    assert first[:end_n_a].endswith(str(N)) and first[end_n_a] == " "
    assert first.endswith(" slower") and len(first) == len(head)  # the verdict too, under VERDICT


def test_cmd_diff_reads_stdin_once_and_needs_the_daemon_for_either_side(tmp_path, capsys, monkeypatch,
                                                                         structlog_as_before):
    import io
    import json

    from aclprof.cli.main import main

    a = _small_jsonl(tmp_path / "a.jsonl", {("MatMul", "fc"): [100_000] * 300})
    with open(a, "rb") as f:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(f.read()), encoding="utf-8"))
    assert main(["diff", "-", a, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["n_a"] == 300.0
    missing = str(tmp_path / "no.sock")
    assert main(["diff", "baseline:good", a, "--socket", missing]) == 2
    assert missing in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["nope.jsonl", "baseline:b"], "argument A: 'nope.jsonl' is neither"),
    (["baseline:a", "nope.jsonl"], "argument B: 'nope.jsonl' is neither"),
    (["baseline:a", "baseline:b", "--limit", "0"], "a row count"),
    (["baseline:a", "baseline:b", "--service", ""], "an empty service name matches nothing"),
])
def test_diff_refuses_bad_arguments_naming_them(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(*argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_table_shows_each_quantile_in_its_units():
    from aclprof.cli.common import format_ns

    res = compare(_source("A", {"Op": _hist(100_000)}), _source("B", {"Op": _hist(150_000)}))
    row = res["rows"][0]
    cells = _table(res, None).splitlines()[1].split()
    for value in (row["p50"]["a_ns"], row["p50"]["b_ns"], row["p99"]["a_ns"], row["p99"]["b_ns"]):
        assert format_ns(value) in cells
    assert [c for c in cells if c.endswith("us")] == [format_ns(row[q][s]) for q in ("p50", "p99")
                                                       for s in ("a_ns", "b_ns")]
