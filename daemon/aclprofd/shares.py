"""Per-agent shares of the daemon's shared tables (issue 19): the aggregates' keys
(:class:`aclprofd.aggregate.keys.KeyRegistry`) and the regression detector's cells
(:class:`aclprofd.detector.state.CellStore`).

An *agent* here is its peer's ``(uid, pid)`` as the kernel reports them at HELLO
(``SO_PEERCRED``; :func:`owner_of`): no peer can forge it, and an agent that reconnects (a
daemon restart, an idle close) keeps its share instead of getting a fresh one per
connection. Entries loaded from disk have no owner (None) and count against no share.

A share bounds what one agent may add to a table, and a uid's share what all agents of one
user together may add (a user forking many agents gets one share per process, but no more
than its uid's; root is exempt from the uid's share, not from the agent's); what an agent
adds beyond a share is refused and counted (:attr:`Shares.refused`), never silently dropped: its records still count
(under "(other)" in the aggregates; as ``untracked`` in the detector).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

__all__ = ["Owner", "Shares", "owner_of"]

#: (uid, pid) of an agent's peer; uid -1 when the socket cannot say
Owner = tuple[int, int]


def owner_of(peer: tuple[int, int, int] | None, pid: int | None) -> Owner:
    """An agent's owner from its ``SO_PEERCRED`` (pid, uid, gid), else (-1, its HELLO pid)."""
    if peer is not None:
        return (peer[1], peer[0])
    return (-1, pid or 0)


class Shares:
    """Entries held per owner, at most ``per_owner`` each, and at most ``per_uid`` per uid
    (the owner's first item; root is exempt: where every containerised service runs as uid
    0, a cap on root would cap the whole host). Both are settings: they may change."""

    def __init__(self, per_owner: int, per_uid: int | None = None) -> None:
        self.per_owner = per_owner
        self.per_uid = per_uid
        self._held: dict[Hashable, int] = {}
        self._uid_held: dict[int, int] = {}
        self.refused = 0   # entries refused: their owner (or its uid) held its share
        self.evicted = 0   # entries given back by ageing out (not by their owner leaving)

    @staticmethod
    def _uid(owner: Hashable) -> int | None:
        uid = owner[0] if isinstance(owner, tuple) and owner else None
        return uid if isinstance(uid, int) and uid != 0 else None

    def take(self, owner: Hashable | None) -> bool:
        """One more entry for ``owner``: False (counted) when it, or its uid, holds its share already."""
        if owner is None:
            return True
        n = self._held.get(owner, 0)
        uid = self._uid(owner)
        u = self._uid_held.get(uid, 0) if uid is not None else 0
        if n >= self.per_owner or (uid is not None and self.per_uid is not None and u >= self.per_uid):
            self.refused += 1
            return False
        self._held[owner] = n + 1
        if uid is not None:
            self._uid_held[uid] = u + 1
        return True

    def room(self, owner: Hashable | None, limit: int) -> int:
        """How many more entries ``owner`` may take now (its share, its uid's), at most ``limit``."""
        if owner is None:
            return limit
        room = min(limit, self.per_owner - self._held.get(owner, 0))
        uid = self._uid(owner)
        if uid is not None and self.per_uid is not None:
            room = min(room, self.per_uid - self._uid_held.get(uid, 0))
        return max(room, 0)

    def give_back(self, owner: Hashable | None) -> None:
        """An entry of ``owner`` left the table."""
        if owner is None:
            return
        _drop(self._held, owner)
        uid = self._uid(owner)
        if uid is not None:
            _drop(self._uid_held, uid)

    def largest(self) -> int:
        """The most entries one owner holds now."""
        return max(self._held.values(), default=0)

    def stats(self) -> dict[str, int]:
        """STATUS ``tables.<table>``: the shares, the largest holdings, refused and evicted."""
        return {"per_agent": self.per_owner, "largest_agent": self.largest(),
                "per_uid": self.per_uid if self.per_uid is not None else 0,
                "largest_uid": max(self._uid_held.values(), default=0), "refused": self.refused,
                "evicted": self.evicted}


def _drop(held: dict[Any, int], key: Any) -> None:
    n = held.get(key, 0) - 1
    if n > 0:
        held[key] = n
    else:
        held.pop(key, None)
