"""LIVE (daemon -> agent, PROTOCOL.md): while a STREAM client (``aclprof tail``) watches,
agents send every ~10 ms instead of ~50 ms, so tail shows records sooner; without one they
keep the larger interval (less of the service's CPU and GIL).

The daemon says LIVE true to every agent when the first STREAM client starts and to every
agent that connects meanwhile, LIVE false only LIVE_LINGER_S after the last one left, so a
client that comes and goes in a loop cannot flood agents with frames."""

from __future__ import annotations

import socket
import time

import pytest
from helpers.daemons import Client, InProcess, agent
from helpers.procs import wait_for

from aclprof.protocol.wire import Kind, decode_json


def _frames_within(c: Client, seconds: float) -> list[tuple[Kind, dict]]:
    """What the daemon sends ``c`` within ``seconds`` (an agent gets nothing unasked)."""
    c.sock.settimeout(seconds)
    out = []
    try:
        while True:
            k, payload = c.recv()
            out.append((k, decode_json(payload)))
    except TimeoutError:
        return out
    finally:
        c.sock.settimeout(10)


def _expect(c: Client, frames: list[tuple[Kind, dict]], quiet: float = 0.2) -> None:
    """``c`` gets exactly ``frames`` (each within 5 s), then nothing for ``quiet`` s."""
    c.sock.settimeout(5)
    try:
        got = [(k, decode_json(p)) for k, p in (c.recv() for _ in frames)]
    finally:
        c.sock.settimeout(10)
    assert got == frames
    assert _frames_within(c, quiet) == []


@pytest.fixture
def daemon(monkeypatch):
    import aclprofd.fanout

    monkeypatch.setattr(aclprofd.fanout, "LIVE_LINGER_S", 0.4)
    with InProcess() as d:
        yield d


def test_agents_hear_live_while_a_stream_client_watches(daemon):
    a = agent(daemon.socket)
    assert _frames_within(a, 0.3) == []  # nobody watches: nothing
    s1 = Client(daemon.socket)
    s1.send_json(Kind.STREAM, {"filter": {}})
    _expect(a, [(Kind.LIVE, {"live": True})])
    b = agent(daemon.socket)  # connects while someone watches: told at once (after WELCOME)
    _expect(b, [(Kind.LIVE, {"live": True})])
    s2 = Client(daemon.socket)
    s2.send_json(Kind.STREAM, {"filter": {"type": "Conv"}})
    wait_for(lambda: daemon.daemon.fanout.streaming == 2)
    s1.close()
    wait_for(lambda: daemon.daemon.fanout.streaming == 1)
    assert _frames_within(a, 0.6) == []  # one client still watches (0.6 s > the linger)
    s2.close()
    wait_for(lambda: daemon.daemon.fanout.streaming == 0)
    for c in (a, b):
        _expect(c, [(Kind.LIVE, {"live": False})])
    # records still flow and are counted after the LIVE frames
    import numpy as np

    from aclprof.protocol.wire import RECORD_DTYPE
    recs = np.zeros(10, RECORD_DTYPE)
    recs["op_name"], recs["op_type"], recs["end"] = 3, 1, 1
    a.send_batch(recs)
    wait_for(lambda: daemon.daemon.counters.records_total == 10)


def test_a_stream_client_that_comes_and_goes_does_not_flood_agents(daemon, monkeypatch):
    import aclprofd.fanout

    monkeypatch.setattr(aclprofd.fanout, "LIVE_LINGER_S", 1.5)  # > one cycle on a loaded machine
    a = agent(daemon.socket)
    for _ in range(50):
        s = Client(daemon.socket)
        s.send_json(Kind.STREAM, {"filter": {}})
        wait_for(lambda: daemon.daemon.fanout.streaming == 1)
        s.close()
        wait_for(lambda: daemon.daemon.fanout.streaming == 0)
    # 50 connect/leave cycles within the linger time: one LIVE true, then one false
    _expect(a, [(Kind.LIVE, {"live": True}), (Kind.LIVE, {"live": False})], quiet=0.5)


def test_the_agents_sender_sends_more_often_while_live(daemon, monkeypatch, tmp_path):
    """The real agent (mock model, realtime) against the real daemon: its sender sleeps
    _COALESCE_S between sends while records flow, _LIVE_COALESCE_S once a STREAM client
    watches, and _COALESCE_S again after the daemon says LIVE false."""
    import threading
    import time

    from aclprof import agent as agent_mod
    from aclprof import mock
    from aclprof.agent import sender
    from aclprof.agent.connection import Connection

    sleeps: list[float] = []  # the coalescing window of each wait for records, however it waits
    orig = sender.Sender._sleep
    orig_pump = Connection.pump

    def record(self, timeout):
        sleeps.append(timeout)
        orig(self, timeout)

    def record_pump(self, pump, **kw):
        if pump.busy:  # records flow: the C loop waits coalesce_s between frames
            sleeps.append(kw["coalesce_s"])
        return orig_pump(self, pump, **kw)

    monkeypatch.setattr(sender.Sender, "_sleep", record)
    monkeypatch.setattr(Connection, "pump", record_pump)
    a = agent_mod.start(daemon.socket, service="live")
    stop = threading.Event()
    try:
        model = mock.load_model([{"name": f"op{i}", "type": "Add", "duration_ns": 20_000} for i in range(50)])
        agent_mod.watch(model)

        def run():
            while not stop.is_set():
                mock.execute(model, 1)
                time.sleep(0.002)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        wait_for(lambda: sender._COALESCE_S in sleeps, what="a coalescing sleep while records flow")
        assert sender._LIVE_COALESCE_S not in sleeps
        s = Client(daemon.socket)
        s.send_json(Kind.STREAM, {"filter": {}})
        wait_for(lambda: a._conn.live, what="LIVE reached the agent")
        n = len(sleeps)
        wait_for(lambda: sender._LIVE_COALESCE_S in sleeps[n:], what="a live sleep")
        recs, _, kind = s.stream_frames()  # the stream carries the agent's records
        assert kind == Kind.STREAM_RECORDS and recs and recs[0]["service"] == "live"
        s.close()
        wait_for(lambda: not a._conn.live, timeout=10, what="LIVE false reached the agent")
        n = len(sleeps)
        wait_for(lambda: sender._COALESCE_S in sleeps[n:], what="back to the larger interval")
    finally:
        stop.set()
        final = agent_mod.stop(timeout=5.0)
    assert final is not None and final.records_sent + final.dropped_buffer == final.records_in


