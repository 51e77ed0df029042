"""The storage's compact record encoding (issue 21): aclprof.protocol._reccodec against the
plain-Python reference of its documented format (tests/helpers/reccodec_ref.py), byte for byte
both ways, for records of every shape; the decoder's refusals (truncated, trailing bytes, a
count that does not match, overlong and too-wide varints, a type the table does not hold); and
aclprofd.storage's "ACK3" chunks: read back identical, beside "ACK1"/"ACK2" chunks in one file,
raw where encoding would not be smaller, the switch to raw chunks, one kept encoding buffer.

Under .ci/sanitize_ext.sh _reccodec the codec tests run on a build with ASan/UBSan."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import struct
import time

import numpy as np
import pytest
from aclprofd import storage
from aclprofd.storage import Storage, read_segment
from helpers import reccodec_ref
from helpers.procs import short_tmpdir
from helpers.records import make_records
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aclprof.protocol import _reccodec
from aclprof.protocol.wire import FLAG_KEYPOINT, RECORD_DTYPE

if os.environ.get("ACLPROF_RECCODEC_SANITIZED"):
    # .ci/sanitize_ext.sh _reccodec: the same tests on a build with ASan/UBSan
    _spec = importlib.util.spec_from_file_location("aclprof.protocol._reccodec",
                                                   os.environ["ACLPROF_RECCODEC_SANITIZED"])
    assert _spec is not None and _spec.loader is not None
    _reccodec = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_reccodec)
    storage.encode_records, storage.decode_records = _reccodec.encode_into, _reccodec.decode

REC = RECORD_DTYPE.itemsize
_PACK = struct.Struct("<6I4Q")
U32, U64 = (1 << 32) - 1, (1 << 64) - 1


def enc(raw: bytes, parts: int = 1) -> bytes:
    """The C encoding of ``raw``, handed over in ``parts`` pieces."""
    out = bytearray(len(raw) // REC * _reccodec.RECORD_MAX_BYTES)
    n = len(raw) // REC
    cuts = [n * i // parts * REC for i in range(parts + 1)]
    k = _reccodec.encode_into(out, [raw[a:b] for a, b in itertools.pairwise(cuts)])
    assert k >= 0
    return bytes(out[:k])


def ops(n: int, seed: int = 0, threads: int = 1) -> np.ndarray:
    """Back-to-back ops of a model on ``threads`` streams (the agent benchmark's shape)."""
    rng = np.random.default_rng(seed)
    r = np.zeros(n, RECORD_DTYPE)
    dur = rng.integers(1_000, 50_000, n).astype(np.uint64)
    r["start"] = np.uint64(1_764_000_000_000_000_000) + np.cumsum(dur) - dur
    r["end"] = r["start"] + dur
    r["duration"] = dur
    r["execution_time"] = dur * rng.integers(80, 96, n).astype(np.uint64) // 100
    r["op_name"] = 10 + np.arange(n) % 300
    r["op_type"] = 1 + np.arange(n) % 7
    r["model_id"], r["device_id"] = 3, 1
    r["thread_id"] = 4000 + np.arange(n) % threads
    r["flag"][::100] = FLAG_KEYPOINT
    return r


# ---- the codec ------------------------------------------------------------------------------

u32 = st.one_of(st.integers(0, 3), st.integers(0, U32), st.sampled_from([U32, U32 - 1, 1 << 31, FLAG_KEYPOINT]))
u64 = st.one_of(st.integers(0, 1 << 20), st.integers(0, U64), st.sampled_from([U64, U64 - 1, 1 << 63, 1 << 62]),
                st.integers(1_700_000_000_000_000_000, 1_800_000_000_000_000_000))
record = st.tuples(u32, u32, u32, u32, u32, u32, u64, u64, u64, u64)


@st.composite
def shaped(draw) -> bytes:
    """Records of every shape: arbitrary fields, or a stream whose fields mostly repeat and
    whose times mostly follow (the encoding's short forms), with arbitrary ones mixed in."""
    if draw(st.booleans()):
        return b"".join(_PACK.pack(*r) for r in draw(st.lists(record, max_size=40)))
    out, prev = [], list(draw(record))
    for _ in range(draw(st.integers(0, 60))):
        r = list(prev)
        kind = draw(st.integers(0, 6))
        if kind == 0:
            r = list(draw(record))
        else:
            span = draw(st.integers(0, 1 << 24))
            start = (prev[7] + draw(st.integers(-(1 << 20), 1 << 20))) & U64 if kind < 4 else \
                (prev[6] + draw(st.integers(-(1 << 30), 1 << 30))) & U64
            dur = span if kind != 2 else draw(u64)
            r[1] = (prev[1] + draw(st.integers(-3, 3))) & U32
            r[2] = draw(st.sampled_from([prev[2], 1, 2, 3]))
            r[3] = draw(st.sampled_from([prev[3], 0, FLAG_KEYPOINT]))
            r[6], r[7], r[8] = start, (start + span) & U64, dur
            r[9] = draw(st.one_of(st.integers(0, dur), st.just(0), u64))
        out.append(_PACK.pack(*r))
        prev = r
    return b"".join(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=shaped(), parts=st.integers(1, 4))
@example(raw=_PACK.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), parts=1)
@example(raw=_PACK.pack(U32, U32, U32, U32, U32, U32, U64, 0, U64, U64) * 3, parts=2)  # start > end, all ones
@example(raw=_PACK.pack(1, 2, 3, FLAG_KEYPOINT, 4, 5, 10, 5, 1 << 63, 7), parts=1)
def test_records_round_trip_byte_for_byte_as_the_reference_encodes_them(raw, parts):
    data = enc(raw, parts)
    assert data == reccodec_ref.encode(raw)  # the documented format, choices included
    n = len(raw) // REC
    assert _reccodec.decode(data, n) == raw == reccodec_ref.decode(data, n)
    assert n * _reccodec.RECORD_MIN_BYTES <= len(data) <= n * _reccodec.RECORD_MAX_BYTES


