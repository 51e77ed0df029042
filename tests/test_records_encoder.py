"""The daemon's C JSON Lines encoder (aclprof.protocol._jsonl via aclprofd.records.encode_frames)
writes byte for byte what the Python reference (encode_records_py + jsonl_payloads) writes:
names with quotes, backslashes, control characters, non-ASCII and lone surrogates, every
integer width, keypoint flags, per-record and per-batch times, frame splits by count and
by size; and every line is JSON that decodes to the record's values.

Hostile input: wrong buffer sizes, wrong argument types, a name callback that raises or
returns the wrong type, non-finite times: a clear exception, never a crash or a bad frame.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os

import aclprofd.records
import numpy as np
import pytest
from aclprofd.records import (
    FRAME_RECORDS,
    NameJson,
    encode_frames,
    encode_records_py,
    identity_head,
    jsonl_payloads,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aclprof.protocol import _jsonl

if os.environ.get("ACLPROF_JSONL_SANITIZED"):
    # .ci/sanitize_ext.sh _jsonl: the same tests on a build with ASan/UBSan
    _spec = importlib.util.spec_from_file_location("aclprof.protocol._jsonl", os.environ["ACLPROF_JSONL_SANITIZED"])
    assert _spec is not None and _spec.loader is not None
    _jsonl = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_jsonl)
    aclprofd.records._encode_frames = _jsonl.encode_frames
from aclprof.protocol.wire import FLAG_KEYPOINT, FRAME_TARGET, HEADER, MAX_PAYLOAD, RECORD_DTYPE, FrameReader, Kind


def reference(recs, ts, host, pid, service, names) -> bytes:
    """The frames the Python encoder makes (the daemon's code before the C encoder)."""
    out = bytearray()
    for i in range(0, len(recs), FRAME_RECORDS):
        items = encode_records_py(recs[i:i + FRAME_RECORDS], ts if not isinstance(ts, np.ndarray)
                                  else ts[i:i + FRAME_RECORDS], host, pid, service, NameJson(names))
        for _, payload in jsonl_payloads(items):
            out += HEADER.pack(b"ACLP", 1, int(Kind.STREAM_RECORDS), 0, len(payload)) + payload
    return bytes(out)


def c_frames(recs, ts, host, pid, service, names, kind=Kind.STREAM_RECORDS) -> bytes:
    out = bytearray()
    nj = NameJson(names)
    head = identity_head(host, pid, service)
    for i in range(0, len(recs), FRAME_RECORDS):  # as the daemon calls it
        out += encode_frames(recs[i:i + FRAME_RECORDS], ts if not isinstance(ts, np.ndarray)
                             else ts[i:i + FRAME_RECORDS], head, nj, kind)
    return bytes(out)


def frames_of(data: bytes) -> list[tuple[Kind, bytes]]:
    reader = FrameReader()
    return [(k, bytes(p)) for k, p in reader.feed(data)]


def make(n: int, names: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.zeros(n, dtype=RECORD_DTYPE)
    r["model_id"] = rng.integers(0, 2**32, n, dtype=np.uint64)
    r["op_name"] = rng.integers(0, names, n)
    r["op_type"] = rng.integers(0, names, n)
    r["flag"] = rng.integers(0, 2**32, n, dtype=np.uint64)
    r["thread_id"] = rng.integers(0, 2**32, n, dtype=np.uint64)
    r["device_id"] = rng.integers(0, 2**32, n, dtype=np.uint64)
    for f in ("start", "end", "duration", "execution_time"):
        r[f] = rng.integers(0, 2**63, n, dtype=np.uint64) * 2 + rng.integers(0, 2, n, dtype=np.uint64)
    return r


HOSTILE_NAMES = {0: 'a"b\\c', 1: "\x00\x01\x1f\x7f\u2028", 2: "名前/é", 3: "\ud800lone", 4: "\U0001f600",
                 5: "", 6: "</script>", 7: "x" * 5000}


def test_matches_reference_on_hostile_names_and_full_width_numbers():
    recs = make(5000, names=10)  # ids 8, 9 undefined: "#8", "#9"
    recs["flag"][::7] |= FLAG_KEYPOINT
    recs["flag"][1] = 0xFFFFFFFF
    recs["start"][0] = 2**64 - 1
    ts = 1_700_000_000.123456
    got = c_frames(recs, ts, "h\"ost\u00e9", 4242, "svc\n", HOSTILE_NAMES)
    assert got == reference(recs, ts, "h\"ost\u00e9", 4242, "svc\n", HOSTILE_NAMES)
    lines = b"".join(p for _, p in frames_of(got)).split(b"\n")
    assert lines[-1] == b"" and len(lines) == 5001
    first = json.loads(lines[0])
    r0 = recs[0]
    assert first == {"ts": ts, "host": "h\"ost\u00e9", "pid": 4242, "service": "svc\n",
                     "device": int(r0["device_id"]), "model": int(r0["model_id"]),
                     "op_type": first["op_type"], "op_name": first["op_name"], "start": 2**64 - 1,
                     "end": int(r0["end"]), "duration_ns": int(r0["duration"]),
                     "flag": int(r0["flag"]) & 0x7FFFFFFF, "thread_id": int(r0["thread_id"]),
                     "kind": "keypoint" if r0["flag"] & FLAG_KEYPOINT else "op"}
    assert json.loads(lines[1])["flag"] == 0x7FFFFFFF and json.loads(lines[1])["kind"] == "keypoint"
    # the 5000-char name is cut to MAX_NAME_BYTES, never a longer line
    assert max(len(x) for x in lines) < 4096 * 2 + 600


def test_per_record_times_null_service_and_frame_kind():
    recs = make(3000, names=8, seed=1)
    ts = np.repeat(np.array([1.0, 2.5e9, 1 / 128, 0.0000005, 1e300, -3.25]), 500)  # 1/128: a %.6f tie
    got = c_frames(recs, ts, "", 0, None, HOSTILE_NAMES, Kind.EXPORT_RECORDS)
    want = reference(recs, ts, "", 0, None, HOSTILE_NAMES)
    assert [p for _, p in frames_of(got)] == [p for _, p in frames_of(want)]
    assert {k for k, _ in frames_of(got)} == {Kind.EXPORT_RECORDS}
    assert b'"service":null,' in got and b'"ts":0.007812,' in got


def test_non_finite_time_is_null_not_invalid_json():
    recs = make(3, seed=2)
    for ts in (math.nan, math.inf, -math.inf):
        got = c_frames(recs, ts, "h", 1, "s", {})
        assert got == reference(recs, ts, "h", 1, "s", {})
        for line in frames_of(got)[0][1].splitlines():
            assert json.loads(line)["ts"] is None


def test_frames_split_by_count_and_by_size():
    recs = make(FRAME_RECORDS * 2 + 5, names=2, seed=3)
    frames = frames_of(c_frames(recs, 5.0, "h", 1, "s", {0: "a", 1: "b"}))
    assert [p.count(b"\n") for _, p in frames] == [FRAME_RECORDS, FRAME_RECORDS, 5]
    # long names: the size target ends a frame after the line that crosses it
    big = {0: "n" * 4000, 1: "\x01" * 4000}  # escaped: 6 bytes per character
    recs = make(1000, names=2, seed=4)
    data = c_frames(recs, 5.0, "h", 1, "s", big)
    assert data == reference(recs, 5.0, "h", 1, "s", big)
    frames = frames_of(data)
    assert len(frames) > 1
    for _, p in frames[:-1]:
        body = p[:p.rindex(b"\n", 0, len(p) - 1) + 1]  # all lines but the last
        assert len(body) < FRAME_TARGET <= len(p) < MAX_PAYLOAD


def test_empty_input_is_empty_output():
    assert encode_frames(np.zeros(0, RECORD_DTYPE), 1.0, b"", NameJson({})) == b""


# any code point (lone surrogates included), and the hostile ones often
HOSTILE_CHARS = ['"', "\\", "/", "\x00", "\x1f", "\x7f", "\x80", "\u2028", "\u00e9", "\u540d", "\ud800",
                 "\udfff", "\U0001f600", "\ufffd", "a"]
name_text = st.text(alphabet=st.sampled_from(HOSTILE_CHARS) | st.characters(codec=None, exclude_categories=()),
                    max_size=40)


@example(names={}, host="", service=None, pid=0, n=2, seed=0, ts=[0.0, -0.0])  # -0.0 keeps its sign
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.dictionaries(st.integers(0, 5), name_text, max_size=6),
       host=name_text, service=st.none() | name_text, pid=st.integers(0, 2**31 - 1),
       n=st.integers(0, 60), seed=st.integers(0, 2**32 - 1),
       ts=st.floats(allow_nan=True, allow_infinity=True) | st.lists(st.floats(min_value=-1e12, max_value=1e12),
                                                                   min_size=1, max_size=3))
def test_hypothesis_byte_exact(names, host, service, pid, n, seed, ts):
    recs = make(n, names=7, seed=seed)
    if isinstance(ts, list):
        ts = np.resize(np.array(ts, dtype=np.float64), n)
    assert c_frames(recs, ts, host, pid, service, names) == reference(recs, ts, host, pid, service, names)


# ---- hostile calls of the C function itself -------------------------------------------------

def call(records=None, ts=1.0, head=b"", names=None, miss=None, kind=23, max_records=2048,
         target=FRAME_TARGET, max_payload=MAX_PAYLOAD):
    records = make(2) if records is None else records
    names = {} if names is None else names
    miss = miss or (lambda nid: b'"x"')
    return _jsonl.encode_frames(records, ts, head, names, miss, kind, max_records, target, max_payload)


def test_hostile_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="whole number of 56-byte records"):
        call(records=b"\0" * 57)
    with pytest.raises(ValueError, match="one per record"):
        call(ts=np.zeros(3))
    with pytest.raises(TypeError, match="head must be bytes"):
        call(head="str")
    with pytest.raises(TypeError, match="names must be a dict"):
        call(names=[])
    with pytest.raises(TypeError, match="9 arguments"):
        _jsonl.encode_frames(b"")
    with pytest.raises(ValueError, match="kind must be"):
        call(kind=256)
    with pytest.raises(ValueError, match="kind must be"):
        call(max_records=0)
    with pytest.raises(TypeError, match="not bytes"):
        call(miss=lambda nid: "a str")
    with pytest.raises(ValueError, match="passes the limit"):
        call(max_payload=100)
    with pytest.raises(TypeError):
        call(records=12)


