"""Protocol 2 between the daemon and the CLI (daemon/PROTOCOL.md): JSON Lines records in
STREAM_RECORDS and EXPORT_RECORDS, the END frame, STREAM_SKIPPED; the dispatch tables (a
kind a role may not send closes only that connection); the counters snapshot that STATUS
and /metrics share; the frame reader's views."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest
from helpers.daemons import Client, InProcess, agent, status
from helpers.procs import free_port, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import (
    HEADER,
    MAGIC,
    RECORD_DTYPE,
    FrameReader,
    Kind,
    decode_batch,
    decode_json,
    encode,
    encode_batch,
)

# The frame kinds as PROTOCOL.md numbers them (not taken from the project's enum).
STREAM_RECORDS, EXPORT_RECORDS, END, STREAM_SKIPPED = 23, 27, 31, 32


@pytest.fixture
def daemon():
    with InProcess() as d:
        yield d


def _two_records() -> np.ndarray:
    r = np.zeros(2, RECORD_DTYPE)
    r["model_id"], r["device_id"], r["thread_id"] = 1, 0, 7
    r["op_type"], r["op_name"] = [1, 2], [3, 4]
    r["start"], r["end"], r["duration"] = [1000, 3000], [3000, 3500], [2000, 500]
    r["flag"] = [0, 1]
    return r


def _expected_lines(ts: list[str], pid: int) -> bytes:
    """The two records of _two_records() as PROTOCOL.md's "record" and JSON Lines say,
    written out by hand; ``ts`` is the daemon's receive time as it wrote it."""
    return (
        f'{{"ts":{ts[0]},"host":"testhost","pid":{pid},"service":"svc","device":0,"model":1,"op_type":"Conv2D",'
        '"op_name":"conv1","start":1000,"end":3000,"duration_ns":2000,"flag":0,"thread_id":7,"kind":"op"}\n'
        f'{{"ts":{ts[1]},"host":"testhost","pid":{pid},"service":"svc","device":0,"model":1,"op_type":"MatMul",'
        '"op_name":"fc1","start":3000,"end":3500,"duration_ns":500,"flag":1,"thread_id":7,"kind":"op"}\n'
        ).encode()


def _receive_times(payload: bytes, t0: float, t1: float) -> list[str]:
    ts = re.findall(rb'^\{"ts":([0-9.]+),', payload, flags=re.M)
    assert len(ts) == 2
    for t in ts:
        assert t0 - 1 <= float(t) <= t1 + 1
    return [t.decode() for t in ts]


def test_export_payload_is_json_lines_and_ends_with_end():
    with InProcess() as d:
        t0 = time.time()
        a = agent(d.socket, service="svc")  # pid: the real one (SO_PEERCRED)
        a.send_batch(_two_records())
        wait_for(lambda: status(d.socket)["records_total"] == 2)
        t1 = time.time()
        c = Client(d.socket)
        c.send_json(Kind.EXPORT, {"since_ts": None, "until_ts": None, "filter": {}})
        kind, payload = c.recv()
        assert int(kind) == EXPORT_RECORDS
        data = bytes(payload)
        assert data == _expected_lines(_receive_times(data, t0, t1), os.getpid())
        assert [json.loads(line)["op_name"] for line in data.splitlines()] == ["conv1", "fc1"]
        kind, payload = c.recv()
        assert int(kind) == END and json.loads(bytes(payload)) == {"records": 2, "skipped": 0}
        # the connection stays usable after END
        assert c.request(Kind.STATUS)["records_total"] == 2


def test_stream_payload_is_json_lines_and_stop_sends_end():
    d = InProcess()
    try:
        s = Client(d.socket)
        s.send_json(Kind.STREAM, {"filter": {}})
        wait_for(lambda: any(c.stream is not None for c in list(d.daemon.conns.values())))
        t0 = time.time()
        a = agent(d.socket, service="svc")
        a.send_batch(_two_records())
        kind, payload = s.recv()
        t1 = time.time()
        assert int(kind) == STREAM_RECORDS
        data = bytes(payload)
        assert data == _expected_lines(_receive_times(data, t0, t1), os.getpid())
        d.stop()
        kind, payload = s.recv()
        assert int(kind) == END and json.loads(bytes(payload)) == {"records": 2, "skipped": 0}
        assert s.closed_by_peer()
    finally:
        d.__exit__(None, None, None)


