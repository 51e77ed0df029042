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
        first, new = self.extend_run(w, top, names)
        return {str(first + i): text for i, text in enumerate(new)}

    def extend_run(self, w: Watched, top: int, names: Any) -> tuple[int, list[str]]:
        """:meth:`extend`, the new names as ``(first connection id, texts)``: new ids are
        consecutive (``wire.encode_name_run`` frames them in one go)."""
        mapping = self.mapping(w)
        have = 0 if mapping is None else len(mapping)
        ids = self.ids
        first = len(ids)
        new: list[str] = []
        if top < have:
            return first, new
        # The table only grows: map the ids not mapped yet, all at once.
        texts = names.upto(top + 1)[have:] if hasattr(names, "upto") else names[have:top + 1]
        known = list(map(ids.get, texts))
        if known.count(None) == len(texts) and len(set(texts)) == len(texts):
            # all new and distinct (a model on a new connection, the usual case): no
            # Python per name (~0.05 us each instead of ~0.3)
            ids.update(zip(texts, range(first, first + len(texts))))
            new = list(texts)
            arr = np.arange(first, first + len(texts), dtype=np.uint32)
        else:
            for k, text in enumerate(texts):
                if known[k] is None:
                    cid = ids.get(text)  # a text met earlier in this run
                    if cid is None:
                        cid = ids[text] = len(ids)
                        new.append(text)
                    known[k] = cid
            arr = np.array(known, np.uint32)
        w.name_map = arr if mapping is None else np.concatenate([mapping, arr])
        return first, new
