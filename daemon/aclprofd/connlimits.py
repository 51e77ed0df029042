"""The daemon's connection limits per role (daemon/README.md "Limits"), apart from the
socket I/O of :class:`aclprofd.transport.Transport`, which asks them at accept, at HELLO,
at each request and at the flush tick.

At most ``MAX_CONNECTIONS`` in all, of which at most ``MAX_ANONYMOUS`` have not said HELLO
yet (a new one evicts the oldest: a real client says HELLO at once) and at most
``max_control`` are control clients (a new one evicts the longest idle one that neither
streams nor exports); the rest is the agents' share, so idle control clients cannot lock
agents or ``aclprof status`` out. A control client that sends no request for
``control_idle_s`` while not streaming or exporting is closed.

Agents (issue 19): at most :meth:`ConnLimits.agent_share` (``MAX_CONNECTIONS`` minus the
anonymous and control shares, so agents can never take the room ``aclprof status`` needs)
and at most ``max_agents_per_uid`` per peer uid (``SO_PEERCRED``), so one user cannot lock
out another; root is exempt from the per-uid cap (not from the agent share): it can stop or
read the daemon anyway, and hosts whose containerised services all run as uid 0 would
otherwise meet a host-wide cap. Both are checked at HELLO, *before* WELCOME: the refused
agent's handshake fails with an ERROR naming the limit, so it backs off like for an absent
daemon. An agent that sends no whole frame for ``agent_idle_s`` is closed (with ERROR and
GOODBYE: nothing it delivered is lost); live agents send a heartbeat
(``wire.AGENT_HEARTBEAT_S``). Refusals and idle closes are counted per reason
(:attr:`ConnLimits.refused_by`, :attr:`ConnLimits.idle_closed_by`).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Protocol

from aclprof.protocol.wire import AGENT_HEARTBEAT_S

from .conn import Conn
from .ratelimit import LogLimiter

__all__ = ["ConnLimits", "MAX_CONNECTIONS", "MAX_ANONYMOUS", "REFUSAL_REASONS"]

MAX_CONNECTIONS = 4096
MAX_ANONYMOUS = 256            # connections that have not said HELLO yet
#: why a connection was refused or evicted (``refused_by`` keys, the /metrics label)
REFUSAL_REASONS = ("total", "without_hello", "control", "agent_share", "agent_uid")


class _Fail(Protocol):
    def __call__(self, conn: Conn, reason: str, *, quiet: bool = ..., protocol_error: bool = ...) -> None: ...


class ConnLimits:
    """The tables of anonymous and control connections (open ones only) and the counts of
    what the limits refused (``refused``) and closed for idling (``idle_closed``).

    ``fail(conn, reason, quiet=, protocol_error=)`` closes a connection with an ERROR frame,
    ``close(conn, reason)`` without one (:meth:`aclprofd.transport.Transport.fail`,
    :meth:`~aclprofd.transport.Transport.close_conn`); ``limiter`` logs rate-limited."""

    def __init__(self, fail: _Fail, close: Callable[[Conn, str | None], None], limiter: LogLimiter, *,
                 max_control: int = 64, control_idle_s: float = 60.0, agent_idle_s: float = 60.0,
                 max_agents_per_uid: int = 1024) -> None:
        self._fail, self._close, self._limiter = fail, close, limiter
        #: limits the daemon may change (from its settings; a reload too)
        self.max_control, self.control_idle_s = max_control, control_idle_s
        self.agent_idle_s, self.max_agents_per_uid = agent_idle_s, max_agents_per_uid
        # oldest first: connections without HELLO (by connect time), control clients (by
        # their last request), agents (by their last whole frame)
        self._anon: collections.OrderedDict[Conn, None] = collections.OrderedDict()
        self._controls: collections.OrderedDict[Conn, float] = collections.OrderedDict()
        self._agents: collections.OrderedDict[Conn, float] = collections.OrderedDict()
        self._agent_uids: dict[int, int] = {}  # open agents per peer uid (-1: unknown)
        #: connections refused or evicted by the limits, by reason (REFUSAL_REASONS)
        self.refused_by: dict[str, int] = dict.fromkeys(REFUSAL_REASONS, 0)
        #: connections closed for idling, by role
        self.idle_closed_by: dict[str, int] = {"control": 0, "agent": 0}

    @property
    def refused(self) -> int:
        """Connections refused or evicted by the limits, all reasons."""
        return sum(self.refused_by.values())

    @property
    def idle_closed(self) -> int:
        """Control clients closed for idling (``idle_closed_by`` has the agents too)."""
        return self.idle_closed_by["control"]

    def _refuse(self, reason: str) -> None:
        self.refused_by[reason] += 1

    def counts(self) -> tuple[int, int]:
        """(control clients, connections that have not said HELLO yet) open now."""
        return len(self._controls), len(self._anon)

    def agent_counts(self) -> tuple[int, int]:
        """(agents open now, the most any one uid has open)."""
        return len(self._agents), max(self._agent_uids.values(), default=0)

    def agent_share(self) -> int:
        """Agents at most: what the anonymous and control shares leave of ``MAX_CONNECTIONS``."""
        return MAX_CONNECTIONS - MAX_ANONYMOUS - self.max_control

    @staticmethod
    def _uid(conn: Conn) -> int:
        return conn.peer[1] if conn.peer is not None else -1

    def refusal(self, conn: Conn) -> str | None:
        """``conn`` said HELLO (its role and peer are set), WELCOME not sent yet: why it must
        be refused (counted, logged rate-limited), or None. Agents only: beyond the agent
        share or its uid's cap."""
        if conn.role != "agent":
            return None
        uid = self._uid(conn)
        if len(self._agents) >= self.agent_share():
            self._refuse("agent_share")
            why = (f"too many agent connections: {len(self._agents)} open, the agents' share of the daemon's "
                   f"{MAX_CONNECTIONS} connections (the rest is kept for control clients and new connections)")
        elif uid != 0 and self._agent_uids.get(uid, 0) >= self.max_agents_per_uid:
            self._refuse("agent_uid")
            why = (f"too many agent connections for uid {uid}: {self.max_agents_per_uid} open "
                   f"(max_agent_connections_per_uid); close some or raise the limit")
        else:
            return None
        self._limiter.log("warning", "agent connection refused", pid=conn.pid, uid=uid, reason=why)
        return why

    def connected(self, conn: Conn) -> None:
        """``conn`` was accepted: it has not said HELLO yet."""
        self._anon[conn] = None

    def room_for_one_more(self, open_now: int) -> bool:
        """A connection was accepted while ``open_now`` are open: False if it must be
        refused (at ``MAX_CONNECTIONS``); when the anonymous share is full, the oldest
        anonymous connection is evicted to make room."""
        if open_now >= MAX_CONNECTIONS:
            self._refuse("total")
            self._limiter.log("warning", "connection refused", reason=f"{MAX_CONNECTIONS} connections open")
            return False
        if len(self._anon) >= MAX_ANONYMOUS:
            oldest = next(iter(self._anon))
            self._refuse("without_hello")
            self._close(oldest, None)
            self._limiter.log("warning", "connection evicted",
                              reason=f"more than {MAX_ANONYMOUS} connections without HELLO")
        return True

    def admitted(self, conn: Conn) -> None:
        """``conn`` said HELLO (its role is set): it leaves the anonymous share; a control
        client joins the control share, evicting the longest idle one when it is full.
        A connection already closed (its peer left before WELCOME could be written) joins
        nothing: the tables hold open connections only."""
        self._anon.pop(conn, None)
        if conn.closed:
            return
        if conn.role == "agent":
            self._agents[conn] = time.monotonic()
            uid = self._uid(conn)
            self._agent_uids[uid] = self._agent_uids.get(uid, 0) + 1
            return
        self._controls[conn] = time.monotonic()
        if len(self._controls) <= self.max_control:
            return
        for other in self._controls:
            if other is not conn and self._idle(other):
                self._refuse("control")
                self._fail(other, f"evicted: more than {self.max_control} control connections "
                                  "and this one was the longest idle", quiet=True, protocol_error=False)
                self._limiter.log("warning", "control connection evicted", pid=other.pid,
                                  limit=self.max_control)
                return
        self._refuse("control")
        self._fail(conn, f"too many control connections (limit {self.max_control}, all busy)",
                   protocol_error=False)

    def requested(self, conn: Conn, now: float) -> None:
        """``conn`` sent a request (an agent: a whole frame), or waits for a reply the daemon
        owes it (a TRACE runs): it is not idle."""
        table = self._agents if conn.role == "agent" else self._controls
        if conn in table:
            table[conn] = now
            table.move_to_end(conn)

    def closed(self, conn: Conn) -> None:
        """``conn`` is closed: it leaves the tables."""
        self._anon.pop(conn, None)
        self._controls.pop(conn, None)
        if self._agents.pop(conn, None) is not None:
            uid = self._uid(conn)
            left = self._agent_uids.get(uid, 1) - 1
            if left > 0:
                self._agent_uids[uid] = left
            else:
                self._agent_uids.pop(uid, None)

    @staticmethod
    def _idle(conn: Conn) -> bool:
        return conn.stream is None and conn.export is None and not conn.out

    def reap_idle(self, now: float) -> None:
        """Close control clients without a request for ``control_idle_s`` that neither
        stream nor export, and agents without a whole frame for ``agent_idle_s`` (called
        with the flush tick)."""
        cutoff = now - self.control_idle_s
        for conn, last in list(self._controls.items()):
            if last > cutoff:
                break  # ordered by last request
            if self._idle(conn):
                self.idle_closed_by["control"] += 1
                self._fail(conn, f"idle control connection: no request in {self.control_idle_s:g} s", quiet=True,
                           protocol_error=False)
                self._limiter.log("info", "connection closed", reason="idle control connection", pid=conn.pid)
        cutoff = now - self.agent_idle_s
        for conn, last in list(self._agents.items()):
            if last > cutoff:
                break  # ordered by last frame
            # ERROR, then GOODBYE (Transport.fail): what it delivered is acknowledged; an
            # agent that predates heartbeats reconnects when it has records again
            self.idle_closed_by["agent"] += 1
            self._fail(conn, f"idle agent connection: no frame in {self.agent_idle_s:g} s (agents send a "
                             f"heartbeat every {AGENT_HEARTBEAT_S:g} s while idle)", quiet=True,
                       protocol_error=False)
            self._limiter.log("info", "connection closed", reason="idle agent connection", pid=conn.pid,
                              service=conn.service)
