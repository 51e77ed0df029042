"""aclprof.agent end to end: agent processes on the mock, against a fake daemon (protocol
checks, exact name mapping) and the real one (accounting, restart).

Accounting everywhere: records the mock emitted for the watched model == records the
daemon received + the sum of the agent's LOSS frames.
"""

from __future__ import annotations

import os
import signal
import tempfile

import pytest
from helpers.agent_worker import FIXED_OPS
from helpers.daemons import Daemon
from helpers.procs import Worker, wait_for
from helpers.wiredaemon import FakeDaemon

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def sock_dir():
    d = tempfile.mkdtemp(prefix="aclp-")
    yield d
    import shutil

    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def workers():
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()


def _names_cycle(start: int, n: int) -> list[str]:
    return [FIXED_OPS[(start + i) % len(FIXED_OPS)]["name"] for i in range(n)]


def test_agent_streams_batches_names_and_watch_to_a_fake_daemon(sock_dir, workers):
    path = os.path.join(sock_dir, "fake.sock")
    fake = FakeDaemon(path)
    try:
        w = Worker(path)
        workers.append(w)
        emitted = w.run(300)
        final = w.stop()
        wait_for(lambda: all(c.closed for c in fake.conns), what="the agent to disconnect")
        assert fake.errors() == []
        (conn,) = fake.conns
        assert conn.hello["role"] == "agent" and conn.hello["pid"] == w.pid
        assert conn.hello["service"] == "worker" and conn.hello["labels"] == {"test": "1"}
        assert conn.watches == [{"model_id": w.model, "device": 0, "labels": {"model": "fixed"}}]
        assert conn.unwatches == [{"model_id": w.model}]
        assert conn.kinds[0].name == "HELLO" and conn.kinds[1].name == "WATCH"
        # Every name once, before its first use (the fake daemon rejects anything else).
        assert sorted(set(conn.names.values()) - {"?"}) == sorted(
            {op["name"] for op in FIXED_OPS} | {op["type"] for op in FIXED_OPS})
        assert len(set(conn.names.values())) == len(conn.names)
        assert emitted == 1500 == conn.count == final["agent"]["records_sent"]
        assert [r[3] for r in conn.records] == _names_cycle(0, 1500)
        by_name = {op["name"]: (op["type"], op["duration_ns"]) for op in FIXED_OPS}
        assert all((r[2], r[4]) == by_name[r[3]] for r in conn.records)
        assert final["agent"]["dropped_buffer"] == final["agent"]["dropped_subscription"] == 0
        assert conn.loss == 0
    finally:
        fake.close()


def test_agent_without_a_daemon_is_not_an_error_and_counts_drops(sock_dir, workers):
    w = Worker(os.path.join(sock_dir, "nobody.sock"), "--buffer", "2000")
    workers.append(w)
    assert w.run(1000) == 5000
    st = wait_for(lambda: (s := w.stats()["agent"])["records_in"] == 5000 and s, what="delivery")
    assert not st["connected"] and st["connect_failures"] >= 1
    assert st["buffered"] == 2000 and st["dropped_buffer"] == 3000
    assert st["loss_pending"] == 3000 and st["loss_reported"] == 0
    final = w.stop(timeout=0.5)["agent"]
    assert final["records_in"] == 5000 and final["records_sent"] == 0
    assert final["dropped_buffer"] == 5000 and final["buffered"] == 0


