"""Raw op records on disk: bounded, rotating segment files (format in daemon/README.md).

A segment is ``seg-<seq>.acps``: a 32-byte header, then chunks. A chunk holds the records
one agent connection sent during one flush interval, with that connection's identity, the
names its records use that this segment has not defined yet for it (so every segment can
be read on its own after older ones are deleted), and the receive time of each batch.
Each chunk carries a CRC-32 so that a torn tail (``kill -9`` during a write, a full disk)
ends the reading of that file cleanly. Its records are stored encoded (``ACK3``: the C codec
of :mod:`aclprof.protocol._reccodec`, ~7 bytes a record where the wire's are 56; issue 21) or,
where that would not be smaller or ``encode`` is off, as they came (``ACK1``/``ACK2``).

Caps: a segment is closed once it reaches ``segment_bytes``; the oldest segments are
deleted while the total exceeds ``disk_bytes`` or they are older than ``max_age_s``. A
failing write (ENOSPC, EIO) is counted and reported, never raised into the daemon's loop.

Writing: one daemon per directory (an exclusive ``flock`` on ``.lock``, held until
:meth:`Storage.close`). Each chunk is written unbuffered with ``writev`` from one kept
encoding buffer (or straight from the received batches): a chunk is either wholly in the
file or, after a failed write, cut off again (``ftruncate`` to where it began) and its
records counted in ``records_lost``; the same file goes on when space returns, so a full
disk creates no new files.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog

from aclprof.protocol._batchgroup import crc32c, crc32c_fast
from aclprof.protocol._reccodec import decode as decode_records
from aclprof.protocol._reccodec import encode_into as encode_records
from aclprof.protocol.wire import RECORD_DTYPE

from .atomicfile import FILE_MODE, DirAccess, create_file, private_dir
from .storage_losses import StorageLosses

__all__ = ["Storage", "Chunk", "SEGMENT_VERSION", "read_segment", "DataDirLocked", "LOCK_FILE"]

SEGMENT_MAGIC = b"ACLPSEG\x00"
SEGMENT_VERSION = 1
_FILE_HEADER = struct.Struct("<8sHHIdII")  # magic, version, reserved, header size, created_ts, pid, reserved
#: a chunk's magic says which CRC of its metadata + data it carries: "ACK1" zlib's CRC-32,
#: "ACK2" CRC-32C (Castagnoli), written where the CPU computes it (x86-64 SSE4.2: ~7.5 GB/s
#: where zlib's ran at ~1.7, 80 us of the loop per 140 KB agent frame at 100 k ops/s, issue
#: 21); readers take both, so older files and other hosts' stay readable
_CHUNK_MAGIC = b"ACK1"
_CHUNK_MAGIC_C = b"ACK2"
#: "ACK3": CRC-32C, and the data is the records encoded by aclprof.protocol._reccodec (codec
#: version 1), as many as the metadata's batches count. An older reader stops at this magic
#: (its "bad chunk magic"), as readers before "ACK2" stopped at that one.
_CHUNK_MAGIC_ENC = b"ACK3"
_CHUNK_MAGICS = (_CHUNK_MAGIC, _CHUNK_MAGIC_C, _CHUNK_MAGIC_ENC)
_CHUNK_HEADER = struct.Struct("<4sIII")  # magic, meta length, data length, CRC (of the magic's kind)
_NAME_RE = re.compile(r"^seg-(\d{8,})\.acps$")
_log = structlog.get_logger("aclprofd")
_AT_CAP_S = 600.0  # a deletion for the cap keeps at_cap true this long (segments may be smaller)
LOCK_FILE = ".lock"
_IOV_MAX = 1024  # buffers per writev (Linux's IOV_MAX; more is EINVAL)
_NAME_TRIES = 1000  # names in the way of a new segment skipped before giving up for this write
#: the encoding buffer's first size; it doubles (up to a chunk's raw size) when a chunk's
#: encoding does not fit, and is kept: a new multi-MB buffer per chunk would be fresh pages
#: to fault in at every flush, the cost this encoding is there to cut
_ENC_BUF_START = 256 << 10


class DataDirLocked(OSError):
    """Another process (another aclprofd) holds the data directory's lock."""


