"""Issue 19, the last goal: no one step of the daemon's loop runs long under the soak's
attacks (tests/bench/bench_daemon_soak.py measures the round trips; these tests check that
the work is cut into steps, with no timing: they count what a step does).

- An EXPORT whose filter leaves out every stored chunk reads one chunk per pump step (it
  read the whole store in one step before its first frame: 143 ms of the loop in the soak).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.daemons import Client, InProcess, agent, count_loop_turns, status, trace_done, traced_agents
from helpers.procs import wait_for
from helpers.records import make_records


def test_an_export_that_matches_nothing_reads_one_chunk_per_pump_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from aclprofd import fanout, ingest
    from aclprofd.storage import Chunk, Storage

    monkeypatch.setattr(ingest, "STORE_PENDING_MAX", 0)  # each batch its own chunk
    monkeypatch.setattr(fanout, "EXPORT_SLICE_S", 0.0)  # a pump call ends after its first step
    with InProcess() as d:
        a = agent(d.socket, names={1: "T", 2: "n", 3: "N", 4: "M"}, service="kept")
        for _ in range(12):
            a.send_batch(make_records(50))
        wait_for(lambda: sum(x["records"] for x in status(d.socket)["agents"]) == 600, what="the records read")
        a.close()
        pumps = [0]
        chunks_in: dict[int, int] = {}
        real_pump, real_read = fanout.Fanout.pump_exports, Storage.read

        def pump(self: Any) -> None:
            pumps[0] += 1
            real_pump(self)

        def read(self: Any, *args: Any, **kw: Any) -> Iterator[Chunk]:
            for chunk in real_read(self, *args, **kw):
                chunks_in[pumps[0]] = chunks_in.get(pumps[0], 0) + 1
                yield chunk

        monkeypatch.setattr(fanout.Fanout, "pump_exports", pump)
        monkeypatch.setattr(Storage, "read", read)
        c = Client(d.socket)
        assert c.export(filter={"service": "nobody"}) == []
        c.close()
    assert sum(chunks_in.values()) >= 12, chunks_in
    assert max(chunks_in.values()) == 1, chunks_in  # main: every chunk in one pump call


def _names_frame(first: int, n: int) -> bytes:
    """One NAMES frame of ``n`` short names from id ``first`` (~19 bytes each: 55,000 make
    the 1 MiB a frame may hold)."""
    from aclprof.protocol.wire import encode_names

    frames = encode_names({first + i: f"n{first + i:08d}" for i in range(n)})
    assert len(frames) == 1
    return frames[0]


def test_a_large_names_frame_is_defined_over_several_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NAMES frame of 50,000 names is defined NAMES_STEP (8192) names a step, the
    connection's slice of a loop turn ending between steps (main: the whole frame in one
    piece, 65-78 ms of the loop under load); the table ends whole: records using its first
    and its last names are aggregated under them."""
    from aclprofd import transport
    from aclprofd.ingest import Ingest

    from aclprof.protocol.wire import Kind

    monkeypatch.setattr(transport, "SLICE_S", 0.0)  # every step ends its slice: countable turns
    turn = [0]
    turns_defining: set[int] = set()  # the loop turns in which the frame's names were defined
    real_names = Ingest.names

    def names(self: Any, conn: Any, payload: memoryview) -> Iterator[None] | None:
        turns_defining.add(turn[0])
        work = real_names(self, conn, payload)
        if work is None:
            return None

        def steps() -> Iterator[None]:
            for _ in work:
                turns_defining.add(turn[0])
                yield
        return steps()

    monkeypatch.setattr(Ingest, "names", names)
    n = 50_000
    with InProcess() as d:
        count_loop_turns(monkeypatch, d, turn)
        a = Client(d.socket, "agent", service="tables")
        a.sock.sendall(_names_frame(1, n))
        a.send_batch(make_records(4, types=(1, n), names=(2, n - 1)))
        c = Client(d.socket)
        wait_for(lambda: c.request(Kind.STATUS)["records_total"] == 4, what="the records read")
        assert len(turns_defining) >= 6, turns_defining  # 50,000 / 8192 steps; main: 1
        rows = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "name"})["rows"]
        got = {r["op_name"]: r["count"] for r in rows}
        assert got == {"n00000002": 2, f"n{n - 1:08d}": 2}, got
        a.close()
        c.close()


def test_a_bad_id_late_in_a_large_names_frame_still_ends_the_connection() -> None:
    """The frame's last name has an id that is no integer: the connection ends with that
    error, as when the frame was defined in one piece, and the daemon serves the others."""
    from aclprof.protocol.wire import Kind, decode_json, encode

    n = 30_000
    body = _names_frame(1, n)[12:-2] + b',"x7":"bad"}}'  # the payload, its last name's id not an integer
    with InProcess() as d:
        a = Client(d.socket, "agent", service="bad-table")
        a.sock.sendall(encode(Kind.NAMES, body))
        kind, payload = a.recv()
        assert kind == Kind.ERROR and "name id 'x7' is not an integer" in decode_json(payload)["message"]
        assert status(d.socket)["protocol_errors"] == 1
        a.close()


def test_a_large_trace_reply_is_built_over_several_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TRACE_DONE that completes a trace of 20 processes with ~1.5 MB of JSON each: the
    reply is encoded a process a step, the steps spread over loop turns (main: ~12 MB of
    JSON in the one handling of that frame, 56-58 ms of the loop in the soak's trace_paths),
    and the reply is whole: every process listed or counted as cut."""
    import json

    from aclprofd import transport

    from aclprof.protocol.wire import Kind

    monkeypatch.setattr(transport, "SLICE_S", 0.0)  # every step ends its slice: countable turns
    turn = [0]
    turns_encoding: set[int] = set()  # loop turns in which a process's result was encoded
    real_dumps = json.dumps
    ctrl = "\x01\x02\x1b" * 1266
    with InProcess() as d:
        loop = d.thread

        def dumps(obj: Any, *a: Any, **k: Any) -> str:
            text = real_dumps(obj, *a, **k)
            if len(text) > 100_000 and threading.current_thread() is loop:
                turns_encoding.add(turn[0])
            return text

        count_loop_turns(monkeypatch, d, turn)
        agents, c, tids = traced_agents(d.socket, 20)
        monkeypatch.setattr(json, "dumps", dumps)
        for i, (a, tid) in enumerate(zip(agents, tids)):
            trace_done(a, tid, [f"/{i}/{j}/" + ctrl for j in range(64)])
        c.sock.settimeout(30)
        kind, payload = c.recv()
        monkeypatch.setattr(json, "dumps", real_dumps)
        assert kind == Kind.TRACE_REPLY, kind
        reply = json.loads(bytes(payload))
        listed = len(reply["processes"])
        assert listed >= 5 and listed + reply["truncated"]["processes"] == 20, (listed, reply["truncated"])
        assert len(turns_encoding) >= listed, (turns_encoding, listed)  # main: 1
        c.close()
        for a in agents:
            a.close()
