"""aclprofd.storage in-process: a chunk's metadata checked before use (each refusal with its
reason), the reader's problems, the names a chunk states when the table is large
(STATE_USED_ONLY), the files a reader on another thread gets, STATUS fields, the data
directory's lock. Written against the survivors of the mutation run of 2026-12-02 night
(tests/bench/MUTATION.md). Segment files are built from the documented format
(daemon/README.md "Segment files"), as test_formats.py does. Tests whose arithmetic is in raw
record bytes (where a segment ends) write raw chunks (``encode=False``): the writer's sizing is
the same for both kinds, and the encoded kind has its own cases here."""

from __future__ import annotations

import errno
import io
import json
import os
import struct
import time
import zlib

import numpy as np
import pytest
from aclprofd import storage
from aclprofd.storage import LOCK_FILE, DataDirLocked, Storage, read_segment
from helpers.records import make_records

from aclprof.protocol.wire import RECORD_DTYPE

FILE_HEADER = struct.Struct("<8sHHIdII")  # magic, version, reserved, header size, created, pid, reserved
CHUNK_HEADER = struct.Struct("<4sIII")    # "ACK1", M, D, CRC-32 of metadata + data


def records(n: int) -> bytes:
    return make_records(n, start=1_000_000).tobytes()


def meta_of(n: int = 2, **over) -> dict:
    m = {"host": "h", "pid": 1, "service": None, "labels": {}, "conn": "x", "names": {"5": "conv"},
         "batches": [[n, 100.0]], "ts_first": 100.0, "ts_last": 100.0}
    m.update(over)
    return m


def segment(chunks: list[tuple[bytes, bytes]], magic: bytes = b"ACK1") -> bytes:
    out = io.BytesIO()
    out.write(FILE_HEADER.pack(b"ACLPSEG\0", 1, 0, 32, 1.0e9, 7, 0))
    for mb, body in chunks:
        out.write(CHUNK_HEADER.pack(magic, len(mb), len(body), zlib.crc32(mb + body)))
        out.write(mb + body)
    return out.getvalue()


def read_problems(tmp_path, data: bytes) -> tuple[list, list[str]]:
    path = tmp_path / "seg-00000001.acps"
    path.write_bytes(data)
    problems: list[str] = []
    return list(read_segment(str(path), problems=problems)), problems


GOOD = json.dumps(meta_of()).encode()


@pytest.mark.parametrize("meta, reason", [
    ([1, 2], "metadata is a JSON list, not an object"),
    (meta_of(names=[["5", "conv"]]), "names is not an object of id -> string"),
    (meta_of(names={"x5": "conv"}), "names is not an object of id -> string"),
    (meta_of(names={"5": 5}), "names is not an object of id -> string"),
    (meta_of(batches={"0": [2, 1.0]}), "batches is not a list of [count, time]"),
    (meta_of(batches=[[2, 1.0, 3]]), "batches is not a list of [count, time]"),
    (meta_of(batches=[[2.0, 1.0]]), "batches is not a list of [count, time]"),
    (meta_of(batches=[[True, 1.0]]), "batches is not a list of [count, time]"),
    (meta_of(batches=[[-1, 1.0]]), "batches is not a list of [count, time]"),
    (meta_of(batches=[[2, "1.0"]]), "batches is not a list of [count, time]"),
    (meta_of(batches="[[2, 1.0]]"), "batches is not a list of [count, time]"),
    (meta_of(batches=None), "batches is not a list of [count, time]"),
    (meta_of(ts_first="100"), "ts_first is not a number"),
    (meta_of(ts_last=None), "ts_last is not a number"),
    (meta_of(host=5), "host/pid/service/conn have the wrong types"),
    (meta_of(pid="1"), "host/pid/service/conn have the wrong types"),
    (meta_of(pid=True), "host/pid/service/conn have the wrong types"),
    (meta_of(service=3), "host/pid/service/conn have the wrong types"),
    (meta_of(conn=3), "host/pid/service/conn have the wrong types"),
])
def test_metadata_that_cannot_be_used_is_refused_with_its_reason(tmp_path, meta, reason):
    chunks, problems = read_problems(tmp_path, segment([(GOOD, records(2)), (json.dumps(meta).encode(), records(2))]))
    assert len(chunks) == 1
    assert problems == [f"seg-00000001.acps@{32 + CHUNK_HEADER.size + len(GOOD) + 2 * RECORD_DTYPE.itemsize}: {reason}"]


