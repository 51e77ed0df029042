"""The daemon in-process (a thread runs the loop, real Unix sockets): handshake, every
control request, accounting with several agents, hostile clients, a slow STREAM client,
the disk cap. Process-level behaviour (signals, kill -9, sd_notify, Prometheus over HTTP)
is in test_daemon_process.py."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest
from helpers.daemons import Client, InProcess, agent, status
from helpers.procs import wait_for
from helpers.records import make_records

from aclprof.protocol.wire import HEADER, MAGIC, MAX_PAYLOAD, Kind, decode_json, encode, encode_json


@pytest.fixture
def daemon():
    with InProcess() as d:
        yield d


def test_handshake_welcome(daemon):
    c = Client(daemon.socket)
    # 2: JSON Lines records, END; 3: OP_FAILURE; 4: REQUEST_BILL; 5: binary STREAM (PROTOCOL.md)
    assert c.welcome["protocol"] == 5 and c.welcome["stream_formats"] == ["jsonl", "records-v1"]
    assert c.welcome["pid"] == os.getpid()
    assert isinstance(c.welcome["version"], str) and c.welcome["started_ts"] <= time.time()
    c.close()


@pytest.mark.parametrize("first", [
    encode_json(Kind.STATUS, {}),
    encode_json(Kind.HELLO, {"role": "admin", "pid": 1, "host": "h"}),
    encode_json(Kind.HELLO, {"role": "agent", "pid": "x", "host": "h"}),
    encode(Kind.HELLO, b"not json"),
    encode(Kind.HELLO, b"[1, 2]"),
])
def test_bad_handshake_gets_error_and_close(daemon, first):
    c = Client(daemon.socket, hello=False)
    c.sock.sendall(first)
    kind, payload = c.recv()
    assert kind == Kind.ERROR and decode_json(payload)["message"]
    assert c.closed_by_peer()


def test_control_requests(daemon):
    a = agent(daemon.socket, service="resnet", labels={"team": "vision"})
    a.send_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {"m": "resnet50"}})
    a.send_json(Kind.WATCH, {"model_id": 2, "device": 1, "labels": {}})
    a.send_json(Kind.UNWATCH, {"model_id": 2})
    durations = np.arange(1, 1001, dtype=np.uint64) * 1000  # 1..1000 us
    a.send_batch(make_records(1000, durations=durations))
    a.send_json(Kind.LOSS, {"dropped": 7, "reason": "buffer full"})
    c = Client(daemon.socket)
    st = wait_for(lambda: (s := c.request(Kind.STATUS))["records_total"] == 1000 and s["dropped_by_agents"] == 7 and s)
    assert st["healthy"] is False and any("dropped" in p for p in st["problems"])
    [ag] = st["agents"]
    assert ag["service"] == "resnet" and ag["labels"] == {"team": "vision"} and ag["records"] == 1000
    assert ag["models"] == [{"model_id": 1, "device": 0, "labels": {"m": "resnet50"}}]
    assert ag["dropped"] == 7 and ag["lag_ns"] is not None and ag["lag_ns"] >= 0
    assert st["aggregates"]["keys"] == 2 and st["aggregates"]["cap"] == 10000

    for window in ("10s", "1m", "all"):
        snap = c.request(Kind.SNAPSHOT, {"window": window, "group_by": "type", "filter": {}})
        assert snap["window"] == window
        rows = {r["key"]: r for r in snap["rows"]}
        assert set(rows) == {"Conv2D", "MatMul"}
        assert sum(r["count"] for r in rows.values()) == 1000
        assert snap["total_ns"] == int(durations.sum())
        conv = rows["Conv2D"]  # odd durations 1, 3, ..., 999 us
        assert conv["min_ns"] == 1000 and conv["max_ns"] == 999_000 and conv["count"] == 500
        assert abs(conv["p50_ns"] - 500_000) / 500_000 < 0.05
        assert abs(conv["p99_ns"] - 990_000) / 990_000 < 0.05
        assert [r["total_ns"] for r in snap["rows"]] == sorted((r["total_ns"] for r in snap["rows"]), reverse=True)
        assert abs(sum(r["pct_time"] for r in snap["rows"]) - 100) < 0.01
    by_name = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "name", "filter": {"type": "^Mat"}})
    assert [r["key"] for r in by_name["rows"]] == ["fc1"]
    none = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type", "filter": {"pid": 1}})
    assert none["rows"] == [] and none["total_ns"] == 0

    exported = c.export(filter={"name": "conv", "min_duration_ns": 500_000})
    assert len(exported) == 250 and {r["op_name"] for r in exported} == {"conv1"}
    r0 = exported[0]
    assert set(r0) == {"ts", "host", "pid", "service", "device", "model", "op_type", "op_name", "start", "end",
                       "duration_ns", "flag", "thread_id", "kind"}
    assert r0["service"] == "resnet" and r0["host"] == "testhost" and r0["end"] - r0["start"] == r0["duration_ns"]
    assert c.export(since_ts=time.time() + 60) == []
    assert len(c.export(until_ts=time.time() + 1)) == 1000

    assert c.request(Kind.RESET) == {}
    assert c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type"})["rows"] == []
    a.send_batch(make_records(10))
    wait_for(lambda: c.request(Kind.SNAPSHOT, {"window": "10s", "group_by": "type"})["rows"], what="new rows")


def test_stream_with_filters(daemon):
    a = agent(daemon.socket, service="svc")
    s = Client(daemon.socket)
    s.send_json(Kind.STREAM, {"filter": {"type": "Mat", "min_duration_ns": 2000}})
    wait_for(lambda: any(c.stream is not None for c in list(daemon.daemon.conns.values())))
    a.send_batch(make_records(100, durations=np.where(np.arange(100) % 4 < 2, 1000, 3000)))
    got: list[dict] = []
    while len(got) < 25:
        records, skipped, kind = s.stream_frames()
        assert kind == Kind.STREAM_RECORDS
        assert skipped == 0
        got += records
    assert len(got) == 25
    assert all(r["op_type"] == "MatMul" and r["duration_ns"] == 3000 for r in got)


def _agent_thread(path: str, idx: int, batches: int, size: int, dropped: int) -> None:
    a = agent(path, service=f"svc{idx}",  # one real pid for all (SO_PEERCRED): told apart by service
              names={1: "Conv2D", 2: "MatMul", 3: f"conv{idx}", 4: f"fc{idx}"})
    a.send_json(Kind.WATCH, {"model_id": idx, "device": idx % 2, "labels": {}})
    for i in range(batches):
        a.send_batch(make_records(size, model=idx, device=idx % 2, durations=1000 + i))
        if i == batches // 2:
            a.send_json(Kind.LOSS, {"dropped": dropped, "reason": "test"})
    a.close()


def test_several_agents_accounting(daemon):
    n_agents, batches, size = 6, 40, 1000
    threads = [threading.Thread(target=_agent_thread, args=(daemon.socket, i, batches, size, i))
               for i in range(n_agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    c = Client(daemon.socket)
    sent = n_agents * batches * size
    st = wait_for(lambda: (s := c.request(Kind.STATUS))["records_total"] == sent and not s["agents"] and s,
                    what="all records")
    assert st["dropped_by_agents"] == sum(range(n_agents))
    snap = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "name"})
    assert sum(r["count"] for r in snap["rows"]) == sent
    assert len(snap["rows"]) == 2 * n_agents
    per_pid = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "type", "filter": {"service": "svc3", "model": 3}})
    assert sum(r["count"] for r in per_pid["rows"]) == batches * size
    assert len(c.export()) == sent


def _garbage_frames() -> list[bytes]:
    hello = encode_json(Kind.HELLO, {"role": "agent", "pid": 666, "host": "evil", "service": "x", "labels": {}})
    ctl = encode_json(Kind.HELLO, {"role": "control", "pid": 667, "host": "evil"})
    names = encode_json(Kind.NAMES, {"names": {"1": "A", "2": "B"}})
    return [
        b"GET / HTTP/1.1\r\n\r\n" + b"x" * 100,                       # bad magic
        HEADER.pack(MAGIC, 9, Kind.HELLO, 0, 2) + b"{}",               # bad version
        HEADER.pack(MAGIC, 1, Kind.HELLO, 7, 2) + b"{}",               # reserved != 0
        HEADER.pack(MAGIC, 1, Kind.HELLO, 0, MAX_PAYLOAD + 1),          # oversized
        hello + HEADER.pack(MAGIC, 1, 200, 0, 0),                      # unknown kind
        hello + encode_json(Kind.STATUS, {}),                          # kind not allowed for agents
        ctl + encode(Kind.BATCH, b""),                                 # kind not allowed for control
        hello + names + encode(Kind.BATCH, b"\0" * 57),                # not whole records
        hello + encode(Kind.BATCH, make_records(3, types=(9,), names=(9,)).tobytes()),  # undefined name id
        hello + names + encode_json(Kind.NAMES, {"names": {"1": "C"}}),  # redefined
        hello + encode_json(Kind.LOSS, {"dropped": -1}),
        hello + encode_json(Kind.WATCH, {"model_id": "one"}),
        ctl + encode_json(Kind.SNAPSHOT, {"window": "5h"}),
        ctl + encode_json(Kind.STREAM, {"filter": {"type": "("}}),
        ctl + encode_json(Kind.EXPORT, {"since_ts": "yesterday"}),
        hello + hello,                                                 # HELLO twice
        HEADER.pack(MAGIC, 1, Kind.HELLO, 0, 1 << 20) + b"{" * (100 << 10),  # huge HELLO
    ]


def test_hostile_clients_do_not_affect_a_good_agent(daemon):
    good = agent(daemon.socket, service="good")
    stop = threading.Event()
    sent = [0]

    def keep_sending():
        while not stop.is_set():
            good.send_batch(make_records(500))
            sent[0] += 500
            time.sleep(0.002)

    t = threading.Thread(target=keep_sending)
    t.start()
    try:
        frames = _garbage_frames()
        for frame in frames:
            bad = Client(daemon.socket, hello=False)
            bad.sock.sendall(frame)
            assert bad.closed_by_peer(), frame[:40]
            bad.close()
        # a client that sends half a frame and disappears
        half = Client(daemon.socket, hello=False)
        half.sock.sendall(encode_json(Kind.HELLO, {"role": "agent", "pid": 1, "host": "h"})[:7])
        half.close()
    finally:
        stop.set()
        t.join(10)
    st = wait_for(lambda: (s := status(daemon.socket))["records_total"] == sent[0] and s, what="good records")
    assert st["protocol_errors"] >= len(frames) - 1  # HTTP garbage and friends all count
    assert [a["service"] for a in st["agents"]] == ["good"]


def test_slow_stream_client_does_not_slow_ingestion():
    with InProcess(stream_buffer_bytes="64KiB") as d:
        slow = Client(d.socket)
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.send_json(Kind.STREAM, {"filter": {}})
        wait_for(lambda: any(c.stream is not None for c in list(d.daemon.conns.values())))
        a = agent(d.socket)
        batches, size = 200, 2000
        t0 = time.monotonic()
        for _ in range(batches):
            a.send_batch(make_records(size))
        sent = batches * size
        wait_for(lambda: status(d.socket)["records_total"] == sent, what="ingestion")
        elapsed = time.monotonic() - t0
        assert elapsed < 10
        st = status(d.socket)
        assert st["stream_skipped"] > 0
        # now read everything: records received + skipped == records sent
        received = skipped = 0
        slow.sock.settimeout(5)
        while received + skipped < sent:
            records, n, _kind = slow.stream_frames()
            received += len(records)
            skipped += n
        assert received + skipped == sent and skipped == st["stream_skipped"]


def test_disk_cap_rotates_and_export_still_works():
    with InProcess(segment_bytes="64KiB", disk_bytes="256KiB", flush_interval_s="0.05") as d:
        a = agent(d.socket)
        # 40 x 280 KB = 11 MB of records, ~1.2 MB stored encoded, through a 256 KiB cap
        batches, size = 40, 5000
        for i in range(batches):
            a.send_batch(make_records(size, durations=1000 + i))
            if i % 5 == 0:
                wait_for(lambda n=(i + 1) * size: status(d.socket)["records_total"] == n)
        c = Client(d.socket)
        st = wait_for(lambda: (s := c.request(Kind.STATUS))["records_total"] == batches * size
                        and s["storage"]["deleted_for_cap"] > 0 and s)
        assert st["storage"]["bytes"] <= 256 * 1024 + 64 * 1024
        # a bounded store sitting at its cap is normal: informational, not a problem
        assert st["storage"]["at_cap"] is True and st["storage"]["last_cap_delete_ts"] > 0
        assert st["healthy"] is True and st["problems"] == []
        segs = [f for f in os.listdir(os.path.join(d.tmp, "data")) if f.endswith(".acps")]
        assert 2 <= len(segs) <= 6
        records = c.export()
        assert 0 < len(records) < batches * size
        assert max(r["duration_ns"] for r in records) == 1000 + batches - 1  # the newest are kept
        a.send_batch(make_records(size))  # still ingesting after rotation
        wait_for(lambda: c.request(Kind.STATUS)["records_total"] == (batches + 1) * size)


def test_socket_mode_and_stale_and_live_socket(tmp_path):
    from aclprofd.sockets import DaemonError
    from aclprofd.sockets import bind_socket as _bind
    with InProcess() as d:
        assert oct(os.stat(d.socket).st_mode & 0o777) == "0o660"
        with pytest.raises(DaemonError, match="another aclprofd is already listening"):
            _bind(d.socket, None)
        d.stop()
        assert not os.path.exists(d.socket)
        # a stale socket file (its daemon died) is replaced
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(d.socket)
        s.close()
        assert os.path.exists(d.socket)
        sock = _bind(d.socket, None)
        sock.close()
        os.unlink(d.socket)
        # not a socket: refused, left alone
        open(d.socket, "w").close()
        with pytest.raises(DaemonError, match="not a socket"):
            _bind(d.socket, None)
        assert os.path.isfile(d.socket)


def _goodbye(c: Client) -> dict:
    """The frames a client gets until GOODBYE (ERROR frames allowed before it)."""
    c.sock.settimeout(10)
    while True:
        kind, payload = c.recv()
        if kind == Kind.GOODBYE:
            return decode_json(payload)
        assert kind == Kind.ERROR, kind


def test_graceful_stop_drains_agents_and_says_goodbye():
    with InProcess(flush_interval_s="30") as d:  # only the stop can store anything
        a = agent(d.socket, service="bye")
        c = Client(d.socket)
        for _ in range(5):
            a.send_batch(make_records(1000))
        a.send_json(Kind.LOSS, {"dropped": 3, "reason": "test"})
        wait_for(lambda: c.request(Kind.STATUS)["records_total"] == 5000, what="ingestion")
        # From now on the loop reads nothing: what follows is in the socket buffer when
        # the stop begins, and only the stop's drain can count it.
        d.daemon.transport.read = lambda conn: None  # type: ignore[method-assign]
        for _ in range(3):
            a.send_batch(make_records(300))  # well within one socket buffer
        d.stop()
        assert _goodbye(a) == {"records": 5900, "dropped": 3}
        assert a.closed_by_peer()
        assert d.daemon.records_total == 5900


def test_goodbye_count_is_stored(tmp_path):
    data = str(tmp_path / "data")
    with InProcess(data_dir=data, flush_interval_s="30") as d:
        a = agent(d.socket)
        for _ in range(10):
            a.send_batch(make_records(700))
        d.stop()
        n = _goodbye(a)["records"]
        assert n == 7000
    from aclprofd.storage import Storage
    assert sum(len(ch.records) for ch in Storage(data).read()) == n


def test_protocol_error_of_an_agent_gets_error_then_goodbye(daemon):
    a = agent(daemon.socket)
    a.send_batch(make_records(300))
    a.sock.sendall(encode(Kind.BATCH, b"\0" * 57))  # not whole records
    assert _goodbye(a) == {"records": 300, "dropped": 0}
    assert a.closed_by_peer()


def test_frame_reader_ignores_unknown_kinds_only_when_asked():
    from aclprof.protocol.wire import FrameReader, ProtocolError
    data = HEADER.pack(MAGIC, 1, 99, 0, 2) + b"{}" + encode_json(Kind.GOODBYE, {"records": 1})
    assert [k for k, _ in FrameReader(ignore_unknown=True).feed(data)] == [Kind.GOODBYE]
    with pytest.raises(ProtocolError, match="unknown frame kind"):
        list(FrameReader().feed(data))


def _count_all(path: str, window: str = "all") -> int:
    c = Client(path)
    try:
        return sum(r["count"] for r in c.request(Kind.SNAPSHOT, {"window": window})["rows"])
    finally:
        c.close()


def test_aggregates_continue_across_a_restart_and_reset_clears_them(tmp_path):
    data = str(tmp_path / "data")
    with InProcess(data_dir=data) as d:
        a = agent(d.socket)
        a.send_batch(make_records(1234))
        wait_for(lambda: _count_all(d.socket) == 1234, what="ingestion")
        a.close()
    assert os.path.exists(os.path.join(data, "aggregates.npz"))
    with InProcess(data_dir=data) as d:
        assert _count_all(d.socket) == 1234 and _count_all(d.socket, "10s") == 0
        st = status(d.socket)
        assert st["records_total"] == 0 and st["aggregates"]["keys"] == 2
        c = Client(d.socket)
        assert c.request(Kind.RESET) == {}
        c.close()
    with InProcess(data_dir=data) as d:  # the reset was saved at once
        assert _count_all(d.socket) == 0


def test_unreadable_aggregates_file_is_set_aside(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "aggregates.npz").write_bytes(b"PK\x03\x04 torn")
    with InProcess(data_dir=str(data)) as d:
        assert status(d.socket)["healthy"] and _count_all(d.socket) == 0
    assert (data / "aggregates.npz.bad").exists()


def test_restored_other_bucket_is_no_new_problem(tmp_path):
    data = str(tmp_path / "data")
    with InProcess(data_dir=data, max_keys="1") as d:
        a = agent(d.socket)
        a.send_batch(make_records(100))  # two keys: one of them goes to "(other)"
        st = wait_for(lambda: (s := status(d.socket))["problems"] and s, what="the key cap problem")
        assert "key cap" in st["problems"][0] and st["aggregates"]["other_bucket_records"] == 50
        a.close()
    with InProcess(data_dir=data, max_keys="1") as d:
        # Two records of the key that kept its place under the cap; once the segment files
        # grew, a flush ran, and the flush (same loop turn) is where "(other)" growth is noticed.
        before = status(d.socket)["storage"]["bytes"]
        a = agent(d.socket)
        a.send_batch(make_records(2, types=(1,), names=(3,)))
        wait_for(lambda: status(d.socket)["storage"]["bytes"] > before, what="a flush after the restart")
        assert _count_all(d.socket) == 102
        st = status(d.socket)
        assert st["aggregates"]["other_bucket_records"] == 50 and st["healthy"], st["problems"]
        a.close()
