"""aclprofd.storage piece by piece (issue 13: mutants of storage.py that the daemon unit and
format tests let survive: where a segment ends, which names a chunk repeats, the time-range
filter's boundaries, the caps' counters, reopening a directory, torn and corrupt tails).
Where a test's arithmetic is in raw record bytes (segment and disk caps), its store writes raw
chunks (``encode=False``); the encoded chunks' sizing has cases of its own (test_storage_codec.py)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from aclprofd.storage import _FILE_HEADER, Storage, read_segment
from helpers.records import make_records

from aclprof.protocol.wire import RECORD_DTYPE

ID = {"host": "h", "pid": 1, "service": "svc"}
REC = RECORD_DTYPE.itemsize
T0 = time.time()  # receive times within the default 7-day age cap


def batch(n: int, start: int = 0) -> bytes:
    r = make_records(n, durations=np.arange(start, start + n) + 1)
    return r.tobytes()


def segments(d) -> list[str]:
    return sorted(p for p in os.listdir(d) if p.startswith("seg-"))


def test_first_segment_name_header_and_chunk(tmp_path):
    st = Storage(str(tmp_path))
    assert segments(tmp_path) == []  # opened lazily
    st.write("c1", ID, [(3, "conv")], [(100.0, batch(2)), (101.0, batch(1, 2))])
    st.flush()
    assert segments(tmp_path) == ["seg-00000001.acps"]
    (chunk,) = read_segment(str(tmp_path / "seg-00000001.acps"))
    assert chunk.meta["host"] == "h" and chunk.meta["conn"] == "c1"
    assert chunk.meta["batches"] == [[2, 100.0], [1, 101.0]]
    assert (chunk.meta["ts_first"], chunk.meta["ts_last"]) == (100.0, 101.0)
    assert chunk.names == {3: "conv"} and chunk.ts.tolist() == [100.0, 100.0, 101.0]
    assert chunk.records["duration"].tolist() == [1, 2, 3]
    s = st.stats()
    assert s["segments"] == 1 and s["bytes"] == os.path.getsize(tmp_path / "seg-00000001.acps")
    assert s["oldest_ts"] <= 100.0 and s["write_errors"] == 0 and s["deleted_for_cap"] == 0
    assert s["last_cap_delete_ts"] is None and s["dir"] == str(tmp_path)
    st.close()


def test_names_are_written_once_per_segment_and_connection(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=1 << 20, encode=False)
    names = [(1, "a")]
    st.write("c1", ID, names, [(1.0, batch(1))])
    names.append((2, "b"))
    st.write("c1", ID, names, [(2.0, batch(1))])
    st.write("c2", ID, names, [(3.0, batch(1))])
    st.flush()
    chunks = list(st.read())
    assert [c.meta["names"] for c in chunks] == [{"1": "a"}, {"2": "b"}, {"1": "a", "2": "b"}]
    assert chunks[1].names == {1: "a", 2: "b"}
    st.close()


def test_a_segment_ends_near_segment_bytes(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=4096, encode=False)
    for i in range(20):
        st.write("c1", ID, [(1, "a")], [(T0 + i, batch(10))])  # 560 bytes of records each
    st.close()
    segs = segments(tmp_path)
    assert len(segs) > 2
    sizes = [os.path.getsize(tmp_path / s) for s in segs]
    assert all(size <= 4096 for size in sizes[:-1])
    assert all(size + 560 + 200 > 4096 for size in sizes[:-1])  # not closed early
    # every chunk of a new segment repeats the names
    for s in segs:
        first = next(read_segment(str(tmp_path / s)))
        assert first.meta["names"] == {"1": "a"}
    total = sum(len(c.records) for s in segs for c in read_segment(str(tmp_path / s)))
    assert total == 200


def test_one_write_is_split_over_segments(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=2048, encode=False)
    st.write("c1", ID, [], [(T0 + i, batch(10)) for i in range(8)])
    st.close()
    assert len(segments(tmp_path)) >= 3
    assert sum(len(c.records) for c in Storage(str(tmp_path)).read()) == 80


@pytest.mark.parametrize("since, until, expected", [
    (None, None, [1.0, 2.0, 3.0]), (2.0, None, [2.0, 3.0]), (None, 2.0, [1.0, 2.0]), (2.0, 2.0, [2.0]),
    (2.5, None, [3.0]), (3.5, None, []), (None, 0.5, []),
])
def test_time_range_is_inclusive(tmp_path, since, until, expected):
    st = Storage(str(tmp_path))
    st.write("c1", ID, [], [(1.0, batch(1)), (2.0, batch(1))])
    st.write("c1", ID, [], [(3.0, batch(1))])
    st.flush()
    got = [t for c in st.read(since, until) for t in c.ts.tolist()]
    assert got == expected
    st.close()


def test_reopening_continues_the_numbering_and_reads_back(tmp_path):
    st = Storage(str(tmp_path))
    st.write("c1", ID, [(1, "a")], [(time.time(), batch(3))])
    st.close()
    st2 = Storage(str(tmp_path))
    assert st2.stats()["segments"] == 1 and st2.stats()["oldest_ts"] is not None
    st2.write("c1", ID, [(1, "a")], [(time.time(), batch(2))])
    st2.close()
    assert segments(tmp_path) == ["seg-00000001.acps", "seg-00000002.acps"]
    reader = Storage(str(tmp_path))  # one Storage at a time: each holds the data dir's lock
    assert sum(len(c.records) for c in reader.read()) == 5
    reader.close()
    (tmp_path / "seg-00000009.acps").write_bytes(b"")  # empty: skipped by readers
    (tmp_path / "other.txt").write_text("x")
    st3 = Storage(str(tmp_path))
    assert st3.stats()["segments"] == 3
    assert sum(len(c.records) for c in st3.read()) == 5


def test_disk_cap_deletes_oldest_and_counts(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=2048, disk_bytes=5000, encode=False)
    for _ in range(12):
        st.write("c1", ID, [], [(time.time(), batch(10))])
    st.flush()
    s = st.stats()
    assert s["deleted_for_cap"] > 0 and s["last_cap_delete_ts"] is not None
    assert s["bytes"] <= 5000 + 2048
    assert s["at_cap"] is True
    assert segments(tmp_path)[0] != "seg-00000001.acps"
    st.close()


def test_age_cap_deletes_without_counting_as_cap(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=1024, max_age_s=100, encode=False)
    now = time.time()  # not T0: the suite may have run for more than max_age_s since import
    st.write("c1", ID, [], [(now, batch(10))])
    st.write("c1", ID, [], [(now + 1, batch(10))])  # a second segment
    st.flush()
    n = len(segments(tmp_path))
    assert n >= 2
    deleted = st.enforce_caps(now=time.time() + 1000)
    assert deleted == n - 1  # all but the current one
    assert st.deleted_for_cap == 0 and st.stats()["at_cap"] is False
    assert st.enforce_caps(now=time.time()) == 0
    st.close()


def test_torn_and_corrupt_tails_stop_quietly(tmp_path):
    st = Storage(str(tmp_path))
    st.write("c1", ID, [], [(1.0, batch(2))])
    st.write("c1", ID, [], [(2.0, batch(2))])
    st.close()
    path = tmp_path / "seg-00000001.acps"
    data = path.read_bytes()
    path.write_bytes(data[:-1])  # torn last chunk
    assert [len(c.records) for c in read_segment(str(path))] == [2]
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # corrupt last chunk
    assert [len(c.records) for c in read_segment(str(path))] == [2]
    path.write_bytes(b"NOPE" + data[4:])
    assert list(read_segment(str(path))) == []



def test_write_failure_counts_lost_records(tmp_path, monkeypatch):
    import aclprofd.storage as storage_mod

    st = Storage(str(tmp_path))
    st.write("c1", ID, [], [(T0, batch(1))])
    real_writev = os.writev

    def enospc(fd, bufs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage_mod.os, "writev", enospc)
    st.write("c1", ID, [], [(T0 + 1, batch(3))])
    assert st.records_lost == 3 and st.write_errors == 1
    assert st.stats()["write_errors"] == 1 and "No space left" in st.last_error
    monkeypatch.setattr(storage_mod.os, "writev", real_writev)
    st.write("c1", ID, [], [(T0 + 2, batch(1))])  # the same segment goes on: no file churn
    st.close()
    assert len(segments(tmp_path)) == 1


# ---- second round: the survivors of the first mutation run ---------------------------------------

def test_fresh_storage_state_and_directory_mode(tmp_path):
    old = os.umask(0o022)
    try:
        st = Storage(str(tmp_path / "new"))
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "new").st_mode & 0o777 == 0o750
    assert (st.last_error, st.last_error_ts, st.write_errors, st.records_lost) == (None, 0.0, 0, 0)
    s = st.stats()
    assert s["oldest_ts"] is None and s["segments"] == 0 and s["bytes"] == 0
    assert s["disk_cap_bytes"] == 1 << 30


def test_batch_counts_in_the_meta_are_integers(tmp_path):
    st = Storage(str(tmp_path))
    st.write("c1", ID, [], [(T0, batch(2))])
    st.flush()
    (chunk,) = st.read()
    assert chunk.meta["batches"] == [[2, T0]] and isinstance(chunk.meta["batches"][0][0], int)
    st.close()


def test_reopen_takes_the_creation_time_from_the_header(tmp_path):
    st = Storage(str(tmp_path))
    st.write("c1", ID, [], [(T0, batch(1))])
    st.close()
    path = tmp_path / "seg-00000001.acps"
    created = _FILE_HEADER.unpack(path.read_bytes()[:_FILE_HEADER.size])[4]
    os.utime(path, (T0 + 5000, T0 + 5000))  # mtime later than the header's creation time
    again = Storage(str(tmp_path))
    assert again.stats()["oldest_ts"] == pytest.approx(created, abs=1e-6)
    again.close()  # one Storage at a time: each holds the data dir's lock
    # a file of header size that is not a segment: its mtime is all there is
    (tmp_path / "seg-00000002.acps").write_bytes(b"\0" * _FILE_HEADER.size)
    os.utime(tmp_path / "seg-00000002.acps", (T0 + 7000, T0 + 7000))
    third = Storage(str(tmp_path))
    assert [s.first_ts for s in third._segments][1] == pytest.approx(T0 + 7000)


def test_an_unreadable_entry_is_skipped_not_the_rest(tmp_path):
    st = Storage(str(tmp_path))
    st.write("c1", ID, [], [(T0, batch(1))])
    st.close()
    (tmp_path / "seg-00000000.acps").mkdir()  # sorts first; open() fails on a directory
    again = Storage(str(tmp_path))
    assert again.stats()["segments"] == 1 and sum(len(c.records) for c in again.read()) == 1


def test_two_connections_keep_their_own_names_in_one_segment(tmp_path):
    st = Storage(str(tmp_path))
    st.write("c1", ID, [(1, "a")], [(T0, batch(1))])
    st.write("c2", ID, [(1, "b")], [(T0, batch(1))])
    st.write("c1", ID, [(1, "a")], [(T0, batch(1))])
    st.flush()
    assert [(c.meta["conn"], c.names) for c in st.read()] == [("c1", {1: "a"}), ("c2", {1: "b"}), ("c1", {1: "a"})]
    st.close()


def several_segments(tmp_path, n: int = 4, **kw) -> Storage:
    st = Storage(str(tmp_path), segment_bytes=1024, **kw, encode=False)
    for i in range(n):
        st.write("c1", ID, [], [(T0 + i, batch(10))])  # 560 bytes: one segment each
    st.flush()
    assert len(st._segments) == n
    return st


def test_read_since_skips_only_older_segments(tmp_path):
    st = several_segments(tmp_path)
    assert [float(t) for c in st.read(since_ts=T0 + 1) for t in c.ts[:1]] == [T0 + 1, T0 + 2, T0 + 3]
    assert [float(t) for c in st.read(since_ts=T0 + 3) for t in c.ts[:1]] == [T0 + 3]
    assert [float(t) for c in st.read(until_ts=T0 + 1) for t in c.ts[:1]] == [T0, T0 + 1]
    st.close()


def test_caps_at_the_exact_boundary_delete_nothing(tmp_path):
    st = several_segments(tmp_path)
    st.disk_bytes = st.bytes
    assert st.enforce_caps(now=T0) == 0
    oldest_last = st._segments[0].last_ts
    assert st.enforce_caps(now=oldest_last + st.max_age_s) == 0  # exactly max_age old: kept
    assert st.enforce_caps(now=oldest_last + st.max_age_s + 1) == 1
    assert st.deleted_for_cap == 0  # deleted for age, not for the disk cap
    st.close()


def test_disk_cap_deletes_exactly_enough_and_counts_each(tmp_path):
    st = several_segments(tmp_path, n=5)
    sizes = [s.size for s in st._segments]
    st.disk_bytes = sum(sizes[2:])  # the two oldest must go
    assert st.enforce_caps(now=T0) == 2
    assert st.deleted_for_cap == 2 and len(st._segments) == 3 and st.bytes == sum(sizes[2:])
    assert st.last_cap_delete_ts == T0
    st.close()


def test_failures_are_counted_each_with_their_message(tmp_path, monkeypatch):
    import aclprofd.storage as storage_mod

    st = Storage(str(tmp_path))
    st.write("c1", ID, [], [(T0, batch(1))])
    real_writev = os.writev

    def enospc(fd, bufs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage_mod.os, "writev", enospc)
    st.write("c1", ID, [], [(T0, batch(2))])
    monkeypatch.setattr(storage_mod.os, "writev", real_writev)
    st.write("c1", ID, [], [(T0, batch(1))])
    monkeypatch.setattr(storage_mod.os, "writev", enospc)
    st.write("c1", ID, [], [(T0, batch(3))])
    monkeypatch.setattr(storage_mod.os, "writev", real_writev)
    st.write("c1", ID, [], [(T0, batch(1))])
    assert st.write_errors == 2 and st.records_lost == 5 and isinstance(st.records_lost, int)
    assert st.last_error == "OSError: [Errno 28] No space left on device"
    assert st.last_error_ts >= T0
    st.close()

def test_split_chunks_keep_their_connection(tmp_path):
    st = Storage(str(tmp_path), segment_bytes=2048, encode=False)
    st.write("c1", ID, [(1, "a")], [(T0 + i, batch(10)) for i in range(8)])
    st.close()
    chunks = list(Storage(str(tmp_path)).read())
    assert len(chunks) >= 3 and {c.meta["conn"] for c in chunks} == {"c1"}


def test_too_old_and_over_the_cap_counts_as_age(tmp_path):
    st = several_segments(tmp_path)
    st.disk_bytes = 1
    assert st.enforce_caps(now=T0 + st.max_age_s + 1000) == 3  # all but the current one
    assert st.deleted_for_cap == 0
    st.close()


def test_a_segment_that_cannot_be_deleted_stops_the_caps(tmp_path, monkeypatch):
    st = several_segments(tmp_path)
    st.disk_bytes = 1

    def refuse(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr("aclprofd.storage.os.unlink", refuse)
    assert st.enforce_caps(now=T0) == 0
    assert st.write_errors == 1 and st.last_error.startswith("PermissionError: [Errno 13] Permission denied")
    assert len(st._segments) == 4
    monkeypatch.undo()
    st.close()