def test_metadata_without_the_optional_fields_is_used(tmp_path):
    """names, host, pid and conn may be absent (the reader's defaults); service may be null."""
    m = meta_of()
    for k in ("names", "host", "pid", "conn"):
        del m[k]
    chunks, problems = read_problems(tmp_path, segment([(json.dumps(m).encode(), records(2))]))
    assert problems == [] and len(chunks) == 1 and chunks[0].names == {}


@pytest.mark.parametrize("damage, reason", [
    ("magic", "bad chunk magic"),
    ("crc", "CRC mismatch"),
    ("json", "metadata is not JSON"),
    ("count", "record count does not match the data"),
    ("partial", "record count does not match the data"),
])
def test_each_damage_is_named(tmp_path, damage, reason):
    body = records(2)
    if damage == "magic":
        data = segment([(GOOD, body)], magic=b"ACK9")  # "ACK2" is a chunk with CRC-32C
    elif damage == "crc":
        data = bytearray(segment([(GOOD, body)]))
        data[-1] ^= 1
        data = bytes(data)
    elif damage == "json":
        data = segment([(b"{not json", body)])
    elif damage == "count":
        data = segment([(json.dumps(meta_of(3)).encode(), body)])
    else:  # a data length that is not whole records, the counts summing to it in bytes
        data = segment([(json.dumps(meta_of(1)).encode(), body[:RECORD_DTYPE.itemsize] + b"x")])
    chunks, problems = read_problems(tmp_path, data)
    assert chunks == [] and problems == [f"seg-00000001.acps@32: {reason}"]


def test_a_chunk_after_a_good_one_is_found_by_its_lengths(tmp_path):
    """Chunks of different metadata and data lengths one after another: each found where the
    previous one's header says it ends."""
    m2 = json.dumps(meta_of(3, names={"6": "relu", "7": "x" * 50})).encode()
    chunks, problems = read_problems(tmp_path, segment([(GOOD, records(2)), (m2, records(3)), (GOOD, records(2))]))
    assert problems == [] and [len(c.records) for c in chunks] == [2, 3, 2]
    assert chunks[2].names == {5: "conv", 6: "relu", 7: "x" * 50}


def test_a_read_limit_stops_at_the_size_the_writer_had(tmp_path):
    chunk_len = CHUNK_HEADER.size + len(GOOD) + 2 * RECORD_DTYPE.itemsize
    path = tmp_path / "seg-00000001.acps"
    path.write_bytes(segment([(GOOD, records(2))] * 3))
    assert len(list(read_segment(str(path), limit=32 + chunk_len))) == 1
    assert len(list(read_segment(str(path), limit=32 + 2 * chunk_len))) == 2
    assert len(list(read_segment(str(path)))) == 3


def test_a_chunk_outside_the_time_range_still_states_its_names(tmp_path):
    early = json.dumps(meta_of(names={"5": "conv"}, batches=[[2, 10.0]], ts_first=10.0, ts_last=10.0)).encode()
    late = json.dumps(meta_of(names={}, batches=[[2, 100.0]])).encode()
    path = tmp_path / "seg-00000001.acps"
    path.write_bytes(segment([(early, records(2)), (late, records(2))]))
    for since, until in ((50.0, None), (None, 50.0)):
        got = list(read_segment(str(path), since, until))
        assert len(got) == 1, (since, until)
    (chunk,) = read_segment(str(path), 50.0, None)
    assert chunk.names == {5: "conv"} and chunk.ts.dtype == np.float64 and chunk.ts.tolist() == [100.0, 100.0]


def test_storage_read_counts_its_problems_and_keeps_the_last(tmp_path):
    for i in (5, 6, 7):  # three damaged files found at start
        (tmp_path / f"seg-0000000{i}.acps").write_bytes(segment([(b"{bad", records(1))]))
    st = Storage(str(tmp_path))
    try:
        assert list(st.read()) == []
        assert st.corrupt_chunks == 3 and st.last_read_problem == "seg-00000007.acps@32: metadata is not JSON"
        list(st.read())
        assert st.corrupt_chunks == 6
    finally:
        st.close()


