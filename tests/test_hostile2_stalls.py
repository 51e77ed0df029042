"""Issue 19, the loop stalls left after the second round (hostile tests).

- one agent's many small frames (WATCH + BATCH relabels, ~1 ms each, all under the read
  budget) were handled in one loop turn: 10,050 pairs held every client 13.7 s. Now one
  connection gets a slice of each turn (``FRAMES_PER_TURN`` frames, ``SLICE_S`` of
  handling), its other frames wait for the next turn, and the loop serves them without
  waiting for new bytes;
- the flush after a hostile agent's long cells wrote the aggregates file on the loop
  thread (~1.3 s of CPU for 4096 keys of 4 KiB names).

Each round trip bound is generous (1 s, several times the target) so that a loaded
machine does not make the test flaky; the deterministic checks count frames per turn.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest
from helpers.daemons import Client, InProcess, agent, status
from helpers.procs import wait_for
from helpers.records import make_records

from aclprof.protocol.wire import Kind, encode_batch, encode_json

pytestmark = pytest.mark.timeout(120)

PROBE_BOUND_S = 1.0  # a STATUS round trip past this is a stall, not load


class Probe:
    """STATUS on one kept connection every 20 ms on a thread; :attr:`worst` round trip."""

    def __init__(self, path: str):
        self.client = Client(path)
        self.worst = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.client.request(Kind.STATUS)
            self.worst = max(self.worst, time.monotonic() - t0)
            self.count += 1
            self._stop.wait(0.02)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(30)
        self.client.close()


def _relabels(n: int) -> bytes:
    """``n`` WATCH relabels of model 1, each followed by one record: a new key each, ~1 ms
    of the loop per pair (tests/test_hostile2_metrics.py's attack)."""
    out = []
    for i in range(n):
        out.append(encode_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {"model": f"m{i}"}}))
        out.append(encode_batch(make_records(1, types=(1,), names=(3,))))
    return b"".join(out)


def _count_frames_per_turn(d: InProcess) -> Counter:
    """Count, per (loop turn, connection), the frames the daemon handles: a turn is the
    span between two ``select`` calls."""
    t = d.daemon.transport
    per_turn: Counter = Counter()
    turn = [0]
    select, handle = t.sel.select, t._handle

    def counting_select(timeout=None):
        turn[0] += 1
        return select(timeout)

    def counting_handle(conn, kind, payload):
        per_turn[(turn[0], conn.id)] += 1
        return handle(conn, kind, payload)

    t.sel.select = counting_select
    t._handle = counting_handle
    return per_turn


def test_many_small_frames_of_one_agent_do_not_hold_the_loop():
    """Was: all of one agent's 3000 WATCH + BATCH pairs (~600 KB, under the 8 MiB read
    budget) in one loop turn, seconds with every other client waiting. Now at most
    FRAMES_PER_TURN of its frames per turn, the STATUS probe is answered between its
    slices, and every record is still read, in order (each BATCH under its WATCH's label)."""
    from aclprofd.transport import FRAMES_PER_TURN

    n = 3000
    with InProcess(max_keys=20000, max_keys_per_agent=20000, max_keys_per_uid=20000) as d:
        per_turn = _count_frames_per_turn(d)
        good = agent(d.socket, host="good", service="good")
        bad = agent(d.socket, host="bad", service="bad")
        payload = _relabels(n)
        with Probe(d.socket) as probe:
            wait_for(lambda: probe.count > 0)
            bad.sock.sendall(payload)  # then nothing more: the rest must be served unprompted
            good.send_batch(make_records(10))
            wait_for(lambda: status(d.socket)["records_total"] == n + 10, timeout=60)
        assert probe.worst < PROBE_BOUND_S, f"worst STATUS round trip {probe.worst:.2f} s"
        bad_frames = max(v for (turn, cid), v in per_turn.items() if cid.endswith("-2"))
        assert bad_frames <= FRAMES_PER_TURN, bad_frames
        st = status(d.socket)
        assert st["loop"]["slices_cut"] >= 2 * n // FRAMES_PER_TURN - 1


_CTRL = "".join(chr(1 + i % 30) for i in range(256))  # 6 bytes each in JSON