def test_stream_skipped_frame_and_end_totals():
    with InProcess(stream_buffer_bytes="64KiB") as d:
        slow = Client(d.socket)
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.send_json(Kind.STREAM, {"filter": {}})
        wait_for(lambda: any(c.stream is not None for c in list(d.daemon.conns.values())))
        a = agent(d.socket)
        sent = 100 * 2000
        for _ in range(100):
            a.send_batch(make_records(2000))
        wait_for(lambda: status(d.socket)["records_total"] == sent, what="ingestion")
        received = skipped = 0
        saw_skipped_frame = False
        slow.sock.settimeout(5)
        while received + skipped < sent:
            kind, payload = slow.recv()
            if int(kind) == STREAM_SKIPPED:
                saw_skipped_frame = True
                skipped += json.loads(bytes(payload))["skipped"]
            else:
                assert int(kind) == STREAM_RECORDS
                received += bytes(payload).count(b"\n")
        assert saw_skipped_frame and skipped == status(d.socket)["stream_skipped"]
        d.stop()
        kind, payload = slow.recv()
        assert int(kind) == END and json.loads(bytes(payload)) == {"records": received, "skipped": skipped}


def test_cli_client_stream_returns_at_end_and_export_checks_count():
    from aclprof.cli.client import Client as CliClient
    d = InProcess()
    try:
        a = agent(d.socket, service="svc")
        a.send_batch(make_records(3000))
        wait_for(lambda: status(d.socket)["records_total"] == 3000)
        c = CliClient(d.socket)
        assert sum(len(b) for b in c.export(None, None, {})) == 3000
        lines = b"".join(c.export_jsonl(None, None, {"type": "Conv"})).splitlines()
        assert len(lines) == 1500 and all(json.loads(x)["op_type"] == "Conv2D" for x in lines)
        c.close()
        s = CliClient(d.socket)
        frames = s.stream({})  # STREAM goes out at the first next()

        def send_when_streaming() -> None:
            wait_for(lambda: any(c.stream is not None for c in list(d.daemon.conns.values())))
            a.send_batch(make_records(10))
        t = threading.Thread(target=send_when_streaming)
        t.start()
        got = next(frames)[0]
        t.join()
        assert len(got) == 10
        d.stop()
        assert list(frames) == []  # END: the iterator ends, no error
        s.close()
    finally:
        d.__exit__(None, None, None)


def test_dispatch_tables_and_forbidden_kinds_close_only_that_connection(daemon):
    d = daemon.daemon
    assert set(d.control.handlers) == {Kind.STATUS, Kind.SNAPSHOT, Kind.STREAM, Kind.EXPORT, Kind.RESET, Kind.TRACE,
                                       Kind.BASELINE_SAVE, Kind.BASELINE_LIST, Kind.BASELINE_GET, Kind.REQUESTS}
    assert set(d.ingest.handlers) == {Kind.BATCH, Kind.NAMES, Kind.LOSS, Kind.WATCH, Kind.UNWATCH, Kind.TRACE_DONE,
                                      Kind.OP_FAILURE, Kind.REQUEST_BILL}
    good = agent(daemon.socket, service="good")
    watcher = Client(daemon.socket)
    cases = [
        (Client(daemon.socket), encode(Kind.BATCH, b""), "BATCH is not allowed from a control client"),
        (Client(daemon.socket), encode(Kind.GOODBYE, b"{}"), "GOODBYE is not allowed from a control client"),
        (agent(daemon.socket), encode(Kind.STATUS, b"{}"), "STATUS is not allowed from an agent"),
        (agent(daemon.socket), encode(Kind.END, b"{}"), "END is not allowed from an agent"),
        (agent(daemon.socket), encode(Kind.TRACE, b"{}"), "TRACE is not allowed from an agent"),
        (Client(daemon.socket), encode(Kind.TRACE_DONE, b"{}"), "TRACE_DONE is not allowed from a control client"),
        (Client(daemon.socket), encode(Kind.OP_FAILURE, b"{}"), "OP_FAILURE is not allowed from a control client"),
        (Client(daemon.socket), encode(Kind.REQUEST_BILL, b"{}"), "REQUEST_BILL is not allowed from a control client"),
        (agent(daemon.socket), encode(Kind.REQUESTS, b"{}"), "REQUESTS is not allowed from an agent"),
        (Client(daemon.socket), HEADER.pack(MAGIC, 1, 28, 0, 2) + b"{}", "unknown frame kind 28"),
    ]
    before = watcher.request(Kind.STATUS)["protocol_errors"]
    for c, frame, message in cases:
        c.sock.sendall(frame)
        kind, payload = c.recv()
        assert kind == Kind.ERROR and decode_json(payload)["message"] == message
        assert c.closed_by_peer()
        good.send_batch(make_records(10))  # the others carry on
    st = wait_for(lambda: (s := watcher.request(Kind.STATUS))["records_total"] == 10 * len(cases) and s)
    assert st["protocol_errors"] == before + len(cases)
    assert [x["service"] for x in st["agents"]] == ["good"]