# ---- writing: the names a chunk states --------------------------------------------------------

def test_beyond_state_used_only_a_chunk_states_only_the_names_its_records_use(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "STATE_USED_ONLY", 10)
    table = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1", 9: "unused_long_name"}
    names = list(table.items())
    st = Storage(str(tmp_path))
    try:
        st.write("c", {"host": "h", "pid": 1}, names, [(100.0, make_records(2, types=(1,), names=(3,)).tobytes())],
                 table)
        st.write("c", {"host": "h", "pid": 1}, names, [(101.0, make_records(2, types=(1, 2), names=(3, 4)).tobytes())],
                 table)
        st.write("c", {"host": "h", "pid": 1}, names, [(102.0, make_records(1, types=(2,), names=(4,)).tobytes())],
                 table)
        st.flush()
        metas = [c.meta["names"] for c in st.read()]
        chunks = list(st.read())
    finally:
        st.close()
    assert metas == [{"1": "Conv2D", "3": "conv1"}, {"2": "MatMul", "4": "fc1"}, {}]
    assert chunks[2].names == {1: "Conv2D", 3: "conv1", 2: "MatMul", 4: "fc1"}


def test_below_state_used_only_the_whole_table_goes_once(tmp_path):
    table = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1", 9: "unused"}
    st = Storage(str(tmp_path))
    try:
        for t in (100.0, 101.0):
            st.write("c", {"host": "h", "pid": 1}, list(table.items()),
                     [(t, make_records(2, types=(1,), names=(3,)).tobytes())], table)
        st.flush()
        metas = [c.meta["names"] for c in st.read()]
    finally:
        st.close()
    assert metas == [{str(k): v for k, v in table.items()}, {}]


# ---- what other threads and STATUS read -------------------------------------------------------

def test_files_gives_the_segments_that_may_hold_a_time_range(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=4096, encode=False)
    try:
        base = time.time() - 60  # (recent: older segments would go to the age cap)
        for t in range(8):
            st.write("c", {"host": "h"}, [], [(base + t, make_records(30).tobytes())])
        st.flush()
        every = st.files()
        assert len(every) >= 3 and every == sorted(every)
        assert all(os.path.getsize(p) == size for p, size in every)
        # each file's time range, read back
        segs = [(min(c.ts.min() for c in read_segment(p)), max(c.ts.max() for c in read_segment(p))) for p, _ in every]
        first_end = segs[0][1]
        assert st.files(until_ts=segs[0][0]) == every[:1]
        assert st.files(until_ts=segs[0][0] - 1e-3) == []
        assert st.files(since_ts=first_end) == every
        assert st.files(since_ts=first_end + 1e-3) == every[1:]
        assert st.files(since_ts=base + 1e6) == every[-1:]  # the current segment: it may receive more
        assert st.files(since_ts=first_end + 1e-3, until_ts=segs[1][0]) == every[1:2]
    finally:
        st.close()


def test_status_fields_of_the_storage(tmp_path):
    st = Storage(str(tmp_path))
    try:
        s = st.stats()
        assert {"records_lost": 0, "names_skipped": 0, "loss_periods": 0, "failing": False}.items() <= s.items()
        assert s["dir_access"] == st.dir_access.as_dict()
    finally:
        st.close()


# ---- the data directory's lock ------------------------------------------------------------------

def test_a_second_storage_on_a_locked_directory_names_the_holder(tmp_path):
    first = Storage(str(tmp_path))
    try:
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(DataDirLocked) as err:
            Storage(str(tmp_path))
        e = err.value
        assert e.errno == errno.EWOULDBLOCK and e.filename == str(tmp_path)
        assert e.strerror == (f"in use by another aclprofd (pid {os.getpid()}); give each daemon "
                              "its own --data-dir")
        # refused without touching the holder's lock file
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        first.close()


def test_a_lock_file_with_another_pid_is_rewritten_by_the_new_holder(tmp_path):
    (tmp_path / LOCK_FILE).write_text("123456789\n")
    st = Storage(str(tmp_path))
    try:
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        st.close()


def test_a_lock_file_that_is_a_symlink_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("x")
    d = tmp_path / "data"
    d.mkdir()
    (d / LOCK_FILE).symlink_to(target)
    with pytest.raises(OSError) as err:
        Storage(str(d))
    assert err.value.errno == errno.ELOOP and target.read_text() == "x"


