"""``aclprof top``'s screens (issue 10): the header, the groupings and their columns, the
notes of an empty table, the view-local reset ``r`` (the daemon's aggregates untouched) and
the one key table behind the caption, ``--help`` and the README."""

from __future__ import annotations

import contextlib
import json
import os
import re
import string
import subprocess
import sys
import time

import pytest
from helpers.daemons import InProcess, agent, fake_control_daemon, status
from helpers.procs import REPO, PtyOutput, cli, env, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import Kind

pytestmark = pytest.mark.timeout(90)


def _screen(renderable, width: int = 200) -> str:
    from rich.console import Console

    console = Console(record=True, width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.export_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- the key table -----------------------------------------------------------------------------

def test_every_key_the_handler_accepts_is_in_help_caption_and_readme(capsys):
    from aclprof.cli.main import main
    from aclprof.cli.top.keys import KEYS, accepted_keys, caption, key_name
    from aclprof.cli.top.view import TopView

    assert main(["top", "--help"]) == 0
    helptext = capsys.readouterr().out
    keys_part = helptext.split("keys (live view):", 1)[1].split("examples:", 1)[0]
    key_column = {w for line in keys_part.splitlines() if line.startswith("  ") and not line.startswith("   ")
                  for w in line[:13].split()}
    readme = (REPO / "README.md").read_text()
    readme_keys = set(re.findall(r"^\| `([^`]+)` \|", readme, re.M))
    for ch in accepted_keys():
        name = key_name(ch)
        if ch.isprintable():
            assert name in key_column, f"key {name!r} missing from top --help"
            assert any(name in k.split() for k in readme_keys), f"key {name!r} missing from README"
        else:
            assert name in keys_part, f"{name} missing from top --help"
    for b in KEYS:
        assert f"{b.keys[0]}" in caption() and b.label in caption()
    assert "w window" in caption()
    # and no other key changes the view: the table is the whole truth
    for ch in set(string.printable) - accepted_keys():
        v = TopView()
        before = dict(vars(v))
        v.key(ch)
        assert vars(v) == before, f"key {ch!r} changed the view but is not in the key table"


# -- the header --------------------------------------------------------------------------------

def _st(dropped=0, skipped=0, protocol=0, healthy=True, problems=(), agents=(), write_errors=0, refused=0):
    return {"version": "0.1.0", "pid": 7, "uptime_s": 3725, "healthy": healthy, "problems": list(problems),
            "records_per_s": 12345.0, "dropped_by_agents": dropped, "stream_skipped": skipped,
            "protocol_errors": protocol, "agents": list(agents),
            "storage": {"write_errors": write_errors}, "memory": {"refused": {"stream": refused}}}


def test_header_counts_drops_in_the_window_and_names_what_degrades_health():
    from aclprof.cli.top.header import Header

    agents = [{"pid": 1, "service": "alpha", "models": [{"model_id": 1, "device": 0}]},
              {"pid": 2, "service": "beta", "models": [{"model_id": 1, "device": 1}]},
              {"pid": 3, "service": "beta", "models": []}]
    h = Header()
    h.add(_st(dropped=100, skipped=5, agents=agents), now=1000.0)
    first = _flat(_screen(h.render({}, 10.0, "10s")))
    assert "in 12,345 rec/s · 3 processes, 2 services connected · devices 0,1" in first
    assert "drops since daemon start: 105 (agents 100, slow streams 5)" in first  # one sample: totals
    assert "aclprofd 0.1.0 pid 7, up 1h02m: ok" in first
    h.add(_st(dropped=130, skipped=5, agents=agents), now=1005.0)
    h.add(_st(dropped=160, skipped=9, protocol=2, agents=agents), now=1012.0)
    text = _flat(_screen(h.render({}, 10.0, "10s")))
    # the window's growth: 1005 -> 1012 (1000 is older than 10 s)
    assert "drops in 10s: 34 (agents 30, slow streams 4)" in text
    assert "degraded: protocol errors +2" in text
    h.add(_st(dropped=160, skipped=9, protocol=2, write_errors=3, refused=4, agents=agents), now=1013.0)
    assert "degraded: protocol errors +2, storage write errors +3, memory refusals +4" in \
        _flat(_screen(h.render({}, 10.0, "10s")))
    h.add(_st(healthy=False, problems=["storage write failing: ENOSPC", "agent pid 1 dropped"]), now=1014.0)
    assert "UNHEALTHY: storage write failing: ENOSPC (+1 more: aclprof status)" in \
        _flat(_screen(h.render({}, 10, "10s")))
    # a daemon with per-service keys: the window's own figures from SNAPSHOT's summary
    snap = {"summary": {"records": 500, "records_per_s": 50.0, "processes": 4, "services": 3, "devices": [2, 3]}}
    assert "in 50 rec/s · 4 processes, 3 services in 10s · devices 2,3" in _flat(_screen(h.render(snap, 10, "10s")))
    assert "drops since r at 10:00:00: 0 (agents 0" in _flat(_screen(h.render({}, 30.0, "since r at 10:00:00")))


def test_header_escapes_peer_strings():
    from aclprof.cli.top.header import Header

    h = Header()
    h.add(_st(healthy=False, problems=["[bold]x[/bold] \x1b[2J"]), now=1.0)
    text = _screen(h.render({}, None, "all"))
    assert "[bold]x[/bold] \\x1b[2J" in text and "\x1b" not in text


# -- groupings and columns ---------------------------------------------------------------------

def test_g_cycles_the_groupings_the_daemon_offers():
    from aclprof.cli.top.view import TopView, note_snapshot

    v = TopView()
    seen = []
    for _ in range(3):
        v.key("g")
        seen.append(v.group)
    assert seen == ["name", "type", "name"]  # a daemon without per-service keys
    note_snapshot(v, {"rows": [], "summary": {}})
    seen = []
    for _ in range(6):
        v.key("g")
        seen.append(v.group)
    assert seen == ["service", "process", "device", "model", "type", "name"]
    for ch in "/conv\r":  # grouped by name: the regex is on the op name
        v.key(ch)
    assert v.filter() == {"name": "conv"}
    v.key("g")  # by service: on the op type, and the screen says so
    assert v.filter() == {"type": "conv"} and v.message == "filter now type=conv"


def test_columns_adapt_to_the_grouping_and_every_string_is_escaped():
    from aclprof.cli.top.view import TopView, render_table

    row = {"count": 10, "total_ns": 5000, "mean_ns": 500, "p50_ns": 500, "p99_ns": 600, "max_ns": 700, "pct_time": 100}
    v = TopView(group="process")
    text = _screen(render_table({"rows": [{**row, "key": "alpha/42", "pid": 42, "service": "[red]alpha\x1b[0m"}]}, v))
    header = next(line for line in text.splitlines() if "Count" in line)
    assert re.search(r"PID\s.*Service\s.*Count", header)
    assert "[red]alpha\\x1b[0m" in text and "\x1b" not in text
    v = TopView(group="model")
    text = _screen(render_table({"rows": [{**row, "key": "alpha/resnet50@v3", "service": "alpha", "model_id": 1}]}, v))
    header = next(line for line in text.splitlines() if "Count" in line)
    assert re.search(r"Model\s.*Service\s.*Id\s.*Count", header) and "alpha/resnet50@v3" in text
    v = TopView(group="device")
    text = _screen(render_table({"rows": [{**row, "key": "3"}]}, v))  # rows without the device field
    assert re.search(r"Device\s.*Count", text) and re.search(r"^3 {2,}10 ", text, re.M)


def test_baseline_subtracts_counts_and_totals_and_hides_what_it_cannot_know():
    from aclprof.cli.top.baseline import Baseline
    from aclprof.cli.top.view import TopView, render_table

    def row(key, count, total):
        return {"key": key, "count": count, "total_ns": total, "mean_ns": total / count, "p50_ns": 1, "p99_ns": 2,
                "max_ns": 3, "min_ns": 1}

    b = Baseline({}, {"type": {"Conv2D": row("Conv2D", 10, 1000), "MatMul": row("MatMul", 5, 500)}}, time.time(), 0)
    since = b.subtract({"rows": [row("Conv2D", 14, 1800), row("MatMul", 5, 500), row("Relu", 2, 200)]}, "type")
    assert since is not None
    got = {r["key"]: r for r in since["rows"]}
    assert set(got) == {"Conv2D", "Relu"}  # MatMul: nothing since
    assert (got["Conv2D"]["count"], got["Conv2D"]["total_ns"], got["Conv2D"]["mean_ns"]) == (4, 800, 200)
    assert got["Conv2D"]["pct_time"] == pytest.approx(80.0) and got["Conv2D"]["p99_ns"] is None
    assert since["window"].startswith("since r at ")
    v = TopView()
    v.baseline = b
    text = _screen(render_table(since, v))
    assert "—" in text and "since r at" in text
    # the daemon's aggregates went back (an admin reset them): nothing is derivable
    assert b.subtract({"rows": [row("Conv2D", 3, 300)]}, "type") is None


def test_w_offers_since_r_after_a_baseline_and_a_new_filter_ends_it():
    from aclprof.cli.top.baseline import SINCE_RESET, Baseline
    from aclprof.cli.top.view import TopView

    v = TopView(window="all")
    v.key("w")
    assert v.window == "10s"  # no baseline: the daemon's windows only
    v.baseline, v.window = Baseline({}, {"type": {}, "name": {}}, time.time(), 0), "all"
    v.key("w")
    assert v.window == SINCE_RESET
    v.key("w")
    assert v.window == "10s"
    v.window = SINCE_RESET
    v.key("g")  # by name: the baseline has it, the filter is the same
    assert (v.window, v.baseline is not None) == (SINCE_RESET, True)
    for ch in "/conv\r":
        v.key(ch)
    assert v.baseline is None and v.window == "10s"
    assert "'since r' ended" in v.message


# -- against a daemon --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def daemon():
    with InProcess() as d:
        yield d


def _feed(d, service: str, n: int, device: int = 0, types=(1, 2)):
    a = agent(d.socket, service=service)
    try:
        a.send_json(Kind.WATCH, {"model_id": 1, "device": device, "labels": {}})
        a.send_batch(make_records(n, device=device, types=types))
    finally:
        a.close()


@contextlib.contextmanager
def _older_daemon():
    """A daemon that answers SNAPSHOT as aclprofd did before per-service keys (no
    ``summary``): what the CLI detects to stay within such a daemon's protocol."""
    with InProcess() as d:
        agg = d.daemon.aggregator
        current = agg.snapshot

        def without_summary(*args, **kw):
            reply = current(*args, **kw)
            reply.pop("summary", None)
            return reply

        agg.snapshot = without_summary
        yield d


@contextlib.contextmanager
def _two_services(d, alpha: int, beta: int, alpha_labels=None):
    """Agents "alpha" (model 1 on device 0, ``alpha`` records) and "beta" (model 1 on device
    1, ``beta`` records), their records aggregated; closed after."""
    a = agent(d.socket, service="alpha")
    b = agent(d.socket, service="beta")
    try:
        a.send_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": alpha_labels or {}})
        b.send_json(Kind.WATCH, {"model_id": 1, "device": 1, "labels": {}})
        a.send_batch(make_records(alpha))
        b.send_batch(make_records(beta, device=1))
        wait_for(lambda: status(d.socket)["records_total"] >= alpha + beta, what=f"{alpha + beta} records")
        yield
    finally:
        a.close()
        b.close()


def test_top_once_header_and_empty_notes_from_a_real_daemon():
    with InProcess() as d:
        p = cli("top", "--once", "--socket", d.socket)
        assert p.returncode == 0, p.stderr
        assert "(no records yet in window 10s)" in p.stdout and "0 processes" in p.stdout
        assert p.stdout.startswith("aclprof top: window 10s")
        with _two_services(d, 100, 100):
            p = cli("top", "--once", "--socket", d.socket)
            out = _flat(p.stdout)
            assert "2 processes, 2 services" in out and "devices 0,1" in out, p.stdout
            assert ": ok" in out and "Conv2D" in out
            p = cli("top", "--once", "--type", "^Nothing$", "--socket", d.socket)
            assert p.returncode == 0, p.stderr
            assert "(no rows match filter type=^Nothing$ (2 op type rows in 10s without it))" in _flat(p.stdout)


def test_top_group_beyond_type_and_name_needs_a_daemon_that_offers_it(daemon):
    _feed(daemon, "alpha", 50)
    p = cli("top", "--once", "--group", "service", "--window", "all", "--socket", daemon.socket)
    assert p.returncode == 0, p.stderr
    assert "by service" in p.stdout and "alpha" in p.stdout
    with _older_daemon() as old:
        _feed(old, "alpha", 50)
        p = cli("top", "--once", "--group", "service", "--window", "all", "--socket", old.socket)
        assert p.returncode == 2
        assert p.stderr.strip() == ("aclprof: error: --group service: this daemon groups by type, name only "
                                    "(grouping by service, process, device or model needs an aclprofd with "
                                    "per-service keys: upgrade it)")
        assert status(old.socket)["protocol_errors"] == 0  # refused in the client, nothing sent


def test_top_groupings_and_device_filter_on_a_daemon_with_per_service_keys():
    with InProcess() as d:
        with _two_services(d, 300, 100, alpha_labels={"model": "resnet50", "version": "v3"}):

            def table(*args: str) -> list[str]:
                p = cli("top", "--once", "--window", "all", *args, "--socket", d.socket)
                assert p.returncode == 0, p.stderr
                return p.stdout.splitlines()

            def row(lines: list[str], first: str) -> list[str]:
                return next(re.split(r" {2,}", line.strip()) for line in lines  # cells: 2+ blanks apart
                            if line.startswith(first + " "))

            lines = table("--group", "service")
            assert row(lines, "alpha")[:2] == ["alpha", "300"] and row(lines, "beta")[:2] == ["beta", "100"]
            assert "2 processes, 2 services in all · devices 0,1" in " ".join(lines)
            lines = table("--group", "process")
            assert re.search(r"PID +Service +Count", " ".join(lines))
            assert row(lines, str(os.getpid()))[1:3] in (["alpha", "300"], ["beta", "100"])
            lines = table("--group", "device")
            assert row(lines, "0")[:2] == ["0", "300"] and row(lines, "1")[:2] == ["1", "100"]
            lines = table("--group", "model")
            assert row(lines, "alpha/resnet50@v3")[:3] == ["alpha/resnet50@v3", "alpha", "1"]
            lines = table("--device", "1")
            assert "filter device=1" in lines[0] and sum(int(row(lines, t)[1]) for t in ("Conv2D", "MatMul")) == 100
            p = cli("status", "--socket", d.socket)
            assert "devices (window 10s, from the daemon's aggregates):" in p.stdout
            assert status(d.socket)["protocol_errors"] == 0


@pytest.mark.parametrize("command", ["top", "tail"])
def test_device_filter_on_a_daemon_without_it_is_a_usage_error(command):
    args = ("--once",) if command == "top" else ()
    with _older_daemon() as old:
        p = cli(command, *args, "--device", "0", "--socket", old.socket, timeout=20)
        assert p.returncode == 2
        assert p.stderr.strip() == ("aclprof: error: --device: this daemon has no device filter (it predates "
                                    "per-service keys: upgrade aclprofd)")
        assert status(old.socket)["protocol_errors"] == 0  # refused in the client, nothing sent


@pytest.mark.parametrize("value", ["-1", "x"])
def test_device_filter_is_a_non_negative_int(value):
    p = cli("top", "--once", f"--device={value}", "--socket", "/nonexistent/d.sock")
    assert p.returncode == 2 and f"argument --device: {value!r}" in p.stderr and "device id" in p.stderr


def _all_counts(d) -> dict[str, int]:
    from aclprof.cli.client import Client

    with Client(d.socket) as c:
        return {r["key"]: r["count"] for r in c.snapshot("all", "type", {})["rows"]}


def test_r_in_top_is_view_local_and_never_resets_the_daemon(daemon):
    import pty

    _feed(daemon, "rsvc", 400)
    wait_for(lambda: sum(_all_counts(daemon).values()) >= 400, what="400 records")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "aclprof", "top", "--interval", "0.2", "--window", "all",
                             "--socket", daemon.socket],
                            stdin=slave, stdout=slave, stderr=slave, env=env(TERM="xterm", COLUMNS="160", LINES="40"),
                            start_new_session=True)
    os.close(slave)
    out = PtyOutput(master)

    def read_until(pattern: bytes) -> None:
        out.read_until(pattern, regex=True, new_only=True)

    try:
        read_until(rb"Conv2D")
        before = _all_counts(daemon)
        os.write(master, b"r")
        read_until(rb"since r at")
        read_until(rb"the daemon's aggregates are untouched")
        time.sleep(0.5)  # a few refreshes
        assert _all_counts(daemon) == before  # a second client sees the same counts: no RESET
        _feed(daemon, "rsvc", 6)  # 3 Conv2D, 3 MatMul since r
        read_until(rb"Conv2D {2,}3 {2,}\S")  # "Conv2D   3   ..."
        after = _all_counts(daemon)
        assert after["Conv2D"] == before["Conv2D"] + 3
        os.write(master, b"q")
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_top_once_json_is_the_daemon_reply(daemon):
    _feed(daemon, "jsonsvc", 10)
    p = cli("top", "--once", "--json", "--window", "all", "--socket", daemon.socket)
    assert p.returncode == 0 and json.loads(p.stdout)["rows"]


