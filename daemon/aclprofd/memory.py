"""The daemon's one memory budget, and handing freed heap pages back to the kernel.

:class:`Memory` answers "may this client make the daemon hold more?" (daemon/README.md
"Memory budget") and decides when to call ``malloc_trim``: every ``_TRIM_EVERY_S``, and at
the next flush after a connection that held a lot was closed. Kept apart from
:mod:`aclprofd.server` so that the budget's rules are in one small module that the loop,
the ingest and the control parts all consult.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .conn import Conn

__all__ = ["Memory", "REPLY_CAP", "UNREAD_REPLIES", "malloc_trim"]

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

    def __init__(self, conns: Mapping[int, Conn], budget: int, refused: dict[str, int]):
        #: the daemon's open connections (the transport's table, read live)
        self.conns = conns
        #: ``memory_budget`` in bytes (a SIGHUP may change it: :func:`aclprofd.reload.apply_reload`)
        self.budget = budget
        #: refusals by what they would have grown (the daemon's ``Counters.memory_refused``)
        self.refused = refused
        self._next_trim = 0.0
        #: bytes held outside the connections, each read on demand: the /metrics rendering
        #: (:meth:`aclprofd.metrics.Metrics.held`)
        self.holders: list[Callable[[], int]] = []

    def used(self) -> int:
        """Bytes the connections hold now (:meth:`Conn.held`), and the /metrics rendering."""
        return self._tally(0)[0]

    def outside(self) -> int:
        """Bytes held outside the connections (the /metrics rendering)."""
        return sum(h() for h in self.holders)

    def stream_room(self, est_record: int) -> tuple[int, int]:
        """(bytes the budget has left, bytes all STREAM buffers together may still grow, at
        most half the budget), counting each STREAM client's records waiting to be encoded
        at ``est_record`` bytes each. One pass over the connections."""
        used, streams = self._tally(est_record)
        return self.budget - used, self.budget // 2 - streams

    def _tally(self, est_record: int) -> tuple[int, int]:
        """(bytes held, of which STREAM buffers): the one place the "used" sum is made."""
        used, streams = self.outside(), 0
        for c in self.conns.values():
            used += c.held()
            if c.stream is not None:
                pending = c.stream_pending_n * est_record
                used += pending
                streams += len(c.out) + pending
        return used, streams

    def fits(self, more: int) -> bool:
        return self.used() + more <= self.budget

    def reply_cap(self) -> int:
        """Bytes one connection may have queued (replies, stream and export frames)."""
        return min(REPLY_CAP, self.budget // 4)

    def metrics_share(self) -> int:
        """Bytes one /metrics rendering may take (its text; later series are left out)."""
        return self.budget // 4

    def names_share(self) -> int:
        """Bytes one connection's name table may be charged."""
        return self.budget // 8

    def refuse(self, what: str) -> None:
        r = self.refused
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


def _load_malloc_trim() -> Callable[[], None]:
    # Frames of ~230 KB arriving thousands of times a second leave glibc's heap holes that
    # it keeps (RSS creeps at saturation although Python-level memory is flat);
    # malloc_trim(0) returns them. No-op where there is no glibc.
    try:
        import ctypes
        trim = ctypes.CDLL("libc.so.6").malloc_trim
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0) and None


malloc_trim = _load_malloc_trim()