def test_a_raising_name_callback_propagates_and_leaks_nothing():
    class Boom(Exception):
        pass

    def miss(nid):
        raise Boom(nid)

    for _ in range(1000):  # refcounts: a leak or a double free shows up as a crash or growth
        with pytest.raises(Boom):
            call(records=make(50, names=3), miss=miss)


def test_name_cache_is_filled_once_per_id():
    calls = []
    nj = NameJson({0: "a", 1: "b"})

    def miss(nid):
        calls.append(nid)
        return nj(nid)

    recs = make(10_000, names=2, seed=5)
    out = _jsonl.encode_frames(recs, 1.0, b"", nj.cache, miss, 23, 2048, FRAME_TARGET, MAX_PAYLOAD)
    assert sorted(calls) == [0, 1] and nj.cache == {0: b'"a"', 1: b'"b"'}
    assert out.count(b"\n") == 10_000


def test_records_must_be_wire_records():
    with pytest.raises(TypeError, match="RECORD_DTYPE"):
        encode_frames(np.zeros(3, np.dtype([("a", "<u8")] * 1 + [("b", "S48")])), 1.0, b"", NameJson({}))


def test_records_must_be_contiguous_and_wire_sized():
    recs = make(10)
    assert encode_frames(recs[::2], 1.0, b"", NameJson({})) == encode_frames(recs[::2].copy(), 1.0, b"", NameJson({}))
    with pytest.raises((ValueError, BufferError), match="contiguous"):
        _jsonl.encode_frames(recs[::2], 1.0, b"", {}, lambda n: b'""', 23, 2048, FRAME_TARGET, MAX_PAYLOAD)