# -- aclprof reset (the admin's explicit command) ----------------------------------------------

def test_reset_refuses_without_yes_when_stdin_is_not_a_terminal_and_wipes_with_it():
    with InProcess() as d:
        _feed(d, "alpha", 200)
        wait_for(lambda: sum(_all_counts(d).values()) == 200, what="200 records")
        p = cli("reset", "--socket", d.socket, stdin=subprocess.DEVNULL)
        assert p.returncode == 2
        assert p.stderr.strip() == ("aclprof: error: reset wipes the daemon's aggregates for every user: stdin is "
                                    "not a terminal to confirm on; pass --yes to reset without asking")
        assert sum(_all_counts(d).values()) == 200  # state intact
        p = cli("reset", "--yes", "--socket", d.socket, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("reset: wiped 200 op records in 2 aggregate keys since ")
        assert "the stored records and Prometheus' series are kept" in p.stdout
        assert _all_counts(d) == {}


def test_reset_asks_on_a_terminal():
    import pty

    with InProcess() as d:
        _feed(d, "alpha", 20)
        wait_for(lambda: sum(_all_counts(d).values()) == 20, what="20 records")
        for answer, code, left in ((b"n\n", 1, 20), (b"y\n", 0, 0)):
            master, slave = pty.openpty()
            proc = subprocess.Popen([sys.executable, "-m", "aclprof", "reset", "--socket", d.socket],
                                    stdin=slave, stdout=slave, stderr=slave, env=env(), start_new_session=True)
            os.close(slave)
            try:
                out = b""
                deadline = time.monotonic() + 15
                while b"[y/N]" not in out:
                    assert time.monotonic() < deadline, out
                    out += os.read(master, 4096)
                assert b"Wipe 20 op records" in out and b"for every user?" in out
                os.write(master, answer)
                assert proc.wait(10) == code
                assert sum(_all_counts(d).values()) == left
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                os.close(master)


# -- status: the per-device section ------------------------------------------------------------

def test_status_device_lines_from_the_aggregates_and_from_status():
    from aclprof.cli.status import device_lines

    rows = [{"key": "1", "device": 1, "count": 200, "pct_time": 28.7}, {"key": "0", "device": 0, "count": 500,
                                                                         "pct_time": 71.3}]
    assert device_lines({}, {"window": "10s", "seconds": 10.0, "rows": rows}) == [
        "devices (window 10s, from the daemon's aggregates):",
        "  device 0: 50 records/s, 71.3% of op time",
        "  device 1: 20 records/s, 28.7% of op time"]
    st = {"agents": [{"records_per_s": 300.0, "models": [{"device": 0}]},
                     {"records_per_s": 100.0, "models": [{"device": 0}, {"device": 1}]},
                     {"records_per_s": 100.0, "models": [{"device": 0}]},
                     {"records_per_s": 5.0, "models": []}]}
    lines = device_lines(st)
    assert lines[0].startswith("devices (from the connected processes; op time per device needs")
    assert lines[1:] == ["  device 0: 400 records/s, 80.0% of records (2 processes)",
                         "  devices 0+1: 100 records/s, 20.0% of records (1 process)"]


@pytest.mark.parametrize("older", [False, True], ids=["per-service-keys", "older-daemon"])
def test_status_shows_a_device_section_without_protocol_errors(older):
    with (_older_daemon() if older else InProcess()) as d:
        with _two_services(d, 300, 100):
            p = cli("status", "--socket", d.socket)
            assert p.returncode == 0, p.stderr
            lines = p.stdout.splitlines()
            if not older:
                assert "devices (window 10s, from the daemon's aggregates):" in lines
                assert any(line.startswith("  device 0: ") and line.endswith("% of op time") for line in lines)
            else:
                assert any(line.startswith("devices (from the connected processes") for line in lines)
                assert any(line.startswith("  device 0: ") and "(1 process)" in line for line in lines)
                assert any(line.startswith("  device 1: ") and "(1 process)" in line for line in lines)
            assert status(d.socket)["protocol_errors"] == 0


def test_top_header_turns_degraded_when_protocol_errors_rise(daemon):
    """top in a pipe (a table per interval): after a malformed frame from another client, the
    header names the rising fault; the window's drops and the health come from STATUS."""
    from helpers.daemons import Client

    proc = subprocess.Popen([sys.executable, "-m", "aclprof", "top", "--interval", "0.3", "--socket", daemon.socket],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    got: list[str] = []
    import threading

    threading.Thread(target=lambda: [got.append(x) for x in proc.stdout], daemon=True).start()
    try:
        wait_for(lambda: sum(": ok" in line for line in got) >= 2, what="two healthy headers")
        bad = Client(daemon.socket)
        bad.sock.sendall(b"XXXX" * 4)  # bad magic: the daemon closes it and counts a protocol error
        assert bad.closed_by_peer()
        bad.close()
        wait_for(lambda: any("degraded: protocol errors +1" in line for line in got), what="a degraded header")
    finally:
        proc.kill()
        proc.wait()


# -- hostile replies: something else on the socket, or a daemon of another version -------------

_GARBAGE_STATUS = {"version": ["x"], "pid": "p", "uptime_s": "long", "healthy": "maybe", "problems": "disk",
                   "records_per_s": "fast", "dropped_by_agents": None, "agents": 5, "stream_skipped": float("nan"),
                   "storage": [], "memory": {"refused": "all"}, "aggregates": {"windows": "10s", "group_by": 3}}


def test_top_and_status_survive_replies_of_the_wrong_types():
    big = "[red]" + "x" * 100_000 + "\x1b[2J"
    snap = {"window": 10, "rows": [{"key": big, "count": "many", "total_ns": None, "pct_time": "NaN",
                                    "p99_ns": [1]}, 7, "row", {"key": None, "count": 1e300}],
            "summary": {"devices": "all", "processes": "two", "records_per_s": {}}}
    path, stop = fake_control_daemon({Kind.STATUS: _GARBAGE_STATUS, Kind.SNAPSHOT: snap})
    try:
        p = cli("top", "--once", "--socket", path)
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr and "\x1b" not in p.stdout
        assert "[red]xxx" in p.stdout  # shown as text, cut to the column
        assert len(max(p.stdout.splitlines(), key=len)) <= 140
        p = cli("status", "--socket", path)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        assert p.stderr.startswith("aclprof: error: the daemon's STATUS reply is not as daemon/PROTOCOL.md says (")
        assert len(p.stderr.strip().splitlines()) == 1
    finally:
        stop()


def test_top_once_with_a_flood_of_rows_shows_the_limit():
    rows = [{"key": f"op{i:06d}", "count": i, "total_ns": i * 1000, "mean_ns": 1000, "p50_ns": 1000, "p99_ns": 1000,
             "max_ns": 1000, "pct_time": 0.001} for i in range(60_000)]
    path, stop = fake_control_daemon({Kind.STATUS: {"healthy": True, "agents": []},
                               Kind.SNAPSHOT: {"window": "10s", "rows": rows}})
    try:
        started = time.monotonic()
        p = cli("top", "--once", "--limit", "10", "--socket", path)
        assert p.returncode == 0, p.stderr
        assert "op059999" in p.stdout and "... 59,990 more rows" in p.stdout
        assert time.monotonic() - started < 20
    finally:
        stop()


def test_live_view_asks_status_at_most_once_a_second_whatever_the_rows():
    from aclprof.cli.top.live import run_live
    from aclprof.cli.top.view import TopView

    class Counting:
        def __init__(self):
            self.calls = {"status": 0, "snapshot": 0}

        def status(self):
            self.calls["status"] += 1
            return {"healthy": True, "agents": [], "records_per_s": 1.0}

        def snapshot(self, window, group, filt):
            self.calls["snapshot"] += 1
            return {"window": window, "rows": [{"key": f"op{i}", "count": 1, "total_ns": i} for i in range(500)]}

    c = Counting()
    run_live(c, TopView(), interval=0.05, stop_at=time.monotonic() + 1.5)
    assert c.calls["snapshot"] >= 10  # one per refresh
    assert 1 <= c.calls["status"] <= 2  # at start, then at most once a second: never per row or refresh