def test_agent_keeps_the_newest_records_and_reports_loss_on_reconnect(sock_dir, workers):
    path = os.path.join(sock_dir, "late.sock")
    w = Worker(path, "--buffer", "2000")
    workers.append(w)
    w.run(1000)  # 5000 records, no daemon: the newest 2000 are kept
    wait_for(lambda: w.stats()["agent"]["buffered"] == 2000, what="buffering")
    fake = FakeDaemon(path)
    try:
        wait_for(lambda: fake.received == 2000 and fake.loss == 3000, what="reconnect + LOSS")
        conn = fake.conns[0]
        assert [r[3] for r in conn.records] == _names_cycle(3000, 2000)  # the newest ones
        kinds = [k.name for k in conn.kinds]
        # HELLO, WATCH, then the LOSS report before (or with) the first records
        assert kinds[:2] == ["HELLO", "WATCH"]
        assert "LOSS" in kinds[2:4] and kinds.index("LOSS") < kinds.index("BATCH")
        # The daemon goes away mid-run, then comes back: the agent reconnects on its own.
        emitted = w.run(200)
        wait_for(lambda: fake.received == 3000, what="delivery")
        fake.close()
        emitted = w.run(200)  # lost or buffered while nobody listens
        fake = FakeDaemon(path)
        emitted = w.run(200)
        final = w.stop()["agent"]
        wait_for(lambda: fake.conns and all(c.closed for c in fake.conns), what="disconnect")
        assert fake.errors() == []
        assert emitted == 8000
        assert final["loss_pending"] == 0
        assert final["records_sent"] + final["loss_reported"] == emitted
        assert final["connections"] == 2
        received_first = 3000
        assert received_first + fake.received + 3000 + fake.loss == emitted
    finally:
        fake.close()


def test_goodbye_counts_what_the_daemon_did_not_read(sock_dir, workers):
    """A GOODBYE saying the daemon read fewer records (and LOSS drops) than the agent wrote:
    the agent counts the difference as lost, ignores a frame kind it does not know,
    reconnects and reports the loss (and the unread LOSS again) on the next connection."""
    path = os.path.join(sock_dir, "bye.sock")
    fake = FakeDaemon(path)
    try:
        w = Worker(path)
        workers.append(w)
        w.run(300)
        wait_for(lambda: fake.received == 1500, what="delivery")
        fake.goodbye(shortfall=100, unknown_kind=99)
        wait_for(lambda: len(fake.conns) == 2 and fake.conns[1].loss == 100, what="reconnect + LOSS")
        st = w.stats()["agent"]
        assert st["goodbyes"] == 1 and st["dropped_unread"] == 100 and st["records_sent"] == 1400
        assert st["loss_reported"] == 100 and st["loss_pending"] == 0
        # Now the daemon says it did not read a LOSS frame: it is reported again.
        fake.goodbye(loss_shortfall=100)
        wait_for(lambda: len(fake.conns) == 3 and fake.conns[2].loss == 100, what="LOSS again")
        emitted = w.run(100)
        final = w.stop()["agent"]
        wait_for(lambda: all(c.closed for c in fake.conns), what="disconnect")
        assert fake.errors() == []
        assert final["goodbyes"] == 2 and final["connections"] == 3
        assert final["loss_reported"] == 100 and final["dropped_unread"] == 100
        assert emitted == 2000 == fake.received - 100 + final["loss_reported"]
        assert final["records_sent"] + final["dropped_unread"] == final["records_in"] == emitted
    finally:
        fake.close()



def _handshake(sock) -> None:
    from aclprof.protocol import wire

    reader, pending = wire.FrameReader(), []
    kind, _ = wire.recv_frame(sock, reader, pending)
    assert kind == wire.Kind.HELLO
    sock.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0.1.0", "protocol": 1,
                                                       "pid": os.getpid(), "started_ts": 0.0}))