def _long_cells(cells: int) -> tuple[list[bytes], list[bytes]]:
    """One agent's ``cells`` ops of 4 KiB control-character op types and names (the soak's
    ``baseline_long_cells``): its NAMES frames and its BATCH frames (3 records per cell)."""
    from aclprof.protocol.wire import encode_names

    names = {}
    for i in range(cells):
        names[2 * i + 10] = f"t{i:05d}" + _CTRL * 16
        names[2 * i + 11] = f"n{i:05d}" + _CTRL * 16
    batches = []
    for lo in range(0, cells, 256):
        recs = make_records(3 * min(256, cells - lo))
        ids = np.repeat(np.arange(lo, lo + len(recs) // 3), 3)
        recs["op_type"], recs["op_name"] = 2 * ids + 10, 2 * ids + 11
        batches.append(encode_batch(recs))
    return list(encode_names(names)), batches


def _largest_chunk_meta(data_dir: str) -> int:
    """The largest chunk metadata (names, identity, batches) in the data dir's segments."""
    from aclprofd.storage import _CHUNK_HEADER, _FILE_HEADER

    largest = 0
    for fn in sorted(os.listdir(data_dir)):
        if not fn.endswith(".acps"):
            continue
        with open(os.path.join(data_dir, fn), "rb") as f:
            f.seek(_FILE_HEADER.unpack(f.read(_FILE_HEADER.size))[3])
            while len(h := f.read(_CHUNK_HEADER.size)) == _CHUNK_HEADER.size:
                _, mlen, dlen, _ = _CHUNK_HEADER.unpack(h)
                largest = max(largest, mlen)
                f.seek(mlen + dlen, os.SEEK_CUR)
    return largest


def test_saving_long_aggregate_keys_does_not_hold_the_loop(monkeypatch):
    """Was: after one agent's 4096 cells of 4 KiB control-character names, every flush
    with new records (any agent's) rewrote aggregates.npz with their ~180 MB of key JSON on
    the loop thread (~1.3 s of CPU each time): a STATUS stall at every flush. Now the loop
    takes a copy of the state and a writer thread encodes and writes it; the file still
    has every key and the latest figures, written atomically (mode 0640)."""
    import aclprofd.persist
    from aclprofd.aggregate import aggregator, npzfile
    from aclprofd.aggregate.npzfile import read_state
    from aclprofd.storage import read_segment

    cells = 4096
    names_frames, batches = _long_cells(cells)
    writers: list[str] = []
    real_write = npzfile.write_state

    def recording_write(path, arrays, meta):
        writers.append(threading.current_thread().name)
        return real_write(path, arrays, meta)

    for mod in (aggregator, aclprofd.persist):  # whichever module the daemon calls it from
        if hasattr(mod, "write_state"):
            monkeypatch.setattr(mod, "write_state", recording_write)
    with InProcess(flush_interval_s=0.2) as d:
        path = os.path.join(d.settings.data_dir, "aggregates.npz")
        bad = agent(d.socket, host="bad", service="hostile-cells")
        for frame in names_frames + batches:
            bad.sock.sendall(frame)
        wait_for(lambda: status(d.socket)["records_total"] == 3 * cells, timeout=90)
        # the long keys are saved once (the segment's names too: a one-time cost, not this test's)
        wait_for(lambda: os.path.exists(path) and len(read_state(path)[0]["keys"]) > 2000, timeout=90,
                 interval=0.2)
        good = agent(d.socket, host="good", service="good")
        sent = 0
        with Probe(d.socket) as probe:
            t_end = time.monotonic() + 4.0  # ~20 flushes, each with new records to save
            while time.monotonic() < t_end:
                good.send_batch(make_records(100))
                sent += 100
                time.sleep(0.05)
            wait_for(lambda: status(d.socket)["records_total"] == 3 * cells + sent)
        assert probe.worst < PROBE_BOUND_S, f"worst STATUS round trip {probe.worst:.2f} s"
        assert writers and d.thread.name not in writers, set(writers)
        d.stop()  # the last save waits for the writer
        meta, arrays = read_state(path)
        assert len(meta["keys"]) > 2000 and int(arrays["count"].sum()) == 3 * cells + sent
        assert os.stat(path).st_mode & 0o777 == 0o640
        # the segment: each chunk states the names its records use (a batch's worth, ~12 MB
        # of JSON here), not the whole table (~180 MB) in one chunk; every record's names
        # are in its segment
        data = d.settings.data_dir
        assert _largest_chunk_meta(data) < 32 << 20
        records = 0
        for fn in sorted(os.listdir(data)):
            if fn.endswith(".acps"):
                for chunk in read_segment(os.path.join(data, fn)):
                    if chunk.meta.get("service") == "hostile-cells":
                        ids = set(chunk.records["op_type"].tolist()) | set(chunk.records["op_name"].tolist())
                        assert ids <= chunk.names.keys()
                        records += len(chunk.records)
        assert records == 3 * cells