def test_clients_with_the_same_selection_share_one_encoding(daemon, monkeypatch):
    """Two tail clients without a filter and one with a filter that selects the same
    records get the batch encoded once; a client with another selection gets its own. All
    receive exactly their records."""
    import aclprofd.fanout
    import numpy as np

    from aclprof.protocol.wire import RECORD_DTYPE

    calls = []
    real = aclprofd.fanout.encode_frames

    def counting(records, *a, **kw):
        calls.append(len(records))
        return real(records, *a, **kw)

    monkeypatch.setattr(aclprofd.fanout, "encode_frames", counting)
    a = agent(daemon.socket)  # names: 1 Conv2D, 2 MatMul, 3 conv1, 4 fc1
    clients = [Client(daemon.socket) for _ in range(4)]
    for c, flt in zip(clients, ({}, {}, {"type": "Conv|MatMul"}, {"type": "MatMul"})):
        c.send_json(Kind.STREAM, {"filter": flt})
    wait_for(lambda: daemon.daemon.fanout.streaming == 4)
    _expect(a, [(Kind.LIVE, {"live": True})])
    recs = np.zeros(3000, RECORD_DTYPE)
    recs["op_type"] = np.where(np.arange(3000) % 3 == 0, 2, 1)  # 1000 MatMul, 2000 Conv2D
    recs["op_name"], recs["end"] = 3, 1
    a.send_batch(recs)
    got = []
    for c in clients:
        lines: list = []
        while len(lines) < (1000 if c is clients[3] else 3000):
            more, skipped, kind = c.stream_frames()
            assert kind == Kind.STREAM_RECORDS and not skipped
            lines += more
        got.append(lines)
    assert got[0] == got[1] == got[2] and len(got[0]) == 3000
    assert [r["op_type"] for r in got[3]] == ["MatMul"] * 1000
    # 3000 records in 2048-record chunks: 2 calls for the three alike, 1 for the MatMul client
    assert sorted(calls) == [952, 1000, 2048]


def test_the_agent_survives_malformed_and_flooded_live_frames(tmp_path):
    """A daemon's LIVE frames are a hint: malformed ones (not JSON, not an object, a
    non-bool value) leave the agent connected and not live; a flood of them is read without
    the agent losing its connection or records; only {"live": true} makes it live."""
    from aclprof import agent as agent_mod
    from aclprof.protocol import wire

    path = str(tmp_path / "fake.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(10)
    a = agent_mod.start(path)
    try:
        conn, _ = srv.accept()
        conn.settimeout(10)
        reader, pending = wire.FrameReader(), []
        kind, _ = wire.recv_frame(conn, reader, pending)
        assert kind == wire.Kind.HELLO
        bad = [wire.encode(wire.Kind.LIVE, b"not json"), wire.encode(wire.Kind.LIVE, b"[true]"),
               wire.encode_json(wire.Kind.LIVE, {"live": "yes"}), wire.encode_json(wire.Kind.LIVE, {"live": 1}),
               wire.encode_json(wire.Kind.LIVE, {})]
        # WELCOME, then the malformed ones in the same write (read with the handshake)
        conn.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 1, "pid": 1,
                                                           "started_ts": 0.0}) + b"".join(bad))
        wait_for(lambda: a.stats().connected, what="connection")
        conn.sendall(b"".join(bad) * 2000)  # a flood: 10,000 frames
        time.sleep(0.5)
        assert a.stats().connected and not a._conn.live
        conn.sendall(wire.encode_json(wire.Kind.LIVE, {"live": True}))
        wait_for(lambda: a._conn.live, what="a well-formed LIVE")
        assert a.stats().connected and a.stats().connections == 1
        conn.close()
    finally:
        agent_mod.stop(timeout=1.0)
        srv.close()


def test_live_goes_only_to_agents_a_stream_filter_admits(daemon):
    """`aclprof tail --pid P` (or --service, --host) makes only the matching agents send
    more often; the others keep their larger interval."""
    # (the daemon takes each agent's pid from the socket: all are this process here)
    a = agent(daemon.socket, host="alpha-host", service="alpha")
    b = agent(daemon.socket, service="beta")
    s = Client(daemon.socket)
    s.send_json(Kind.STREAM, {"filter": {"service": "beta"}})
    _expect(b, [(Kind.LIVE, {"live": True})])
    assert _frames_within(a, 0.3) == []
    c = agent(daemon.socket, service="beta")  # a new matching agent: told at once
    _expect(c, [(Kind.LIVE, {"live": True})])
    s2 = Client(daemon.socket)
    s2.send_json(Kind.STREAM, {"filter": {"host": "alpha-host"}})
    _expect(a, [(Kind.LIVE, {"live": True})])
    s.close()  # beta is no longer watched; alpha still is
    _expect(b, [(Kind.LIVE, {"live": False})])
    _expect(c, [(Kind.LIVE, {"live": False})])
    assert _frames_within(a, 0.2) == []
    s2.close()
    _expect(a, [(Kind.LIVE, {"live": False})])
