"""Every limit the daemon and the agent enforce, probed exactly at the limit, one below and
one above (issue 20, "limits tested far from their edges").

:data:`LIMITS` is the one table: each entry names where the limit lives, its value, whether
it is a most or a least, and a probe that answers "accepted?" for one value. The probes
talk to a real daemon (served in this process) over its socket, or call the parser the
daemon's configuration uses; a probe tells a refusal from any other failure (the refusal's
message is checked), so an off-by-one in either direction fails here.

The agent's side: what the agent produces at a limit (a service name, labels and a model's
labels of the maximum size and number, a name table split into NAMES frames as full as the
limit allows, a frame of the sender's largest batch) is accepted by the daemon.

Sizes use two-byte characters (``é``), so a limit counted in characters instead of UTF-8
bytes is caught too.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from aclprofd.connlimits import MAX_ANONYMOUS, MAX_CONNECTIONS
from helpers.daemons import Client, InProcess
from helpers.procs import wait_for
from helpers.records import make_records

from aclprof.protocol import wire
from aclprof.protocol.wire import Kind, decode_json, encode, encode_batch, encode_json, encode_names

#: agents at most with the default max_control_connections (64): what the anonymous and control
#: shares leave
AGENT_SHARE = MAX_CONNECTIONS - MAX_ANONYMOUS - 64

# ---- helpers -----------------------------------------------------------------------------------


def text_of(nbytes: int, pad: str = "x") -> str:
    """A string of exactly ``nbytes`` UTF-8 bytes, mostly two-byte characters."""
    return "é" * (nbytes // 2) + pad * (nbytes % 2)


def _hello(role: str = "agent", **kw: Any) -> bytes:
    obj = {"role": role, "version": "0.1.0", "pid": 0, "host": "edge", "service": "edge", "labels": {}}
    obj.update(kw)
    return encode_json(Kind.HELLO, obj)


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(2000):  # a full listen backlog: the daemon accepts them as it goes
        try:
            s.connect(path)
            break
        except BlockingIOError:
            time.sleep(0.005)
    s.settimeout(20)
    return s


def _frames_to_eof(s: socket.socket) -> list[tuple[Kind, dict]]:
    """Every frame until the daemon closes the connection."""
    reader, pending, out = wire.FrameReader(ignore_unknown=True), [], []  # type: ignore[var-annotated]
    while True:
        try:
            f = wire.recv_frame(s, reader, pending)
        except ConnectionResetError:
            # the daemon closed with our bytes unread: the kernel may drop its ERROR
            return [*out, (Kind.ERROR, {"message": RESET})]
        if f is None:
            return out
        k, p = f
        out.append((k, decode_json(p) if k in (Kind.ERROR, Kind.WELCOME, Kind.GOODBYE) else {}))


RESET = "<connection reset: the ERROR was lost>"


def agent_session(path: str, frames: list[bytes], **hello: Any) -> str | None:
    """An agent connection that says HELLO (with ``hello``), sends ``frames`` and ends its
    stream: the daemon's ERROR message, or None when it took everything."""
    s = _connect(path)
    try:
        try:
            s.sendall(_hello("agent", **hello) + b"".join(frames))
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we sent: its ERROR is read below
        got = _frames_to_eof(s)
    finally:
        s.close()
    errors = [p.get("message", "") for k, p in got if k == Kind.ERROR]
    if errors:
        return errors[0]
    assert got and got[0][0] == Kind.WELCOME, got
    return None


def refused(message: str | None, *needles: str) -> bool:
    """True for a refusal naming what it refused; an unexpected error fails the probe. A
    reset (the daemon closed before reading all we sent) counts as a refusal: the callers
    that can meet one check the daemon's protocol_errors as well."""
    if message is None:
        return False
    if message == RESET:
        return True
    assert all(n in message for n in needles), f"refused for another reason: {message!r} (want {needles})"
    return True


def control_request(path: str, kind: Kind, payload: bytes) -> tuple[Kind, dict] | None:
    """One raw control request: its reply (kind, JSON) or None if the daemon closed."""
    s = _connect(path)
    try:
        s.sendall(_hello("control"))
        reader, pending = wire.FrameReader(ignore_unknown=True), []  # type: ignore[var-annotated]
        f = wire.recv_frame(s, reader, pending)
        assert f is not None and f[0] == Kind.WELCOME
        try:
            s.sendall(encode(kind, payload) if len(payload) <= wire.MAX_PAYLOAD else
                      wire.HEADER.pack(wire.MAGIC, wire.VERSION, int(kind), 0, len(payload)) + payload)
        except (BrokenPipeError, ConnectionResetError):
            return None
        try:
            f = wire.recv_frame(s, reader, pending)
        except ConnectionResetError:
            return None
        if f is None:
            return None
        k, p = f
        return k, decode_json(p) if k != Kind.STREAM_RECORDS else {}
    finally:
        s.close()


