"""Issue 19, items 3, 6 and 10, tried as an attacker would: replies that peers' strings
would push past the 16 MiB frame limit, baseline documents made huge by one agent's long
cells, and out-of-range or malformed values that must be refused and counted as protocol
errors (never internal errors), with the CLI failing cleanly on hostile files.

Each test fails on the code before issue 19 (daemon/README.md "Limits" says what holds now)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from helpers.daemons import Client, InProcess, agent, running, status
from helpers.procs import cli, short_tmpdir
from helpers.records import make_records

from aclprof.protocol.wire import MAX_LABELS, MAX_PAYLOAD, Kind, encode, encode_json

#: a label key or value of 256 control characters: 1,536 bytes in JSON (six-fold escapes)
_CTRL = "".join(chr(1 + i % 30) for i in range(256))


@pytest.fixture
def tmp():
    d = short_tmpdir("aclr-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _ctrl_labels(i: int) -> dict[str, str]:
    """64 labels of 256 control characters each way: ~196 kB of JSON per WATCH."""
    return {f"{i:04d}{j:02d}" + _CTRL[6:]: _CTRL for j in range(MAX_LABELS)}


def _hostile_watches(path: str, n: int = 100) -> Client:
    """One agent's ``n`` WATCHes of control-character labels (19.6 MB of STATUS JSON at 100)."""
    a = agent(path, service="hostile")
    for i in range(n):
        a.send_json(Kind.WATCH, {"model_id": i, "device": 0, "labels": _ctrl_labels(i)})
    return a


def _long_types(a: Client, n: int = 400) -> None:
    """``n`` op types of 4,096 control characters, with records: ~20 MB of SNAPSHOT rows
    grouped by type (the key and the op_type field, each escaped six-fold)."""
    names = {100 + i: f"{i:05d}" + "".join(chr(1 + (i + k) % 30) for k in range(4091)) for i in range(n)}
    names[99] = "hostile_op"
    a.names(names)
    for i in range(n):
        a.send_batch(make_records(2, model=1, types=(100 + i,), names=(99,)))


def _wait_agents(path: str, n: int) -> dict:
    deadline = time.monotonic() + 30
    while True:
        st = status(path)
        if len(st["agents"]) + st.get("truncated", {}).get("agents", 0) >= n:
            models = sum(len(x["models"]) + x.get("models_truncated", 0) for x in st["agents"])
            if models >= 100:
                return st
        assert time.monotonic() < deadline, st.get("agents")
        time.sleep(0.05)


def test_status_of_100_control_character_watches_fits_its_frame_and_says_what_it_cut():
    """One agent's 100 WATCHes of control-character labels made STATUS 19.6 MB: every
    client's STATUS failed (main: the daemon raised "payload ... exceeds" for each). Now
    the agent's models are cut to its share, counted in the reply and since the start."""
    with InProcess() as d:
        good = agent(d.socket, service="good")
        hostile = _hostile_watches(d.socket)
        try:
            st = _wait_agents(d.socket, 2)
            size = len(json.dumps(st, separators=(",", ":")))
            assert size <= MAX_PAYLOAD
            by_service = {a["service"]: a for a in st["agents"]}
            assert set(by_service) == {"good", "hostile"}  # the good agent is not pushed out
            cut = by_service["hostile"]["models_truncated"]
            assert cut > 0 and len(by_service["hostile"]["models"]) + cut == 100
            assert st["truncated"]["models"] == cut
            st2 = status(d.socket)
            assert st2["replies_truncated"]["replies"] >= 1
            assert st2["replies_truncated"]["items"]["status.models"] >= cut
        finally:
            good.close()
            hostile.close()


def test_cli_status_top_reset_survive_hostile_watches_and_long_types_and_a_restart(tmp):
    """The issue's attack: 100 control-character WATCHes (STATUS 19.6 MB) plus 400 op types
    of 4 KiB control characters (SNAPSHOT by type ~20 MB, kept in aggregates.npz across a
    restart). `aclprof status`, `top --once` and `reset --yes` failed on main, also after a
    restart; now they work and show what the daemon cut."""
    with running(tmp) as d:
        hostile = _hostile_watches(d.socket)
        _long_types(hostile)
        _wait_agents(d.socket, 1)
        out = cli("status", "--socket", d.socket)
        assert out.returncode == 0, out.stderr
        assert "models not shown" in out.stdout
        top = cli("top", "--once", "--socket", d.socket)
        assert top.returncode == 0, top.stderr
        assert "lighter rows not sent" in top.stdout
        hostile.close()
        time.sleep(0.5)  # a flush: the aggregates are saved
    with running(tmp) as d:  # the same data dir: the long op types come back from aggregates.npz
        top = cli("top", "--once", "--json", "--window", "all", "--socket", d.socket)
        assert top.returncode == 0, top.stderr
        snap = json.loads(top.stdout)
        assert snap["truncated"]["rows"] > 0 and snap["rows"]
        reset = cli("reset", "--yes", "--socket", d.socket)
        assert reset.returncode == 0, reset.stderr
        assert "reset: wiped" in reset.stdout
        assert status(d.socket)["replies_truncated"]["items"]["snapshot.rows"] > 0


def test_error_reply_quoting_a_huge_filter_key_is_cut_and_the_daemon_runs_on():
    """SNAPSHOT with a filter key of 10 MB (5 M "é", raw UTF-8): the ERROR quoting it
    ("unknown filter keys: ...") was ~30 MB of JSON escapes; encoding it raised inside the
    error path and the exception left the event loop (main: the daemon thread died, every
    client lost). Now the message is cut and the daemon serves on."""
    with InProcess() as d:
        c = Client(d.socket)
        key = "\u00e9" * 5_000_000
        c.sock.sendall(encode(Kind.SNAPSHOT, json.dumps({"filter": {key: 1}}, ensure_ascii=False).encode()))
        kind, payload = c.recv()
        assert kind == Kind.ERROR
        assert len(payload) < 64 << 10
        c.close()
        assert d.thread.is_alive()
        assert status(d.socket)["protocol_errors"] == 1


def _unused() -> None:  # keep imports used while the file grows
    _ = (os, encode_json)
