"""The aggregates' key registry: one integer per ``(host, pid, device, model, op_type,
op_name)``, and the mapping of a connection's name ids to those integers.

Keys never go away (a reset keeps them, so the connections' caches stay valid). At most
``max_keys`` keys are registered; later ones share the one "other" key, so memory stays
bounded whatever the agents send.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .aggregate_quantiles import I64

__all__ = ["KeySource", "KeyRegistry", "OTHER", "OTHER_IDENTITY", "Key"]

OTHER = "(other)"
#: (host, pid, device, model, op_type, op_name)
Key = tuple[str, int, int, int, str, str]
OTHER_IDENTITY: Key = ("", 0, -1, -1, OTHER, OTHER)


@dataclass
class KeySource:
    """The identity of one sender (an agent connection) that keys are built from."""

    host: str
    pid: int
    service: str | None
    #: (device, model) -> (sorted codes, global key per code); code = name << 32 | type
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class KeyRegistry:
    """Keys and their identity columns (numbers as arrays, for vectorised filters).

    ``on_grow(old, new)`` is called when the capacity grows from ``old`` to ``new`` rows, so
    the owner can grow its per-key arrays alongside.
    """

    def __init__(self, max_keys: int, on_grow: Callable[[int, int], None]) -> None:
        self.max_keys = max_keys
        self._on_grow = on_grow
        self._index: dict[Key, int] = {}
        self.host: list[str] = []
        self.service: list[str | None] = []
        self.type: list[str] = []
        self.name: list[str] = []
        self.capacity = 0
        self.pid = np.zeros(0, I64)
        self.device = np.zeros(0, I64)
        self.model = np.zeros(0, I64)
        self._grow(min(64, self.max_keys + 1))
        self.other = self._add(OTHER_IDENTITY, None)

    def __len__(self) -> int:
        return len(self.host)

    def _grow(self, cap: int) -> None:
        old = self.capacity
        self.pid = grow(self.pid, old, cap)
        self.device = grow(self.device, old, cap)
        self.model = grow(self.model, old, cap)
        self.capacity = cap
        if old:
            self._on_grow(old, cap)

    def _add(self, key: Key, service: str | None) -> int:
        idx = len(self.host)
        if idx >= self.capacity:
            self._grow(min(max(64, 2 * self.capacity), self.max_keys + 1))
        host, pid, device, model, op_type, op_name = key
        self.host.append(host)
        self.service.append(service)
        self.type.append(op_type)
        self.name.append(op_name)
        self.pid[idx], self.device[idx], self.model[idx] = pid, device, model
        self._index[key] = idx
        return idx

    def get(self, key: Key, service: str | None) -> int:
        """The key's integer: registered now if new and under the cap, else the "other" key."""
        idx = self._index.get(key)
        if idx is None:
            idx = self._add(key, service) if len(self) <= self.max_keys else self.other
        return idx

    def resolve(self, src: KeySource, device: int, model: int, codes: np.ndarray,
                names: dict[int, str]) -> np.ndarray:
        """Global key of each (name << 32 | type) code of one (device, model); new codes
        go through the registry (the only per-key Python loop). Raises KeyError(id) for a
        name id that ``names`` does not define."""
        dm = (model << 32) | device
        known_codes, known_keys = src.cache.get(dm, (np.zeros(0, np.uint64), np.zeros(0, I64)))
        pos = np.searchsorted(known_codes, codes)
        pos_c = np.minimum(pos, max(len(known_codes) - 1, 0))
        hit = ((pos < len(known_codes)) & (known_codes[pos_c] == codes) if len(known_codes)
               else np.zeros(len(codes), bool))
        out = np.empty(len(codes), I64)
        out[hit] = known_keys[pos_c[hit]]
        miss = np.flatnonzero(~hit)
        if len(miss):
            new_keys = np.empty(len(miss), I64)
            for j, code in enumerate(codes[miss].tolist()):
                name = names.get(code >> 32)
                op_type = names.get(code & 0xFFFFFFFF)
                if name is None or op_type is None:
                    raise KeyError(code >> 32 if name is None else code & 0xFFFFFFFF)
                new_keys[j] = self.get((src.host, src.pid, device, model, op_type, name), src.service)
            out[miss] = new_keys
            all_codes = np.concatenate([known_codes, codes[miss]])
            all_keys = np.concatenate([known_keys, new_keys])
            order = np.argsort(all_codes)
            src.cache[dm] = (all_codes[order], all_keys[order])
        return out

    def mask(self, flt: Any) -> np.ndarray:
        """Keys matching a filter (``aclprofd.filters.Filter``; min_duration_ns is ignored:
        aggregates do not keep single records)."""
        n = len(self)
        mask = np.ones(n, bool)
        if flt is None:
            return mask
        if flt.model is not None:
            mask &= self.model[:n] == flt.model
        if flt.pid is not None:
            mask &= self.pid[:n] == flt.pid
        for attr, values in (("host", self.host), ("service", self.service)):
            want = getattr(flt, attr)
            if want is not None:
                mask &= np.fromiter((v == want for v in values), bool, n)
        for rx, names in ((flt.type_re, self.type), (flt.name_re, self.name)):
            if rx is not None:
                cache: dict[str, bool] = {}
                mask &= np.fromiter((cache.setdefault(v, bool(rx.search(v))) if v not in cache else cache[v]
                                     for v in names), bool, n)
        return mask

    def identity(self, k: int) -> list[Any]:
        """Key k as saved in the aggregates file: host, pid, device, model, type, name, service."""
        return [self.host[k], int(self.pid[k]), int(self.device[k]), int(self.model[k]),
                self.type[k], self.name[k], self.service[k]]


def grow(arr: np.ndarray, old: int, cap: int | tuple[int, ...], fill: int = 0) -> np.ndarray:
    """A new int64 array of shape ``cap`` filled with ``fill``, holding ``arr``'s first ``old`` rows."""
    new = np.full(cap, fill, dtype=I64)
    if old:
        new[:old] = arr[:old]
    return new