def records(n: int, **kw: Any) -> np.ndarray:
    return make_records(n, types=(1,), names=(2,), **kw)


NAMES12 = b"".join(encode_names({1: "Conv2D", 2: "conv1"}))


@pytest.fixture(scope="module")
def daemon() -> Iterator[InProcess]:
    with InProcess() as d:
        yield d


def _status(d: InProcess) -> dict:
    c = Client(d.socket)
    try:
        return c.request(Kind.STATUS)
    finally:
        c.close()


# ---- probes: one value in, "accepted?" out ---------------------------------------------------

def p_hello_service(d: InProcess, n: int) -> bool:
    return not refused(agent_session(d.socket, [], service=text_of(n)), "HELLO service", "256 bytes")


def p_hello_host(d: InProcess, n: int) -> bool:
    return not refused(agent_session(d.socket, [], host=text_of(n)), "HELLO host", "256 bytes")


def p_hello_label_key(d: InProcess, n: int) -> bool:
    return not refused(agent_session(d.socket, [], labels={text_of(n): "v"}), "HELLO label", "256 bytes")


def p_hello_label_value(d: InProcess, n: int) -> bool:
    return not refused(agent_session(d.socket, [], labels={"k": text_of(n)}), "HELLO label", "256 bytes")


def p_hello_label_count(d: InProcess, n: int) -> bool:
    labels = {f"k{i}": "v" for i in range(n)}
    return not refused(agent_session(d.socket, [], labels=labels), f"HELLO has {n} labels", "at most 64")


def p_watch_label_value(d: InProcess, n: int) -> bool:
    w = encode_json(Kind.WATCH, {"model_id": 3, "device": 0, "labels": {"model": text_of(n)}})
    return not refused(agent_session(d.socket, [w]), "WATCH label", "256 bytes")


def p_watch_label_count(d: InProcess, n: int) -> bool:
    w = encode_json(Kind.WATCH, {"model_id": 3, "device": 0, "labels": {f"k{i}": "v" for i in range(n)}})
    return not refused(agent_session(d.socket, [w]), f"WATCH has {n} labels", "at most 64")


def _names_payload(n: int) -> bytes:
    """A NAMES payload of exactly ``n`` bytes (names of ~4000 bytes, the last one padded)."""
    head, tail = b'{"names":{', b"}}"
    parts: list[bytes] = []
    size = len(head) + len(tail)
    i = 0
    while True:
        prefix = (b"," if parts else b"") + f'"{i}":"'.encode()
        room = n - size - len(prefix) - 1  # 1: the closing quote
        if room <= 4000 + 40:  # the last name takes the rest (not cut: <= 4096 bytes)
            assert 0 <= room <= wire.MAX_NAME_BYTES
            parts.append(prefix + b"a" * room + b'"')
            break
        parts.append(prefix + b"a" * 4000 + b'"')
        size += len(parts[-1])
        i += 1
    payload = head + b"".join(parts) + tail
    assert len(payload) == n and isinstance(json.loads(payload)["names"], dict)
    return payload


def p_names_frame(d: InProcess, n: int) -> bool:
    msg = agent_session(d.socket, [encode(Kind.NAMES, _names_payload(n))])
    return not refused(msg, f"NAMES frame of {n} bytes", f"at most {wire.MAX_NAMES_PAYLOAD}")


def p_frame_payload(d: InProcess, n: int) -> bool:
    """A STATUS request whose JSON is padded to ``n`` bytes: any frame kind has the same
    frame limit; beyond it the connection is closed without reading the payload."""
    pad = b'{"pad":"' + b"p" * (n - 10) + b'"}'
    assert len(pad) == n
    errors = _status(d)["protocol_errors"]
    got = control_request(d.socket, Kind.STATUS, pad)
    if got is None:  # closed (the ERROR lost to a reset): counted as a protocol error
        assert wait_for(lambda: _status(d)["protocol_errors"] == errors + 1)
        return False
    kind, body = got
    if kind == Kind.ERROR:
        return not refused(body["message"], f"frame of {n} bytes exceeds the limit of {wire.MAX_PAYLOAD}")
    assert kind == Kind.STATUS_REPLY, got
    return True


def p_regex(d: InProcess, n: int) -> bool:
    got = control_request(d.socket, Kind.SNAPSHOT,
                          json.dumps({"window": "all", "group_by": "type", "filter": {"type": "a" * n}}).encode())
    assert got is not None
    kind, body = got
    if kind == Kind.ERROR:
        return not refused(body["message"], str(wire.MAX_REGEX_BYTES))
    assert kind == Kind.SNAPSHOT_REPLY, got
    return True