def test_a_held_lock_with_no_pid_written_yet_names_an_unknown_holder(tmp_path):
    """The holder between its lock and its pid (an empty lock file): "pid ?"."""
    first = Storage(str(tmp_path))
    try:
        (tmp_path / LOCK_FILE).write_text("")
        with pytest.raises(DataDirLocked, match=r"in use by another aclprofd \(pid \?\);"):
            Storage(str(tmp_path))
    finally:
        first.close()


def test_closing_releases_the_directory_and_a_second_close_is_harmless(tmp_path):
    st = Storage(str(tmp_path))
    assert st.last_read_problem is None and st.corrupt_chunks == 0
    st.close()
    st.close()
    again = Storage(str(tmp_path))  # the lock was released: no DataDirLocked
    again.close()


def test_names_in_the_way_of_new_segments_are_skipped_and_counted(tmp_path):
    for seq in (1, 2, 4):  # directories where the writer's next segments would go
        os.mkdir(tmp_path / f"seg-{seq:08d}.acps")
    st = Storage(str(tmp_path), segment_bytes=4096, encode=False)
    try:
        base = time.time() - 60
        for t in range(6):
            st.write("c", {"host": "h"}, [], [(base + t, make_records(30).tobytes())])
        st.flush()
        files = sorted(p.name for p in tmp_path.iterdir() if p.is_file() and p.name.startswith("seg-"))
        assert files[:2] == ["seg-00000003.acps", "seg-00000005.acps"]
        assert st.names_skipped == 3 and st.stats()["names_skipped"] == 3 and st.records_lost == 0
    finally:
        st.close()


def test_a_thousand_names_in_the_way_lose_the_write_and_say_why(tmp_path):
    for seq in range(1, 1001):
        os.mkdir(tmp_path / f"seg-{seq:08d}.acps")
    st = Storage(str(tmp_path))
    try:
        t = time.time()
        st.write("c", {"host": "h", "pid": 9, "service": "s"}, [], [(t, make_records(4).tobytes())])
        path = tmp_path / "seg-00001000.acps"
        assert st.records_lost == 4 and st.names_skipped == 1000
        assert st.last_error == \
            f"FileExistsError: [Errno {errno.EEXIST}] 1000 segment names in a row are taken: '{path}'"
        assert st.losses.failing is True and st.stats()["failing"] is True and st.stats()["loss_periods"] == 1
        (p,) = st.losses.periods
        assert (p.since_ts, p.until_ts, p.records, p.host, p.pid, p.service) == (t, t, 4, "h", 9, "s")
        assert p.error == st.last_error
        os.rmdir(path)
        st.write("c", {"host": "h", "pid": 9, "service": "s"}, [], [(t + 1, make_records(1).tobytes())])
        assert st.losses.failing is False and st.records_lost == 4
    finally:
        st.close()


def test_a_write_split_over_chunks_states_the_used_names_in_each(tmp_path, monkeypatch):
    """Beyond STATE_USED_ONLY, a write whose batches do not fit one segment: each chunk states
    the names of its own records."""
    monkeypatch.setattr(storage, "STATE_USED_ONLY", 10)
    table = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1", 9: "unused_long_name"}
    n = 4096 // RECORD_DTYPE.itemsize // 2 + 1  # two batches of n records overflow a 4 KiB segment
    st = Storage(str(tmp_path), segment_bytes=4096, encode=False)
    try:
        t = time.time()
        st.write("c", {"host": "h", "pid": 1}, list(table.items()),
                 [(t, make_records(n, types=(1,), names=(3,)).tobytes()),
                  (t + 1, make_records(n, types=(2,), names=(4,)).tobytes())], table)
        st.flush()
        metas = [c.meta["names"] for c in st.read()]
    finally:
        st.close()
    assert metas == [{"1": "Conv2D", "3": "conv1"}, {"2": "MatMul", "4": "fc1"}]


