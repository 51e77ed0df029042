"""The daemon's connection limits per role (daemon/README.md "Limits"), apart from the
socket I/O of :class:`aclprofd.transport.Transport`, which asks them at accept, at HELLO,
at each request and at the flush tick.

At most ``MAX_CONNECTIONS`` in all, of which at most ``MAX_ANONYMOUS`` have not said HELLO
yet (a new one evicts the oldest: a real client says HELLO at once) and at most
``max_control`` are control clients (a new one evicts the longest idle one that neither
streams nor exports); the rest is the agents' share, so idle control clients cannot lock
agents or ``aclprof status`` out. A control client that sends no request for
``control_idle_s`` while not streaming or exporting is closed.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Protocol

from .conn import Conn
from .ratelimit import LogLimiter

__all__ = ["ConnLimits", "MAX_CONNECTIONS", "MAX_ANONYMOUS"]

MAX_CONNECTIONS = 4096
MAX_ANONYMOUS = 256            # connections that have not said HELLO yet


class _Fail(Protocol):
    def __call__(self, conn: Conn, reason: str, *, quiet: bool = ..., protocol_error: bool = ...) -> None: ...


class ConnLimits:
    """The tables of anonymous and control connections (open ones only) and the counts of
    what the limits refused (``refused``) and closed for idling (``idle_closed``).

    ``fail(conn, reason, quiet=, protocol_error=)`` closes a connection with an ERROR frame,
    ``close(conn, reason)`` without one (:meth:`aclprofd.transport.Transport.fail`,
    :meth:`~aclprofd.transport.Transport.close_conn`); ``limiter`` logs rate-limited."""

    def __init__(self, fail: _Fail, close: Callable[[Conn, str | None], None], limiter: LogLimiter, *,
                 max_control: int = 64, control_idle_s: float = 60.0) -> None:
        self._fail, self._close, self._limiter = fail, close, limiter
        #: limits the daemon may change (from its settings; a reload too)
        self.max_control, self.control_idle_s = max_control, control_idle_s
        # oldest first: connections without HELLO (by connect time), control clients (by
        # their last request)
        self._anon: collections.OrderedDict[Conn, None] = collections.OrderedDict()
        self._controls: collections.OrderedDict[Conn, float] = collections.OrderedDict()
        self.refused = 0             # connections refused or evicted by the limits
        self.idle_closed = 0         # control clients closed for idling

    def counts(self) -> tuple[int, int]:
        """(control clients, connections that have not said HELLO yet) open now."""
        return len(self._controls), len(self._anon)

    def room_for_one_more(self, open_now: int) -> bool:
        """A connection was accepted while ``open_now`` are open: False if it must be
        refused (at ``MAX_CONNECTIONS``); when the anonymous share is full, the oldest
        anonymous connection is evicted to make room."""
        if open_now >= MAX_CONNECTIONS:
            self.refused += 1
            self._limiter.log("warning", "connection refused", reason=f"{MAX_CONNECTIONS} connections open")
            return False
        if len(self._anon) >= MAX_ANONYMOUS:
            oldest = next(iter(self._anon))
            self.refused += 1
            self._close(oldest, None)
            self._limiter.log("warning", "connection evicted",
                              reason=f"more than {MAX_ANONYMOUS} connections without HELLO")
        return True

    def connected(self, conn: Conn) -> None:
        """``conn`` was accepted: it has not said HELLO yet."""
        self._anon[conn] = None

    def admitted(self, conn: Conn) -> None:
        """``conn`` said HELLO (its role is set): it leaves the anonymous share; a control
        client joins the control share, evicting the longest idle one when it is full.
        A connection already closed (its peer left before WELCOME could be written) joins
        nothing: the tables hold open connections only."""
        self._anon.pop(conn, None)
        if conn.role != "control" or conn.closed:
            return
        self._controls[conn] = time.monotonic()
        if len(self._controls) <= self.max_control:
            return
        for other in self._controls:
            if other is not conn and self._idle(other):
                self.refused += 1
                self._fail(other, f"evicted: more than {self.max_control} control connections "
                                  "and this one was the longest idle", quiet=True, protocol_error=False)
                self._limiter.log("warning", "control connection evicted", pid=other.pid,
                                  limit=self.max_control)
                return
        self.refused += 1
        self._fail(conn, f"too many control connections (limit {self.max_control}, all busy)",
                   protocol_error=False)

    def requested(self, conn: Conn, now: float) -> None:
        """``conn`` sent a request, or waits for a reply the daemon owes it (a TRACE runs):
        a control client doing so is not idle."""
        if conn in self._controls:
            self._controls[conn] = now
            self._controls.move_to_end(conn)

    def closed(self, conn: Conn) -> None:
        """``conn`` is closed: it leaves the tables."""
        self._anon.pop(conn, None)
        self._controls.pop(conn, None)

    @staticmethod
    def _idle(conn: Conn) -> bool:
        return conn.stream is None and conn.export is None and not conn.out

    def reap_idle(self, now: float) -> None:
        """Close control clients without a request for ``control_idle_s`` that neither
        stream nor export (called with the flush tick)."""
        cutoff = now - self.control_idle_s
        for conn, last in list(self._controls.items()):
            if last > cutoff:
                break  # ordered by last request
            if self._idle(conn):
                self.idle_closed += 1
                self._fail(conn, f"idle control connection: no request in {self.control_idle_s:g} s", quiet=True,
                           protocol_error=False)
                self._limiter.log("info", "connection closed", reason="idle control connection", pid=conn.pid)
