"""`aclprof fleet` against a fake Prometheus (an HTTP server on 127.0.0.1 in this process):
the table and JSON from canned replies, usage errors (exit 2), and hostile servers (exit 1
with one line naming the problem, within the timeout): garbage, deep JSON, HTTP errors,
huge replies, slow drips, label values carrying terminal escape sequences."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.procs import PtyOutput, env

from aclprof.cli.fleet.data import queries
from aclprof.cli.main import main

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


class FakePrometheus:
    """Serves ``handler(request)`` for every GET; records the queries asked."""

    def __init__(self, handler: Handler):
        owner = self
        self.asked: list[str] = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
                owner.asked.append(q)
                with contextlib.suppress(OSError):
                    handler(self)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@contextlib.contextmanager
def fake(handler: Handler) -> Iterator[FakePrometheus]:
    f = FakePrometheus(handler)
    try:
        yield f
    finally:
        f.close()


def send(req: http.server.BaseHTTPRequestHandler, body: bytes, status: int = 200,
         ctype: str = "application/json", length: int | None = None) -> None:
    req.send_response(status)
    req.send_header("Content-Type", ctype)
    req.send_header("Content-Length", str(len(body) if length is None else length))
    req.end_headers()
    req.wfile.write(body)


def canned(samples: dict[str, list[tuple[dict, float]]], host_label: str = "host") -> Handler:
    """Answers each query of `aclprof fleet` (window 1m) with its samples."""
    names = {expr: name for name, expr in queries("1m", host_label).items()}

    def handler(req: http.server.BaseHTTPRequestHandler) -> None:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(req.path).query)["query"][0]
        result = [{"metric": m, "value": [time.time(), repr(v)]} for m, v in samples.get(names.get(q, ""), [])]
        send(req, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode())
    return handler


def fleet_samples(p99: dict[str, float], op_type: str = "MatMul", service: str = "llm") -> dict:
    s: dict[str, list] = {k: [] for k in ("calls", "count", "device", "p50", "p99", "fleet_p50", "fleet_p99")}
    for host, v in p99.items():
        m = {"host": host, "service": service, "op_type": op_type}
        s["calls"].append((m, 20.0))
        s["count"].append((m, 1200.0))
        s["device"].append((m, 20 * v / 2))
        s["p50"].append((m, v / 2))
        s["p99"].append((m, v))
    fm = {"service": service, "op_type": op_type}
    s["fleet_p50"].append((fm, 6e-5))
    s["fleet_p99"].append((fm, 3.9e-4))
    return s


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``aclprof fleet ARGS`` in this process: exit status, stdout, stderr."""
    import structlog

    saved = structlog.get_config()  # the CLI configures structlog onto this test's captured stderr
    try:
        rc = main(["fleet", *args])
    finally:
        structlog.configure(**saved)
    out, err = capsys.readouterr()
    return rc, out, err


SLOW = {"a": 1e-4, "b": 1.05e-4, "c": 4e-4}


# -- the table and the JSON -------------------------------------------------------------------

def test_once_json_lists_hosts_and_flags_the_slow_one(capsys):
    with fake(canned(fleet_samples(SLOW))) as prom:
        rc, out, err = run(capsys, "--prometheus", prom.url, "--once", "--json")
    assert (rc, err) == (0, "")
    doc = json.loads(out)
    assert doc["hosts"] == ["a", "b", "c"] and doc["window"] == "1m" and doc["prometheus"] == prom.url
    (row,) = doc["rows"]
    assert (row["op_type"], row["service"], row["hosts_reporting"], row["outliers"]) == ("MatMul", "llm", 3, ["c"])
    assert row["calls_per_s"] == 60.0 and row["p99_s"] == 3.9e-4 and row["share"] == 1.0
    assert doc["outliers"][0]["host"] == "c" and doc["outliers"][0]["direction"] == "slow"
    assert doc["thresholds"] == {"min_count": 100.0, "min_hosts": 3, "z": 3.5, "mad_floor": 0.05}
    assert "8 buckets per power of two" in doc["quantile_resolution"]  # what p50_s and p99_s are worth
    assert set(prom.asked) == set(queries("1m").values())  # every query, nothing else


def test_once_table_and_drill_down(capsys):
    with fake(canned(fleet_samples(SLOW))) as prom:
        rc, out, err = run(capsys, "--prometheus", prom.url, "--once")
        assert (rc, err) == (0, "")
        assert "3 hosts, window 1m" in out and "MatMul" in out and "c x3.8 z=" in out
        rc, out, err = run(capsys, "--prometheus", prom.url, "--once", "--host", "c")
        assert (rc, err) == (0, "")
        assert "host c" in out and "OUTLIER" in out and "400.0us" in out
        rc, out, _ = run(capsys, "--prometheus", prom.url, "--once", "--host", "a")
        assert rc == 0 and "OUTLIER" not in out
        rc, out, _ = run(capsys, "--prometheus", prom.url, "--once", "--host", "nosuch")
        assert rc == 0 and "(no op series for host nosuch)" in out


