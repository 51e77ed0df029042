"""The control requests (``aclprofd/control.py``) against in-process daemons (issue 20, mutation
run): what each request does and refuses, read back over the wire. The daemon runs on a thread
of this process, so a mutant of control.py is live here; the deployed-daemon tests
(test_deployment.py, test_bite2_security.py) run it in a subprocess and cannot kill one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time

import numpy as np
import pytest
from aclprofd import authz, control
from aclprofd.persist import AGGREGATES_FILE
from helpers.daemons import DAEMON_LOGS, Client, InProcess, agent, status
from helpers.procs import free_port, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import Kind, decode_json


def error_of(c: Client) -> str:
    """The ERROR the daemon answered with; the connection is closed after it."""
    kind, payload = c.recv()
    assert kind == Kind.ERROR, (kind, bytes(payload)[:200])
    assert c.closed_by_peer()
    return decode_json(payload)["message"]


def daemon_log_events(fields: tuple[str, ...]) -> list[dict]:
    """This test's in-process daemon log lines (JSON), reduced to ``fields``."""
    out = []
    for line in DAEMON_LOGS.text().splitlines():
        e = json.loads(line)
        out.append({k: e.get(k) for k in fields})
    return out


@pytest.fixture(scope="module")
def daemon():
    with InProcess() as d:
        yield d


def test_status_says_who_may_do_what_and_where_metrics_listen(daemon: InProcess):
    reply = status(daemon.socket)
    assert reply["access"] == {"socket_group": None, "admin_group": None, "daemon_uid": os.geteuid(),
                               "peer_is_admin": True}
    assert reply["metrics"] == {"host": "127.0.0.1", "port": 0}  # no endpoint: nothing more to say
    assert "flags" in reply["detector"] and "items" in reply["captures"]


def test_status_names_the_groups_it_was_given_and_what_metrics_left_out():
    port = free_port()
    with InProcess(admin_group="root", prometheus_port=port, prometheus_max_series=1234) as d:
        reply = status(d.socket)
    assert reply["access"]["admin_group"] == "root" and reply["access"]["socket_group"] is None
    m = reply["metrics"]
    assert (m["host"], m["port"], m["max_series"]) == ("127.0.0.1", port, 1234)
    assert {"series", "series_refused", "requests_refused"} <= set(m)  # the endpoint's own (Metrics.stats)


def test_a_request_kind_no_handler_takes_is_refused_by_name(daemon: InProcess):
    c = Client(daemon.socket)
    try:
        c.send_json(Kind.NAMES, {})
        assert error_of(c) == "NAMES is not allowed from a control client"
    finally:
        c.close()


def test_every_request_but_status_goes_through_the_authorization_rule(daemon: InProcess, monkeypatch):
    """With the rule saying no admin, STATUS still answers and the rest are refused (the
    handler table is behind :func:`authz.authorize`, whatever the peer's credentials here)."""
    monkeypatch.setattr(authz, "is_admin", lambda settings, peer: False)
    monkeypatch.setattr(control, "is_admin", lambda settings, peer: False)
    assert status(daemon.socket)["access"]["peer_is_admin"] is False
    for kind in (Kind.SNAPSHOT, Kind.STREAM, Kind.EXPORT, Kind.RESET, Kind.BASELINE_LIST):
        c = Client(daemon.socket)
        try:
            c.send_json(kind, {})
            assert error_of(c).startswith(f"{kind.name} refused: control requests other than STATUS need root")
        finally:
            c.close()