@dataclass
class Chunk:
    """One chunk read back: the sender's identity, its names so far in this segment, the
    records, and the receive time of each record."""

    meta: dict[str, Any]
    names: dict[int, str]
    records: np.ndarray
    ts: np.ndarray


@dataclass
class _Segment:
    path: str
    seq: int
    size: int
    first_ts: float
    last_ts: float


@dataclass
class _ConnState:
    segment_seq: int = -1
    names_written: int = 0  # this segment has names[:names_written] of the connection ...
    stated: set[int] = field(default_factory=set)  # ... and these (stated for their records)


#: A connection's names not yet in the segment of more than this many characters: a chunk
#: states only the names its records use (the others wait for records that use them), so a
#: large table is written a batch's names at a time, not all at one flush (issue 19: 4096
#: cells of 4 KiB control-character names were one ~180 MB chunk, ~1.1 s of the loop)
STATE_USED_ONLY = 1 << 20


class Storage:
    """Writer and reader of the segment directory. Used from the daemon's loop thread only."""

    def __init__(self, directory: str, segment_bytes: int = 64 << 20, disk_bytes: int = 1 << 30,
                 max_age_s: float = 7 * 86400.0, encode: bool = True):
        self.dir = directory
        #: store records encoded ("ACK3"); False: as they came ("ACK1"/"ACK2"), which an
        #: aclprof older than the encoding reads (config ``segment_format = "raw"``)
        self.encode = encode
        self._enc_buf = bytearray()
        self.segment_bytes = int(segment_bytes)
        self.disk_bytes = int(disk_bytes)
        self.max_age_s = float(max_age_s)
        #: chunks carry CRC-32C ("ACK2") where the CPU computes it, else zlib's CRC-32 ("ACK1")
        self.crc32c = crc32c_fast()
        #: 0750 whatever the umask; a wider directory of ours narrowed, another user's reported
        self.dir_access: DirAccess = private_dir(directory)
        self._lock_fd: int | None = _lock_dir(directory)  # before reading the directory: it is ours from here
        self._segments: list[_Segment] = []
        for name in sorted(os.listdir(directory)):
            m = _NAME_RE.match(name)
            if m:
                path = os.path.join(directory, name)
                try:
                    st = os.stat(path)
                    with open(path, "rb") as f:
                        head = f.read(_FILE_HEADER.size)
                except OSError:
                    continue
                created = st.st_mtime
                if len(head) == _FILE_HEADER.size and head.startswith(SEGMENT_MAGIC):
                    created = min(created, _FILE_HEADER.unpack(head)[4])
                self._segments.append(_Segment(path, int(m.group(1)), st.st_size, created, st.st_mtime))
        self._segments.sort(key=lambda s: s.seq)
        self._fd: int | None = None  # the current segment (unbuffered), opened lazily at the first write
        self._current: _Segment | None = None
        self._conns: dict[str, _ConnState] = {}
        self.write_errors = 0
        self.last_error: str | None = None
        self.last_error_ts = 0.0
        self.deleted_for_cap = 0
        self.last_cap_delete_ts = 0.0
        self.records_lost = 0  # records not written because a write failed
        self.corrupt_chunks = 0  # damaged chunks met while reading (the rest of that file is skipped)
        self.last_read_problem: str | None = None
        self.names_skipped = 0  # segment names that something else already had
        self.record_bytes_in = 0  # record bytes of the chunks written, as received ...
        self.record_bytes_stored = 0  # ... and as stored (encoded or not)
        self.losses = StorageLosses(directory, self.max_age_s)  # which records failed writes lost (when, whose)

    # ---- writing ------------------------------------------------------------------------
    def _open_segment(self, now: float) -> None:
        """A new segment after the newest one. A name that is taken (a file or directory
        put there by someone else) is skipped, not retried: retrying the same name would
        fail every write from then on."""
        seq = self._segments[-1].seq + 1 if self._segments else 1
        for _ in range(_NAME_TRIES):
            path = os.path.join(self.dir, f"seg-{seq:08d}.acps")
            try:
                fd = create_file(path)  # 0640 whatever the umask
                break
            except FileExistsError:
                self.names_skipped += 1
                seq += 1
        else:
            raise FileExistsError(errno.EEXIST, f"{_NAME_TRIES} segment names in a row are taken", path)
        head = _FILE_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, 0, _FILE_HEADER.size, now, os.getpid(), 0)
        try:
            _write_all(fd, [head])
        except OSError:
            # no empty or headless file per failed attempt (a full disk must not churn files)
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        self._fd = fd
        self._current = _Segment(path, seq, _FILE_HEADER.size, now, now)
        self._segments.append(self._current)

    def _close_segment(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as exc:
                self.failed(exc)
            self._fd = None
            self._current = None

    def write(self, conn_id: str, identity: dict[str, Any], names: list[tuple[int, str]],
              batches: list[tuple[float, bytes]], table: dict[int, str] | None = None) -> None:
        """Append ``batches`` of raw RECORD_DTYPE bytes (with their receive times) from
        connection ``conn_id``, whose whole name table in definition order is ``names``
        (``table``: the same as a dict, for :data:`STATE_USED_ONLY`). Batches are split over
        chunks so that a segment ends near ``segment_bytes``."""
        group: list[tuple[float, bytes]] = []
        size = 0
        for ts, b in batches:
            used = self._current.size if self._current is not None else _FILE_HEADER.size
            if group and used + size + _nbytes(b) > self.segment_bytes:
                self._write_chunk(conn_id, identity, names, group, table)
                group, size = [], 0
            group.append((ts, b))
            size += _nbytes(b)
        if group:
            self._write_chunk(conn_id, identity, names, group, table)

    def _write_chunk(self, conn_id: str, identity: dict[str, Any], names: list[tuple[int, str]],
                     batches: list[tuple[float, bytes]], table: dict[int, str] | None = None) -> None:
        now = time.time()
        data_len = sum(_nbytes(b) for _, b in batches)
        encoded = self._encode(batches, data_len) if self.encode else None
        stored_len = data_len if encoded is None else encoded.nbytes
        try:
            cur = self._current
            if self._fd is None or (cur is not None and cur.size > _FILE_HEADER.size
                                    and cur.size + stored_len > self.segment_bytes):
                self._close_segment()
                self._open_segment(now)
                self.enforce_caps(now)  # at every rotation, not only at the flush tick: the
                # total stays within the cap plus one segment even at GB/s
            assert self._current is not None and self._fd is not None
            if self._current.size == _FILE_HEADER.size:
                self._current.first_ts = min(now, batches[0][0])  # the time range this file covers
            st = self._conns.setdefault(conn_id, _ConnState())
            if st.segment_seq != self._current.seq:
                st.segment_seq, st.names_written, st.stated = self._current.seq, 0, set()
            delta = names[st.names_written:]
            used_only = table is not None and sum(len(n) for _, n in delta) > STATE_USED_ONLY
            if used_only:
                assert table is not None
                recs = [np.frombuffer(b, dtype=RECORD_DTYPE) for _, b in batches]
                ids = np.unique(np.concatenate([r[f] for r in recs for f in ("op_type", "op_name")]))
                delta = [(i, table[i]) for i in ids.tolist() if i not in st.stated and i in table]
            elif st.stated:
                delta = [(i, n) for i, n in delta if i not in st.stated]
            meta = dict(identity, conn=conn_id, names={str(i): s for i, s in delta},
                        batches=[[_nbytes(b) // RECORD_DTYPE.itemsize, ts] for ts, b in batches],
                        ts_first=batches[0][0], ts_last=batches[-1][0])
            mb = json.dumps(meta, separators=(",", ":")).encode()
            if encoded is not None:  # CRC-32C in any case: ~1/8 of the bytes, table or instruction
                crc = crc32c(encoded, crc32c(mb))
                self._append([_CHUNK_HEADER.pack(_CHUNK_MAGIC_ENC, len(mb), stored_len, crc), mb, encoded])
            else:
                crc_of, magic = (crc32c, _CHUNK_MAGIC_C) if self.crc32c else (zlib.crc32, _CHUNK_MAGIC)
                crc = crc_of(mb)
                for _, b in batches:
                    crc = crc_of(b, crc)
                self._append([_CHUNK_HEADER.pack(magic, len(mb), data_len, crc), mb, *(b for _, b in batches)])
            if used_only:
                st.stated.update(i for i, _ in delta)
            else:
                st.names_written = len(names)
                st.stated.clear()
            self._current.size += _CHUNK_HEADER.size + len(mb) + stored_len
            self._current.last_ts = batches[-1][0]
            self.record_bytes_in += data_len
            self.record_bytes_stored += stored_len
        except OSError as exc:
            n = data_len // RECORD_DTYPE.itemsize
            self.records_lost += n
            self.failed(exc)
            self.losses.lost(identity, min(ts for ts, _ in batches), max(ts for ts, _ in batches), n,
                             self.last_error or str(exc), now)
            return
        self.losses.ok(now)

    def _encode(self, batches: list[tuple[float, bytes]], data_len: int) -> memoryview | None:
        """The chunk's records encoded, in the kept buffer; None where that is not smaller
        than ``data_len`` (the raw chunk is written then). Valid until the next call."""
        limit = data_len - 1
        if limit <= 0:
            return None
        parts = [b for _, b in batches]
        buf = self._enc_buf
        if not buf:
            buf = self._enc_buf = bytearray(_ENC_BUF_START)
        while True:
            view = memoryview(buf)[:min(len(buf), limit)]
            try:
                n = encode_records(view, parts)
            except ValueError:  # a batch of part of a record (ingest sends none): stored as it came
                return None
            if n >= 0:
                return view[:n]
            view.release()
            if len(buf) >= limit:
                return None  # encoded, the records would not be smaller: stored raw
            buf = self._enc_buf = bytearray(min(limit, 2 * len(buf)))  # a new one: the old is free

    def _append(self, parts: list[Any]) -> None:
        """Write one whole chunk at the end of the current segment, or nothing: after a
        failed or short write the file is cut back to where the chunk began, so the same
        file goes on (no new file per failure) and the reader never meets half a chunk.
        If even that fails, the segment is closed and the next write starts a new one."""
        assert self._fd is not None and self._current is not None
        try:
            _write_all(self._fd, parts)
        except OSError:
            try:
                os.ftruncate(self._fd, self._current.size)
                os.lseek(self._fd, self._current.size, os.SEEK_SET)
            except OSError:
                self._close_segment()
            raise

    def flush(self) -> None:
        """Apply the caps. Chunks are already in the kernel when :meth:`write` returns (they
        survive kill -9; not fsync: see README)."""
        self.enforce_caps()

    def failed(self, exc: OSError) -> None:
        self.write_errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.last_error_ts = time.time()

    def enforce_caps(self, now: float | None = None) -> int:
        """Delete the oldest segments beyond the disk cap or the age cap; returns how many."""
        now = time.time() if now is None else now
        deleted = 0
        total = self.bytes
        while self._segments:
            seg = self._segments[0]
            too_old = seg.last_ts < now - self.max_age_s
            over = total > self.disk_bytes
            if not (too_old or over):
                break
            if seg is self._current:
                break  # never the segment being written (config keeps it well under the cap)
            try:
                os.unlink(seg.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.failed(exc)
                break
            self._segments.pop(0)
            total -= seg.size
            deleted += 1
            if over and not too_old:
                self.deleted_for_cap += 1
                self.last_cap_delete_ts = now
        return deleted

    def close(self) -> None:
        """Close the current segment and release the directory's lock."""
        self.flush()
        self._close_segment()
        self.losses.save()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ---- status -------------------------------------------------------------------------
    @property
    def bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def at_cap(self) -> bool:
        """The store is full: the cap deleted a segment in the last ``_AT_CAP_S`` seconds,
        or the total is within one segment of ``disk_bytes`` (so the next segment deletes
        the oldest; this part holds across restarts). Normal for a bounded store:
        informational, not a health problem."""
        recent = self.last_cap_delete_ts > time.time() - _AT_CAP_S
        return recent or self.bytes + self.segment_bytes > self.disk_bytes

    def stats(self) -> dict[str, Any]:
        return {"dir": self.dir, "bytes": self.bytes, "segments": len(self._segments),
                "record_bytes_in": self.record_bytes_in, "record_bytes_stored": self.record_bytes_stored,
                "oldest_ts": self._segments[0].first_ts if self._segments else None,
                "disk_cap_bytes": self.disk_bytes, "write_errors": self.write_errors,
                "deleted_for_cap": self.deleted_for_cap, "at_cap": self.at_cap,
                "records_lost": self.records_lost, "names_skipped": self.names_skipped,
                "loss_periods": len(self.losses.periods), "failing": self.losses.failing,
                "last_cap_delete_ts": self.last_cap_delete_ts or None, "dir_access": self.dir_access.as_dict()}

    # ---- reading ------------------------------------------------------------------------
    def files(self, since_ts: float | None = None, until_ts: float | None = None) -> list[tuple[str, int]]:
        """(path, size now) of the segments that may hold records received in [since_ts,
        until_ts], oldest first: for a reader on another thread (the flight recorder), which
        reads each with ``read_segment(path, since_ts, until_ts, limit=size)`` and never
        touches this object. A segment deleted meanwhile raises FileNotFoundError there."""
        return [(seg.path, seg.size) for seg in self._segments
                if not (until_ts is not None and seg.first_ts > until_ts)
                and not (since_ts is not None and seg.last_ts < since_ts and seg is not self._current)]

    def read(self, since_ts: float | None = None, until_ts: float | None = None) -> Iterator[Chunk]:
        """Chunks overlapping [since_ts, until_ts], oldest first; call :meth:`flush` first
        to include what the writer still buffers. Records outside the range are dropped."""
        for seg in list(self._segments):
            if until_ts is not None and seg.first_ts > until_ts:
                continue
            if since_ts is not None and seg.last_ts < since_ts and seg is not self._current:
                continue
            problems: list[str] = []
            try:
                yield from read_segment(seg.path, since_ts, until_ts, limit=seg.size, problems=problems)
            except FileNotFoundError:
                continue  # deleted by a cap while we were reading
            except OSError as exc:
                problems.append(f"{os.path.basename(seg.path)}: {exc.strerror or exc}")
            if problems:
                # the rest of that file is left out of this read: counted, and the log says where
                self.corrupt_chunks += len(problems)
                self.last_read_problem = problems[-1]
                _log.warning("segment damaged; the rest of it is skipped", problem=problems[-1],
                             corrupt_chunks=self.corrupt_chunks)


def _valid_meta(meta: Any) -> str | None:
    """Why a chunk's metadata (whose CRC matched) cannot be used, or None. Written by this
    daemon, so anything else is a bug or a file from elsewhere: refused, never trusted."""
    if not isinstance(meta, dict):
        return f"metadata is a JSON {type(meta).__name__}, not an object"
    names = meta.get("names", {})
    if not isinstance(names, dict) or not all(isinstance(k, str) and k.isdigit() and isinstance(v, str)
                                              for k, v in names.items()):
        return "names is not an object of id -> string"
    batches = meta.get("batches")
    if not isinstance(batches, list) or not all(
            isinstance(b, list) and len(b) == 2 and type(b[0]) is int and b[0] >= 0
            and type(b[1]) in (int, float) for b in batches):
        return "batches is not a list of [count, time]"
    for k in ("ts_first", "ts_last"):
        if type(meta.get(k)) not in (int, float):
            return f"{k} is not a number"
    if not isinstance(meta.get("host", ""), str) or type(meta.get("pid", 0)) is not int \
            or not isinstance(meta.get("service"), (str, type(None))) or not isinstance(meta.get("conn", ""), str):
        return "host/pid/service/conn have the wrong types"
    return None


def _lock_dir(directory: str) -> int:
    """Take the directory's exclusive lock (non-blocking) and write our pid into the lock
    file; DataDirLocked naming the holder if another process has it. Two daemons on one
    directory would give out the same segment numbers and delete each other's segments."""
    path = os.path.join(directory, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError:
        pass  # a lock file of another user's (read-only data dir): the lock below decides
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        except OSError:
            holder = "?"
        os.close(fd)
        raise DataDirLocked(errno.EWOULDBLOCK, f"in use by another aclprofd (pid {holder}); give each daemon "
                            f"its own --data-dir", directory) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _nbytes(b: Any) -> int:
    """Bytes of a batch: bytes or any buffer (a memoryview of a kept buffer, whatever its
    format: len() would count its items)."""
    return len(b) if type(b) is bytes else memoryview(b).nbytes


def _write_all(fd: int, parts: list[Any]) -> None:
    """``writev`` until every byte of ``parts`` is written (a short write continues)."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        n = os.writev(fd, views[:_IOV_MAX])
        while n and views:
            if n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0


def read_segment(path: str, since_ts: float | None = None, until_ts: float | None = None,
                 limit: int | None = None, problems: list[str] | None = None) -> Iterator[Chunk]:
    """The chunks of one segment file; stops at a torn or corrupt chunk (the reason is
    appended to ``problems``; a torn tail at the very end, the normal result of a kill -9
    during a write, is no problem). A chunk's CRC is checked before its metadata is parsed,
    and the parsed metadata is checked before it is used (issue 9: a flipped bit that kept
    the JSON valid killed the daemon)."""
    def bad(reason: str) -> None:
        if problems is not None:
            problems.append(f"{os.path.basename(path)}@{pos}: {reason}")

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = size if limit is None else min(limit, size)
        head = f.read(_FILE_HEADER.size)
        if len(head) < _FILE_HEADER.size:
            return
        magic, version, _, hsize, _, _, _ = _FILE_HEADER.unpack(head)
        if magic != SEGMENT_MAGIC or version != SEGMENT_VERSION:
            return
        f.seek(hsize)
        pos = hsize
        names: dict[str, dict[int, str]] = {}
        while pos < end:
            h = f.read(_CHUNK_HEADER.size)
            if len(h) < _CHUNK_HEADER.size:
                return  # torn tail
            magic, mlen, dlen, crc = _CHUNK_HEADER.unpack(h)
            if magic not in _CHUNK_MAGICS:
                return bad("bad chunk magic")
            nxt = pos + _CHUNK_HEADER.size + mlen + dlen
            if nxt > size:
                return  # torn tail (or lengths that point past the file: never read them)
            mb = f.read(mlen)
            data = f.read(dlen)
            crc_of = zlib.crc32 if magic == _CHUNK_MAGIC else crc32c  # "ACK2" and "ACK3": CRC-32C
            if crc_of(data, crc_of(mb)) != crc:
                return bad("CRC mismatch")
            try:
                meta = json.loads(mb)
            except ValueError:
                return bad("metadata is not JSON")
            why = _valid_meta(meta)
            if why is not None:
                return bad(why)
            count = sum(c for c, _ in meta["batches"])
            encoded = magic == _CHUNK_MAGIC_ENC
            if not encoded and (dlen % RECORD_DTYPE.itemsize or count * RECORD_DTYPE.itemsize != dlen):
                return bad("record count does not match the data")
            outside = ((since_ts is not None and meta["ts_last"] < since_ts)
                       or (until_ts is not None and meta["ts_first"] > until_ts))
            if encoded and not outside:  # decoded only when read (a chunk outside is skipped unread)
                try:  # checked to the last byte: the count, every varint, nothing left over
                    data = decode_records(data, count)
                except ValueError as exc:
                    return bad(str(exc))
            conn_names = names.setdefault(meta.get("conn", ""), {})
            conn_names.update((int(k), v) for k, v in meta.get("names", {}).items())
            pos = nxt
            if outside:
                continue
            records = np.frombuffer(data, dtype=RECORD_DTYPE)
            counts = [c for c, _ in meta["batches"]]
            ts = np.repeat(np.asarray([t for _, t in meta["batches"]], dtype=np.float64), counts)
            sel = None
            if since_ts is not None:
                sel = ts >= since_ts
            if until_ts is not None:
                sel = (ts <= until_ts) if sel is None else (sel & (ts <= until_ts))
            if sel is not None and not sel.all():
                records, ts = records[sel], ts[sel]
            if len(records):
                yield Chunk(meta, conn_names, records, ts)