def test_a_chunk_written_a_few_bytes_at_a_time_lands_whole(tmp_path, monkeypatch):
    """writev may write part of a chunk (a signal, a full pipe of a FUSE disk): the rest is
    written after it, nothing twice."""
    real = os.writev
    calls = []

    def partial(fd, bufs):
        data = b"".join(bytes(b) for b in bufs)
        calls.append(len(data))
        return real(fd, [data[:100]])

    st = Storage(str(tmp_path))
    try:
        recs = make_records(200)  # > 500 bytes encoded
        monkeypatch.setattr(storage.os, "writev", partial)
        st.write("c", {"host": "h", "pid": 1}, [(3, "conv1")], [(time.time(), recs.tobytes())])
        monkeypatch.setattr(storage.os, "writev", real)
        st.flush()
        (chunk,) = st.read()
    finally:
        st.close()
    assert len(calls) > 5 and chunk.records.tobytes() == recs.tobytes() and chunk.names == {3: "conv1"}
    assert st.records_lost == 0


def test_a_batch_of_zero_records_in_the_metadata_is_accepted(tmp_path):
    m = json.dumps(meta_of(2, batches=[[0, 99.0], [2, 100.0]], ts_first=99.0)).encode()
    chunks, problems = read_problems(tmp_path, segment([(m, records(2))]))
    assert problems == [] and [len(c.records) for c in chunks] == [2] and chunks[0].ts.tolist() == [100.0, 100.0]


def test_a_lock_file_of_bytes_that_are_not_utf8_still_names_the_holder(tmp_path):
    first = Storage(str(tmp_path))
    try:
        (tmp_path / LOCK_FILE).write_bytes(b"\xff12\n")
        with pytest.raises(DataDirLocked, match="pid \ufffd12"):
            Storage(str(tmp_path))
    finally:
        first.close()


def test_a_torn_chunk_that_cannot_be_cut_back_closes_the_segment_and_the_next_write_opens_one(tmp_path, monkeypatch):
    st = Storage(str(tmp_path))
    try:
        t = time.time()
        st.write("c", {"host": "h", "pid": 1}, [], [(t, records(2))])
        real_writev, real_ftruncate = os.writev, os.ftruncate

        def fail(*a):
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(storage.os, "writev", fail)
        monkeypatch.setattr(storage.os, "ftruncate", fail)
        st.write("c", {"host": "h", "pid": 1}, [], [(t + 1, records(3))])
        monkeypatch.setattr(storage.os, "writev", real_writev)
        monkeypatch.setattr(storage.os, "ftruncate", real_ftruncate)
        assert st.records_lost == 3
        st.write("c", {"host": "h", "pid": 1}, [], [(t + 2, records(1))])
        st.flush()
        assert [len(c.records) for c in st.read()] == [2, 1]
        assert len([p for p in tmp_path.iterdir() if p.name.startswith("seg-")]) == 2
    finally:
        st.close()


def test_a_damaged_segment_is_logged_with_the_problem_and_the_count(tmp_path, monkeypatch):
    import structlog

    monkeypatch.setattr(storage, "_log", structlog.get_logger("aclprofd"))  # not a proxy cached elsewhere
    for i in (5, 6):
        (tmp_path / f"seg-0000000{i}.acps").write_bytes(segment([(b"{bad", records(1))]))
    st = Storage(str(tmp_path))
    try:
        with structlog.testing.capture_logs() as logs:
            list(st.read())
    finally:
        st.close()
    assert [(e["event"], e["log_level"], e["problem"], e["corrupt_chunks"]) for e in logs] == [
        ("segment damaged; the rest of it is skipped", "warning", f"seg-0000000{i}.acps@32: metadata is not JSON", n)
        for n, i in ((1, 5), (2, 6))]


def test_a_segment_that_cannot_be_read_is_a_problem_named_by_its_file(tmp_path):
    st = Storage(str(tmp_path))
    try:
        st.write("c", {"host": "h", "pid": 1}, [], [(time.time(), records(2))])
        st.flush()
        (seg,) = [p for p in tmp_path.iterdir() if p.name.startswith("seg-")]
        seg.unlink()
        seg.mkdir()  # in its place something open() reads as EISDIR
        assert list(st.read()) == []
        assert st.corrupt_chunks == 1 and st.last_read_problem == f"{seg.name}: Is a directory"
    finally:
        st.close()


