"""Binary STREAM records (protocol 5, ``"format": "records-v1"``; daemon/PROTOCOL.md "Binary
STREAM"): the daemon sends agents' records as they arrived with their sources and names, the
client writes them as JSON Lines with the daemon's own encoder. What a client prints must be
byte for byte what the daemon sends in the JSON mode for the same records; what a client does
not ask for (an old client) stays JSON Lines; the stream's accounting (STREAM_SKIPPED, END,
the memory budget) holds; a client that gets a frame the daemon would never send says so.
"""

from __future__ import annotations

import json
import struct
import threading

import numpy as np
import pytest
from aclprofd.conn import Conn
from aclprofd.fanout import EST_RECORD_BIN, EST_RECORD_JSON
from aclprofd.filters import Filter, NameMatcher
from aclprofd.records import NameJson, encode_records_py, jsonl_payload
from helpers.daemons import Client, InProcess, agent, status
from helpers.fakedaemon import FakeDaemon
from helpers.fanstub import stub_fanout
from helpers.procs import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclprof.cli.client import Client as CliClient
from aclprof.cli.client import DaemonError, DaemonRejected
from aclprof.protocol import streambin
from aclprof.protocol.streambin import BATCH_HEAD, StreamDecoder, names_frames, source_frame
from aclprof.protocol.wire import (
    FLAG_KEYPOINT,
    MAX_NAME_BYTES,
    MAX_NAMES_PAYLOAD,
    RECORD_DTYPE,
    FrameReader,
    Kind,
    ProtocolError,
    decode_json,
    encode,
    encode_json,
)

NEW_DAEMON = {"protocol": 5, "stream_formats": ["jsonl", "records-v1"]}


def _records(rng: np.random.Generator, n: int, ids: list[int]) -> np.ndarray:
    r = np.zeros(n, RECORD_DTYPE)
    r["op_name"], r["op_type"] = rng.choice(ids, n), rng.choice(ids, n)
    r["model_id"], r["device_id"] = rng.integers(0, 2**32, n), rng.integers(0, 8, n)
    r["thread_id"] = rng.choice([7, 2**32 - 1, 0], n)
    r["flag"] = rng.choice([0, 1, FLAG_KEYPOINT, FLAG_KEYPOINT | 3], n)
    r["start"] = rng.integers(0, 2**63, n, dtype=np.uint64)
    r["end"], r["duration"] = r["start"] + rng.integers(0, 10**9, n, dtype=np.uint64), rng.integers(0, 10**9, n)
    return r


def _as_ingest_keeps(r: np.ndarray) -> np.ndarray:
    """The array ingest offers: over the bytes it keeps (the binary stream queues those)."""
    return np.frombuffer(r.tobytes(), dtype=RECORD_DTYPE)


def _decode(data: bytes, dec: StreamDecoder | None = None) -> tuple[bytes, int, list[Kind]]:
    """(the JSON Lines a client prints, records skipped, the kinds) of a stream's bytes."""
    dec = dec or StreamDecoder()
    text, skipped, kinds = [], 0, []
    for kind, payload in FrameReader().feed(data):
        kinds.append(kind)
        if kind == Kind.STREAM_RECORDS:
            text.append(bytes(payload))
        elif kind == Kind.STREAM_SKIPPED:
            skipped += decode_json(payload)["skipped"]
        else:
            text += [bytes(t) for t in dec.frame(kind, payload)]
    return b"".join(text), skipped, kinds


