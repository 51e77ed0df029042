"""Per-group duration statistics as the exports accumulate them, one record at a time
(count, total, min, max), shared by the csv export and the ``ascend`` op statistics."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

__all__ = ["tally"]

K = TypeVar("K", bound=Hashable)


def tally(groups: dict[K, list[int]], key: K, duration: int) -> None:
    """Add one ``duration`` to ``groups[key]`` = [count, total, min, max]."""
    g = groups.get(key)
    if g is None:
        groups[key] = [1, duration, duration, duration]
        return
    g[0] += 1
    g[1] += duration
    if duration < g[2]:
        g[2] = duration
    if duration > g[3]:
        g[3] = duration