def test_the_agent_benchmarks_records_take_about_seven_bytes():
    """Back-to-back ops of one stream: tag, op_name +1, start at the previous end, end - start,
    execution time 2 bytes each, op type from the table: 7 bytes a record (1/8 of 56)."""
    r = ops(20_000, threads=1)
    dur = np.uint64(10_000)  # the mock model of bench_agent_overhead: 1000 ops x 10 us, no gap
    r["start"] = r["start"][0] + np.arange(len(r), dtype=np.uint64) * dur
    r["end"], r["duration"] = r["start"] + dur, dur
    r["execution_time"] = dur * np.random.default_rng(1).integers(80, 96, len(r)).astype(np.uint64) // 100
    r["op_name"] = 10 + np.arange(len(r)) % 1000
    r["op_type"] = 1 + r["op_name"] % 6  # an op's type is the same at each execution
    r["flag"] = 0
    data = enc(r.tobytes())
    assert len(data) / len(r) < 7.1  # the first of 20 executions takes its op types
    assert _reccodec.decode(data, len(r)) == r.tobytes()


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80), count=st.integers(0, 12))
@example(data=b"\xff\x00\x00\x00\x00", count=1)
def test_the_decoder_refuses_exactly_what_the_reference_refuses(data, count):
    """Any bytes: the C decoder and the reference agree on the records or both refuse."""
    try:
        want = reccodec_ref.decode(data, count)
    except reccodec_ref.RefDecodeError:
        with pytest.raises(ValueError, match="records codec"):
            _reccodec.decode(data, count)
    else:
        assert _reccodec.decode(data, count) == want


GOOD = enc(ops(3).tobytes())


@pytest.mark.parametrize(("data", "count", "message"), [
    (GOOD, 4, "records need at least|record 3 of 4: tag: the data ends"),
    (GOOD + b"\x00", 3, r"1 bytes after the last of 3 records \(byte %d of %d\)" % (len(GOOD), len(GOOD) + 1)),
    (GOOD, 2, "bytes after the last of 2 records"),
    (b"", 1, "1 records need at least 5 bytes each, the data is 0 bytes"),
    (GOOD, -1, "a count of -1 records"),
    (GOOD, 1 << 40, "records need at least"),
    # tag 0xFF: every repeatable field repeats; op_name's varint 0x80 0x00 is 0 in two bytes
    (b"\xff\x80\x00\x00\x00\x00", 1, r"record 0 of 1: op_name: an overlong varint \(byte 1 of 6\)"),
    (b"\xdf\x80\x80\x80\x80\x80\x01\x00\x00\x00", 1, "op_name: an overlong varint"),  # six bytes for 32 bits
    (b"\xdf\x80\x80\x80\x80\x10\x00\x00\x00\x00", 1, "op_name: a varint wider than the field"),  # 2^32
    (b"\xdf\x00\x00" + b"\xff" * 9 + b"\x02\x00\x00", 1, "start: a varint wider than the field"),  # 2^64
    (b"\xdf\x00\x00" + b"\xff" * 10 + b"\x01", 1, "start: an overlong varint"),
    (b"\xff\x05\x00\x00\x00", 1, "op_type from the table, which has none for op_name 4294967293"),
    (b"\xdf\x00\x00\x00\x80", 1, r"record 0 of 1: end: the data ends \(byte 4 of 5\)"),
])
def test_the_decoder_names_what_is_wrong(data, count, message):
    with pytest.raises(ValueError, match=message):
        _reccodec.decode(data, count)