def _metric(text: str, line_start: str) -> float:
    vals = [float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line_start + " ")]
    assert len(vals) == 1, (line_start, vals)
    return vals[0]


def test_status_and_metrics_read_the_same_snapshot():
    port = free_port()
    with InProcess(prometheus_port=port) as d:
        a = agent(d.socket, service="svc")
        a.send_batch(make_records(1234))
        a.send_json(Kind.LOSS, {"dropped": 5, "reason": "x"})
        bad = Client(d.socket)
        bad.sock.sendall(encode(Kind.BATCH, b""))
        assert bad.closed_by_peer()
        wait_for(lambda: status(d.socket)["records_total"] == 1234 and status(d.socket)["dropped_by_agents"] == 5)
        c = Client(d.socket)
        st = c.request(Kind.STATUS)  # publishes the snapshot /metrics reads
        snap = d.daemon.published
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert _metric(text, "aclprofd_records_total") == st["records_total"] == snap.records_total == 1234
        assert _metric(text, f'aclprofd_agent_dropped_records_total{{pid="{os.getpid()}",service="svc"}}') == 5
        assert st["dropped_by_agents"] == snap.dropped_total == 5
        assert _metric(text, "aclprofd_connected_agents") == len(st["agents"]) == len(snap.agents) == 1
        assert _metric(text, "aclprofd_protocol_errors_total") == st["protocol_errors"] == snap.protocol_errors
        assert _metric(text, "aclprofd_stream_skipped_records_total") == st["stream_skipped"] == 0
        assert _metric(text, "aclprofd_aggregate_keys") == st["aggregates"]["keys"] == snap.aggregate_keys
        assert _metric(text, "aclprofd_storage_bytes") == st["storage"]["bytes"]
        with pytest.raises(dataclasses.FrozenInstanceError):
            snap.records_total = 0  # type: ignore[misc]


def test_collector_reads_only_the_snapshot_and_the_aggregator():
    from aclprofd.metrics import DaemonCollector
    from prometheus_client import CollectorRegistry, generate_latest
    with InProcess() as d:
        a = agent(d.socket, service="svc")
        a.send_batch(make_records(100))
        wait_for(lambda: status(d.socket)["records_total"] == 100)

        class OnlyTheseTwo:  # any other attribute the collector reached for would raise
            published = d.daemon.published
            aggregator = d.daemon.aggregator
            # (and the detector's published view: one immutable object, replaced every second)
            detection = type("View", (), {"published": d.daemon.detection.published})

        reg = CollectorRegistry(auto_describe=False)
        reg.register(DaemonCollector(OnlyTheseTwo()))  # type: ignore[arg-type]
        text = generate_latest(reg).decode()
        assert _metric(text, "aclprofd_records_total") == 100
        assert _metric(text, "aclprofd_connected_agents") == 1


def test_frame_reader_hands_out_views_not_copies():
    recs = make_records(100)
    frame = encode_batch(recs)
    # whole frame in one piece: the payload is a view of the data that was fed
    [(kind, payload)] = list(FrameReader().feed(frame))
    assert kind == Kind.BATCH and isinstance(payload, memoryview)
    arr = decode_batch(payload)
    assert np.shares_memory(arr, np.frombuffer(frame, np.uint8)) and np.array_equal(arr, recs)
    # in pieces of every size: assembled once into a buffer of its own, still a view
    for step in (1, 7, 12, 13, 1000):
        r = FrameReader()
        out = []
        for i in range(0, len(frame) * 2, step):
            out += r.feed((frame * 2)[i:i + step])
        assert len(out) == 2 and all(isinstance(p, memoryview) for _, p in out)
        assert all(np.array_equal(decode_batch(p), recs) for _, p in out)  # earlier views stay valid
        assert r.buffered == 0
