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

import threading
import time
from collections import Counter
from typing import Any

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
