"""Name ids: the library's interned name ids -> the current connection's ids.

Each subscription interns op names and types into its own string table; the wire uses
one id space per connection (a daemon keeps a table per connection, extended by NAMES
frames). :class:`NameMap` assigns connection ids, reports which names are new (they go
out in a NAMES frame before the first record that uses them). The records themselves are
converted through the map by the compiled helper (:mod:`aclprof.binding.agentpath`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aclprof.agent.watched import Watched

__all__ = ["NameMap"]


class NameMap:
    """The name table of one connection; :meth:`reset` for each new connection."""

    def __init__(self) -> None:
        self.gen = 0
        self.ids: dict[str, int] = {}

    def reset(self, gen: int) -> None:
        """A new connection (generation ``gen``): its ids start afresh."""
        self.gen = gen
        self.ids = {}

    def mapping(self, w: Watched) -> np.ndarray | None:
        """``w``'s map (subscription name id -> this connection's id) so far; None when
        nothing is mapped yet on this connection."""
        if w.map_gen != self.gen:
            w.name_map, w.map_gen = None, self.gen
        mapping: np.ndarray | None = w.name_map
        return mapping

    def extend(self, w: Watched, top: int, names: Any) -> dict[str, str]:
        """Map ``w``'s name ids up to ``top`` (``names`` is the subscription's table);
        returns the names this connection has not seen, ``{str(conn_id): text}``."""
        mapping = self.mapping(w)
        have = 0 if mapping is None else len(mapping)
        new: dict[str, str] = {}
        if top < have:
            return new
        # The table only grows: map the ids not mapped yet, all at once.
        extra = np.empty(top + 1 - have, np.uint32)
        ids = self.ids
        for i in range(have, top + 1):
            text = names[i]
            cid = ids.get(text)
            if cid is None:
                cid = len(ids)
                ids[text] = cid
                new[str(cid)] = text
            extra[i - have] = cid
        w.name_map = extra if mapping is None else np.concatenate([mapping, extra])
        return new