def test_snapshot_rows_and_its_refusals(daemon: InProcess):
    # one process's agents share their aggregate keys (the kernel's pid): told apart by device here
    a, noise = agent(daemon.socket, service="snap"), agent(daemon.socket, service="noise")
    try:
        before = status(daemon.socket)["records_total"]
        a.send_batch(make_records(10, durations=[1000, 3000] * 5))
        noise.send_batch(make_records(6, device=1, durations=7000))
        wait_for(lambda: status(daemon.socket)["records_total"] == before + 16)
    finally:
        a.close()
        noise.close()
    c = Client(daemon.socket)
    try:
        reply = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type", "filter": {"device": 0}})
        rows = {r["op_type"]: (r["count"], r["total_ns"]) for r in reply["rows"]}
        assert rows == {"Conv2D": (5, 5000), "MatMul": (5, 15000)}
        default = c.request(Kind.SNAPSHOT, {"filter": {"device": 0}})  # window all, by type
        assert {r["op_type"]: r["count"] for r in default["rows"]} == {"Conv2D": 5, "MatMul": 5}
        assert "shift_p99" in default["rows"][0]  # the detector's annotation per op type
        everyone = c.request(Kind.SNAPSHOT, {"group_by": "device"})
        assert {r["device"]: r["count"] for r in everyone["rows"]} == {0: 10, 1: 6}
    finally:
        c.close()
    for bad, message in (({"window": "fortnight"}, "unknown window 'fortnight' (one of 10s, 1m, all)"),
                         ({"group_by": "colour"},
                          "group_by must be one of type, name, service, process, device, model, not 'colour'")):
        c = Client(daemon.socket)
        try:
            c.send_json(Kind.SNAPSHOT, bad)
            assert error_of(c) == message
        finally:
            c.close()


@pytest.mark.parametrize("req", [{"since_ts": "yesterday"}, {"since_ts": True}, {"until_ts": [1]},
                                 {"until_ts": False}], ids=["text", "true", "list", "false"])
def test_export_refuses_bounds_that_are_not_numbers(daemon: InProcess, req):
    c = Client(daemon.socket)
    try:
        c.send_json(Kind.EXPORT, {"since_ts": None, "until_ts": None, "filter": {}, **req})
        assert error_of(c) == "since_ts/until_ts must be numbers or null"
    finally:
        c.close()


def test_a_second_export_on_the_same_connection_is_refused(daemon: InProcess):
    # The first EXPORT must still be running when the second is read: the two frames come in
    # one read, but the loop may cut the connection's slice between them, and an EXPORT of an
    # empty store could end first (then the second one is rightly taken). With more output
    # than the daemon buffers (2 MiB) plus the socket's, and a client that reads nothing yet,
    # the first cannot end before the second is handled.
    before = status(daemon.socket)["records_total"]  # the module's daemon: other tests' records too
    a = agent(daemon.socket, service="bulk")
    try:
        for _ in range(10):
            a.send_batch(make_records(4000))
        wait_for(lambda: status(daemon.socket)["records_total"] == before + 40_000)
    finally:
        a.close()
    c = Client(daemon.socket)
    try:
        req = {"since_ts": 0, "until_ts": 1.5e18, "filter": {}}
        from aclprof.protocol.wire import encode_json
        c.sock.sendall(encode_json(Kind.EXPORT, req) + encode_json(Kind.EXPORT, req))  # one read: both at once
        while True:
            kind, payload = c.recv()
            if kind == Kind.ERROR:
                assert decode_json(payload)["message"] == "an EXPORT is already running on this connection"
                break
            assert kind in (Kind.EXPORT_RECORDS, Kind.END), kind
    finally:
        c.close()


def test_export_includes_what_was_received_before_it_even_between_flushes():
    """A flush interval of a minute and the agent still connected: without EXPORT's own flush
    its records would still be in its connection, not in storage."""
    with InProcess(flush_interval_s="60") as d:
        a, other = agent(d.socket, service="fresh"), agent(d.socket, service="other")
        try:
            t0 = time.time()
            a.send_batch(make_records(7))
            other.send_batch(make_records(2))
            wait_for(lambda: status(d.socket)["records_total"] == 9)
            t1 = time.time()
            c = Client(d.socket)
            try:
                got = c.export(filter={"service": "fresh"})
                assert len(c.export()) == 9
                assert c.export(since_ts=t1 + 3600) == []  # received before the window
                assert c.export(until_ts=t0 - 3600) == []  # received after it
                assert len(c.export(since_ts=t0 - 1, until_ts=t1 + 1)) == 9
            finally:
                c.close()
        finally:
            a.close()
            other.close()
    assert len(got) == 7 and {r["service"] for r in got} == {"fresh"}


