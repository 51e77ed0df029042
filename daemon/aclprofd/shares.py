"""Per-agent shares of the daemon's shared tables (issue 19): the aggregates' keys
(:class:`aclprofd.aggregate.keys.KeyRegistry`) and the regression detector's cells
(:class:`aclprofd.detector.state.CellStore`).

An *agent* here is its peer's ``(uid, pid)`` as the kernel reports them at HELLO
(``SO_PEERCRED``; :func:`owner_of`): no peer can forge it, and an agent that reconnects (a
daemon restart, an idle close) keeps its share instead of getting a fresh one per
connection. Entries loaded from disk have no owner (None) and count against no share.

A share bounds what one agent may add to a table; what it adds beyond its share is refused
and counted (:attr:`Shares.refused`), never silently dropped: its records still count
(under "(other)" in the aggregates; as ``untracked`` in the detector).
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["Owner", "Shares", "owner_of"]

#: (uid, pid) of an agent's peer; uid -1 when the socket cannot say
Owner = tuple[int, int]


def owner_of(peer: tuple[int, int, int] | None, pid: int | None) -> Owner:
    """An agent's owner from its ``SO_PEERCRED`` (pid, uid, gid), else (-1, its HELLO pid)."""
    if peer is not None:
        return (peer[1], peer[0])
    return (-1, pid or 0)


class Shares:
    """Entries held per owner, at most ``per_owner`` each (a setting: may change)."""

    def __init__(self, per_owner: int) -> None:
        self.per_owner = per_owner
        self._held: dict[Hashable, int] = {}
        self.refused = 0   # entries refused: their owner held its share
        self.evicted = 0   # entries given back by ageing out (not by their owner leaving)

    def take(self, owner: Hashable | None) -> bool:
        """One more entry for ``owner``: False (counted) when it holds its share already."""
        if owner is None:
            return True
        n = self._held.get(owner, 0)
        if n >= self.per_owner:
            self.refused += 1
            return False
        self._held[owner] = n + 1
        return True

    def give_back(self, owner: Hashable | None) -> None:
        """An entry of ``owner`` left the table."""
        if owner is None:
            return
        n = self._held.get(owner, 0) - 1
        if n > 0:
            self._held[owner] = n
        else:
            self._held.pop(owner, None)

    def largest(self) -> int:
        """The most entries one owner holds now."""
        return max(self._held.values(), default=0)

    def stats(self) -> dict[str, int]:
        """STATUS ``tables.<table>``: the share, the largest holding, refused and evicted."""
        return {"per_agent": self.per_owner, "largest_agent": self.largest(), "refused": self.refused,
                "evicted": self.evicted}
