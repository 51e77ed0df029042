"""Screens at 80 columns, the default terminal (issue 17): ``top`` (once and live), ``fleet``,
``status``, the demo's summary and ``tail`` keep every number whole and every line within
the terminal, shortening names and hiding the least important columns first, with a note;
the same at 200 columns shows everything. One mechanism (``aclprof.cli.fit``) for all.

Each screen is rendered at both widths and parsed back: its number cells are compared with
the data they came from (whole, never an ellipsis), its lines measured."""

from __future__ import annotations

import re
import time

import pytest
from helpers.daemons import InProcess, agent, fake_control_daemon
from helpers.procs import in_pty, screen_lines, wait_for
from helpers.records import make_records

from aclprof.cli.common import format_ns
from aclprof.protocol.wire import Kind

pytestmark = pytest.mark.timeout(90)

WIDTHS = (80, 200)
LONG_NAME = "model/encoder/layer_11/attention/self/query/MatMul_fused_with_bias_and_gelu_" + "x" * 90


def _render(renderable, width: int) -> str:
    from rich.console import Console

    console = Console(record=True, width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.export_text()


def _cells(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _assert_within(text: str, width: int) -> None:
    for line in text.splitlines():
        assert _cells(line.rstrip()) <= width, f"{_cells(line)} > {width}: {line!r}"


def _assert_no_cut_number(text: str) -> None:
    """No number shown with an ellipsis in it or after it (``28,6…``, ``571.86…``), whatever
    the layout: the first check, layout-independent."""
    cut = re.findall(r"(?<![\w/])[0-9][0-9,.]*(?:[a-zµ%]*)…", text)
    assert not cut, f"numbers cut: {cut}"


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """The headings and rows of the one fitted table in ``text`` (cells are 2+ blanks apart;
    the row lines follow the heading's rule, as many cells as headings)."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"})
    heads = re.split(r" {2,}", lines[rule - 1].strip())
    rows = []
    for line in lines[rule + 1:]:
        cells = re.split(r" {2,}", line.strip())
        if len(cells) != len(heads):
            break
        rows.append(cells)
    return heads, rows


def _hidden(text: str) -> list[str]:
    m = re.search(r"^\d+ columns? hidden: (.*?) \(", text, re.M)
    return m.group(1).split(", ") if m else []


# -- the rule ----------------------------------------------------------------------------------

def test_fit_shrinks_names_first_then_hides_by_priority_and_never_cuts_a_number():
    from aclprof.cli.fit import Col, cut, fit

    cols = [Col("name", 0, whole=False, min_width=10), Col("a", 0), Col("b", 3), Col("c", 1), Col("d", 2)]
    natural = [50, 10, 10, 10, 10]
    # wide enough for all at natural width
    f = fit(cols, natural, 200, gap=2)
    assert f.shown == [0, 1, 2, 3, 4] and f.widths[0] == 50 and not f.hidden
    # the name shrinks (not below 10) before any column goes
    f = fit(cols, natural, 10 + 40 + 8, gap=2)
    assert f.shown == [0, 1, 2, 3, 4] and f.widths[0] == 10 and f.total <= 58
    # then the highest priority number goes first (b: 3, then d: 2), and the name gets the room back
    f = fit(cols, natural, 10 + 30 + 6, gap=2)
    assert f.hidden == ["b"] and f.widths[0] == 10
    f = fit(cols, natural, 45, gap=2)
    assert f.hidden == ["b", "d"] and f.widths[0] == 45 - 20 - 4 and f.total == 45
    # priority 0 is never hidden, whatever the width: numbers stay whole
    f = fit(cols, natural, 5, gap=2)
    assert f.shown == [0, 1] and f.widths[1] == 10
    assert cut("abcdefghij", 5, "middle") == "ab…ij" and cut("abcdefghij", 5) == "abcd…" and cut("abc", 5) == "abc"
    assert _cells(cut("名前名前名前", 5)) <= 5  # wide characters count as two cells


# -- top -----------------------------------------------------------------------------------------

#: the issue's figures: 28.6 M calls, 571.86 s, a flagged p50
_TOP_ROWS = [
    {"key": "Conv2D", "count": 28_612_345, "total_ns": 571_860_000_000, "mean_ns": 19_986, "min_ns": 900,
     "max_ns": 34_000, "p50_ns": 18_000, "p90_ns": 30_000, "p99_ns": 34_000, "pct_time": 62.3, "shift_p99": 1.009,
     "regression": True, "flagged": [{"quantile": "p50", "shift": 1.427}]},
    {"key": "MatMulV2", "count": 1_234_567, "total_ns": 345_678_900_000, "mean_ns": 280_000, "min_ns": 100_000,
     "max_ns": 1_900_000, "p50_ns": 250_000, "p90_ns": 400_000, "p99_ns": 1_200_000, "pct_time": 37.6,
     "shift_p99": 0.97, "regression": False, "flagged": []},
    {"key": "Add", "count": 98_765, "total_ns": 123_456_000, "mean_ns": 1_250, "min_ns": 800, "max_ns": 9_000,
     "p50_ns": 1_100, "p90_ns": 2_000, "p99_ns": 4_000, "pct_time": 0.1, "shift_p99": None, "regression": False,
     "flagged": []},
]


def _expected_top(r: dict) -> dict[str, str]:
    def q(ns: int) -> str:  # a quantile at the max is the max, marked "at most"
        return "≤" + format_ns(r["max_ns"]) if ns >= r["max_ns"] else format_ns(ns)

    return {"Count": f"{r['count']:,}", "Total": format_ns(r["total_ns"]), "Avg": format_ns(r["mean_ns"]),
            "p50": q(r["p50_ns"]), "p99": q(r["p99_ns"]), "Max": format_ns(r["max_ns"]),
            "% time": f"{r['pct_time']:.1f}"}


def _check_top(text: str, rows: list[dict], width: int, name_heading: str) -> list[str]:
    _assert_no_cut_number(text)
    _assert_within(text, width)
    heads, got = _table(text)
    heads = [h.replace(" ▼", "") for h in heads]
    assert len(got) == len(rows), text
    hidden = _hidden(text)
    every = ["Count", "Total", "Avg", "p50", "p99", "Max", "% time"]
    assert [h for h in every if h not in heads] == [h for h in hidden if h in every]
    for cells, r in zip(got, rows):
        cell = dict(zip(heads, cells))
        for head, want in _expected_top(r).items():
            if head in cell:
                assert cell[head] == want, (head, cell[head], want)  # whole: no ellipsis, no digit lost
        name = cell[name_heading]
        assert name == r["key"] or (name.count("…") == 1 and len(name) < len(r["key"]))
        assert "Shift" not in heads or "…" not in cell["Shift"]
    return heads


@pytest.mark.parametrize("width", WIDTHS)
def test_top_by_type_keeps_numbers_whole(width):
    from aclprof.cli.top.view import TopView, render_table

    text = _render(render_table({"window": "10s", "rows": _TOP_ROWS}, TopView(), 10, width=width), width)
    heads = _check_top(text, _TOP_ROWS, width, "Op type")
    assert "p50 +42.7% REGRESSION" in text
    if width == 200:
        assert not _hidden(text) and "Shift" in heads
    else:
        assert "(widen the terminal or press h)" in text and "Total" in heads  # the sorted column stays


@pytest.mark.parametrize("width", WIDTHS)
def test_top_by_name_with_one_long_name_keeps_every_number_column(width):
    from aclprof.cli.top.view import TopView, render_table

    rows = [{**_TOP_ROWS[0], "key": LONG_NAME, "op_type": "MatMul"},
            {**_TOP_ROWS[2], "key": "add_1", "op_type": "Add"}]
    text = _render(render_table({"window": "10s", "rows": rows}, TopView(group="name"), 10, width=width), width)
    heads = _check_top(text, rows, width, "Op name")
    # the issue: every number column was empty; now at most the least important ones are hidden
    assert {"Count", "Total", "Avg", "p99"} <= set(heads)
    long_cell = _table(text)[1][0][0]
    assert long_cell.startswith("model/") and long_cell.endswith("x") and "…" in long_cell  # cut in the middle


@pytest.mark.parametrize("width", WIDTHS)
def test_top_once_and_live_in_a_terminal(width):
    """The real command on a pseudo-terminal of that width: ``top --once``, then the live view,
    its help key (h shows the keys and the hidden columns, h again the table)."""
    rows = [{**_TOP_ROWS[0], "key": LONG_NAME}, *_TOP_ROWS[1:]]
    path, stop = fake_control_daemon({Kind.STATUS: {"healthy": True, "agents": [], "version": "0.1.0", "pid": 1},
                                      Kind.SNAPSHOT: {"window": "10s", "rows": rows}})
    try:
        with in_pty("top", "--once", "--socket", path, columns=width) as (proc, out, _):
            assert proc.wait(20) == 0
            out.read_until(b"% time")
        text = "\n".join(screen_lines(out.seen))
        _check_top(text, rows, width, "Op type")
        with in_pty("top", "--interval", "0.2", "--socket", path, columns=width, lines=40) as (proc, out, master):
            import os

            out.read_until(b"h help")
            frame = "\n".join(screen_lines(out.seen))
            _assert_within(frame, width)
            os.write(master, b"h")
            out.read_until(b"Esc: back to the table", new_only=True)
            help_start = len(out.seen)
            out.read_until(b"how exact each number is", new_only=False)
            shown = "\n".join(screen_lines(out.seen[help_start - 2000:]))
            _assert_within(shown, width)
            if width == 80:
                out.read_until(b"hidden to fit this terminal:")
            os.write(master, b"h")
            out.read_until(b"% time", new_only=True)
            os.write(master, b"q")
            assert proc.wait(10) == 0
    finally:
        stop()


# -- fleet ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_fleet_keeps_numbers_whole(width):
    from aclprof.cli.fleet.data import build_rows, sort_rows
    from aclprof.cli.fleet.prom import PromClient
    from aclprof.cli.fleet.view import Fleet, render

    hosts = {"npu-host-0001.cluster.example.com": 1.0e-4, "npu-host-0002.cluster.example.com": 1.04e-4,
             "npu-host-0003.cluster.example.com": 4.1e-4}
    samples: dict[str, list] = {k: [] for k in ("calls", "count", "device", "p50", "p99", "fleet_p50", "fleet_p99")}
    for op, scale in (("MatMulV2_fused_attention_projection", 1.0), ("Conv2D", 0.5)):
        for h, v in hosts.items():
            m = {"host": h, "service": "llm-inference-frontend", "op_type": op}
            samples["calls"].append((m, 12_345.6))
            samples["count"].append((m, 740_736.0))
            samples["device"].append((m, 20 * v * scale))
            samples["p50"].append((m, v * scale / 2))
            samples["p99"].append((m, v * scale))
        fm = {"service": "llm-inference-frontend", "op_type": op}
        samples["fleet_p50"].append((fm, 6.0e-5 * scale))
        samples["fleet_p99"].append((fm, 3.9e-4 * scale))
    rows = build_rows(samples)
    fleet = Fleet(PromClient("http://prometheus.monitoring.example.com:9090"), "1m")
    text = _render(render(fleet, rows, "share", None, 0, "keys: d c 5 9 o sort, q quit", width=width), width)
    _assert_within(text, width)
    heads, got = _table(text)
    every = ["Calls/s", "p50", "p99", "% device", "Hosts", "Outliers (p99)"]
    assert [h for h in every if h not in heads] == [h for h in _hidden(text) if h in every] or \
        set(_hidden(text)) == {h.split(" (")[0] for h in every if h not in heads}
    for cells, r in zip(got, sort_rows(rows, "share")):
        cell = dict(zip(heads, cells))
        want = {"Calls/s": f"{r.calls_per_s:,.1f}", "p50": format_ns(r.p50_s * 1e9), "p99": format_ns(r.p99_s * 1e9),
                "% device": f"{100 * r.share:.1f}", "Hosts": "3"}
        for head, value in want.items():
            if head in cell:
                assert cell[head] == value
        if "Outliers (p99)" in cell:
            assert re.search(r"x\d+\.\d z=\+\d+\.\d$", cell["Outliers (p99)"])  # the numbers whole
    assert "buckets per power of two" in text  # what resolution the fleet's quantiles have
    if width == 200:
        assert not _hidden(text)
    # drill-down: the host's columns, the same rule
    text = _render(render(fleet, rows, "share", "npu-host-0003.cluster.example.com", 0, width=width), width)
    _assert_within(text, width)
    heads, got = _table(text)
    assert all("OUTLIER" in " ".join(c) for c in got) and "z" in heads and "p99" in heads


# -- status --------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_status_report_fits_and_never_splits_a_number(width):
    from aclprof.cli.status import format_status

    st = {"version": "0.1.0", "pid": 811, "healthy": False, "uptime_s": 3600,
          "problems": ["storage write failing: [Errno 28] No space left on device (123,456 records not stored)"],
          "records_total": 52_400_000, "records_per_s": 14_500, "dropped_by_agents": 12_345, "stream_skipped": 77,
          "protocol_errors": 3,
          "agents": [{"pid": 4242, "service": "resnet-inference-frontend", "host": "npu-host-3.cluster.example.com",
                      "records": 35_280_000, "records_per_s": 9_800, "dropped": 0, "lag_ns": 1_200_000,
                      "connected_s": 3600, "steps": 12_345,
                      "models": [{"model_id": 1, "device": 0, "labels": {"model": "resnet50", "version": "v3"}}]}],
          "storage": {"dir": "/var/lib/aclprof/" + "deep/" * 20 + "segments", "bytes": 123_456_789, "segments": 12}}
    text = format_status(st, None, width)
    _assert_within(text, width)
    words = text.split()
    for number in ("52,400,000", "14,500/s;", "12,345;", "35,280,000", "9,800/s,", "(123,456", "12,345,"):
        assert number in words, number  # whole: never broken across lines
    assert format_status(st, None, None).count("\n") <= text.count("\n")
    if width == 80:
        assert any(line.startswith("      ") for line in text.splitlines())  # continuations indented


# -- the demo's summary --------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_demo_summary_fits(width):
    from aclprof.cli.demo import summary_text

    results = [{"service": "transformer-inference-0", "pid": 4242, "inferences": 3_000, "emitted": 1_234_567,
                "agent": {"records_sent": 1_234_567}},
               {"service": "resnet-0", "pid": 4243, "inferences": 3_000, "emitted": 987_654,
                "agent": {"records_sent": 987_654}}]
    by_service = {"window": "all", "rows": [{**_TOP_ROWS[0], "key": "transformer-inference-0"},
                                            {**_TOP_ROWS[1], "key": "resnet-0"}]}
    snap = {"window": "all", "total_ns": 917_662_356_000, "rows": _TOP_ROWS}
    text = summary_text(results, 20.0, {"records_total": 2_222_221}, snap, by_service, width)
    _assert_within(text, width)
    assert "1,234,567" in text.split() or "1,234,567 op" in text
    tables = text.split("aclprof top: ")[1:]
    assert len(tables) == 2
    _check_top("aclprof top: " + tables[0], by_service["rows"], width, "Service")
    _check_top("aclprof top: " + tables[1], _TOP_ROWS, width, "Op type")


# -- tail ----------------------------------------------------------------------------------------

_RECORD = {"ts": 1764400000.5, "pid": 4242, "service": "resnet-inference-frontend", "device": 3, "model": 12,
           "op_type": "Conv2DBackpropFilter", "op_name": LONG_NAME, "duration_ns": 1_234_567, "kind": "op"}


@pytest.mark.parametrize("width", WIDTHS)
def test_tail_one_line_per_record_names_shortened_numbers_whole(width):
    from aclprof.cli.tail import tail_layout, tail_line

    layout = tail_layout(width)
    for r in (_RECORD, {**_RECORD, "kind": "keypoint", "start": 1_700_000_000_000_000_000,
                        "end": 1_700_000_000_012_300_000},
              {**_RECORD, "kind": "gap", "gap_records": 9_000, "pause_ns": 1_500_000_000}):
        for colour in (False, True):
            line = tail_line(r, colour, layout, width)
            plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
            assert "\n" not in plain and _cells(plain) <= width, (width, plain)
    plain = tail_line(_RECORD, False, layout, width)
    for number in ("pid 4242", "1.23ms", time.strftime("%H:%M:%S", time.localtime(_RECORD["ts"])) + ".500"):
        assert number in plain, (number, plain)
    if width == 80:
        assert layout is not None and layout.hidden == ["model"]
        assert "model 12" not in plain and "…" in plain
    else:
        assert "model 12" in plain and "dev 3" in plain and "Conv2DBackpropF…" in plain
    gap = tail_line({**_RECORD, "kind": "gap", "gap_records": 9_000, "pause_ns": 1_500_000_000}, False, layout, width)
    assert "9000 ops not streamed" in gap and "1.50s" in gap
    # a pipe (no width): the op type and name whole, as before (the service cut at 16, as before)
    piped = tail_line(_RECORD, False)
    assert piped.endswith(LONG_NAME) and " Conv2DBackpropFilter " in piped and "resnet-inferenc… " in piped


def test_tail_in_an_80_column_terminal_writes_one_line_per_record():
    with InProcess() as d, in_pty("tail", "--socket", d.socket, columns=80) as (_proc, out, _):
        a = agent(d.socket, names={1: "Conv2DBackpropFilter", 3: LONG_NAME}, service="resnet-inference-frontend")
        try:
            def shown() -> int:  # records reach tail once its STREAM is in place: feed until 5 are shown
                out.drain(0.05)
                n = sum("1.23ms" in line for line in screen_lines(out.seen))
                if n < 5:
                    a.send_batch(make_records(1, types=(1,), names=(3,), durations=1_234_567))
                    time.sleep(0.05)
                return n >= 5

            wait_for(shown, what="5 records on tail's terminal")
        finally:
            a.close()
    lines = [line for line in screen_lines(out.seen) if line.strip()]
    records = [line for line in lines if "1.23ms" in line]
    assert len(records) >= 5 and all(_cells(line) <= 80 for line in lines), lines
    assert all("pid " in line and "Conv2DB" in line and "…" in line for line in records)
    assert any("1 column hidden: model" in line for line in lines)  # said once, on stderr


def test_status_on_an_80_column_terminal():
    """The real command on a terminal: each line within 80 columns, each number whole."""
    st = {"version": "0.1.0", "pid": 811, "healthy": True, "uptime_s": 3600, "problems": [],
          "records_total": 52_400_000, "records_per_s": 14_500, "dropped_by_agents": 12_345, "stream_skipped": 77,
          "protocol_errors": 3, "agents": [
              {"pid": 4242, "service": "resnet-inference-frontend", "host": "npu-host-3.cluster.example.com",
               "records": 35_280_000, "records_per_s": 9_800, "dropped": 0, "lag_ns": 1_200_000, "connected_s": 3600,
               "steps": 12_345, "models": [{"model_id": 1, "device": 0, "labels": {"model": "resnet50"}}]}]}
    path, stop = fake_control_daemon({Kind.STATUS: st, Kind.SNAPSHOT: {"window": "10s", "rows": []}})
    try:
        with in_pty("status", "--socket", path, columns=80) as (proc, out, _):
            assert proc.wait(20) == 0
            out.drain(0.5)
    finally:
        stop()
    text = "\n".join(screen_lines(out.seen))
    _assert_within(text, 80)
    assert "35,280,000" in text.split() and "12,345;" in text.split()
    assert max(_cells(line) for line in text.splitlines()) > 60  # the lines use the width


def test_demo_on_an_80_column_terminal():
    """``aclprof demo`` end to end on an 80-column terminal: its live top and its closing
    summary (two tables) within the width, every number whole."""
    with in_pty("demo", "--duration", "3", "--interval", "0.5", columns=80, lines=40) as (proc, out, _):
        out.read_until(b"emitted - received - lost", timeout=60)
        assert proc.wait(30) == 0
        out.drain(0.5)
    lines = screen_lines(out.seen)
    text = "\n".join(lines)
    _assert_no_cut_number(text)
    _assert_within(text, 80)
    summary = text[text.rindex("aclprof demo:"):]
    assert summary.count("aclprof top: window all") == 2 and "% time" in summary