def test_every_cut_of_an_encoding_is_refused():
    """A chunk cut anywhere (the count from its metadata, the bytes short) is an error, never
    records read from past the end (the sanitized build would say)."""
    raw = ops(50, threads=3).tobytes()
    data = enc(raw)
    for cut in range(len(data)):
        with pytest.raises(ValueError, match="records codec"):
            _reccodec.decode(data[:cut], 50)
        with pytest.raises(ValueError, match="records codec"):
            _reccodec.decode(bytearray(data[:cut]), 50)  # any buffer


def test_encoding_into_a_buffer_too_small_says_so():
    raw = ops(200, threads=2).tobytes()
    data = enc(raw)
    exact = bytearray(len(data))
    assert _reccodec.encode_into(exact, [raw]) == len(data) and bytes(exact) == data
    assert _reccodec.encode_into(bytearray(len(data) - 1), [raw]) == -1
    assert _reccodec.encode_into(bytearray(0), [raw]) == -1
    assert _reccodec.encode_into(bytearray(0), []) == 0 == _reccodec.encode_into(bytearray(10), [b""])
    assert _reccodec.encode_into(memoryview(bytearray(len(data) + 100))[3:], [memoryview(raw)]) == len(data)
    with pytest.raises(ValueError, match="part 1 is 55 bytes, not a whole number of 56-byte records"):
        _reccodec.encode_into(bytearray(100), [raw[:56], raw[:55]])
    with pytest.raises(BufferError):
        _reccodec.encode_into(b"read-only", [raw])
    with pytest.raises(TypeError):
        _reccodec.encode_into(bytearray(10), 5)
    with pytest.raises(TypeError):
        _reccodec.decode(b"")


def test_the_codec_under_test_is_the_one_asked_for():
    """Under .ci/sanitize_ext.sh _reccodec every test here ran on the sanitized build."""
    path = os.environ.get("ACLPROF_RECCODEC_SANITIZED")
    assert storage.encode_records is _reccodec.encode_into and storage.decode_records is _reccodec.decode
    if path:
        assert _reccodec.__file__ == path


# ---- storage ------------------------------------------------------------------------------

ID = {"host": "h", "pid": 1, "service": "svc", "labels": {}}


def chunk_magics(path) -> list[bytes]:
    data = open(path, "rb").read()
    pos, out = 32, []
    while pos < len(data):
        magic, mlen, dlen, _ = struct.unpack_from("<4sIII", data, pos)
        out.append(magic)
        pos += 16 + mlen + dlen
    return out


def test_encoded_raw_and_older_chunks_in_one_segment_read_back_identical(tmp_path):
    """One file: an encoded chunk, a raw one (encode off: what a downgrade asks for), an
    encoded one again, one the codec cannot shrink (raw even with encode on); every record
    back as sent, through read_segment and Storage.read, a time range too."""
    t = time.time()
    a, b, c = ops(3000, 1, threads=2), ops(500, 2), ops(1000, 3, threads=4)
    rng = np.random.default_rng(9)
    noise = rng.integers(0, 256, 40 * REC, dtype=np.uint8).tobytes()  # random bits: larger encoded
    st = Storage(str(tmp_path))
    try:
        st.write("c1", ID, [(1, "a")], [(t, a[:1000].tobytes()), (t + 1, memoryview(a[1000:]))])  # any buffer
        st.encode = False
        st.write("c1", ID, [(1, "a"), (2, "b")], [(t + 2, b.tobytes())])
        st.encode = True
        st.write("c2", ID, [(1, "a")], [(t + 3, c.tobytes())])
        st.write("c2", ID, [(1, "a")], [(t + 4, noise)])
        st.flush()
        [seg] = [p for p in os.listdir(tmp_path) if p.endswith(".acps")]
        raw_magic = b"ACK2" if st.crc32c else b"ACK1"
        assert chunk_magics(tmp_path / seg) == [b"ACK3", raw_magic, b"ACK3", raw_magic]
        chunks = list(read_segment(str(tmp_path / seg)))
        assert [ch.records.tobytes() for ch in chunks] == [a.tobytes(), b.tobytes(), c.tobytes(), noise]
        assert chunks[1].names == {1: "a", 2: "b"} and chunks[0].ts.tolist() == [t] * 1000 + [t + 1] * 2000
        assert [len(ch.records) for ch in st.read(since_ts=t + 0.5, until_ts=t + 3)] == [2000, 500, 1000]
        s = st.stats()
        stored = s["record_bytes_stored"]
        assert s["record_bytes_in"] == (4500 + 40) * REC and stored < (500 + 40 + 4000 / 5) * REC
    finally:
        st.close()


