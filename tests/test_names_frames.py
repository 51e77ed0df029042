"""NAMES frames are bounded (``wire.MAX_NAMES_PAYLOAD``): the daemon parses a frame in one go
on its loop, so one agent's 16 MiB name table used to hold every other client for ~1.5 s.
Agents split a large table into several frames (``wire.encode_names``); the daemon refuses a
larger frame, closing only that connection."""

from __future__ import annotations

import json

import pytest
from helpers.daemons import Client, InProcess, agent
from helpers.procs import wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from aclprof.protocol.wire import (
    HEADER,
    MAX_NAME_BYTES,
    MAX_NAMES_PAYLOAD,
    Kind,
    encode_name_pieces,
    encode_name_run,
    encode_names,
    name_run_json,
)

pytestmark = pytest.mark.timeout(90)


def _payloads(frames: list[bytes]) -> list[bytes]:
    out = []
    for f in frames:
        *_, kind, _reserved, length = HEADER.unpack_from(f)
        assert kind == Kind.NAMES and len(f) == HEADER.size + length
        out.append(f[HEADER.size:])
    return out


def _union(frames: list[bytes]) -> dict[str, str]:
    table: dict[str, str] = {}
    for p in _payloads(frames):
        part = json.loads(p)["names"]
        assert not set(part) & set(table)  # each id in one frame only
        table.update(part)
    return table


def test_a_large_table_is_split_into_bounded_frames_that_add_up_to_it():
    # the worst escaping: every character of a longest name becomes a 6-byte \\u00XX
    names = {i: ("\x01" * MAX_NAME_BYTES if i % 7 == 0 else f"op{i}/" + "x" * 3000) for i in range(1500)}
    frames = encode_names(names)
    assert len(frames) > 1
    assert all(len(p) <= MAX_NAMES_PAYLOAD for p in _payloads(frames))
    assert _union(frames) == {str(k): v for k, v in names.items()}
    assert encode_names({}) == []
    one = encode_names({"5": "Conv2D"})
    assert _payloads(one) == [b'{"names":{"5":"Conv2D"}}']


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 2**32 - 1), st.text(max_size=200), max_size=40))
def test_encode_names_round_trips_any_table(names):
    frames = encode_names(names)
    assert _union(frames) == {str(k): v for k, v in names.items()}
    assert all(len(p) <= MAX_NAMES_PAYLOAD for p in _payloads(frames))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.text(max_size=200), max_size=40))
def test_a_name_run_encodes_to_the_same_bytes_as_its_table(first, texts):
    """The agent's fast path (issue 21: one C JSON call per run of new names) sends exactly
    what encode_names sends for the same ids."""
    assert encode_name_run(first, texts) == encode_names({first + i: t for i, t in enumerate(texts)})


def test_a_name_run_too_large_for_one_frame_is_split_like_encode_names():
    texts = ["\x01" * MAX_NAME_BYTES if i % 7 == 0 else f"op{i}/" + "x" * 3000 for i in range(1500)]
    frames = encode_name_run(10, texts)
    assert len(frames) > 1 and frames == encode_names({10 + i: t for i, t in enumerate(texts)})


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.lists(st.text(max_size=200), max_size=12), max_size=8))
def test_name_runs_built_apart_frame_as_one_table(first, runs):
    """The agent's slices of a connection's names (issue 21: each built in its own GIL hold)
    framed together: the bytes of encode_names of all of them when they fit one frame."""
    pieces, at = [], first
    for texts in runs:
        pieces.append((at, texts, name_run_json(at, texts)))
        at += len(texts)
    table = {first + i: t for i, t in enumerate(t for texts in runs for t in texts)}
    assert encode_name_pieces(pieces) == encode_names(table)


def test_name_runs_too_large_for_one_frame_split_between_runs_and_a_huge_run_between_names():
    big = [f"op{i}/" + "x" * 3000 for i in range(200)]  # ~600 KB of JSON a run
    huge = ["\x01" * MAX_NAME_BYTES for _ in range(60)]  # ~1.5 MB of escaped JSON: no frame holds it
    pieces, at = [], 7
    for texts in (big, ["a", "b"], big, huge, ["c"]):
        pieces.append((at, texts, name_run_json(at, texts)))
        at += len(texts)
    frames = encode_name_pieces(pieces)
    table = {str(first + i): t for first, texts, _ in pieces for i, t in enumerate(texts)}
    assert _union(frames) == table
    assert all(len(p) <= MAX_NAMES_PAYLOAD for p in _payloads(frames))
    assert len(frames) < len(pieces) + 3  # runs share frames; the huge one takes several of its own


def test_the_daemon_refuses_an_oversize_names_frame_and_only_that_connection():
    with InProcess() as d:
        watcher = Client(d.socket)
        bad = Client(d.socket, "agent")
        big = {str(i): "n" * 1000 for i in range(1100)}  # ~1.1 MB of JSON in one frame
        bad.send_json(Kind.NAMES, {"names": big})
        assert bad.closed_by_peer(timeout=10)
        st_ = watcher.request(Kind.STATUS)
        assert st_["protocol_errors"] >= 1
        good = agent(d.socket)  # others connect and are served as before
        good.close()
        watcher.close()


def test_an_agent_with_a_multi_megabyte_name_table_streams_every_name():
    from aclprof import agent as agent_mod
    from aclprof import mock

    with InProcess() as d:
        ops = [{"name": f"layer{i:04d}/" + "w" * 700, "type": f"T{i % 9}", "duration_ns": 1000} for i in range(2500)]
        model = mock.load_model(ops)  # ~1.8 MB of names: at least two NAMES frames
        try:
            a = agent_mod.start(d.socket, service="bignames")
            agent_mod.watch(model)
            mock.execute(model, 2)
            mock.wait_writer_idle()
            wait_for(lambda: a.stats().records_sent >= 5000, what="every record sent")
            c = Client(d.socket)

            def by_name() -> dict | None:
                r = c.request(Kind.SNAPSHOT, {"window": "all", "group_by": "name"})
                return r if sum(x["count"] for x in r["rows"]) >= 5000 else None

            snap = wait_for(by_name, what="all records aggregated")
            assert {row["key"] for row in snap["rows"]} == {op["name"] for op in ops}
            assert c.request(Kind.STATUS)["protocol_errors"] == 0
            c.close()
        finally:
            agent_mod.stop(timeout=5)
            mock.unload(model)