def test_a_name_callback_that_encodes_too_gets_its_own_buffer():
    """The name callback is Python, which may switch threads or encode itself: the inner
    call must not write into the buffer the outer call is filling (both outputs exact)."""
    inner_recs = make(3000, names=2, seed=8)  # big enough to grow a buffer
    inner_out = []
    nj = NameJson(HOSTILE_NAMES)

    def miss(nid):
        inner_out.append(encode_frames(inner_recs, 2.0, b'"host":"i",', NameJson({0: "x" * 300, 1: "y"})))
        return nj(nid)

    recs = make(4000, names=8, seed=9)
    outer = _jsonl.encode_frames(recs, 1.0, identity_head("h", 1, "s"), nj.cache, miss, 23, FRAME_RECORDS * 2,
                                 FRAME_TARGET, MAX_PAYLOAD)
    assert inner_out and all(x == inner_out[0] for x in inner_out)
    assert b"".join(p for _, p in frames_of(outer)) == b"".join(
        p for _, p in frames_of(reference(recs, 1.0, "h", 1, "s", HOSTILE_NAMES)))
    want_inner = encode_frames(inner_recs, 2.0, b'"host":"i",', NameJson({0: "x" * 300, 1: "y"}))
    assert inner_out[0] == want_inner


def _lines_into(buf: bytearray, recs: np.ndarray, ts: float, host: str, pid: int, service: str | None,
                names: dict) -> tuple[bytes, int]:
    """All of ``recs`` through encode_lines_into ``buf``, call after call: (text, calls)."""
    nj, head, text, calls, i = NameJson(names), identity_head(host, pid, service), b"", 0, 0
    while i < len(recs):
        done, size = _jsonl.encode_lines_into(buf, recs[i:], ts, head, nj.cache, nj)
        assert done > 0 and size <= len(buf)
        text += bytes(buf[:size])
        i, calls = i + done, calls + 1
    return text, calls