def test_a_chunk_with_a_good_crc_whose_records_do_not_decode_is_a_counted_problem(tmp_path):
    """Encoded records that are wrong under a CRC that matches (a bug, a hand-made file): the
    reading of that file stops there, with the codec's reason; the chunks before it are read."""
    from aclprof.protocol._batchgroup import crc32c

    t = time.time()
    st = Storage(str(tmp_path))
    st.write("c1", ID, [(1, "a")], [(t, ops(10).tobytes())])
    st.close()
    [seg] = [tmp_path / p for p in os.listdir(tmp_path) if p.endswith(".acps")]
    meta = json.dumps({"host": "h", "pid": 1, "conn": "c1", "names": {}, "batches": [[3, t + 1]],
                       "ts_first": t + 1, "ts_last": t + 1}).encode()
    body = enc(ops(2).tobytes())  # two records where the metadata counts three
    with open(seg, "ab") as f:
        f.write(struct.pack("<4sIII", b"ACK3", len(meta), len(body), crc32c(body, crc32c(meta))) + meta + body)
    problems: list[str] = []
    assert [len(c.records) for c in read_segment(str(seg), problems=problems)] == [10]
    assert len(problems) == 1 and "record 2 of 3: tag: the data ends" in problems[0], problems
    st2 = Storage(str(tmp_path))
    try:
        assert [len(c.records) for c in st2.read()] == [10] and st2.corrupt_chunks == 1
    finally:
        st2.close()


def test_the_encoding_buffer_is_kept_from_chunk_to_chunk(tmp_path):
    """One buffer, grown while a chunk's encoding does not fit and then reused: a new
    multi-MB buffer per chunk would be fresh pages to fault in at every flush."""
    st = Storage(str(tmp_path))
    try:
        big = ops(100_000, threads=2)  # 5.6 MB raw, ~0.8 MB encoded: grows from 256 KiB
        st.write("c", ID, [], [(time.time(), big.tobytes())])
        buf = st._enc_buf
        assert storage._ENC_BUF_START < len(buf) < len(big.tobytes())
        for i in range(3):
            st.write("c", ID, [], [(time.time(), ops(100_000, i, threads=2).tobytes())])
            assert st._enc_buf is buf
        assert sum(len(c.records) for c in st.read()) == 400_000
    finally:
        st.close()


def test_an_encoded_segment_ends_near_segment_bytes(tmp_path):
    """The writer sizes segments by the bytes chunks take encoded: segments fill to near
    segment_bytes (by raw sizes they would close at a seventh of it)."""
    st = Storage(str(tmp_path), segment_bytes=16 << 10)
    try:
        t = time.time()
        sent = [ops(200, i, threads=2) for i in range(60)]
        for i, r in enumerate(sent):
            st.write("c1", ID, [(1, "a")], [(t + i, r.tobytes())])  # 11 KB raw, ~1.6 KB encoded
        st.flush()
        sizes = [size for _, size in st.files()]
        assert len(sizes) > 3 and all((16 << 10) - 2500 < s <= 16 << 10 for s in sizes[:-1]), sizes
        assert b"".join(c.records.tobytes() for c in st.read()) == b"".join(r.tobytes() for r in sent)
    finally:
        st.close()


def test_a_reload_switches_the_chunk_kind(tmp_path):
    """segment_format is live: a SIGHUP's settings reach the store."""
    from aclprofd import config
    from aclprofd.reload import apply_reload
    from helpers.daemons import InProcess

    d = InProcess()
    try:
        assert d.daemon.storage is not None and d.daemon.storage.encode
        raw = config.load({"socket": d.socket, "data_dir": os.path.join(d.tmp, "data"), "prometheus_port": "0",
                           "segment_format": "raw"}, environ={})
        apply_reload(d.daemon, lambda: raw)
        assert not d.daemon.storage.encode
    finally:
        d.stop()
    with pytest.raises(config.ConfigError, match=r"segment.format"):
        config.load({"socket": "s", "segment_format": "zip"}, environ={})