def test_thresholds_are_options(capsys):
    with fake(canned(fleet_samples(SLOW))) as prom:
        _, out, _ = run(capsys, "--prometheus", prom.url, "--once", "--json", "--min-hosts", "4")
        assert json.loads(out)["outliers"] == []
        _, out, _ = run(capsys, "--prometheus", prom.url, "--once", "--json", "--min-count", "2000")
        assert json.loads(out)["outliers"] == []
        _, out, _ = run(capsys, "--prometheus", prom.url, "--once", "--json", "--z", "100")
        assert json.loads(out)["outliers"] == []


def test_filters_and_host_label_reach_the_queries(capsys):
    with fake(canned({})) as prom:
        rc, out, _ = run(capsys, "--prometheus", prom.url + "/", "--once", "--service", 'l"m', "--type", "Mat.*",
                         "--host-label", "instance", "--window", "30s")
    assert rc == 0 and "(no aclprofd op series in this window)" in out
    assert all('{service="l\\"m",op_type=~"Mat.*"}[30s]' in q for q in prom.asked)
    assert all("by (instance, service, op_type" in q for q in prom.asked if "fleet" not in q and "(service" not in q)


def test_labels_with_escape_sequences_are_shown_escaped(capsys):
    evil_host = "h\x1b]0;pwned\x07"
    evil_type = "Mat\x1b[2J\u202eMul\nX"
    s = fleet_samples({"a": 1e-4, "b": 1e-4, evil_host: 5e-4}, op_type=evil_type, service="svc\x9b31m")
    with fake(canned(s)) as prom:
        rc, out, err = run(capsys, "--prometheus", prom.url, "--once", "--limit", "5")
        assert (rc, err) == (0, "")
        for bad in ("\x1b", "\x07", "\u202e", "\x9b"):
            assert bad not in out
        assert "\\x1b[2J" in out and "\\u202e" in out and "svc\\x9b31m" in out and "h\\x1b]0;pwned\\x07" in out
        rc, out, err = run(capsys, "--prometheus", prom.url, "--once", "--host", evil_host)
        assert rc == 0 and "\x1b" not in out and "OUTLIER" in out
        rc, out, _ = run(capsys, "--prometheus", prom.url, "--once", "--json")
        assert "\x1b" not in out and json.loads(out)["outliers"][0]["host"] == evil_host  # JSON: exact


# -- usage errors: exit 2 ---------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ([], "--prometheus"),
    (["--prometheus", "ftp://x"], "http:// or https://"),
    (["--prometheus", "http://"], "no host"),
    (["--prometheus", "http://h:99999"], "bad port"),
    (["--prometheus", "http://h/?q=1"], "without ?query"),
    (["--prometheus", "http://h", "--window", "1d"], "not a window"),
    (["--prometheus", "http://h", "--window", "1m]) or vector(1"], "not a window"),
    (["--prometheus", "http://h", "--host-label", "a-b"], "not a Prometheus label"),
    (["--prometheus", "http://h", "--json"], "--json needs --once"),
    (["--prometheus", "http://h", "--once", "--interval", "0"], "argument --interval: '0' is not a number"),
    (["--prometheus", "http://h", "--once", "--timeout", "nan"], "argument --timeout: 'nan'"),
    (["--prometheus", "http://h", "--once", "--max-bytes", "10"], "--max-bytes"),
    (["--prometheus", "http://h", "--once", "--min-hosts", "1"], "--min-hosts"),
    (["--prometheus", "http://h", "--once", "--z", "-1"], "argument --z: '-1'"),
    (["--prometheus", "http://h", "--once", "--mad-floor", "inf"], "argument --mad-floor: 'inf'"),
    (["--prometheus", "http://h", "--once", "--limit", "-1"], "--limit"),
    (["--prometheus", "http://h", "--sort", "nope"], "invalid choice"),
    (["--prometheus", "http://h", "--type", "(?=lookahead)"], "RE2 rejects"),
    (["--prometheus", "http://h", "--once", "--rules", "--window", "5m"], "--rules: the recording rules have"),
    (["--prometheus", "http://h", "--once", "--rules", "--host-label", "instance"], "--rules"),
])
def test_usage_errors_exit_2(capsys, args, message):
    rc, out, err = run(capsys, *args)
    assert rc == 2 and out == "" and message in err


# -- hostile or absent servers: exit 1, one line ----------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable(capsys):
    rc, out, err = run(capsys, "--prometheus", f"http://127.0.0.1:{_closed_port()}", "--once")
    assert rc == 1 and out == "" and "is unreachable: Connection refused" in err and err.count("\n") == 1