def test_whole_second_batch_times_are_read_as_floats(tmp_path):
    m = json.dumps(meta_of(2, batches=[[2, 100]], ts_first=100, ts_last=100)).encode()
    (chunk,), problems = read_problems(tmp_path, segment([(m, records(2))]))
    assert problems == [] and chunk.ts.dtype == np.float64 and chunk.ts.tolist() == [100.0, 100.0]


def test_names_of_exactly_state_used_only_characters_go_whole(tmp_path, monkeypatch):
    table = {1: "ab", 3: "cd", 9: "zz"}
    monkeypatch.setattr(storage, "STATE_USED_ONLY", 6)  # the table's 6 characters: not beyond it
    st = Storage(str(tmp_path))
    try:
        st.write("c", {"host": "h", "pid": 1}, list(table.items()),
                 [(time.time(), make_records(2, types=(1,), names=(3,)).tobytes())], table)
        st.flush()
        (chunk,) = st.read()
    finally:
        st.close()
    assert chunk.meta["names"] == {"1": "ab", "3": "cd", "9": "zz"}


def test_a_write_without_the_table_after_used_only_chunks_states_the_names_not_stated_yet(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "STATE_USED_ONLY", 10)
    table = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1"}
    st = Storage(str(tmp_path))
    try:
        t = time.time()
        st.write("c", {"host": "h", "pid": 1}, list(table.items()),
                 [(t, make_records(1, types=(1,), names=(3,)).tobytes())], table)
        st.write("c", {"host": "h", "pid": 1}, list(table.items()),
                 [(t + 1, make_records(1, types=(2,), names=(4,)).tobytes())])
        st.flush()
        metas = [c.meta["names"] for c in st.read()]
    finally:
        st.close()
    assert metas == [{"1": "Conv2D", "3": "conv1"}, {"2": "MatMul", "4": "fc1"}]


def test_a_segment_deleted_while_a_read_is_under_way_is_passed_over(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=4096, encode=False)
    try:
        t = time.time() - 60
        n = 4096 // RECORD_DTYPE.itemsize - 4  # one chunk a segment
        for i in range(3):
            st.write("c", {"host": "h", "pid": 1}, [], [(t + i, make_records(n).tobytes())])
        st.flush()
        paths = [p for p, _ in st.files()]
        assert len(paths) == 3
        reading = st.read()
        first = next(reading)
        os.unlink(paths[1])  # as a cap deletes it on the loop meanwhile
        rest = list(reading)
        assert [first.ts[0], *(c.ts[0] for c in rest)] == [t, t + 2]
    finally:
        st.close()


def test_a_batch_that_fills_the_segment_exactly_stays_in_it(tmp_path):
    """Batches of a write go to the current segment while they fit in segment_bytes, the
    last one exactly."""
    b = make_records(10).tobytes()
    st = Storage(str(tmp_path), segment_bytes=FILE_HEADER.size + 2 * len(b), encode=False)
    try:
        t = time.time()
        st.write("c", {"host": "h"}, [], [(t, b), (t, b)])  # 32 + 2 batches: exactly segment_bytes
        st.flush()
        assert [len(c.records) for c in st.read()] == [20] and len(st.files()) == 1
    finally:
        st.close()


@pytest.mark.parametrize("encode", [False, True])
def test_a_chunk_whose_data_ends_exactly_at_segment_bytes_joins_the_current_segment(tmp_path, encode):
    """The rotation compares the bytes the chunk's records take in the file: encoded, their
    encoded length (the raw one would close segments early)."""
    b = make_records(10).tobytes()
    t = float(int(time.time()))  # the same time in every chunk: metadata of the same length
    st0 = Storage(str(tmp_path / "probe"), encode=encode)
    try:
        st0.write("c", {"host": "h"}, [], [(t, b)])
        first = st0.files()[0][1]  # header and one chunk
        stored = st0.stats()["record_bytes_stored"]
    finally:
        st0.close()
    assert (stored < len(b)) == encode and st0.stats()["record_bytes_in"] == len(b)
    st = Storage(str(tmp_path / "d"), segment_bytes=first + stored, encode=encode)
    try:
        st.write("c", {"host": "h"}, [], [(t, b)])
        st.write("c", {"host": "h"}, [], [(t, b)])  # size so far + its data == segment_bytes: no rotation
        st.flush()
        assert len(st.files()) == 1 and [len(c.records) for c in st.read()] == [10, 10]
    finally:
        st.close()