@pytest.mark.parametrize("size", [60_000, 200_000, 1 << 20])
def test_lines_into_a_kept_buffer_are_the_frames_payloads(size):
    """encode_lines_into (a client rendering binary STREAM records): the payloads of the
    daemon's frames for the same records, whatever buffer they are written into, in as many
    calls as it takes; nothing written past the buffer (the sanitized build would say)."""
    recs = make(3000, names=8, seed=5)
    text, calls = _lines_into(bytearray(size), recs, 1.7e9, "h\n", 3, None, HOSTILE_NAMES)
    want = b"".join(p for _, p in frames_of(reference(recs, 1.7e9, "h\n", 3, None, HOSTILE_NAMES)))
    assert text == want and (calls > 1) == (size < len(want))


def test_lines_into_a_buffer_too_small_for_a_line_is_an_error():
    recs = make(2, names=8, seed=6)
    with pytest.raises(ValueError, match="too small for a line"):
        _lines_into(bytearray(100), recs, 1.0, "h", 1, "s", HOSTILE_NAMES)
    assert _jsonl.encode_lines_into(bytearray(100), recs[:0], 1.0, b"", {}, NameJson({})) == (0, 0)
    with pytest.raises(BufferError):
        _jsonl.encode_lines_into(b"read-only", recs, 1.0, b"", {}, NameJson({}))


def test_the_encoder_under_test_is_the_one_asked_for():
    """Under .ci/sanitize_ext.sh _jsonl every test above ran on the sanitized build."""
    path = os.environ.get("ACLPROF_JSONL_SANITIZED")
    assert aclprofd.records._encode_frames is _jsonl.encode_frames
    if path:
        assert _jsonl.__file__ == path


def test_a_connections_name_literals_are_looked_up_once_across_calls():
    """Issue 21: the encoder keeps its name cache from one call to the next for the same
    cache dict (a STREAM pump's calls for one agent), so each id is looked up once, not once
    per call; another dict gets its own literals, and a miss that raised leaves nothing."""
    calls = []

    def miss(nid):  # not stored in the dict: only the encoder's own cache can skip it
        calls.append(nid)
        return b'"n%d"' % nid

    cache: dict[int, bytes] = {}
    recs = make(500, names=3, seed=2)
    first = _jsonl.encode_frames(recs, 1.0, b"", cache, miss, 23, 2048, FRAME_TARGET, MAX_PAYLOAD)
    assert sorted(set(calls)) == sorted(calls)  # each id once in the call
    n = len(calls)
    again = _jsonl.encode_frames(recs, 1.0, b"", cache, miss, 23, 2048, FRAME_TARGET, MAX_PAYLOAD)
    assert again == first and len(calls) == n  # nothing looked up again
    other = {k: b'"o%d"' % k for k in range(3)}
    out = _jsonl.encode_frames(recs, 1.0, b"", other, miss, 23, 2048, FRAME_TARGET, MAX_PAYLOAD)
    assert b'"o0"' in out or b'"o1"' in out or b'"o2"' in out
    assert b'"n' not in out  # not the first dict's literals

    def bad(nid):
        raise RuntimeError("miss failed")

    with pytest.raises(RuntimeError, match="miss failed"):
        _jsonl.encode_frames(recs, 1.0, b"", {}, bad, 23, 2048, FRAME_TARGET, MAX_PAYLOAD)
    calls.clear()
    assert _jsonl.encode_frames(recs, 1.0, b"", cache, miss, 23, 2048, FRAME_TARGET, MAX_PAYLOAD) == first


# ---- number formatting and the caches of the encoder (issue 21) ------------------------------

_EDGES = sorted({v for k in range(20) for v in (10**k - 1, 10**k, 10**k + 1)} | {2**32 - 1, 2**32, 2**63, 2**64 - 1}
                | {2**k for k in range(64)})