def _one_record_rejected(d: InProcess, recs: np.ndarray, reason: str) -> bool:
    """Send ``recs`` as an agent; whether the daemon refused them for ``reason`` (counted
    per reason; every other reason stays as it was)."""
    before = _status(d)
    msg = agent_session(d.socket, [NAMES12, encode_batch(recs)])
    assert msg is None, msg  # a refused record never closes the connection
    after = wait_for(lambda: (lambda s: s if s["records_total"] >= before["records_total"] + len(recs) else None)
                     (_status(d)))
    delta = {k: v - before["records_rejected"].get(k, 0) for k, v in after["records_rejected"].items()}
    delta = {k: v for k, v in delta.items() if v}
    assert set(delta) <= {reason}, delta
    return delta.get(reason, 0) == len(recs)


def p_duration(d: InProcess, n: int) -> bool:
    r = records(1, durations=n, start=1 << 60)
    return not _one_record_rejected(d, r, "duration_too_large")


def p_end_minus_start(d: InProcess, n: int) -> bool:
    r = records(1, durations=5, start=10_000)
    if n >= 0:
        r["end"] = r["start"] + np.uint64(n)
    else:
        r["start"] = r["end"] + np.uint64(-n)
    return not _one_record_rejected(d, r, "end_before_start")


def p_model_id(d: InProcess, n: int) -> bool:
    return not _one_record_rejected(d, records(1, model=n), "bad_id")


def p_device_id(d: InProcess, n: int) -> bool:
    return not _one_record_rejected(d, records(1, device=n), "bad_id")


def p_watched_models(d: InProcess, n: int) -> bool:
    watches = [encode_json(Kind.WATCH, {"model_id": i, "device": 0, "labels": {}}) for i in range(n)]
    return not refused(agent_session(d.socket, watches), f"more than {4096} watched models")


def p_batch_records(d: InProcess, n: int) -> bool:
    """A BATCH of ``n`` records: the largest whole batch within the frame limit goes; one
    more record makes the frame too large and the connection is closed."""
    recs = records(n, start=1 << 40)
    payload = recs.tobytes()
    frame = wire.HEADER.pack(wire.MAGIC, wire.VERSION, int(Kind.BATCH), 0, len(payload)) + payload
    before, errors = _status(d)["records_total"], _status(d)["protocol_errors"]
    msg = agent_session(d.socket, [NAMES12, frame])
    if refused(msg, "exceeds the limit"):
        st = wait_for(lambda: (lambda s: s if s["protocol_errors"] == errors + 1 else None)(_status(d)))
        assert st["records_total"] == before  # none of it taken
        return False
    assert wait_for(lambda: _status(d)["records_total"] >= before + n, timeout=30)
    return True


def p_control_connections(_: InProcess, n: int) -> bool:
    """``max_control_connections`` = 4: ``n`` idle control clients; all stay iff n <= 4
    (the fifth evicts the longest idle one: the first)."""
    with InProcess(max_control_connections=4) as d:
        clients = [Client(d.socket) for _ in range(n)]
        try:
            # every client has its WELCOME: admitted, in order
            evicted = clients[0].closed_by_peer(timeout=0.5 if n <= 4 else 10)
            for c in clients[1:]:
                c.request(Kind.STATUS)  # the others were kept
            return not evicted
        finally:
            for c in clients:
                c.close()


def p_anonymous_connections(_: InProcess, n: int) -> bool:
    """``n`` connections that never say HELLO: the oldest is closed iff n > 256."""
    with InProcess() as d:
        ctl = Client(d.socket)  # admitted before the others: it is not one of them
        socks = [_connect(d.socket) for _ in range(n)]
        try:
            # every accept happened once STATUS counts them all
            wait_for(lambda: (lambda c: c["without_hello"] + c["refused"] >= n)(
                ctl.request(Kind.STATUS)["connections"]))
            st = ctl.request(Kind.STATUS)["connections"]
            ctl.close()
            assert st["without_hello"] == min(n, 256), st
            socks[0].settimeout(5)
            if st["refused"]:
                assert socks[0].recv(1) == b""  # the oldest, closed
                return False
            return True
        finally:
            for s in socks:
                s.close()


def _first_frame(s: socket.socket) -> tuple[Kind, dict]:
    """The daemon's answer to a HELLO: (WELCOME, its JSON) or (ERROR, its JSON)."""
    f = wire.recv_frame(s, wire.FrameReader(ignore_unknown=True), [])
    assert f is not None and f[0] in (Kind.WELCOME, Kind.ERROR), f
    return f[0], decode_json(f[1])