def test_stream_sends_the_records_that_pass_its_filter(daemon: InProcess):
    c = Client(daemon.socket)
    a = None
    try:
        c.send_json(Kind.STREAM, {"filter": {"service": "streamed"}})
        c.send_json(Kind.STATUS, {})  # answered after the STREAM was started (frames are taken in order)
        assert c.recv()[0] == Kind.STATUS_REPLY
        other = agent(daemon.socket, service="other")
        a = agent(daemon.socket, service="streamed")
        before = status(daemon.socket)["records_total"]
        other.send_batch(make_records(3))
        wait_for(lambda: status(daemon.socket)["records_total"] == before + 3)  # fanned out before a's
        a.send_batch(make_records(4))
        got: list[dict] = []
        while len(got) < 4:
            records, _, kind = c.stream_frames()
            assert kind in (Kind.STREAM_RECORDS, Kind.STREAM_SKIPPED)
            got += records
        assert len(got) == 4 and {r["service"] for r in got} == {"streamed"}
        other.close()
        assert {"event": "stream started", "pid": os.getpid()} in daemon_log_events(("event", "pid"))
    finally:
        c.close()
        if a is not None:
            a.close()


def test_reset_empties_the_aggregates_and_a_crash_after_it_does_not_bring_them_back():
    """RESET saves the emptied aggregates at once: a copy of the data directory taken right
    after it (what a crash leaves; the flush interval is a minute) restarts empty."""
    data = tempfile.mkdtemp(prefix="aclprof-reset-")
    crashed = data + "-crash"
    try:
        with InProcess(data_dir=data, flush_interval_s="60") as d:
            a = agent(d.socket, service="gone")
            try:
                a.send_batch(make_records(5))
                wait_for(lambda: status(d.socket)["records_total"] == 5)
            finally:
                a.close()
            c = Client(d.socket)
            try:
                c.export()  # flushes, and so saves the aggregates with the 5 records ...
                # ... on the writer thread: on disk before RESET, so that a RESET that only
                # started a save (or skipped one: the last was under AGGREGATES_SAVE_S ago)
                # leaves the 5 records in the copy
                wait_for(lambda: os.path.exists(os.path.join(data, AGGREGATES_FILE)), what="the first save")
                assert len(c.request(Kind.SNAPSHOT, {})["rows"]) == 2
                assert c.request(Kind.RESET) == {}
                assert {"event": "aggregates reset", "by_pid": os.getpid(), "level": "info"} in \
                    daemon_log_events(("event", "by_pid", "level"))
                assert c.request(Kind.SNAPSHOT, {})["rows"] == []
                shutil.copytree(data, crashed)
            finally:
                c.close()
        with InProcess(data_dir=crashed) as d:
            c = Client(d.socket)
            try:
                assert c.request(Kind.SNAPSHOT, {})["rows"] == []
            finally:
                c.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(crashed, ignore_errors=True)


def test_a_snapshot_too_large_for_its_frame_keeps_its_heaviest_rows_and_says_so(monkeypatch):
    """The reply budget made small (the real one is the frame's payload limit less 4 MiB):
    the rows are cut after the heaviest, the reply says how many were left out, and STATUS
    counts them under ``snapshot.rows``."""
    with InProcess() as d:
        a = agent(d.socket, names={1: "Heavy", 2: "Light", 3: "h", 4: "l"})
        try:
            a.send_batch(make_records(4, durations=[5000, 10] * 2))
            wait_for(lambda: status(d.socket)["records_total"] == 4)
        finally:
            a.close()
        c = Client(d.socket)
        try:
            full = c.request(Kind.SNAPSHOT, {})
            assert [r["op_type"] for r in full["rows"]] == ["Heavy", "Light"] and "truncated" not in full
            one_row = len(json.dumps([full["rows"][0]], separators=(",", ":")))
            monkeypatch.setattr(control, "REPLY_BUDGET", one_row + 5)
            cut = c.request(Kind.SNAPSHOT, {})
        finally:
            c.close()
        assert [r["op_type"] for r in cut["rows"]] == ["Heavy"]
        assert cut["truncated"] == {"rows": 1}
        assert status(d.socket)["replies_truncated"] == {"replies": 1, "items": {"snapshot.rows": 1}}