def test_a_daemon_started_with_raw_segments_stores_raw_chunks():
    """segment_format is read when the daemon opens its storage, not only by the command
    line's main or a reload: a daemon built from settings (as tests and embedders build one)
    writes what they say."""
    from helpers.daemons import InProcess

    for fmt, encode in (("raw", False), ("compact", True)):
        d = InProcess(segment_format=fmt)
        try:
            assert d.daemon.storage is not None and d.daemon.storage.encode is encode, fmt
        finally:
            d.stop()


def test_records_from_make_records_round_trip_in_a_daemon_sized_chunk(tmp_path):
    st = Storage(str(tmp_path))
    try:
        r = make_records(77_000, names=tuple(range(5, 2005)), types=tuple(range(1, 2001)))
        st.write("c", ID, [], [(time.time(), r.tobytes())])
        (chunk,) = st.read()
        assert chunk.records.tobytes() == r.tobytes()
        assert st.stats()["record_bytes_stored"] < len(r.tobytes()) / 4
    finally:
        st.close()


# ---- end to end: a daemon storing at rate -------------------------------------------------------

@pytest.mark.parametrize("fmt", ["compact", "raw"])
def test_a_daemon_stores_what_agents_sent_and_reads_it_back(tmp_path, fmt):
    """Two agents send ~100 k records/s each for a second; the aclprofd process stores them
    (flush every 0.2 s: several chunks per agent, encoded or raw as configured); the files
    read back give every record exactly as sent, in order, per agent; EXPORT gives them all."""
    names = {i: f"layer/op{i}" for i in range(10, 310)} | {i: f"Type{i}" for i in range(1, 8)}
    sent: list[list[bytes]] = [[], []]
    root = short_tmpdir("scodec-")
    try:
        stored, magics, exported = _store_at_rate(root, fmt, names, sent)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert b"".join(stored["h0"]) == b"".join(sent[0]) and b"".join(stored["h1"]) == b"".join(sent[1])
    assert magics and magics <= ({b"ACK3"} if fmt == "compact" else {b"ACK2", b"ACK1"})
    assert len(exported) == 200_000
    first = min((e for e in exported if e["host"] == "h1"), key=lambda e: e["start"])
    r0 = np.frombuffer(sent[1][0], RECORD_DTYPE)[0]
    assert (first["start"], first["end"], first["duration_ns"], first["thread_id"]) == (
        int(r0["start"]), int(r0["end"]), int(r0["duration"]), int(r0["thread_id"]))


def _store_at_rate(root: str, fmt: str, names: dict[int, str], sent: list[list[bytes]]):
    from helpers.daemons import Client, agent, running

    from aclprof.protocol.wire import Kind

    with running(root, "--segment-format", fmt) as d:
        agents = [agent(d.socket, names=names, host=f"h{k}", service="svc") for k in range(2)]
        t0 = time.monotonic()
        for i in range(50):  # 50 x 2 x 2000 records over ~1 s
            for k, a in enumerate(agents):
                r = ops(2000, seed=i * 2 + k, threads=1 + k)
                a.send_batch(r)
                sent[k].append(r.tobytes())
            time.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
        for a in agents:
            a.send_json(Kind.GOODBYE, {})
            a.close()
        deadline = time.monotonic() + 20
        while d.status()["records_total"] < 200_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        c = Client(d.socket)
        exported = c.export()
        c.close()
        assert d.stop() == 0
        data = os.path.join(d.root, "data")
        stored: dict[str, list[bytes]] = {"h0": [], "h1": []}
        magics: set[bytes] = set()
        for seg in sorted(p for p in os.listdir(data) if p.endswith(".acps")):
            problems: list[str] = []
            for ch in read_segment(os.path.join(data, seg), problems=problems):
                stored[ch.meta["host"]].append(ch.records.tobytes())
            assert problems == []
            magics.update(chunk_magics(os.path.join(data, seg)))
    return stored, magics, exported


def test_a_batch_of_part_of_a_record_is_stored_as_it_came_not_raised(tmp_path):
    """Ingest hands over whole records only; if a batch were not, the write must not raise
    into the daemon's loop: the chunk is stored raw, as before the encoding."""
    st = Storage(str(tmp_path))
    try:
        st.write("c", ID, [], [(time.time(), ops(3).tobytes() + b"\x01" * 20)])
        assert st.write_errors == 0 and st.stats()["record_bytes_stored"] == 3 * REC + 20
    finally:
        st.close()