def test_goodbye_counts_the_frame_in_flight(sock_dir, workers):
    """Issue 13: the daemon stops while the agent is half-way through writing a frame.

    A raw daemon completes the handshake, then reads only the start of a large backlog (the
    agent's socket fills; a frame is partly written), counts the records of the whole
    BATCH frames it read and says GOODBYE with that count. Everything else the agent took
    from its buffer for that connection, the frame in flight included, is unread: it must
    be counted as lost and reported in the LOSS frame of the next connection, so that
    read on the first connection + received on the second + LOSS == emitted, exactly."""
    import socket

    from aclprof.protocol import wire

    path = os.path.join(sock_dir, "inflight.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(15)
    w = Worker(path)
    workers.append(w)
    conn, _ = srv.accept()
    srv.close()
    os.unlink(path)
    fake = None
    try:
        conn.settimeout(15)
        _handshake(conn)
        emitted = w.run(20_000)  # 100 000 records, far more than the socket holds
        st = wait_for(lambda: (s := w.stats()["agent"])["records_in"] == emitted and s,
                      what="the records to reach the agent")
        # the agent's socket (its send buffer: at most 2 MiB, aclprof.agent.connection
        # SEND_BUFFER doubled by the kernel, ~37,000 records) holds well under the backlog
        assert st["connected"] and st["records_sent"] < emitted // 2 and st["goodbyes"] == 0, st
        reader = wire.FrameReader()
        got, read = 0, 0
        kinds = []
        # At least 300 kB and one whole BATCH frame (frames carry up to 32 k records, 1.8 MiB):
        # the rest of the backlog, a frame cut in the middle included, stays unread.
        while got < 300_000 or read == 0:
            data = conn.recv(65536)
            assert data
            got += len(data)
            for kind, payload in reader.feed(data):
                kinds.append(kind)
                if kind == wire.Kind.BATCH:
                    read += len(payload) // wire.RECORD_DTYPE.itemsize
        assert kinds[0] == wire.Kind.WATCH and read > 0
        conn.sendall(wire.encode_json(wire.Kind.GOODBYE, {"records": read, "dropped": 0}))
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()
        fake = FakeDaemon(path)
        wait_for(lambda: len(fake.conns) == 1 and read + fake.received + fake.loss == emitted,
                 what="the rest, and the LOSS of what the first daemon did not read")
        final = w.stop()["agent"]
        wait_for(lambda: all(c.closed for c in fake.conns), what="disconnect")
        assert fake.errors() == []
        assert final["goodbyes"] == 1 and final["connections"] == 2
        assert final["dropped_buffer"] == final["dropped_subscription"] == 0
        # the unread records: all the first connection carried beyond `read`, in flight too
        assert fake.loss == final["dropped_unread"] == final["loss_reported"] > 0
        assert final["records_sent"] == read + fake.received
        assert read + fake.received + fake.loss == emitted == final["records_in"]
    finally:
        conn.close()
        if fake is not None:
            fake.close()


@pytest.fixture
def daemon():
    d = Daemon()
    d.start()
    yield d
    d.cleanup()


def _agent_rows(status: dict) -> dict[int, dict]:
    return {a["pid"]: a for a in status["agents"]}


def test_accounting_with_several_agents_and_the_real_daemon(daemon, workers):
    for i in range(3):
        workers.append(Worker(daemon.socket, "--service", f"svc{i}", "--device", str(i)))
    st = wait_for(lambda: len((s := daemon.status())["agents"]) == 3
                  and all(a["models"] for a in s["agents"]) and s, what="3 agents and their models")
    rows = _agent_rows(st)
    for i, w in enumerate(workers):
        assert rows[w.pid]["service"] == f"svc{i}"
        assert [(m["model_id"], m["device"]) for m in rows[w.pid]["models"]] == [(w.model, i)]
    emitted = {w.pid: w.run(400 * (i + 1)) for i, w in enumerate(workers)}
    finals = {w.pid: w.stop()["agent"] for w in workers}
    total = sum(emitted.values())
    assert total == 5 * 400 * 6
    st = wait_for(lambda: (s := daemon.status())["records_total"] == total and s, what="all records")
    assert st["dropped_by_agents"] == 0
    for pid, f in finals.items():
        assert f["records_sent"] == emitted[pid] and f["dropped_buffer"] == 0


def test_accounting_across_a_daemon_restart(daemon, workers):
    for i in range(2):
        workers.append(Worker(daemon.socket, "--buffer", "3000", "--service", f"r{i}"))
    phase1 = sum(w.run(500) for w in workers)
    run1 = wait_for(lambda: (s := daemon.status())["records_total"] == phase1 and s, what="phase 1")
    assert daemon.stop(signal.SIGTERM) == 0
    # Daemon down: each agent keeps its newest 3000 records and counts the rest.
    emitted = {w.pid: w.run(1000) for w in workers}  # 5000 more each
    for w in workers:
        wait_for(lambda w=w: (s := w.stats()["agent"])["buffered"] == 3000 and not s["connected"],
                 what="buffering while the daemon is down")
    daemon.start()
    # The agents reconnect by themselves (backoff capped at 0.3 s in the worker) and send
    # what they kept, after a LOSS frame for the rest.
    wait_for(lambda: daemon.status()["records_total"] == 2 * 3000, what="the agents to reconnect")
    emitted = {w.pid: w.run(100) for w in workers}  # cumulative per process
    finals = {w.pid: w.stop()["agent"] for w in workers}
    total = sum(emitted.values())
    assert total == 2 * 5 * 1600
    lost = sum(f["loss_reported"] for f in finals.values())
    assert lost == 2 * 2000
    assert all(f["loss_pending"] == 0 and f["connections"] == 2 for f in finals.values())
    # idle agents read the stopping daemon's GOODBYE: it had read everything they wrote
    assert all(f["goodbyes"] == 1 and f["dropped_unread"] == 0 for f in finals.values()), finals
    run2 = wait_for(lambda: (s := daemon.status())["records_total"] == total - phase1 - lost and s,
                    what="phase 2 records")
    assert run1["records_total"] + run2["records_total"] + run2["dropped_by_agents"] == total
    assert run2["dropped_by_agents"] == lost
    # the since-start aggregates continued across the restart
    assert sum(_snapshot_count(daemon, w.pid) for w in workers) == total - lost


# -- the API, in process -----------------------------------------------------------------------

@pytest.fixture
def stopped_agent():
    from aclprof import agent

    yield agent
    agent.stop(timeout=1.0)


def test_agent_api_errors_and_idempotence(sock_dir, stopped_agent):
    import aclprof
    from aclprof import mock

    agent = stopped_agent
    assert agent.stop() is None and not agent.running()
    with pytest.raises(RuntimeError, match="not started"):
        agent.watch(1)
    path = os.path.join(sock_dir, "none.sock")
    a = agent.start(path, service="s")
    assert agent.start(path) is a and agent.running()
    model = mock.load_model(FIXED_OPS)
    agent.watch(model)
    with pytest.raises(ValueError, match="already watched"):
        agent.watch(model)
    with pytest.raises(aclprof.InvalidModelIdError):
        agent.watch(model + 100)
    assert agent.stats().models == (model,)
    mock.execute(model, 10)
    mock.wait_writer_idle()
    agent.unwatch(model)
    with pytest.raises(ValueError, match="not watched"):
        agent.unwatch(model)
    final = agent.stop(timeout=0.2)
    assert final.records_in == 50 and final.dropped_buffer == 50 and final.records_sent == 0
    assert agent.stats() == final and not agent.running()


def test_agent_default_socket_path(monkeypatch):
    from aclprof.protocol.paths import default_socket_path, resolve_socket_path

    monkeypatch.delenv("ACLPROF_SOCKET", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert default_socket_path() == "/run/user/1000/aclprof/aclprofd.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_socket_path() == "/run/aclprof/aclprofd.sock"
    monkeypatch.setenv("ACLPROF_SOCKET", "/tmp/x.sock")
    assert resolve_socket_path() == "/tmp/x.sock"
    assert resolve_socket_path("/tmp/y.sock") == "/tmp/y.sock"


def _exported(daemon: Daemon, pid: int) -> int:
    from aclprof.cli.client import Client

    with Client(daemon.socket, timeout=10) as c:
        return sum(len(b) for b in c.export(None, None, {"pid": pid}))


def _snapshot_count(daemon: Daemon, pid: int) -> int:
    from aclprof.cli.client import Client

    with Client(daemon.socket, timeout=10) as c:
        snap = c.snapshot("all", "type", {"pid": pid})
    return sum(r["count"] for r in snap["rows"])


def test_daemon_restart_while_agents_stream(daemon, workers):
    """SIGTERM + restart while two realtime agents stream: the stopping daemon reads what
    they wrote, stores it and says GOODBYE with its count; the agents count the rest as
    lost, reconnect and report it. Accounting is EXACT: every record is on disk (and in
    the since-start aggregates, which survive the restart) or in a LOSS frame."""
    for i in range(2):
        workers.append(Worker(daemon.socket, "--realtime", "--buffer", "2000", "--service", f"m{i}"))
    for w in workers:  # asynchronously: ~0.6 s of realtime inference each
        w.proc.stdin.write("run 8000\n")
        w.proc.stdin.flush()
    wait_for(lambda: daemon.status()["records_total"] >= 10_000, what="streaming")
    assert daemon.stop(signal.SIGTERM) == 0
    daemon.start()
    emitted = {w.pid: w._read()["emitted"] for w in workers}
    finals = {w.pid: w.stop()["agent"] for w in workers}
    st = daemon.status()
    assert st["dropped_by_agents"] <= sum(f["loss_reported"] for f in finals.values())
    for w in workers:
        f = finals[w.pid]
        assert emitted[w.pid] == 40_000 and f["records_in"] == 40_000
        assert f["connections"] == 2 and f["loss_pending"] == 0 and f["goodbyes"] == 1, f
        dropped = f["dropped_buffer"] + f["dropped_subscription"] + f["dropped_unread"]
        assert f["records_sent"] + dropped == f["records_in"], f
        assert f["loss_reported"] == dropped, f
        # the second daemon stores the agent's last records at its flush tick (0.1 s)
        wait_for(lambda w=w, f=f: _exported(daemon, w.pid) == f["records_sent"], what="the records on disk")
        received = _exported(daemon, w.pid)
        assert received + f["loss_reported"] == emitted[w.pid], (received, f)
        assert _snapshot_count(daemon, w.pid) == received


# -- the parts, in process ---------------------------------------------------------------------

def _op_records(n: int, keypoint_every: int = 0):
    import numpy as np

    from aclprof.api.records import OP_DTYPE

    data = np.zeros(n + 1, OP_DTYPE)[1:]  # a slice: not at the start of its buffer
    data["model_id"] = 7
    data["op_name"] = np.arange(n) % 5
    data["op_type"] = np.arange(n) % 3
    data["flag"] = 2
    data["start"] = np.arange(n) * 10
    data["end"] = data["start"] + 4
    data["duration"] = 4
    if keypoint_every:
        data["keypoint"][::keypoint_every] = True
    return data


def test_convert_writes_wire_records_in_place():
    """The compiled conversion gives the wire record: every field, name ids mapped, the
    keypoint mark in ``flag``, at the offset asked, nothing written around it."""
    import numpy as np

    from aclprof.binding.agentpath import convert
    from aclprof.protocol import wire

    data = _op_records(50, keypoint_every=7)
    data["start"] += 1 << 40  # the u64 fields keep their high bytes
    mapping = np.array([10, 11, 12, 13, 14], np.uint32)
    buf = np.full(12 + 50 * 56 + 8, 0xAB, np.uint8)
    assert convert(buf, 12, data, mapping) == -1
    assert (buf[:12] == 0xAB).all() and (buf[-8:] == 0xAB).all()
    out = wire.decode_batch(bytes(buf[12:12 + 50 * 56]))
    for field in ("model_id", "thread_id", "device_id", "start", "end", "duration", "execution_time"):
        assert (out[field] == data[field]).all(), field
    assert (out["op_name"] == mapping[data["op_name"]]).all()
    assert (out["op_type"] == mapping[data["op_type"]]).all()
    assert (out["flag"] == np.where(data["keypoint"], 2 | wire.FLAG_KEYPOINT, 2)).all()


def test_convert_reports_the_largest_unmapped_name_id():
    """A batch using ids the map does not cover yet: the largest id of the whole batch is
    returned (the caller maps up to it), also when a smaller unmapped id comes first."""
    import numpy as np

    from aclprof.binding.agentpath import convert

    data = _op_records(6)
    data["op_name"] = [0, 3, 1, 9, 2, 1]
    data["op_type"] = [0, 1, 1, 1, 7, 1]
    buf = np.zeros(6 * 56, np.uint8)
    assert convert(buf, 0, data, None) == 9
    assert convert(buf, 0, data, np.arange(4, dtype=np.uint32)) == 9
    assert convert(buf, 0, data, np.arange(10, dtype=np.uint32)) == -1
    with pytest.raises(ValueError, match="no room"):
        convert(buf, 8, data, np.arange(10, dtype=np.uint32))
    with pytest.raises(TypeError, match="layout"):
        convert(buf, 0, data[["op_name", "op_type"]], np.arange(10, dtype=np.uint32))


def test_name_map_sends_each_name_once_per_connection():
    from aclprof.agent.names import NameMap
    from aclprof.agent.watched import Watched

    table = ["conv", "Conv2D", "relu", "Relu", "fc"]
    a, b = Watched(1, 0, {}), Watched(2, 0, {})
    m = NameMap()
    m.reset(1)
    assert m.extend(a, 2, table) == {"0": "conv", "1": "Conv2D", "2": "relu"}  # ids 0..2
    assert m.extend(a, 2, table) == {}
    # another subscription's table: the same text gets the same connection id
    assert m.extend(b, 1, ["relu", "fc"]) == {"3": "fc"}
    assert b.name_map.tolist() == [2, 3]
    m.reset(2)  # a new connection: everything again
    assert m.mapping(a) is None
    assert m.extend(a, 2, table) == {"0": "conv", "1": "Conv2D", "2": "relu"}


def test_frame_buffer_grows_with_a_batch_open():
    """Frames written in place decode as written, also when the buffer must grow in the
    middle of a BATCH frame and part of it was already sent."""
    import numpy as np

    from aclprof.agent.frames import FrameBuffer
    from aclprof.protocol import wire

    def records(n: int) -> np.ndarray:  # the sender's way: reserve, write in place, commit
        at = out.reserve_records(n)
        view = out.buf[at:at + n * wire.RECORD_DTYPE.itemsize].view(wire.RECORD_DTYPE)
        out.commit_records(n)
        return view

    out = FrameBuffer(capacity=64)
    out.append(wire.encode_json(wire.Kind.WATCH, {"model_id": 1}))
    first = records(3)
    first[:] = np.arange(3).astype(wire.RECORD_DTYPE)
    out.consume(5)  # five bytes were written
    sent = b"" + wire.encode_json(wire.Kind.WATCH, {"model_id": 1})[:5]
    more = records(40)  # grows: the open frame moves
    more["start"] = np.arange(40) + 100
    out.append(wire.encode_json(wire.Kind.LOSS, {"dropped": 3}), loss=3)
    assert out.records == 43 and out.loss == 3 and out.frames == 3
    stream = sent + bytes(out.pending())
    frames = list(wire.FrameReader().feed(stream))
    assert [k for k, _ in frames] == [wire.Kind.WATCH, wire.Kind.BATCH, wire.Kind.LOSS]
    recs = wire.decode_batch(frames[1][1])
    assert len(recs) == 43 and recs["start"].tolist()[3:] == list(range(100, 140))
    out.consume(len(out))
    assert not out
    out.clear()
    assert len(out) == 0 and out.records == out.loss == out.frames == 0


def test_buffer_keeps_the_newest_and_its_control_items():
    from aclprof.agent.buffer import RecordBuffer
    from aclprof.agent.items import Batch, Unwatch, Watch
    from aclprof.agent.watched import Watched

    buf = RecordBuffer(10)
    try:
        w = Watched(1, 0, {})
        buf.items.append(Watch(w))
        for _ in range(3):
            buf.add_batch(w, _op_records(4), [])
        buf.items.append(Unwatch(w))
        buf.add_batch(w, _op_records(4), [])
        assert buf.records_in == 16 and buf.buffered == 10 and buf.dropped == 6
        items, records = buf.take(6)
        assert records == 6 and [type(i) for i in items] == [Watch, Batch, Batch, Batch]
        # the oldest records went first: all of the first batch (its item stays behind the
        # WATCH, empty), half of the second
        assert [len(i.data) for i in items[1:]] == [0, 2, 4]
        items, records = buf.take(100)
        assert records == 4 and [type(i) for i in items] == [Unwatch, Batch]
        buf.add_batch(w, _op_records(3), [])
        assert buf.discard_all() == 3 and buf.dropped == 9 and buf.lost_total() == 9
    finally:
        buf.close()


def test_stop_does_not_hang_on_a_daemon_that_never_reads(sock_dir, stopped_agent):
    """A daemon that completes the handshake and then reads nothing: the agent's socket
    fills, a frame stays half written; stop() returns within its timeout and counts every
    record it could not deliver as dropped."""
    import socket
    import threading
    import time

    from aclprof import mock

    agent = stopped_agent
    path = os.path.join(sock_dir, "deaf.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(10)
    try:
        a = agent.start(path)
        conn, _ = srv.accept()
        _handshake(conn)
        wait_for(lambda: a.stats().connected, what="connection")
        model = mock.load_model(FIXED_OPS)
        agent.watch(model)
        mock.execute(model, 20_000)  # 100 000 records, 5.6 MB: far beyond the socket
        mock.wait_writer_idle()
        # While it waits for room the sender sleeps, also after a wake-up (a watch() writes
        # the wake pipe): it must not spin on a pipe that stays readable.
        other = mock.load_model(FIXED_OPS)
        agent.watch(other)
        (sender,) = [t for t in threading.enumerate() if t.name == "aclprof-agent"]
        clock = time.pthread_getcpuclockid(sender.ident)
        cpu0 = time.clock_gettime(clock)
        time.sleep(0.5)
        assert time.clock_gettime(clock) - cpu0 < 0.1
        assert a.stats().connected
        t0 = time.monotonic()
        final = agent.stop(timeout=0.5)
        assert time.monotonic() - t0 < 2.0
        assert final.records_in == 100_000 and final.buffered == 0
        assert final.records_sent + final.dropped_buffer == final.records_in
        # the socket (at most 2 MiB, SEND_BUFFER doubled: ~37,000 records) took well under them
        assert final.records_sent < final.records_in // 2 and not final.connected
        conn.close()
    finally:
        srv.close()


def test_stop_does_not_hang_on_a_daemon_that_never_answers(sock_dir, stopped_agent):
    """A listener that never completes the handshake: each attempt times out
    (``connect_timeout``) and stop() still returns promptly, everything counted."""
    import socket
    import time

    from aclprof import mock

    agent = stopped_agent
    path = os.path.join(sock_dir, "mute.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    try:
        a = agent.start(path)
        wait_for(lambda: a.stats().connect_failures >= 1, what="a failed handshake")
        model = mock.load_model(FIXED_OPS)
        agent.watch(model)
        mock.execute(model, 10)
        mock.wait_writer_idle()
        t0 = time.monotonic()
        final = agent.stop(timeout=0.2)
        assert time.monotonic() - t0 < 0.2 + 1.0 + 1.0  # timeout + one handshake + slack
        assert final.records_in == 50 and final.dropped_buffer == 50 and final.records_sent == 0
    finally:
        srv.close()


def test_frame_buffer_reserve_commit_with_names_in_between():
    """The sender's order: records reserved, then (names missing) a NAMES frame appended
    and the records reserved again, then committed: the stream is BATCH, NAMES, BATCH with
    every record after the NAMES that its ids need, none duplicated or lost."""
    import numpy as np

    from aclprof.agent.frames import FrameBuffer
    from aclprof.binding.agentpath import convert
    from aclprof.protocol import wire

    out = FrameBuffer(capacity=32)  # grows on the way
    first = _op_records(4)
    at = out.reserve_records(4)
    assert convert(out.buf, at, first, np.arange(5, dtype=np.uint32)) == -1
    out.commit_records(4)
    second = _op_records(3)
    second["op_name"] = [5, 6, 5]
    at = out.reserve_records(3)
    assert convert(out.buf, at, second, np.arange(5, dtype=np.uint32)) == 6
    out.append(wire.encode_json(wire.Kind.NAMES, {"names": {"5": "a", "6": "b"}}))
    at = out.reserve_records(3)
    assert convert(out.buf, at, second, np.arange(7, dtype=np.uint32)) == -1
    out.commit_records(3)
    out.end_batch()
    assert out.records == 7 and out.frames == 3
    frames = list(wire.FrameReader().feed(bytes(out.pending())))
    assert [k for k, _ in frames] == [wire.Kind.BATCH, wire.Kind.NAMES, wire.Kind.BATCH]
    assert wire.decode_batch(frames[0][1])["op_name"].tolist() == first["op_name"].tolist()
    assert wire.decode_batch(frames[2][1])["op_name"].tolist() == [5, 6, 5]


def test_sender_joins_runs_of_small_batches_in_order():
    """Runs of consecutive batches of one model go out as one conversion: every record
    arrives once, in order, each name id resolving (through the NAMES frames sent before
    it) to its own text, also when a later batch of the run brought new names, and a
    WATCH of another model between two runs keeps its place."""
    import socket

    import numpy as np

    from aclprof.agent.buffer import RecordBuffer
    from aclprof.agent.connection import Connection
    from aclprof.agent.items import Watch
    from aclprof.agent.sender import Sender
    from aclprof.agent.watched import Watched
    from aclprof.protocol import wire

    buf = RecordBuffer(1 << 16)
    conn = Connection("/nonexistent", buf, service=None, labels={}, connect_timeout=0.1)
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        conn.sock, conn.gen = ours, 1
        conn.names.reset(1)
        a, b = Watched(1, 0, {}), Watched(2, 0, {})
        a.announced = 1
        sender = Sender(buf, conn, {1: a, 2: b}, backoff_max=1)
        table_a: list[str] = ["a0", "a1"]
        table_b = ["b0"]
        sent = []

        def batch(w, table, ids):
            d = _op_records(len(ids))
            d["model_id"] = w.model_id
            d["op_name"] = ids
            d["op_type"] = 0
            d["start"] = np.arange(len(ids)) + 1000 * len(sent)
            sent.append((w.model_id, [table[i] for i in ids], d["start"].tolist()))
            buf.add_batch(w, d, table)

        batch(a, table_a, [0, 1, 1])
        table_a += ["a2", "a3"]  # the subscription's table grows between two batches
        batch(a, table_a, [3, 2])
        batch(a, table_a, [0])
        buf.items.append(Watch(b))
        batch(b, table_b, [0, 0])
        batch(a, table_a, [2])
        assert sender._pump()
        assert not conn.out
        data = b""
        theirs.setblocking(False)
        try:
            while chunk := theirs.recv(1 << 16):
                data += chunk
        except BlockingIOError:
            pass
        names: dict[int, str] = {}
        got = []
        kinds = []
        for kind, payload in wire.FrameReader().feed(data):
            kinds.append(kind)
            if kind == wire.Kind.NAMES:
                names.update({int(k): v for k, v in wire.decode_json(payload)["names"].items()})
            elif kind == wire.Kind.BATCH:
                recs = wire.decode_batch(payload)
                got += [(int(r["model_id"]), names[int(r["op_name"])], int(r["start"])) for r in recs]
        want = [(m, n, s) for m, ns, ss in sent for n, s in zip(ns, ss)]
        assert got == want
        assert kinds.index(wire.Kind.WATCH) > kinds.index(wire.Kind.BATCH)  # b's WATCH after a's run
        assert conn.records_sent == len(want) and buf.buffered == 0
    finally:
        conn.sock = None
        ours.close()
        theirs.close()
        buf.close()
