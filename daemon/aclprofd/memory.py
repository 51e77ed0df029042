"""The daemon's one memory budget, and handing freed heap pages back to the kernel.

:class:`Memory` answers "may this client make the daemon hold more?" (daemon/README.md
"Memory budget") and decides when to call ``malloc_trim``: every ``_TRIM_EVERY_S``, and at
the next flush after a connection that held a lot was closed. The budget bounds the
process's resident size: what the daemon holds itself (its RSS at start, then its tables)
and a stated headroom for allocator slack are taken off it first, and the clients get the
rest (:meth:`Memory.share`). Kept apart from
:mod:`aclprofd.server` so that the budget's rules are in one small module that the loop,
the ingest and the control parts all consult.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Mapping
from itertools import chain

import numpy as np

from .conn import Conn

__all__ = ["Memory", "REPLY_CAP", "UNREAD_REPLIES", "SLACK_DIV", "MIN_SHARE_DIV", "TABLES_EVERY_S", "array_bytes",
           "malloc_trim", "process_rss"]

REPLY_CAP = 64 << 20            # queued bytes per connection, at most (and a quarter of the clients' share)
UNREAD_REPLIES = 1 << 20        # reply bytes queued while the socket is full: the client does not read
_TRIM_EVERY_S = 10.0            # hand freed heap pages back to the kernel this often
_TRIM_AFTER = 1 << 20           # a connection that held more than this: trim the heap at the next flush
#: the tables' arrays are walked at a flush this often, or at once when a table's capacity
#: grew (their bytes follow the capacity, which doubles; the window slots' change slowly):
#: a walk at every flush (1/s) was ~1-2 ms of loop CPU a second at 1000 keys (issue 21)
TABLES_EVERY_S = 10.0
#: an eighth of the budget is headroom for allocator slack: heap pages freed but not yet
#: returned (malloc_trim runs every 10 s), fragmentation, thread stacks, the transient
#: copies of a reply or a NAMES frame being decoded; the clients' share excludes it
SLACK_DIV = 8
#: a budget whose clients' share would be under a quarter of it is refused (start, SIGHUP)
MIN_SHARE_DIV = 4


class Memory:
    """The daemon's one memory budget (``memory_budget``, daemon/README.md "Memory budget"):
    the budget less what the daemon holds itself (:meth:`own`: its resident size at
    :meth:`start` less its tables then, plus its tables now) and the slack headroom
    (:meth:`slack`) is the clients' share (:meth:`share`). What clients make it hold —
    queued outgoing bytes of every connection (replies, stream and export frames), name
    tables, received records not yet stored, partial frames — is summed on demand from the
    connections (at most 4096), never tracked incrementally (nothing to get out of step). A
    request that would pass the clients' share, or one client's part of it, is refused and
    counted by what it would have grown (``refused``). ``rss``: how the process's resident
    bytes are read (:func:`process_rss`; a daemon that shares its process with others, as
    the tests' in-process daemons do, sets its own: :attr:`rss`)."""

    def __init__(self, conns: Mapping[int, Conn], budget: int, refused: dict[str, int], *,
                 rss: Callable[[], int] | None = None):
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
        #: the daemon's own tables (aggregates, detector), each read on demand in bytes
        self.tables: list[Callable[[], int]] = []
        #: reads the resident bytes of the process (the daemon may set its own)
        self.rss = rss if rss is not None else process_rss
        #: the process's resident bytes at :meth:`start` less its tables' bytes then
        self.base = 0
        #: the tables' bytes at the last :meth:`refresh`
        self.tables_bytes = 0
        #: the tables' capacities, each read on demand (cheap): a change walks them at once
        self.capacities: list[Callable[[], int]] = []
        self._walked_caps: tuple[int, ...] = ()
        self._next_walk = 0.0
        #: walks of the tables so far (STATUS does not show it: the tests read it)
        self.walks = 0

    def refresh(self) -> None:
        """Read the tables' bytes again now (a walk of their arrays: ~1 ms at 1000 keys)."""
        self.tables_bytes = sum(t() for t in self.tables)
        self._walked_caps = tuple(c() for c in self.capacities)
        self.walks += 1

    def refresh_if_due(self, mono: float) -> None:
        """At a flush: :meth:`refresh` every :data:`TABLES_EVERY_S`, or at once when a table's
        capacity changed since the last walk (a doubling is most of any growth: up to
        ~15 KB per row). Between walks ``tables_bytes`` may miss the window slots' slow
        drift, which the slack covers."""
        if mono >= self._next_walk or tuple(c() for c in self.capacities) != self._walked_caps:
            self._next_walk = mono + TABLES_EVERY_S
            self.refresh()

    def start(self) -> None:
        """Take the base (the daemon ready, its aggregates loaded); ValueError naming the
        base if the budget leaves the clients nothing (:meth:`too_small`)."""
        self.refresh()
        self.base = max(0, self.rss() - self.tables_bytes)
        problem = self.too_small(self.budget)
        if problem:
            raise ValueError(problem)

    def too_small(self, budget: int) -> str | None:
        """Why ``budget`` cannot be the budget (it leaves the clients less than a quarter of
        it, :data:`MIN_SHARE_DIV`), or None."""
        own = self.own()
        if budget - own - budget // SLACK_DIV >= budget // MIN_SHARE_DIV:
            return None
        # budget * (1 - 1/8 - 1/4) >= own, rounded up to a MiB
        least = -(-own * SLACK_DIV * MIN_SHARE_DIV // (SLACK_DIV * MIN_SHARE_DIV - SLACK_DIV - MIN_SHARE_DIV)
                  // (1 << 20)) + 1
        return (f"memory_budget of {budget} bytes ({budget / 2**20:.1f} MiB) is too small: the daemon holds "
                f"{own} bytes itself ({self.base / 2**20:.1f} MiB resident at start, its base, plus "
                f"{self.tables_bytes / 2**20:.1f} MiB of aggregate and detector tables), an eighth of the budget "
                f"is kept for allocator slack, and clients must get at least a quarter of it; set memory_budget "
                f"to {least}MiB or more (daemon/README.md \"Memory budget\")")

    def problem(self) -> str | None:
        """A STATUS problem while the tables have grown so that the clients' share is under a
        quarter of the budget (they are bounded by ``max_keys``, not refused), else None."""
        share = self.share()
        if share >= self.budget // MIN_SHARE_DIV:
            return None
        return (f"memory: the daemon's base ({self.base / 2**20:.0f} MiB) and tables ({self.tables_bytes / 2**20:.0f} "
                f"MiB) leave clients {share / 2**20:.0f} MiB of memory_budget ({self.budget / 2**20:.0f} MiB), under "
                f"a quarter: raise memory_budget or lower max_keys (daemon/README.md \"Memory budget\")")

    def own(self) -> int:
        """Bytes the daemon holds itself: its base and its tables (at the last refresh)."""
        return self.base + self.tables_bytes

    def slack(self) -> int:
        """The headroom for allocator slack (:data:`SLACK_DIV`)."""
        return self.budget // SLACK_DIV

    def share(self) -> int:
        """The clients' share: the budget less what the daemon holds itself and the slack."""
        return max(0, self.budget - self.own() - self.slack())

    def used(self) -> int:
        """Bytes the connections hold now (:meth:`Conn.held`), and the /metrics rendering."""
        return self._tally(False)[0]

    def outside(self) -> int:
        """Bytes held outside the connections (the /metrics rendering)."""
        return sum(h() for h in self.holders)

    def stream_room(self) -> tuple[int, int]:
        """(bytes the budget has left, bytes all STREAM buffers together may still grow, at
        most half the budget), counting each STREAM client's records waiting to be encoded
        at its ``stream_est`` bytes each (JSON: ~220, binary: ~56). One pass over the
        connections."""
        used, streams = self._tally(True)
        share = self.share()
        return share - used, share // 2 - streams

    def _tally(self, pending_too: bool) -> tuple[int, int]:
        """(bytes held, of which STREAM buffers): the one place the "used" sum is made."""
        used, streams = self.outside(), 0
        for c in self.conns.values():
            used += c.held()
            if c.stream is not None:
                pending = c.stream_pending_n * c.stream_est if pending_too else 0
                used += pending
                streams += len(c.out) + pending
        return used, streams

    def fits(self, more: int) -> bool:
        return self.used() + more <= self.share()

    def reply_cap(self) -> int:
        """Bytes one connection may have queued (replies, stream and export frames)."""
        return min(REPLY_CAP, self.share() // 4)

    def metrics_share(self) -> int:
        """Bytes one /metrics rendering may take (its text; later series are left out)."""
        return self.share() // 4

    def names_share(self) -> int:
        """Bytes one connection's name table may be charged."""
        return self.share() // 8

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


#: the types array_bytes never looks into (exactly these: a subclass is walked as before)
_LEAVES = frozenset({str, int, float, bool, bytes, type(None)})


def array_bytes(root: object, depth: int = 3) -> int:
    """Bytes of the numpy arrays held by ``root``'s attributes, and by those of the daemon's
    objects (and lists/deques of them) it holds, ``depth`` levels down: a table's size read
    on demand, without each table keeping a count. Dicts are not walked (their entries are
    the clients' or bounded by the table caps)."""
    total = 0
    seen: set[int] = set()
    todo = [(root, depth)]
    while todo:
        obj, d = todo.pop()
        while isinstance(obj, np.ndarray) and isinstance(obj.base, np.ndarray):
            obj = obj.base  # a view: the array it views holds the bytes (counted once)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            total += obj.nbytes
            continue
        if isinstance(obj, (list, tuple, collections.deque)):
            # leaves hold no array and are never walked into: a list of only them (the key
            # registry's names, hosts and services, ~5 per key) is passed over in one C-speed
            # look, not one Python step per item (~3 ms per refresh at 3000 keys, issue 21)
            types = set(map(type, obj))
            if _LEAVES.issuperset(types):
                continue
            if types == {tuple} and _LEAVES.issuperset(map(type, chain.from_iterable(obj))):
                # a list of tuples of leaves (the detector's cell identities, one per cell)
                # holds no array either: one more C-speed look, not one step per tuple
                # (1000 cells were ~1.5 ms of each refresh, a flush a second)
                continue
            todo.extend((o, d) for o in obj if type(o) not in _LEAVES)
            continue
        if d <= 0 or not type(obj).__module__.startswith("aclprofd"):
            continue
        attrs = getattr(obj, "__dict__", None)
        values = list(attrs.values()) if attrs is not None else [
            getattr(obj, n, None) for n in getattr(type(obj), "__slots__", ())]
        todo.extend((v, d - 1) for v in values)
    return total


def process_rss() -> int:
    """This process's resident bytes now (/proc/self/statm; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


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
