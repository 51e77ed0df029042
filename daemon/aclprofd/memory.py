"""The daemon's one memory budget, and handing freed heap pages back to the kernel.

:class:`Memory` answers "may this client make the daemon hold more?" (daemon/README.md
"Memory budget") and decides when to call ``malloc_trim``: every ``_TRIM_EVERY_S``, and at
the next flush after a connection that held a lot was closed. Kept apart from
:mod:`aclprofd.server` so that the budget's rules are in one small module that the loop,
the ingest and the control parts all consult.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .persist import malloc_trim

if TYPE_CHECKING:
    from .server import Daemon

__all__ = ["Memory", "REPLY_CAP", "UNREAD_REPLIES"]

REPLY_CAP = 64 << 20            # queued bytes per connection, at most (and at most a quarter of the budget)
UNREAD_REPLIES = 1 << 20        # reply bytes queued while the socket is full: the client does not read
_TRIM_EVERY_S = 10.0            # hand freed heap pages back to the kernel this often
_TRIM_AFTER = 1 << 20           # a connection that held more than this: trim the heap at the next flush


class Memory:
    """The daemon's one memory budget (``memory_budget``, daemon/README.md "Memory budget"):
    what clients make it hold — queued outgoing bytes of every connection (replies, stream
    and export frames), name tables, received records not yet stored, partial frames —
    is summed on demand from the connections (at most 4096), never tracked incrementally
    (nothing to get out of step). A request that would pass the budget, or one client's
    share of it, is refused and counted by what it would have grown (``refused``)."""

    def __init__(self, daemon: Daemon):
        self.d = daemon
        self._next_trim = 0.0

    @property
    def budget(self) -> int:
        return self.d.settings.memory_budget_bytes

    def used(self) -> int:
        return sum(len(c.out) + c.names_bytes + c.pending_bytes + c.reader.buffered
                   for c in self.d.conns.values())

    def fits(self, more: int) -> bool:
        return self.used() + more <= self.budget

    def reply_cap(self) -> int:
        """Bytes one connection may have queued (replies, stream and export frames)."""
        return min(REPLY_CAP, self.budget // 4)

    def names_share(self) -> int:
        """Bytes one connection's name table may be charged."""
        return self.budget // 8

    def refuse(self, what: str) -> None:
        r = self.d.counters.memory_refused
        r[what] = r.get(what, 0) + 1

    def released(self, held: int) -> None:
        """A closed connection held ``held`` bytes (name table and queue)."""
        if held > _TRIM_AFTER:
            # what it held is garbage now: give the pages back at the next flush, not in 10 s
            self._next_trim = 0.0

    def trim_if_due(self, mono: float) -> None:
        """At a flush: hand freed heap pages back to the kernel now and then."""
        if mono >= self._next_trim:
            self._next_trim = mono + _TRIM_EVERY_S
            malloc_trim()
