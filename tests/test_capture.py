"""The flight recorder (daemon/README.md "Flight recorder"): a real daemon, real agents in
mock inference processes, one op type slowed; the detector flags it and a capture of the
records around the flag appears, listed by ``aclprof captures`` and ``aclprof status``."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest
from helpers.daemons import Client, running
from helpers.procs import Worker, cli, short_tmpdir, wait_for

from aclprof.protocol.wire import Kind

DETECT_FAST = ("--detector-window", "2s", "--detector-trailing", "4s", "--detector-min-count", "200",
               "--detector-persistence", "2")


def _drive(workers: list[Worker], seconds: float, n: int = 40) -> None:
    """``n`` iterations of each worker's model (5 ops, one MatMulV2) every 0.1 s."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for w in workers:
            w.run(n)
        time.sleep(0.1)


def _trace(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


@pytest.mark.slow
def test_a_slowed_op_is_flagged_and_captured_with_the_records_around_it():
    root = short_tmpdir("aclp-")
    with running(root, *DETECT_FAST, "--capture-before", "8s", "--capture-after", "1s") as d:
        slow, other = Worker(d.socket, "--service", "svc"), Worker(d.socket, "--service", "bystander")
        try:
            _drive([slow, other], 5.0)
            assert d.status()["captures"]["count"] == 0
            t_slow = time.time()
            slow.cmd("slow MatMulV2 2")

            def captured():
                _drive([slow, other], 0.3)
                return d.status()["captures"]["count"]
            wait_for(captured, timeout=30, what="a capture")
            st = d.status()["captures"]
        finally:
            for w in (slow, other):
                w.kill()
        assert st["made_total"] == 1 and st["errors_total"] == 0 and st["count"] == 1
        item = st["newest"]
        assert (item["service"], item["op_type"]) == ("svc", "MatMulV2")
        assert item["shift"] > 1.3 and item["lower"] > 1.0 and item["truncated"] is False
        cap = Path(item["path"])
        assert cap.parent == Path(d.data_dir) / "captures" and cap.name.endswith("_svc_MatMulV2")
        doc = json.loads((cap / "capture.json").read_text())
        assert {oct(p.stat().st_mode & 0o777) for p in (cap / "trace.json", cap / "capture.json")} == {"0o640"}
        assert oct(cap.stat().st_mode & 0o777) == "0o750"
        t = doc["flag"]["since_ts"]
        assert 0 < doc["created_ts"] - doc["window"]["until_ts"] < 10  # written once the window had passed
        assert doc["window"]["since_ts"] == pytest.approx(t - 8) and doc["window"]["until_ts"] == pytest.approx(t + 1)
        assert doc["records"]["written"] == doc["records"]["found"] == item["records"] > 0

        # the Chrome trace: every record of the service in the window, the bystander's none
        events = [e for e in _trace(cap / "trace.json") if e["ph"] == "X"]
        assert len(events) == doc["records"]["written"]
        assert {e["pid"] for e in events} == {slow.pid}
        received = [e["args"]["received_ts"] for e in events]
        assert min(received) >= t - 8 and max(received) <= t + 1
        matmul = [e for e in events if e["cat"] == "MatMulV2"]
        # the window holds the change itself: fast before the slowdown, slow from it to the end
        assert t_slow < t
        assert {e["dur"] for e in matmul if e["args"]["received_ts"] < t_slow} == {10.0}
        assert {e["dur"] for e in matmul if e["args"]["received_ts"] > t_slow + 0.5} == {20.0}

        # the same records as `aclprof export` of that window and service gives
        c = Client(d.socket)
        exported = c.export(since_ts=doc["window"]["since_ts"], until_ts=doc["window"]["until_ts"],
                            filter={"service": "svc"})
        c.close()
        assert len(exported) == len(events)

        # the ascend export: one process directory, every record a kernel_details row
        (proc_dir,) = (cap / "ascend").iterdir()
        assert proc_dir.name.split("_")[1] == str(slow.pid)
        out = proc_dir / "ASCEND_PROFILER_OUTPUT"
        with open(out / "kernel_details.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == len(events)
        stat_types = {r["OP Type"] for r in csv.DictReader(open(out / "op_statistic.csv", newline=""))}
        assert "MatMulV2" in stat_types and "Conv2D" in stat_types
        assert json.loads((proc_dir / "profiler_metadata.json").read_text())["aclprof_service"] == "svc"
        assert any(e.get("name") == "Computing" for e in _trace_list(out / "trace_view.json"))

        # listed by `aclprof captures` and shown by `aclprof status`
        listed = json.loads(cli("captures", "--json", "--socket", d.socket, check=True).stdout)
        assert [x["name"] for x in listed["items"]] == [cap.name]
        text = cli("captures", "--socket", d.socket, check=True).stdout
        assert cap.name in text and "MatMulV2" in text and "svc" in text
        status_text = cli("status", "--socket", d.socket).stdout
        assert "captures: 1" in status_text and cap.name in status_text


def _trace_list(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def test_captures_lists_nothing_yet_and_says_so():
    root = short_tmpdir("aclp-")
    with running(root) as d:
        out = cli("captures", "--socket", d.socket)
        assert out.returncode == 0 and "no captures" in out.stdout
        doc = json.loads(cli("captures", "--json", "--socket", d.socket, check=True).stdout)
        assert doc["count"] == 0 and doc["items"] == [] and doc["dir"] == os.path.join(d.data_dir, "captures")


def test_captures_usage_errors_and_no_daemon_exit_2(tmp_path):
    assert cli("captures", "--bogus").returncode == 2
    out = cli("captures", "--socket", str(tmp_path / "none.sock"))
    assert out.returncode == 2 and "no daemon socket" in out.stderr and "Traceback" not in out.stderr
    assert "examples:" in cli("captures", "--help").stdout


def test_status_reply_has_captures():
    root = short_tmpdir("aclp-")
    with running(root, "--capture-max-count", "3", "--no-capture") as d:
        c = Client(d.socket)
        st = c.request(Kind.STATUS)["captures"]
        c.close()
        assert st["enabled"] is False and st["max_count"] == 3 and st["count"] == 0 and st["newest"] is None


def test_captures_text_escapes_peer_strings_and_survives_odd_replies():
    from aclprof.cli.capturefmt import format_captures, status_lines

    evil = "svc\x1b[2J\nforged line"
    item = {"name": "n", "path": "/p", "bytes": 2048, "flag_ts": 1.0, "service": evil, "op_type": "Mat\x07Mul",
            "quantile": "p99", "shift": 1.5, "lower": 1.2, "upper": 1.8, "records": 10, "truncated": True}
    text = format_captures({"items": [item, "junk", {"shift": "x", "bytes": None}], "max_count": 20, "bytes": 2048,
                            "max_bytes": 1 << 20, "dir": "/d", "errors_total": 2, "last_error": "disk\x1b full"})
    assert "\x1b" not in text and "\x07" not in text and "\nforged" not in text
    assert "TRUNCATED" in text and "x1.50 [1.20, 1.80]" in text and "2 failed" in text
    assert "unreadable capture.json" in text  # the item without records
    lines = status_lines({"count": 1, "bytes": 2048, "newest": item})
    assert lines[0].startswith("captures: 1, 2.0 KiB") and "newest" in lines[1]
    assert status_lines(None) == [] and status_lines("x") == [] and status_lines({"count": 0}) == []
    assert "2 failed" in status_lines({"count": 0, "errors_total": 2, "last_error": "e"})[0]


@pytest.mark.parametrize("key,value,message", [
    ("capture_max_count", "0", "1..1000"), ("capture_max_count", "1001", "1..1000"),
    ("capture_max_bytes", "1KiB", "at least 1MiB"), ("capture_before_s", "2h", "at most 1h"),
    ("capture_after_s", "-1", "bad duration"), ("capture_min_interval_s", "soon", "bad duration"),
    ("capture_enabled", "maybe", "bad boolean"),
])
def test_bad_capture_settings_are_refused(key, value, message):
    from aclprofd import config

    with pytest.raises(config.ConfigError, match=message):
        config.load({"socket": "/tmp/x.sock", key: value}, environ={})


def test_capture_settings_parse_and_reload_live():
    from aclprofd import config

    s = config.load({"socket": "/tmp/x.sock", "capture_min_interval_s": "0", "capture_max_bytes": "64MiB",
                     "capture_before_s": "30s"}, environ={})
    assert (s.capture_min_interval_s, s.capture_max_bytes, s.capture_before_s) == (0.0, 64 << 20, 30.0)
    assert all(o.live for o in config.OPTIONS if o.field.startswith("capture_"))