NAME = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['a"b', "back\\slash", "new\nline", "tab\t", "\x00\x1f", "\u2028", "é中🙂", "", "#7"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_binary_lines_are_the_json_modes_bytes(data):
    """Hypothesis-drawn sources (escaped hosts, services), names (escapes, unicode, defined
    over time), records and filters: a binary client's lines equal a JSON client's, and with
    a small buffer (skips) equal the daemon's reference text of what it was sent, every
    record sent or counted skipped."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    slow = data.draw(st.booleans(), "slow client")
    with stub_fanout(stream_buffer=data.draw(st.sampled_from([2000, 40_000])) if slow else 8 << 20) as (f, conn, _):
        flt = Filter.parse(data.draw(st.sampled_from([{}, {"min_duration_ns": 5 * 10**8}, {"name": "a|é"}])))
        jc, bc = conn("json", "control"), conn("bin", "control")
        f.start_stream(jc, flt)
        f.start_stream(bc, flt, binary=True)
        agents = []
        for i in range(data.draw(st.integers(1, 3), "sources")):
            a = conn(f"a{i}", "agent")
            a.host = data.draw(st.text(max_size=8).map(lambda s: s.encode("utf-8", "replace").decode()))
            a.pid, a.service = 100 + i, data.draw(st.none() | NAME)
            agents.append(a)
        expected, offered = [], 0
        for step in range(data.draw(st.integers(1, 6), "batches")):
            a = agents[data.draw(st.integers(0, len(agents) - 1))]
            new = {len(a.names) + k: data.draw(NAME) for k in range(data.draw(st.integers(0 if a.names else 1, 4)))}
            a.names.update(new)
            a.names_order.extend(new.items())
            recs = _as_ingest_keeps(_records(rng, data.draw(st.integers(1, 300)), list(a.names)))
            ts = 1.7e9 + step * 0.001 + data.draw(st.floats(0, 1))
            f.offer(a, recs, ts)
            m = flt.mask(recs, NameMatcher(), a.names)
            offered += len(recs) if m is None else int(m.sum())
            expected.append((a, recs, ts))
            if data.draw(st.booleans()):
                f.pump_streams()
            f.outbox.reading = not slow or data.draw(st.booleans())
        f.outbox.reading = True
        for _ in range(2):  # the second: a STREAM_SKIPPED waits for the client's buffer to drain
            f.pump_streams()
            f.outbox.send(bc)
            f.outbox.send(jc)
        btext, bskipped, kinds = _decode(f.outbox.sent.get("bin", b""))
        assert bskipped == bc.stream_skipped_all and bc.stream_sent + bskipped == offered
        assert btext.count(b"\n") == bc.stream_sent
        if not slow:
            jtext, _, _ = _decode(f.outbox.sent.get("json", b""))
            assert btext == jtext and bskipped == 0
            # and the reference's text of every selected record (the JSON encoder's spec)
            ref = b""
            for a, recs, ts in expected:
                m = flt.mask(recs, NameMatcher(), a.names)
                sel = recs if m is None else recs[m]
                ref += jsonl_payload(encode_records_py(sel, ts, a.host, a.pid, a.service, NameJson(a.names)))
            assert btext == ref
        assert Kind.STREAM_SOURCE in kinds or not bc.stream_sent


def _agent(conn, names: dict[int, str]) -> Conn:
    a = conn("a", "agent")
    a.host, a.pid, a.service = "h", 7, "svc"
    a.names = dict(names)
    a.names_order = list(names.items())
    return a


def test_names_go_once_per_source_then_only_new_ids():
    with stub_fanout() as (f, conn, _):
        c = conn("c", "control")
        f.start_stream(c, Filter(), binary=True)
        a = _agent(conn, {0: "op", 1: "Add"})
        recs = _as_ingest_keeps(_records(np.random.default_rng(1), 10, [0, 1]))
        f.offer(a, recs, 1.0)
        f.pump_streams()
        f.offer(a, recs, 2.0)
        f.pump_streams()
        a.names[2] = "late"
        a.names_order.append((2, "late"))
        f.offer(a, _as_ingest_keeps(_records(np.random.default_rng(2), 10, [2])), 3.0)
        f.pump_streams()
        frames = list(FrameReader().feed(f.outbox.sent["c"]))
        assert [k for k, _ in frames] == [Kind.STREAM_SOURCE, Kind.STREAM_NAMES, Kind.STREAM_BATCH, Kind.STREAM_BATCH,
                                          Kind.STREAM_NAMES, Kind.STREAM_BATCH]
        assert json.loads(bytes(frames[4][1])) == {"source": a.stream_source, "names": [[2, "late"]]}
        # a whole batch goes as the agent's own bytes (no copy): the record bytes are the batch's
        assert bytes(frames[2][1])[BATCH_HEAD.size:] == recs.tobytes()
        assert c.stream_sent == 30


def test_a_source_that_closes_ends_after_its_pending_records_with_their_names():
    """An agent that closes with records still pending: they go out with its names (the loop
    drops the name table right after: main wrote them as "#<id>"), then STREAM_SOURCE_END."""
    with stub_fanout() as (f, conn, _):
        jc, bc = conn("json", "control"), conn("bin", "control")
        f.start_stream(jc, Filter())
        f.start_stream(bc, Filter(), binary=True)
        a = _agent(conn, {0: "conv1", 1: "Conv2D"})
        f.offer(a, _as_ingest_keeps(_records(np.random.default_rng(3), 5, [0, 1])), 1.0)
        f.pump_streams()
        f.offer(a, _as_ingest_keeps(_records(np.random.default_rng(4), 5, [0, 1])), 2.0)
        a.closed = True
        f.closed(a)
        a.names, a.names_order = {}, []  # as the loop's _on_close does next
        f.pump_streams()
        jtext, _, _ = _decode(f.outbox.sent["json"])
        assert jtext.count(b"\n") == 10 and b'"#' not in jtext and jtext.count(b'"op_type":"Conv2D"') + \
            jtext.count(b'"op_type":"conv1"') == 10
        dec = StreamDecoder()
        btext, _, kinds = _decode(f.outbox.sent["bin"], dec)
        assert btext == jtext and kinds[-1] == Kind.STREAM_SOURCE_END and dec.sources == 0 and dec.name_bytes == 0
        assert not bc.stream_sources


def test_pending_binary_records_are_charged_at_their_size():
    with stub_fanout(budget=64 << 20) as (f, conn, mem):
        jc, bc = conn("json", "control"), conn("bin", "control")
        f.start_stream(jc, Filter())
        f.start_stream(bc, Filter(), binary=True)
        before = mem.stream_room()
        a = _agent(conn, {0: "op"})
        f.offer(a, _as_ingest_keeps(_records(np.random.default_rng(5), 1000, [0])), 1.0)
        after = mem.stream_room()
        assert before[1] - after[1] == 1000 * (EST_RECORD_JSON + EST_RECORD_BIN)
        f.pump_streams()


def test_a_binary_client_that_never_reads_is_bounded_and_counted():
    with stub_fanout(stream_buffer=100_000) as (f, conn, _):
        c = conn("c", "control")
        f.start_stream(c, Filter(), binary=True)
        a = _agent(conn, {0: "op"})
        f.outbox.reading = False
        for i in range(200):
            f.offer(a, _as_ingest_keeps(_records(np.random.default_rng(i), 500, [0])), 1.0 + i)
            f.pump_streams()
        # bounded: the buffer's limit plus at most one batch frame past it
        assert len(c.out) <= 100_000 + 500 * 56 + 2000
        assert c.stream_sent + c.stream_skipped_all == 200 * 500 and c.stream_skipped_all > 190 * 500
        f.outbox.reading = True
        f.offer(a, _as_ingest_keeps(_records(np.random.default_rng(0), 1, [0])), 999.0)
        f.pump_streams()
        text, skipped, kinds = _decode(f.outbox.sent["c"])
        assert kinds.count(Kind.STREAM_SKIPPED) == 1 and skipped == c.stream_skipped_all
        assert text.count(b"\n") == c.stream_sent == 200 * 500 + 1 - skipped


# ---- the client against frames the daemon would never send ---------------------------
def _batch(source: int, recs: np.ndarray, ts: float = 1.5, version: int = 1) -> bytes:
    return BATCH_HEAD.pack(version, 0, 0, source, ts) + recs.tobytes()


def _payload(frame: bytes) -> bytes:
    return frame[12:]


def _defined(names: dict[int, str] | None = None) -> StreamDecoder:
    dec = StreamDecoder()
    dec.frame(Kind.STREAM_SOURCE, _payload(source_frame(3, "h", 1, None)))
    for fr in names_frames(3, list((names or {0: "op"}).items())):
        dec.frame(Kind.STREAM_NAMES, _payload(fr))
    return dec


ONE = _records(np.random.default_rng(9), 1, [0])


@pytest.mark.parametrize("kind, payload, message", [
    (Kind.STREAM_BATCH, _batch(4, ONE), "STREAM_BATCH of source 4, which is not defined"),
    (Kind.STREAM_BATCH, _batch(3, ONE)[:-1], "is not a 16-byte head and whole 56-byte records"),
    (Kind.STREAM_BATCH, b"\x01\x00", "is not a 16-byte head"),
    (Kind.STREAM_BATCH, _batch(3, ONE, version=2), "format version 2"),
    (Kind.STREAM_BATCH, _batch(3, _records(np.random.default_rng(9), 3, [5])), "names op id 5, which its source "
                                                                                   "never defined"),
    (Kind.STREAM_NAMES, b'{"source":4,"names":[[1,"x"]]}', "STREAM_NAMES for source 4, which is not defined"),
    (Kind.STREAM_NAMES, b'{"source":3,"names":[[0,"other"]]}', "redefines name 0 of source 3"),
    (Kind.STREAM_NAMES, b'{"source":3,"names":[[-1,"x"]]}', "name id must be an integer"),
    (Kind.STREAM_NAMES, b'{"source":3,"names":{"1":"x"}}', "needs a list of [id, name] pairs"),
    (Kind.STREAM_NAMES, json.dumps({"source": 3, "names": [[1, "x" * (MAX_NAME_BYTES + 1)]]}).encode(),
     f"longer than {MAX_NAME_BYTES} bytes"),
    (Kind.STREAM_NAMES, b" " * (MAX_NAMES_PAYLOAD + 1), f"at most {MAX_NAMES_PAYLOAD}"),
    (Kind.STREAM_NAMES, b"[1,", "STREAM_NAMES payload is not JSON"),
    (Kind.STREAM_SOURCE, _payload(source_frame(3, "h", 1, None)), "defines source 3 again"),
    (Kind.STREAM_SOURCE, b'{"source":5,"host":"h","pid":true,"service":null}', "pid must be an integer"),
    (Kind.STREAM_SOURCE, json.dumps({"source": 5, "host": "h" * 300, "pid": 1, "service": None}).encode(),
     "host is longer than 256 bytes"),
    (Kind.STREAM_SOURCE_END, b'{"source":9}', "STREAM_SOURCE_END of source 9, which is not defined"),
    (Kind.STREAM_RECORDS, b"", "STREAM_RECORDS is not a binary stream frame"),
])
def test_frames_the_daemon_never_sends_are_named_errors(kind, payload, message):
    with pytest.raises(ProtocolError) as exc:
        list(_defined().frame(kind, payload))
    assert message in str(exc.value)


def test_client_limits_on_sources_and_names():
    dec = StreamDecoder(max_sources=2, max_name_bytes=10_000)
    for s in (1, 2):
        dec.frame(Kind.STREAM_SOURCE, _payload(source_frame(s, "h", s, None)))
    with pytest.raises(ProtocolError, match="more than 2 sources at once"):
        dec.frame(Kind.STREAM_SOURCE, _payload(source_frame(3, "h", 3, None)))
    with pytest.raises(ProtocolError, match="pass this client's limit of 10000 bytes"):
        for fr in names_frames(1, [(i, "n" * 100) for i in range(100)]):
            dec.frame(Kind.STREAM_NAMES, _payload(fr))
    dec.frame(Kind.STREAM_SOURCE_END, b'{"source":1}')  # its names are given back
    assert dec.sources == 1 and dec.name_bytes == 0
    for fr in names_frames(2, [(i, "n" * 100) for i in range(50)]):
        dec.frame(Kind.STREAM_NAMES, _payload(fr))


def test_a_name_table_over_one_frame_goes_in_several():
    items = [(i, "x" * 4000 + str(i)) for i in range(600)]  # ~2.4 MB of names
    frames = names_frames(1, items)
    assert len(frames) == 3 and all(len(fr) - 12 <= MAX_NAMES_PAYLOAD for fr in frames)
    dec = StreamDecoder()
    dec.frame(Kind.STREAM_SOURCE, _payload(source_frame(1, "h", 1, "s")))
    for fr in frames:
        dec.frame(Kind.STREAM_NAMES, _payload(fr))
    r = ONE.copy()
    r["op_name"] = r["op_type"] = 599
    assert b'"op_name":"' + b"x" * 4000 + b'599"' in b"".join(dec.frame(Kind.STREAM_BATCH, _batch(1, r)))


def _fake(script, welcome=NEW_DAEMON):
    fake = FakeDaemon(script, welcome)
    return fake


SOURCE_1 = encode_json(Kind.STREAM_SOURCE, {"source": 1, "host": "h", "pid": 1, "service": None})


@pytest.mark.parametrize("frames, message", [
    ([SOURCE_1, encode(Kind.STREAM_BATCH, _batch(2, ONE))],
     "malformed STREAM_BATCH frame: STREAM_BATCH of source 2, which is not defined"),
    ([SOURCE_1, encode(Kind.STREAM_BATCH, _batch(1, ONE))],
     "malformed STREAM_BATCH frame: STREAM_BATCH names op id 0, which its source never defined"),
    ([SOURCE_1, encode(Kind.STREAM_NAMES, b'{"source":1,"names":[[1,' + b'"x' * 3000 + b'"]]}')],
     "malformed STREAM_NAMES frame: STREAM_NAMES payload is not JSON"),
    ([struct.pack("<4sBBHI", b"ACLP", 1, 35, 0, 17 << 20)],  # a batch header over MAX_PAYLOAD
     "malformed frame: frame of 17825792 bytes exceeds the limit of 16777216"),
    ([struct.pack("<4sBBHI", b"ACLP", 1, 99, 0, 0)], "malformed frame: unknown frame kind 99"),
])
def test_the_client_names_a_malformed_frame_and_does_not_crash(frames, message):
    def script(fake, conn, recv):
        kind, payload = recv()
        assert kind == Kind.STREAM and decode_json(payload)["format"] == "records-v1"
        for frame in frames:
            conn.sendall(frame)
        fake.release.wait(10)

    fake = _fake(script)
    try:
        c = CliClient(fake.path)
        with pytest.raises(DaemonError) as exc:
            list(c.stream_jsonl({}))
        assert message in str(exc.value)
        c.close()
    finally:
        fake.close()
    assert fake.error is None


def test_an_old_daemon_is_never_asked_for_binary():
    got = []

    def script(fake, conn, recv):
        got.append(decode_json(recv()[1]))
        conn.sendall(encode(Kind.STREAM_RECORDS, b'{"a":1}\n'))
        conn.sendall(encode_json(Kind.END, {"records": 1, "skipped": 0}))

    fake = _fake(script, {"protocol": 4})
    try:
        c = CliClient(fake.path)
        assert [bytes(p) for p, _ in c.stream_jsonl({"pid": 3})] == [b'{"a":1}\n']
        assert got == [{"filter": {"pid": 3}}]  # no "format": JSON Lines, as every daemon sends
        c.close()
    finally:
        fake.close()
    fake = _fake(lambda fake, conn, recv: fake.release.wait(10), {"protocol": 4})
    try:
        c = CliClient(fake.path)
        with pytest.raises(DaemonRejected, match="does not stream binary records: upgrade aclprofd"):
            list(c.stream_jsonl({}, "binary"))
        c.close()
    finally:
        fake.close()


# ---- the daemon ----------------------------------------------------------------------
def test_the_daemon_refuses_a_format_it_does_not_stream():
    with InProcess() as d:
        c = Client(d.socket)
        assert c.welcome["protocol"] == 5 and c.welcome["stream_formats"] == ["jsonl", "records-v1"]
        c.send_json(Kind.STREAM, {"filter": {}, "format": "records-v9"})
        kind, payload = c.recv()
        assert kind == Kind.ERROR and decode_json(payload)["message"] == (
            "STREAM format 'records-v9' is not one this daemon streams (jsonl, records-v1)")
        assert c.closed_by_peer()


def test_the_daemon_streams_both_formats_alike_end_to_end():
    """A JSON client (``--wire jsonl``), a binary one (the default) and an old one (no
    ``format``: byte for byte the JSON client's frames) of the same records, from two agents
    with escaped names; END and the counts alike."""
    with InProcess() as d:
        clients = {w: CliClient(d.socket) for w in ("jsonl", "auto")}
        old = Client(d.socket)
        old.send_json(Kind.STREAM, {"filter": {}})
        got: dict[str, list[bytes]] = {w: [] for w in clients}

        def read(w: str) -> None:
            for payload, _ in clients[w].stream_jsonl({}, w):
                got[w].append(bytes(payload))
        threads = [threading.Thread(target=read, args=(w,)) for w in clients]
        for t in threads:
            t.start()
        wait_for(lambda: sum(c.stream is not None for c in list(d.daemon.conns.values())) == 3)
        rng = np.random.default_rng(11)
        names = {0: 'q"uote', 1: "back\\slash\n", 2: "é中🙂\u2028", 3: "plain"}
        a1, a2 = agent(d.socket, service="s1", names=names), agent(d.socket, service=None, names=names)
        for i in range(5):
            for a in (a1, a2):
                r = _records(rng, 400, list(names))
                r["start"] = 1_764_000_000_000_000_000 + i
                r["end"], r["duration"] = r["start"] + 10, 10
                a.send_batch(r)
        wait_for(lambda: status(d.socket)["records_total"] == 4000)
        d.stop()
        for t in threads:
            t.join(10)
        old_text = b""
        while True:
            kind, payload = old.recv()
            if kind == Kind.END:
                assert decode_json(payload) == {"records": 4000, "skipped": 0}
                break
            assert kind == Kind.STREAM_RECORDS
            old_text += bytes(payload)
        assert b"".join(got["auto"]) == b"".join(got["jsonl"]) == old_text and old_text.count(b"\n") == 4000


def test_tail_prints_the_same_bytes_over_either_wire(tmp_path):
    """``aclprof tail`` (binary by default) and ``--wire jsonl``: the same output, with
    ``--json`` and as human lines."""
    import subprocess
    import sys

    with InProcess() as d:
        runs = {f"{w}{j}": (w, j) for w in ("auto", "jsonl") for j in ("-json", "-human")}
        outs = {name: open(tmp_path / name, "wb") for name in runs}
        procs = [subprocess.Popen([sys.executable, "-m", "aclprof", "tail", *(["--json"] if j == "-json" else []),
                                   "--wire", w, "--socket", d.socket], stdout=outs[name])
                 for name, (w, j) in runs.items()]
        wait_for(lambda: sum(c.stream is not None for c in list(d.daemon.conns.values())) == 4, timeout=20)
        a = agent(d.socket, service="tail", names={0: "x\ty", 1: "Relu"})
        r = _records(np.random.default_rng(12), 3000, [0, 1])
        r["end"], r["duration"] = r["start"] + 5, 5
        a.send_batch(r)
        wait_for(lambda: all((tmp_path / name).read_bytes().count(b"\n") == 3000 for name in runs), timeout=20)
        d.stop()
        for p in procs:
            p.wait(20)
        for f in outs.values():
            f.close()
        for j in ("-json", "-human"):
            assert (tmp_path / f"auto{j}").read_bytes() == (tmp_path / f"jsonl{j}").read_bytes()


def test_batch_head_layout():
    """The STREAM_BATCH head as PROTOCOL.md describes it (not taken from the project's struct)."""
    head = streambin.batch_prefix(9, 2.5, 3)
    assert head[:12] == b"ACLP" + bytes([1, 35, 0, 0]) + struct.pack("<I", 16 + 3 * 56)
    assert head[12:] == bytes([1, 0, 0, 0]) + struct.pack("<I", 9) + struct.pack("<d", 2.5)


def test_a_binary_client_that_never_reads_costs_the_daemon_nothing_and_is_told():
    """A binary client reading nothing while 200,000 records pass: ingestion goes on, what
    it misses is skipped and counted (STATUS, STREAM_SKIPPED), and when it reads, its
    records + skipped are everything, END repeating both."""
    import socket

    from helpers.records import make_records

    with InProcess(stream_buffer_bytes="64KiB") as d:
        slow = Client(d.socket)
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.send_json(Kind.STREAM, {"filter": {}, "format": "records-v1"})
        wait_for(lambda: any(c.stream is not None for c in list(d.daemon.conns.values())))
        a = agent(d.socket)
        for _ in range(100):
            a.send_batch(make_records(2000))
        wait_for(lambda: status(d.socket)["records_total"] == 200_000, what="ingestion")
        skipped_then = status(d.socket)["stream_skipped"]
        assert skipped_then > 100_000  # the daemon did not wait for it
        dec, received, skipped = StreamDecoder(), 0, 0
        slow.sock.settimeout(5)
        while received + skipped < 200_000:
            kind, payload = slow.recv()
            if kind == Kind.STREAM_SKIPPED:
                skipped += decode_json(payload)["skipped"]
            else:
                received += sum(bytes(t).count(b"\n") for t in dec.frame(kind, payload))
        assert skipped == status(d.socket)["stream_skipped"] >= skipped_then
        d.stop()
        kind, payload = slow.recv()
        assert kind == Kind.END and decode_json(payload) == {"records": received, "skipped": skipped}