@pytest.mark.parametrize("body, status, expect", [
    (b"\x00\xff garbage \x1b[2J", 200, "reply is not JSON (UnicodeDecodeError): '\\x00\ufffd garbage \\x1b[2J'"),
    (b"garbage", 200, "reply is not JSON (JSONDecodeError): 'garbage'"),
    (b"[" * 200_000, 200, "reply is not JSON (RecursionError)"),
    (b"<html>bad gateway</html>", 502, "HTTP 502, reply is not JSON"),
    (json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error\x1b[31m"}).encode(), 400,
     "HTTP 400: bad_data: parse error\\x1b[31m"),
    (json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(), 200,
     "unexpected reply to the calls query: resultType is 'matrix'"),
    (b"[1, 2]", 200, "reply is a JSON list"),
])
def test_bad_replies(capsys, body, status, expect):
    with fake(lambda req: send(req, body, status)) as prom:
        rc, out, err = run(capsys, "--prometheus", prom.url, "--once", "--json")
    assert rc == 1 and out == "" and expect in err and "\x1b" not in err and err.count("\n") == 1


def test_huge_declared_reply_is_refused_before_reading(capsys):
    def handler(req):
        send(req, b"{}", length=10**12)  # declares a terabyte, sends two bytes
    with fake(handler) as prom:
        rc, _, err = run(capsys, "--prometheus", prom.url, "--once")
    assert rc == 1 and "reply of 1,000,000,000,000 bytes is over the limit" in err


def test_huge_streamed_reply_is_cut_at_max_bytes(capsys):
    sent = []

    def handler(req):
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Connection", "close")  # no length: read until the server closes
        req.end_headers()
        chunk = b" " * 65536
        for _ in range(1000):  # 64 MB if it were all read
            req.wfile.write(chunk)
            sent.append(len(chunk))
    with fake(handler) as prom:
        t0 = time.monotonic()
        rc, _, err = run(capsys, "--prometheus", prom.url, "--once", "--max-bytes", str(1 << 20))
    assert rc == 1 and "over the limit of 1,048,576 bytes (--max-bytes)" in err
    assert time.monotonic() - t0 < 5
    assert sum(sent) < 64 << 20  # the client stopped reading: the server could not send it all


@pytest.mark.parametrize("where", ["body", "headers", "nothing"])
def test_slow_server_hits_the_deadline(capsys, where):
    stop = threading.Event()

    def handler(req):
        if where == "nothing":
            stop.wait(10)
            return
        if where == "headers":
            for ch in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                req.wfile.write(bytes([ch]))
                req.wfile.flush()
                if stop.wait(0.1):
                    return
        req.send_response(200)
        req.send_header("Content-Length", "100000")
        req.end_headers()
        while not stop.wait(0.1):  # a byte every 0.1 s: never trips a socket timeout
            req.wfile.write(b" ")
            req.wfile.flush()
    with fake(handler) as prom:
        t0 = time.monotonic()
        try:
            rc, out, err = run(capsys, "--prometheus", prom.url, "--once", "--timeout", "1")
        finally:
            stop.set()
        took = time.monotonic() - t0
    assert rc == 1 and out == "" and "no complete reply within 1s (--timeout)" in err
    assert took < 3, took
    assert not [t for t in threading.enumerate() if t.name == "aclprof-fleet-deadline"]


def test_path_prefix_is_kept(capsys):
    paths = []

    def handler(req):
        paths.append(urllib.parse.urlsplit(req.path).path)
        canned({})(req)
    with fake(handler) as prom:
        rc, _, _ = run(capsys, "--prometheus", prom.url + "/prom/", "--once")
    assert rc == 0 and set(paths) == {"/prom/api/v1/query"}


# -- a pipe that closes -----------------------------------------------------------------------

def test_live_into_head_exits_0_quietly():
    with fake(canned(fleet_samples(SLOW))) as prom, tempfile.TemporaryDirectory() as tmp:
        cmd = (f"'{sys.executable}' -m aclprof fleet --prometheus {prom.url} --interval 0.05 2>stderr.txt "
               "| head -3; echo \"rc=${PIPESTATUS[0]}\"; cat stderr.txt >&2")
        p = subprocess.run(["bash", "-c", cmd], cwd=tmp, env=env(), capture_output=True, text=True, timeout=30)
    out, _, rc = p.stdout.rpartition("rc=")
    assert out.startswith("aclprof fleet: 3 hosts")
    assert (int(rc), p.stderr) == (0, "")


def test_reply_cut_short(capsys):
    def handler(req):
        req.send_response(200)
        req.send_header("Content-Length", "100")
        req.send_header("Connection", "close")
        req.end_headers()
        req.wfile.write(b'{"status":')
        req.close_connection = True
    with fake(handler) as prom:
        rc, _, err = run(capsys, "--prometheus", prom.url, "--once")
    assert rc == 1 and "Prometheus at" in err and err.count("\n") == 1
    assert "reply cut short (10 of 100 bytes)" in err


# -- the live view on a terminal --------------------------------------------------------------

def test_live_keys_on_a_pty_errors_in_the_caption_and_terminal_restored():
    import os
    import pty
    import termios

    failing = threading.Event()
    good = canned(fleet_samples(SLOW))

    def handler(req):
        if failing.is_set():
            send(req, json.dumps({"status": "error", "errorType": "unavailable", "error": "tsdb busy"}).encode(), 503)
        else:
            good(req)

    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    with fake(handler) as prom:
        proc = subprocess.Popen([sys.executable, "-m", "aclprof", "fleet", "--prometheus", prom.url, "--interval",
                                 "0.3"], stdin=slave, stdout=slave, stderr=slave,
                                env=env(TERM="xterm", COLUMNS="160", LINES="40"), start_new_session=True)
        os.close(slave)
        read_until = PtyOutput(master).read_until

        try:
            read_until(b"sorted by share")
            read_until(b"MatMul")
            os.write(master, b"9")
            read_until(b"sorted by p99")
            failing.set()
            read_until(b"refresh failed: Prometheus at")  # the last table stays, the error is shown
            read_until(b"HTTP 503: unavailable: tsdb busy")
            failing.clear()
            os.write(master, b"o")
            read_until(b"sorted by outlier")
            os.write(master, b"q")
            assert proc.wait(10) == 0
            after = termios.tcgetattr(master)
            assert after[3] == before[3]  # cbreak undone
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)


