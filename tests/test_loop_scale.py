"""The daemon's work per handshake does not grow with the connections already open
(issue 20: ``.ci/run`` under 10 minutes).

The loop passed over every open connection on each turn (is an EXPORT running? pump the
EXPORTs, pump the STREAMs) and, while a STREAM client watched, once more for each new
agent (its LIVE check): a handshake cost O(open connections), 0.24 ms with 10 agents
connected and 1.4 ms with 3,500, and the tests that open the agents' whole share
(~3,800 connections) spent minutes on it under coverage.

These tests count the connections the daemon visits (a ``transport.conns`` that counts
what its passes hand out) while agents say HELLO one after another: with N agents open,
K handshakes visit fewer than 2 N of them (a periodic sweep, such as the detector's age
scan, may fall in the window), where one pass per turn made it K x N or more. Counted
work, not time: the result does not depend on the machine's load.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.daemons import Client, InProcess
from helpers.procs import wait_for

from aclprof.protocol.wire import Kind

OPEN = 300       # agents connected before the counted handshakes
HANDSHAKES = 40  # counted handshakes, one after another


class CountingConns(dict):
    """A ``Transport.conns`` that counts the connections its passes (``values()``,
    ``items()``, iteration) hand out; lookups, inserts and ``len`` are not counted."""

    visits = 0

    def _count(self, it: Iterator[Any]) -> Iterator[Any]:
        for x in it:
            self.visits += 1
            yield x

    def values(self):  # type: ignore[override]
        return self._count(iter(list(super().values())))

    def items(self):  # type: ignore[override]
        return self._count(iter(list(super().items())))

    def keys(self):  # type: ignore[override]
        return self._count(iter(list(super().keys())))

    def __iter__(self):
        return self._count(iter(list(super().keys())))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InProcess, CountingConns]]:
    """An in-process daemon whose connection table counts the passes over it; the
    periodic passes (flush, published counters) are out of the counted window."""
    import aclprofd.server

    monkeypatch.setattr(aclprofd.server, "PUBLISH_S", 3600.0)
    with InProcess(flush_interval_s=600) as d:
        t = d.daemon.transport
        conns = CountingConns()
        # swapped before the first connection (the loop reads the attribute each time);
        # the memory budget's tally holds the same table
        assert not t.conns
        t.conns = conns
        t.memory.conns = conns
        yield d, conns


@pytest.mark.parametrize("watched", [False, True], ids=["no-stream", "a-stream-client-watches"])
def test_a_handshake_does_not_visit_the_open_connections(counted: tuple[InProcess, CountingConns], watched: bool):
    d, conns = counted
    clients: list[Client] = []
    try:
        if watched:  # `aclprof tail` running: each new agent gets its LIVE check
            tail = Client(d.socket)
            clients.append(tail)
            tail.send_json(Kind.STREAM, {"filter": {}})
            wait_for(lambda: d.daemon.fanout.streaming == 1)
        clients += [Client(d.socket, "agent", service=f"s{i}") for i in range(OPEN)]
        assert len(conns) == len(clients)
        before = conns.visits
        clients += [Client(d.socket, "agent", service=f"k{i}") for i in range(HANDSHAKES)]
        visited = conns.visits - before
        assert len(conns) == len(clients)
        assert visited < 2 * OPEN, (f"{HANDSHAKES} handshakes with {OPEN} agents open visited {visited} "
                                    f"connections: ~{visited // HANDSHAKES} per handshake")
    finally:
        for c in clients:
            c.close()


def test_the_counting_table_sees_a_pass(counted: tuple[InProcess, CountingConns]):
    """The instrument itself: a STATUS lists every agent, one pass over the table."""
    d, conns = counted
    clients = [Client(d.socket, "agent", service=f"s{i}") for i in range(20)]
    try:
        ctl = Client(d.socket)
        clients.append(ctl)
        before = conns.visits
        assert len(ctl.request(Kind.STATUS)["agents"]) == 20
        assert conns.visits - before >= 20
    finally:
        for c in clients:
            c.close()