_EDGES = [v for v in _EDGES if v < 2**64]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.sampled_from(_EDGES) | st.integers(0, 2**64 - 1)] * 3,
                          *[st.sampled_from([v for v in _EDGES if v < 2**32]) | st.integers(0, 2**32 - 1)] * 4),
                min_size=1, max_size=20))
def test_numbers_at_every_digit_count_are_exact(rows):
    """Every u64 and u32 field at the edges of each digit count (10**k - 1, 10**k) and at
    random values: the C encoder writes eight digits at a time and counts digits with a
    multiply-shift, and must write exactly what the reference's %d writes."""
    recs = np.zeros(len(rows), RECORD_DTYPE)
    for i, (start, end, duration, model, device, thread, flag) in enumerate(rows):
        recs[i]["start"], recs[i]["end"], recs[i]["duration"] = start, end, duration
        recs[i]["model_id"], recs[i]["device_id"], recs[i]["thread_id"], recs[i]["flag"] = model, device, thread, flag
        recs[i]["op_name"], recs[i]["op_type"] = i % 3, 2
    names = {0: "a", 1: "b", 2: "T"}
    assert c_frames(recs, 3.5, "h", 1, "s", names) == reference(recs, 3.5, "h", 1, "s", names)


def test_op_texts_of_many_long_names_pass_the_cache_bound_exactly():
    """The encoder keeps each op's text (device .. "start":) between calls, at most ~1 MiB of
    them: 300 ops whose names escape to 24 KB each pass that bound several times within one
    call and across calls, and every line is still the reference's."""
    names = {i: "\x01" * 4000 + str(i) for i in range(300)}
    recs = make(900, names=300, seed=11)
    recs["device_id"] %= 2
    recs["model_id"] %= 2
    nj = NameJson(names)
    head = identity_head("h", 1, "s")
    want = reference(recs, 2.0, "h", 1, "s", names)
    for _ in range(2):  # the second call starts from what the first left in the cache
        got = b"".join(encode_frames(recs[i:i + FRAME_RECORDS], 2.0, head, nj)
                       for i in range(0, len(recs), FRAME_RECORDS))
        assert got == want


def test_a_pump_alternating_between_agents_keeps_each_ones_literals():
    """A STREAM pump encodes one agent's batch, then another's, then the first's again: the
    encoder keeps the name caches of the last few dicts (LRU), so no id is looked up again
    while a pump alternates between two agents (one cache, as before, was emptied at each
    change of dict: every name looked up again, every call)."""
    calls: dict[str, list[int]] = {"a": [], "b": []}

    def misser(tag):
        def miss(nid):  # not stored in the dict: only the encoder's own caches can skip it
            calls[tag].append(nid)
            return b'"%s%d"' % (tag.encode(), nid)
        return miss

    dicts = {"a": {}, "b": {}}
    recs = make(300, names=5, seed=12)
    firsts = {}
    for _round in range(3):
        for tag in ("a", "b"):
            out = _jsonl.encode_frames(recs, 1.0, b"", dicts[tag], misser(tag), 23, 2048, FRAME_TARGET, MAX_PAYLOAD)
            assert firsts.setdefault(tag, out) == out
            assert (b'"b' in out) == (tag == "b") and (b'"a' in out) == (tag == "a")
    assert sorted(calls["a"]) == sorted(set(calls["a"])) and sorted(calls["b"]) == sorted(set(calls["b"]))


def test_ns_times_that_share_their_high_digits_are_exact():
    """The encoder formats a time's digits above its last eight once for the times that share
    them (a batch's starts and ends): times across a 0.1 s boundary, small values between
    them, the first time of a call and the largest u64 all come out as %d writes them."""
    base = 1_764_000_000_099_999_990
    starts = [base + k * 3 for k in range(8)] + [5, 10**8 - 1, 10**8, base, 2**64 - 1, base + 10**8, 0]
    recs = np.zeros(len(starts), RECORD_DTYPE)
    recs["start"] = starts
    recs["end"] = [s + 7 if s < 2**64 - 8 else s for s in starts]
    recs["duration"] = 7
    head = identity_head("h", 1, "s")
    want = b"".join(p for _, p in frames_of(reference(recs, 1.0, "h", 1, "s", {})))
    for split in (1, 3, len(starts)):  # each call starts its cache afresh
        got = b"".join(encode_frames(recs[i:i + split], 1.0, head, NameJson({})) for i in range(0, len(recs), split))
        assert b"".join(p for _, p in frames_of(got)) == want