def test_one_refresh_is_bounded_by_timeout_as_a_whole(capsys):
    good = canned(fleet_samples(SLOW))

    def handler(req):
        time.sleep(0.4)  # each query is in time, the seven of them are not
        good(req)
    with fake(handler) as prom:
        t0 = time.monotonic()
        rc, _, err = run(capsys, "--prometheus", prom.url, "--once", "--timeout", "1")
        took = time.monotonic() - t0
    assert rc == 1 and "no complete reply within 1s" in err
    assert took < 2, took


def test_prometheus_warnings_and_a_missing_host_label_are_reported(capsys):
    s = fleet_samples({"a": 1e-4})
    for name in ("calls", "count", "device", "p50", "p99"):
        s[name] = [({k: v for k, v in m.items() if k != "host"}, x) for m, x in s[name]]
    names = {expr: name for name, expr in queries("1m").items()}

    def handler(req):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(req.path).query)["query"][0]
        result = [{"metric": m, "value": [0, repr(v)]} for m, v in s.get(names.get(q, ""), [])]
        send(req, json.dumps({"status": "success", "warnings": ["partial data\x1b[2J", 7] if "0.99" in q else "x",
                              "data": {"resultType": "vector", "result": result}}).encode())
    with fake(handler) as prom:
        rc, out, _ = run(capsys, "--prometheus", prom.url, "--once", "--json")
        assert rc == 0
        warnings = json.loads(out)["warnings"]
        assert warnings[0] == "Prometheus warns: partial data\\x1b[2J" and warnings[1] == "Prometheus warns: 7"
        assert "no series has the label 'host'" in warnings[-1] and "--host-label instance" in warnings[-1]
        rc, out, _ = run(capsys, "--prometheus", prom.url, "--once")
        assert rc == 0 and "Prometheus warns: partial data\\x1b[2J" in out and "\x1b" not in out


def test_once_on_an_80_column_terminal_keeps_every_number_whole():
    """issue 17: the fleet's table on the default terminal: names shortened, the least
    important columns hidden with a note, never a number cut, no line wider than 80."""
    import re

    from helpers.procs import in_pty, screen_lines

    hosts = {f"npu-host-{i:04d}.cluster.example.com": v for i, v in enumerate((1.0e-4, 1.04e-4, 4.1e-4))}
    with fake(canned(fleet_samples(hosts, op_type="MatMulV2_fused_attention_projection",
                                   service="llm-inference-frontend"))) as prom:
        with in_pty("fleet", "--prometheus", prom.url, "--once", columns=80) as (proc, out, _):
            assert proc.wait(20) == 0
            out.read_until(b"buckets per power of two")
    lines = screen_lines(out.seen)
    assert all(len(line) <= 80 for line in lines), lines
    text = "\n".join(lines)
    assert not re.findall(r"(?<![\w/])[0-9][0-9,.]*[a-z%]*…", text), text  # no "390.0…", "60…"
    assert re.search(r"columns? hidden: ", text) and re.search(r"npu-host-0002\S* x\d+\.\d z=\+\d+\.\d", text)
    assert "390.0us" in text  # the fleet's p99 (the sorted share column and p99 are kept)