def p_connections(_: InProcess, n: int) -> bool:
    """``n`` agents (and one control client, outside their share) that said HELLO: all stay
    iff n <= the agents' share (4096 - 256 without HELLO - 64 control); beyond, the new one is
    refused at HELLO and counted (root, these tests' uid, is exempt from the per-uid cap).
    Sent 128 at a time, each batch's answers read before the next (under the 256 without
    HELLO: none evicted for that); both sides must agree: the agents' own answers and STATUS."""
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2 * n + 200:
        pytest.skip("needs a descriptor limit of ~7800 (ulimit -n): both ends of 3777 connections")
    with InProcess() as d:
        assert d.daemon.transport.limits.agent_share() == AGENT_SHARE
        ctl = Client(d.socket)
        socks: list[socket.socket] = []
        answers: list[tuple[Kind, dict]] = []
        try:
            hello = _hello("agent", pid=os.getpid())
            for i in range(n):
                s = _connect(d.socket)
                s.sendall(hello)
                socks.append(s)
                if i % 128 == 127 or i == n - 1:
                    answers += [_first_frame(x) for x in socks[len(answers):]]
            welcomed = sum(k == Kind.WELCOME for k, _ in answers)
            errors = [a["message"] for k, a in answers if k == Kind.ERROR]
            assert welcomed == min(n, AGENT_SHARE) and len(errors) == n - welcomed, (welcomed, errors[:3])
            assert all("too many agent connections" in e and "the agents' share" in e for e in errors), errors[:3]
            conns = ctl.request(Kind.STATUS)["connections"]
            assert conns["agents"] == welcomed and conns["without_hello"] == 0, conns
            assert conns["refused_by"]["agent_share"] == len(errors), conns
            return not errors
        finally:
            ctl.close()
            for s in socks:
                s.close()


def p_hello_bytes(d: InProcess, n: int) -> bool:
    """``n`` bytes of an unfinished frame before HELLO; beyond 64 KiB the connection is
    closed, else the rest of the (valid, padded) HELLO gets a WELCOME."""
    obj = {"role": "control", "version": "0.1.0", "pid": 0, "host": "edge", "service": "edge", "labels": {},
           "pad": ""}
    base = len(json.dumps(obj, separators=(",", ":")))
    obj["pad"] = "p" * (n + 100 - wire.HEADER.size - base)  # the whole frame: n + 100 bytes
    frame = encode_json(Kind.HELLO, obj)
    assert len(frame) == n + 100
    s = _connect(d.socket)
    try:
        s.sendall(frame[:n])
        ctl = Client(d.socket)  # a sync point: the daemon read what was sent before it
        ctl.request(Kind.STATUS)
        ctl.request(Kind.STATUS)
        ctl.close()
        try:
            s.sendall(frame[n:])
        except (BrokenPipeError, ConnectionResetError):
            return False
        got = _frames_to_eof_or_first(s)
        return got is not None and got[0] == Kind.WELCOME
    finally:
        s.close()


def _frames_to_eof_or_first(s: socket.socket) -> tuple[Kind, dict] | None:
    reader, pending = wire.FrameReader(ignore_unknown=True), []  # type: ignore[var-annotated]
    try:
        f = wire.recv_frame(s, reader, pending)
    except ConnectionResetError:
        return None
    if f is None:
        return None
    if f[0] == Kind.ERROR:
        assert "HELLO larger than" in decode_json(f[1])["message"]
        return None
    return f[0], decode_json(f[1])


def p_name_bytes(d: InProcess, n: int) -> bool:
    """An op name of ``n`` bytes: kept whole (True) or cut to the limit and counted (False)."""
    name = f"{n}:" + text_of(n - len(f"{n}:"))  # one row per probe, also once cut
    before = _status(d)["names_truncated"]
    c = Client(d.socket, "agent", service=f"names-{n}")
    c.names({1: "EdgeType", 2: name})
    c.send_batch(records(3, start=1 << 41))
    ctl = Client(d.socket)
    try:
        rows = wait_for(lambda: [r for r in ctl.request(Kind.SNAPSHOT, {"window": "all", "group_by": "name",
                                                                         "filter": {"service": f"names-{n}"}})["rows"]
                                 if r["count"] == 3] or None)
    finally:
        ctl.close()
        c.close()
    (row,) = rows
    stored = row["op_name"]
    cut = _status(d)["names_truncated"] - before
    if stored == name:
        assert cut == 0
        return True
    assert cut == 1 and stored == name.encode()[:wire.MAX_NAME_BYTES].decode("utf-8", "ignore"), (cut, len(stored))
    assert len(stored.encode()) <= wire.MAX_NAME_BYTES
    return False


# ---- configuration (aclprofd.config): one parser per setting --------------------------------

def _config_ok(**given: str) -> bool:
    from aclprofd import config
    try:
        config.load({"socket": "/nonexistent/s", "data_dir": "/nonexistent/d", **given}, environ={})
    except config.ConfigError:
        return False
    return True


def cfg(field: str, fmt: str = "{}") -> Callable[[InProcess, int], bool]:
    return lambda _d, n: _config_ok(**{field: fmt.format(n)})


# ---- the table -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Limit:
    what: str
    where: str          # file and symbol that hold the limit
    at: int             # the limit's value
    most: bool          # True: values up to `at` are accepted; False: values from `at` on
    probe: Callable[[InProcess, int], bool]
    step: int = 1       # "one" below/above (1 byte, 1 record, 1 second...)


