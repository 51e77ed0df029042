"""Issue 19, the last goal: no one step of the daemon's loop runs long under the soak's
attacks (tests/bench/bench_daemon_soak.py measures the round trips; these tests check that
the work is cut into steps, with no timing: they count what a step does).

- An EXPORT whose filter leaves out every stored chunk reads one chunk per pump step (it
  read the whole store in one step before its first frame: 143 ms of the loop in the soak).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.daemons import Client, InProcess, agent, status
from helpers.procs import wait_for
from helpers.records import make_records


def test_an_export_that_matches_nothing_reads_one_chunk_per_pump_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from aclprofd import fanout, ingest
    from aclprofd.storage import Chunk, Storage

    monkeypatch.setattr(ingest, "STORE_PENDING_MAX", 0)  # each batch its own chunk
    monkeypatch.setattr(fanout, "EXPORT_SLICE_S", 0.0)  # a pump call ends after its first step
    with InProcess() as d:
        a = agent(d.socket, names={1: "T", 2: "n", 3: "N", 4: "M"}, service="kept")
        for _ in range(12):
            a.send_batch(make_records(50))
        wait_for(lambda: sum(x["records"] for x in status(d.socket)["agents"]) == 600, what="the records read")
        a.close()
        pumps = [0]
        chunks_in: dict[int, int] = {}
        real_pump, real_read = fanout.Fanout.pump_exports, Storage.read

        def pump(self: Any) -> None:
            pumps[0] += 1
            real_pump(self)

        def read(self: Any, *args: Any, **kw: Any) -> Iterator[Chunk]:
            for chunk in real_read(self, *args, **kw):
                chunks_in[pumps[0]] = chunks_in.get(pumps[0], 0) + 1
                yield chunk

        monkeypatch.setattr(fanout.Fanout, "pump_exports", pump)
        monkeypatch.setattr(Storage, "read", read)
        c = Client(d.socket)
        assert c.export(filter={"service": "nobody"}) == []
        c.close()
    assert sum(chunks_in.values()) >= 12, chunks_in
    assert max(chunks_in.values()) == 1, chunks_in  # main: every chunk in one pump call