def test_a_snapshot_filtered_by_service_shows_that_services_shift_not_the_worst_one(tmp_path):
    """Two services on one op type, both judged against a pinned baseline: MatMul of "slow"
    at p99 x1.3, of "mild" at x1.1. The unfiltered SNAPSHOT shows the worst (1.3); filtered
    by a service it shows that service's own shift, and none for a service with no rows."""
    from aclprofd.baselines import BaselineStore
    from helpers.streams import bin_probabilities

    from aclprof.protocol import baselinefmt

    median, n = 100_000, 200_000
    base = np.floor(bin_probabilities(median, 0.3) * n)
    cells = [(svc, "1", "MatMul", "fc1") for svc in ("slow", "mild")]
    BaselineStore(str(tmp_path / "data")).save("good", baselinefmt.encode("good", cells, np.stack([base, base]), {}))
    rng = np.random.default_rng(7)
    with InProcess(data_dir=tmp_path / "data", detector_baseline="good", detector_window_s="2s",
                   detector_min_count="200") as d:
        slow, mild = agent(d.socket, service="slow"), agent(d.socket, service="mild")
        c = Client(d.socket)

        def shifts() -> dict | None:
            for a, factor, device in ((slow, 1.3, 0), (mild, 1.1, 1)):
                durations = rng.lognormal(math.log(median * factor), 0.3, 400).astype(np.int64)
                a.send_batch(make_records(400, device=device, types=(2,), names=(4,), durations=durations))
            got = {svc: c.request(Kind.SNAPSHOT, {"window": "10s", "filter": {"service": svc} if svc else {}})
                   for svc in (None, "slow", "mild", "absent")}
            out = {svc: {r["key"]: r["shift_p99"] for r in reply["rows"]} for svc, reply in got.items()}
            judged = out["slow"].get("MatMul") and out["mild"].get("MatMul")
            # the four requests are four moments: a detector tick between them changes the shifts
            # (seen under load), so only a round where the unfiltered row and a service's agree is
            # read; a daemon that showed the milder shift unfiltered never gives one (times out)
            return out if judged and out[None].get("MatMul") in (out["slow"]["MatMul"], out["mild"]["MatMul"]) \
                else None

        try:
            got = wait_for(shifts, timeout=20, interval=0.1, what="both services' MatMul judged")
        finally:
            for x in (slow, mild, c):
                x.close()
    assert got["slow"] == {"MatMul": pytest.approx(1.3, abs=0.06)}
    assert got["mild"] == {"MatMul": pytest.approx(1.1, abs=0.06)}
    assert got[None] == {"MatMul": got["slow"]["MatMul"]}  # unfiltered: the worst of the op type's services
    assert got["absent"] == {}  # no rows of a service that sent nothing


def test_a_snapshot_filtered_by_service_counts_that_services_op_failures_only():
    """Two services' MatMul/fc1 ops, 2 op failures of fc1 in "fa" (one said dropped before
    it), 1 in "fb": each service's SNAPSHOT row carries its own count, the unfiltered one both."""
    with InProcess() as d:
        agents = {svc: agent(d.socket, service=svc) for svc in ("fa", "fb")}
        c = Client(d.socket)
        try:
            # one device each: this process's two connections are one source (host, pid)
            for device, a in enumerate(agents.values()):
                a.send_batch(make_records(3, device=device, types=(2,), names=(4,)))
            wait_for(lambda: status(d.socket)["records_total"] == 6)
            for device, (svc, dropped) in enumerate((("fa", 1), ("fb", 0))):
                agents[svc].send_json(Kind.OP_FAILURE, {"device": device, "stream": 1, "task": 1, "thread": 1,
                                                        "code": 507015, "op_name": "fc1", "dropped_before": dropped})
            wait_for(lambda: status(d.socket)["failures"].get("total") == 3, what="the failures")
            got = {svc: [(r["key"], r["failures"]) for r in
                         c.request(Kind.SNAPSHOT, {"filter": {"service": svc} if svc else {}})["rows"]]
                   for svc in ("fa", "fb", None)}
        finally:
            for x in (*agents.values(), c):
                x.close()
    assert got == {"fa": [("MatMul", 2)], "fb": [("MatMul", 1)], None: [("MatMul", 3)]}