_MAXDUR = 1 << 50
LIMITS: list[Limit] = [
    Limit("HELLO service bytes", "aclprof/protocol/wire.py MAX_IDENT_BYTES, check_identity", wire.MAX_IDENT_BYTES,
          True, p_hello_service),
    Limit("HELLO host bytes", "aclprof/protocol/wire.py MAX_IDENT_BYTES", wire.MAX_IDENT_BYTES, True, p_hello_host),
    Limit("HELLO label key bytes", "aclprof/protocol/wire.py MAX_IDENT_BYTES", wire.MAX_IDENT_BYTES, True,
          p_hello_label_key),
    Limit("HELLO label value bytes", "aclprof/protocol/wire.py MAX_IDENT_BYTES", wire.MAX_IDENT_BYTES, True,
          p_hello_label_value),
    Limit("HELLO labels", "aclprof/protocol/wire.py MAX_LABELS", wire.MAX_LABELS, True, p_hello_label_count),
    Limit("WATCH label value bytes", "aclprof/protocol/wire.py MAX_IDENT_BYTES", wire.MAX_IDENT_BYTES, True,
          p_watch_label_value),
    Limit("WATCH labels", "aclprof/protocol/wire.py MAX_LABELS", wire.MAX_LABELS, True, p_watch_label_count),
    Limit("NAMES frame payload bytes", "aclprof/protocol/wire.py MAX_NAMES_PAYLOAD; daemon ingest.names",
          wire.MAX_NAMES_PAYLOAD, True, p_names_frame),
    Limit("frame payload bytes", "aclprof/protocol/wire.py MAX_PAYLOAD (FrameReader)", wire.MAX_PAYLOAD, True,
          p_frame_payload),
    Limit("BATCH records in one frame", "aclprof/protocol/wire.py MAX_PAYLOAD / RECORD_DTYPE.itemsize",
          wire.MAX_PAYLOAD // wire.RECORD_DTYPE.itemsize, True, p_batch_records),
    Limit("filter regex bytes", "aclprof/protocol/wire.py MAX_REGEX_BYTES; aclprof/protocol/filterregex.py",
          wire.MAX_REGEX_BYTES, True, p_regex),
    Limit("op name bytes kept whole", "aclprof/protocol/wire.py MAX_NAME_BYTES; daemon ingest.names (cut, counted)",
          wire.MAX_NAME_BYTES, True, p_name_bytes),
    Limit("record duration ns", "daemon/aclprofd/ingest.py MAX_DURATION_NS", _MAXDUR, True, p_duration),
    Limit("record end - start ns", "daemon/aclprofd/ingest.py rejects (end_before_start)", 0, False,
          p_end_minus_start),
    Limit("record model id", "daemon/aclprofd/ingest.py _BAD_ID (2^32-1 is the C API's none)", 0xFFFFFFFE, True,
          p_model_id),
    Limit("record device id", "daemon/aclprofd/ingest.py _BAD_ID", 0xFFFFFFFE, True, p_device_id),
    Limit("watched models per connection", "daemon/aclprofd/ingest.py _MAX_MODELS", 4096, True, p_watched_models),
    Limit("idle control connections (max_control_connections = 4)",
          "daemon/aclprofd/transport.py admitted; config max_control_connections", 4, True, p_control_connections),
    Limit("connections without HELLO", "daemon/aclprofd/transport.py _MAX_ANONYMOUS", 256, True,
          p_anonymous_connections),
    Limit("agent connections", "daemon/aclprofd/connlimits.py agent_share (MAX_CONNECTIONS - MAX_ANONYMOUS - "
          "max_control_connections)", AGENT_SHARE, True, p_connections),
    Limit("bytes buffered before HELLO", "daemon/aclprofd/transport.py _HELLO_MAX", 64 << 10, True, p_hello_bytes),
    Limit("windows seconds", "daemon/aclprofd/config.py _parse_windows", 3600, True, cfg("windows", "{}s")),
    Limit("capture_before seconds", "daemon/aclprofd/config.py _parse_capture_span", 3600, True,
          cfg("capture_before_s")),
    Limit("capture_after seconds", "daemon/aclprofd/config.py _parse_capture_span", 3600, True,
          cfg("capture_after_s")),
    Limit("capture_max_count", "daemon/aclprofd/config.py _parse_capture_count", 1000, True,
          cfg("capture_max_count")),
    Limit("capture_max_count (least)", "daemon/aclprofd/config.py _parse_capture_count", 1, False,
          cfg("capture_max_count")),
    Limit("capture_max_size bytes (least)", "daemon/aclprofd/config.py _parse_capture_bytes", 1 << 20, False,
          cfg("capture_max_bytes")),
    Limit("prometheus_host_label bytes", "daemon/aclprofd/config.py _parse_host_label", 256, True,
          lambda _d, n: _config_ok(prometheus_host_label=text_of(n))),
    Limit("prometheus_port", "daemon/aclprofd/config.py _parse_port", 65535, True, cfg("prometheus_port")),
    Limit("max_keys (least)", "daemon/aclprofd/config.py _parse_positive_int", 1, False, cfg("max_keys")),
    Limit("max_control_connections (least)", "daemon/aclprofd/config.py _parse_positive_int", 1, False,
          cfg("max_control_connections")),
    Limit("detector_persistence (least)", "daemon/aclprofd/config.py _parse_positive_int", 1, False,
          cfg("detector_persistence")),
    Limit("segment_size (least)", "daemon/aclprofd/config.py parse_size", 1, False, cfg("segment_bytes")),
]


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("limit", [pytest.param(x, id=x.what) for x in LIMITS])
def test_limit_at_its_edge(daemon: InProcess, limit: Limit, offset: int):
    value = limit.at + offset * limit.step
    want = value <= limit.at if limit.most else value >= limit.at
    got = limit.probe(daemon, value)
    assert got == want, (f"{limit.what} ({limit.where}) = {value} ({['below', 'at', 'above'][offset + 1]} "
                         f"{limit.at}): accepted={got}, want {want}")


def test_the_daemon_survived_every_probe(daemon: InProcess):
    """No probe cost the daemon more than its own connection (it still answers)."""
    st = _status(daemon)
    assert st["healthy"] or st["problems"], st
    assert st["connections"]["internal_errors"] == 0


def test_a_segment_size_at_a_quarter_of_the_disk_cap_is_kept_and_one_byte_over_is_clamped():
    """config.load: segment_size <= disk_cap // 4, else clamped to a quarter (4 segments)."""
    from aclprofd import config

    def seg(segment: int, disk: int) -> int:
        return config.load({"socket": "/n/s", "data_dir": "/n/d", "segment_bytes": str(segment),
                            "disk_bytes": str(disk)}, environ={}).segment_bytes

    disk = 4 << 20
    assert seg(disk // 4 - 1, disk) == disk // 4 - 1
    assert seg(disk // 4, disk) == disk // 4
    assert seg(disk // 4 + 1, disk) == disk // 4


def test_the_name_table_share_is_an_eighth_of_the_budget_to_the_byte():
    """NAMES is charged len(name) + NAME_OVERHEAD per name; a table costing exactly the
    share (an eighth of the clients' share of memory_budget) is taken, one byte more is
    refused and counted."""
    from aclprofd.ingest import NAME_OVERHEAD

    budget = 16 << 20
    for extra, ok in ((-1, True), (0, True), (1, False)):
        with InProcess(memory_budget_bytes=budget) as d:
            share = _status(d)["memory"]["clients_share_bytes"] // 8
            assert budget // 16 < share < budget // 8
            n = 200
            each = (share + extra - NAME_OVERHEAD) // n - NAME_OVERHEAD - 1
            names = {i: "n" * each for i in range(n)}
            names[n] = "m" * (share + extra - n * (each + NAME_OVERHEAD) - NAME_OVERHEAD)
            assert sum(len(v) + NAME_OVERHEAD for v in names.values()) == share + extra
            msg = agent_session(d.socket, encode_names(names))
            assert (msg is None) == ok, (extra, msg)
            if not ok:
                assert "NAMES refused" in msg and str(share) in msg  # type: ignore[operator]
                assert _status(d)["memory"]["refused"].get("names") == 1


# ---- the agent's side: what it produces at a limit is accepted -------------------------------

def test_the_agent_at_every_identity_limit_is_accepted_by_the_daemon(daemon: InProcess):
    """A real agent (mock backend) whose service, labels, watched model's labels and op
    name/type are all at their limits: the daemon admits it, keeps every string whole and
    aggregates its records under that service (nothing cut, nothing refused)."""
    import aclprof
    from aclprof import agent, mock

    aclprof.use_mock()
    service = text_of(wire.MAX_IDENT_BYTES)
    labels = {f"{i:02d}" + text_of(wire.MAX_IDENT_BYTES - 2): text_of(wire.MAX_IDENT_BYTES)
              for i in range(wire.MAX_LABELS)}
    model_labels = {"model": text_of(wire.MAX_IDENT_BYTES),
                    **{f"{i:02d}" + text_of(wire.MAX_IDENT_BYTES - 2): text_of(wire.MAX_IDENT_BYTES, "y")
                       for i in range(wire.MAX_LABELS - 1)}}
    op_name, op_type = "n" + text_of(wire.MAX_NAME_BYTES - 1), "T" + text_of(wire.MAX_NAME_BYTES - 1)
    before = _status(daemon)
    model = mock.load_model([{"name": op_name, "type": op_type, "duration_ns": 1000}], seed=1)
    agent.start(daemon.socket, service=service, labels=labels)
    try:
        agent.watch(model, labels=model_labels, device=0)
        mock.execute(model, 7)
        mock.wait_writer_idle()
        ctl = Client(daemon.socket)

        def rows(group: str) -> list[dict]:
            return [r for r in ctl.request(Kind.SNAPSHOT, {"window": "all", "group_by": group,
                                                           "filter": {"service": service}})["rows"]]
        try:
            wait_for(lambda: [r["count"] for r in rows("name")] == [7])
            assert [r["op_name"] for r in rows("name")] == [op_name]
            assert [r["op_type"] for r in rows("type")] == [op_type]
            assert [(r["service"], r["model"]) for r in rows("model")] == [(service, model_labels["model"])]
        finally:
            ctl.close()
        (mine,) = [x for x in _status(daemon)["agents"] if x["service"] == service]
        assert mine["labels"] == labels
        assert [m["labels"] for m in mine["models"]] == [model_labels]
    finally:
        agent.stop(timeout=2.0)
    after = _status(daemon)
    assert after["protocol_errors"] == before["protocol_errors"]
    assert after["names_truncated"] == before["names_truncated"]


def test_the_agents_names_encoder_fills_frames_to_the_limit_and_the_daemon_takes_them(daemon: InProcess):
    """encode_names (the agent's NAMES writer) with names at MAX_NAME_BYTES of 4-byte
    characters and a table of several MiB: every frame within MAX_NAMES_PAYLOAD, the fullest
    within one name of it, and the daemon takes them all without cutting a name."""
    long4 = "\U0001F600" * (wire.MAX_NAME_BYTES // 4)  # exactly 4096 bytes
    assert len(long4.encode()) == wire.MAX_NAME_BYTES
    names = {i: long4 if i % 2 else text_of(wire.MAX_NAME_BYTES) for i in range(1, 1500)}
    frames = encode_names(names)
    sizes = [len(f) - wire.HEADER.size for f in frames]
    assert max(sizes) <= wire.MAX_NAMES_PAYLOAD and len(frames) >= 3
    one = max(len(json.dumps({str(k): v})) for k, v in names.items())
    assert all(s > wire.MAX_NAMES_PAYLOAD - one for s in sizes[:-1]), sizes  # as full as allowed
    before = _status(daemon)["names_truncated"]
    assert agent_session(daemon.socket, frames) is None
    assert _status(daemon)["names_truncated"] == before


def test_the_agent_senders_largest_batch_is_within_the_frame_limit():
    """The agent's sender takes at most MAX_FRAME_RECORDS per frame: that batch is a legal frame."""
    from aclprof.agent.sender import MAX_FRAME_RECORDS

    assert MAX_FRAME_RECORDS * wire.RECORD_DTYPE.itemsize <= wire.MAX_PAYLOAD
    frame = encode_batch(records(MAX_FRAME_RECORDS))
    assert len(list(wire.FrameReader().feed(frame))) == 1


# ---- the agent's buffer bound (aclprof/agent/buffer.py RecordBuffer) --------------------------

@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
def test_the_agent_buffer_keeps_exactly_buffer_records_and_counts_the_rest(offset: int):
    """``buffer_records`` (agent.start): with the daemon away, that many records are kept
    (nothing dropped); one more drops exactly the oldest one, counted."""
    from aclprof.agent.buffer import RecordBuffer

    bound = 100
    buf = RecordBuffer(bound)
    try:
        data = np.arange(bound + offset)
        for part in np.array_split(data, 7):  # several batches, as the subscriptions deliver them
            buf.add_batch(None, part, None)  # type: ignore[arg-type]
        items, n = buf.take(1 << 20)
        kept = np.concatenate([it.data for it in items])
        assert buf.records_in == bound + offset
        assert buf.dropped == max(0, offset) and n == min(bound, bound + offset)
        assert kept.tolist() == data[max(0, offset):].tolist()  # the newest kept, in order
    finally:
        buf.close()
    with pytest.raises(ValueError, match="at least 1"):
        RecordBuffer(0)
    RecordBuffer(1).close()


# ---- timeouts: the daemon's flush tick, at a time the test chooses -----------------------------

class _Clock:
    """``time`` for aclprofd.server: real, except during the one flush tick the test arms,
    which reads :attr:`frozen` (the connections' own times, conn.py and transport.py, stay
    real)."""

    def __init__(self) -> None:
        self.frozen: float | None = None

    def monotonic(self) -> float:
        return time.monotonic() if self.frozen is None else self.frozen

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _exact_sum(base: float, span: float, delta: float) -> float:
    """t with t - base == span exactly in floats for delta 0, else about span + delta."""
    t = base + span + delta
    if delta:
        return t
    while t - base > span:
        t = math.nextafter(t, -math.inf)
    while t - base < span:
        t = math.nextafter(t, math.inf)
    return t


def _tick_at(d: InProcess, when: Callable[[], float | None]) -> None:
    """Run the daemon's next flush tick (on its loop thread) at monotonic time ``when()``
    (computed there, from the daemon's connections); return once it ran."""
    from aclprofd import server

    assert isinstance(server.time, _Clock)
    done = threading.Event()
    errors: list[BaseException] = []
    orig = d.daemon.flush_steps

    def flush_steps() -> Iterator[None]:
        # the timer's flush runs in steps over loop turns: here in one piece, at the time
        try:
            t = None if done.is_set() else when()
        except BaseException as exc:  # reported on the test's thread
            errors.append(exc)
            done.set()
            t = None
        if t is None:
            yield from orig()
            return
        server.time.frozen = t
        try:
            for _ in orig():
                pass
        finally:
            server.time.frozen = None
            done.set()
            d.daemon.flush_steps = orig  # type: ignore[method-assign]
        yield

    d.daemon.flush_steps = flush_steps  # type: ignore[method-assign]
    assert done.wait(10), "no flush tick"
    if errors:
        raise errors[0]


STEP = 1e-3  # one millisecond below / above
IDLE = 100.0


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
def test_control_idle_timeout_edge(monkeypatch, offset: int):
    """``control_idle_timeout`` (connlimits.reap_idle): a control client whose last request
    is exactly the timeout old is closed ("no request this long"); a millisecond younger
    is kept."""
    from aclprofd import server

    monkeypatch.setattr(server, "time", _Clock())
    with InProcess(control_idle_timeout_s=IDLE) as d:
        c = Client(d.socket)
        try:
            c.request(Kind.STATUS)
            (conn,) = [x for x in d.daemon.conns.values() if x.role == "control"]
            limits = d.daemon.transport.limits
            _tick_at(d, lambda: None if (last := limits.last_request(conn)) is None
                     else _exact_sum(last, IDLE, offset * STEP))
            assert conn.closed == (offset >= 0), offset
            assert c.closed_by_peer(timeout=10) if offset >= 0 else c.request(Kind.STATUS)
        finally:
            c.close()


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
def test_hello_timeout_edge(monkeypatch, offset: int):
    """A connection that has not said HELLO for more than 10 s (aclprofd/server.py
    _HELLO_TIMEOUT_S) is closed; at exactly 10 s it is not yet."""
    from aclprofd import server

    monkeypatch.setattr(server, "time", _Clock())
    limit = server._HELLO_TIMEOUT_S
    with InProcess() as d:
        s = _connect(d.socket)
        try:
            conn = wait_for(lambda: next((x for x in d.daemon.conns.values() if x.role is None), None))
            _tick_at(d, lambda: _exact_sum(conn.connected, limit, offset * STEP))
            assert conn.closed == (offset > 0), offset
            if offset <= 0:  # kept: it may still say HELLO
                s.sendall(_hello("control"))
                assert _frames_to_eof_or_first(s)[0] == Kind.WELCOME  # type: ignore[index]
        finally:
            s.close()


# ---- EXPORT_RECORDS frames: 2048 records, ~1 MiB (aclprofd/records.py FRAME_RECORDS, wire.FRAME_TARGET) ----

def _export_frames(path: str, service: str) -> list[bytes]:
    c = Client(path)
    try:
        c.send_json(Kind.EXPORT, {"since_ts": None, "until_ts": None, "filter": {"service": service}})
        frames = []
        while True:
            k, payload = c.recv()
            if k == Kind.END:
                assert decode_json(payload)["records"] == sum(f.count(b"\n") for f in frames)
                return frames
            assert k == Kind.EXPORT_RECORDS, k
            frames.append(bytes(payload))
    finally:
        c.close()


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
def test_export_frames_hold_at_most_2048_records(daemon: InProcess, offset: int):
    n = 2048 + offset
    service = f"frames-{n}"
    c = Client(daemon.socket, "agent", service=service)
    c.names({1: "T", 2: "n"})
    c.send_batch(records(n, start=1 << 42))
    c.close()
    frames = wait_for(lambda: (lambda f: f if sum(x.count(b"\n") for x in f) == n else None)(
        _export_frames(daemon.socket, service)), timeout=20)
    assert [f.count(b"\n") for f in frames] == ([2048, 1] if offset > 0 else [n])


def test_export_frames_end_after_the_line_that_crosses_frame_target(daemon: InProcess):
    """Long names (4 KiB): a frame ends with the first line that takes it past 1 MiB."""
    service = "frames-long"
    c = Client(daemon.socket, "agent", service=service)
    c.names({1: "T", 2: "n" * wire.MAX_NAME_BYTES})
    n = 600  # ~2.5 MiB of lines
    c.send_batch(records(n, start=1 << 43))
    c.close()
    frames = wait_for(lambda: (lambda f: f if sum(x.count(b"\n") for x in f) == n else None)(
        _export_frames(daemon.socket, service)), timeout=20)
    assert len(frames) >= 3
    for f in frames[:-1]:
        last = f[:-1].rfind(b"\n") + 1  # where the frame's last line starts
        assert last < wire.FRAME_TARGET <= len(f), (last, len(f))
    assert len(frames[-1]) <= wire.FRAME_TARGET + wire.MAX_NAME_BYTES * 2
