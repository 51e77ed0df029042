"""The aggregates' key registry: one integer per ``(host, pid, device, model, op_type,
op_name, model_label)``, and the mapping of a connection's name ids to those integers.

The *model label* is what the service called the model in WATCH (``labels["model"]``, plus
``"@" + labels["version"]`` when a version is given), ``""`` when it gave no "model" label.
It is part of the key, so a model id that a process unloads and reuses for another
(relabelled) model starts new rows instead of adding to the old model's; the ``service``
is kept beside the key (first registration wins: it is constant per connection).

A reset keeps the keys (so the connections' caches stay valid); a key whose agent is gone
and that nothing fed for ``aggregate_idle_timeout`` leaves (:meth:`KeyRegistry.compact`,
called by :meth:`aclprofd.aggregate.aggregator.Aggregator.age_out`, which renumbers every
table that holds key numbers). At most ``max_keys`` keys are registered; later ones share
the one "other" key, so memory stays bounded whatever the agents send. One agent (its ``owner``, :mod:`aclprofd.shares`)
registers at most ``per_agent`` of them (its further keys are "other", counted in
:attr:`KeyRegistry.shares`), so one agent cannot fill the registry for everyone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclprof.protocol._batchgroup import cache_index as _cache_index
from aclprof.protocol._batchgroup import cache_lookup as _cache_lookup

from ..shares import Shares
from .quantiles import I64

__all__ = ["KeySource", "KeyRegistry", "OTHER", "OTHER_IDENTITY", "Key", "model_label_of", "pair_hash"]

OTHER = "(other)"
CACHE_MAX = 1 << 16  # (device, model, name, type) pairs cached per sender (24 bytes each)
#: while the registry is full, at most this many uncached pairs per batch are looked up in it
#: (the rest count as "other" for that batch): bounds the Python work per batch
FULL_LOOKUPS = 4096
_MIX = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio: spreads dm's bits over the word
#: (host, pid, device, model, op_type, op_name, model_label)
Key = tuple[str, int, int, int, str, str, str]
OTHER_IDENTITY: Key = ("", 0, -1, -1, OTHER, OTHER, "")


def pair_hash(dm: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """A uint64 per (dm, code) pair (not unique: a hit is checked against the pair)."""
    with np.errstate(over="ignore"):
        return (dm * _MIX) ^ codes


def model_label_of(labels: dict[str, str]) -> str:
    """The model label of a WATCH's labels: ``model`` (+ ``@version``), or ``""`` without a
    "model" label (a version alone names nothing)."""
    name = labels.get("model")
    if not name:
        return ""
    version = labels.get("version")
    return f"{name}@{version}" if version else name


@dataclass
class KeySource:
    """The identity of one sender (an agent connection) that keys are built from."""

    host: str
    pid: int
    service: str | None
    #: the cache of (dm = model << 32 | device, code = name << 32 | type) pairs and the
    #: global key of each, sorted by a 64-bit hash of the pair (:func:`pair_hash`: one
    #: vectorised search of uint64s, where a structured-array search cost ~1.5 us a
    #: record), with the pair itself to check a hit; only a cache (the registry decides),
    #: cleared beyond CACHE_MAX entries so that a sender of ever new ids cannot grow it
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    dms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    codes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, I64))
    #: the sorted ids of the sender's name table and its size when they were taken
    name_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    names_seen: int = -1
    #: model id -> model label, from the sender's WATCH frames (see :meth:`set_label`)
    model_labels: dict[int, str] = field(default_factory=dict)
    #: whose share the sender's new keys count against (aclprofd.shares.owner_of; None: none)
    owner: Hashable | None = None
    #: the hash index of ``hashes`` (:meth:`hash_index`) and the array it was built of
    _index: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int32), repr=False, compare=False)
    _index_of: np.ndarray | None = field(default=None, repr=False, compare=False)

    def hash_index(self) -> np.ndarray:
        """An open-addressing index of :attr:`hashes` (``_batchgroup.cache_index``: one or two
        probes per pair where a binary search takes ~10), built again when the cache changed
        (each change assigns new arrays: compared by identity)."""
        if self._index_of is not self.hashes:
            size = 16
            while size < 2 * len(self.hashes):
                size <<= 1
            index = np.empty(size, np.int32)
            _cache_index(self.hashes, index)
            self._index, self._index_of = index, self.hashes
        return self._index

    def set_label(self, model: int, label: str) -> None:
        """The sender's model ``model`` is now called ``label`` ("" for none): its cached
        pairs are forgotten, so its next records resolve to keys with the new label."""
        if not 0 <= model <= 0xFFFFFFFF or self.model_labels.get(model, "") == label:
            return  # records carry u32 model ids: another id labels nothing
        if label:
            self.model_labels[model] = label
        else:
            self.model_labels.pop(model, None)
        if len(self.hashes):
            keep = (self.dms >> np.uint64(32)) != np.uint64(model & 0xFFFFFFFF)
            self.hashes, self.dms, self.codes, self.keys = (
                self.hashes[keep], self.dms[keep], self.codes[keep], self.keys[keep])

    def defined(self, names: dict[int, str]) -> np.ndarray:
        if self.names_seen != len(names):  # tables only grow
            self.name_ids = np.sort(np.fromiter(names.keys(), np.int64, len(names)))
            self.names_seen = len(names)
        return self.name_ids


class KeyRegistry:
    """Keys and their identity columns (numbers as arrays, for vectorised filters).

    ``on_grow(old, new)`` is called when the capacity grows from ``old`` to ``new`` rows, so
    the owner can grow its per-key arrays alongside.
    """

    def __init__(self, max_keys: int, on_grow: Callable[[int, int], None], per_agent: int | None = None,
                 per_uid: int | None = None) -> None:
        self.max_keys = max_keys
        self._on_grow = on_grow
        self.shares = Shares(per_agent or max_keys + 1, per_uid)
        self._index: dict[Key, int] = {}
        self.owner: list[Hashable | None] = []  # per key: the agent that registered it
        self.host: list[str] = []
        self.service: list[str | None] = []
        self.type: list[str] = []
        self.name: list[str] = []
        self.model_label: list[str] = []
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

    def reserve(self, more: int) -> None:
        """Room for ``more`` keys now, in one growth (doubling, at least 64, at most the cap):
        a batch of thousands of new keys grows the per-key arrays once, not once per doubling
        (each a copy of the histograms)."""
        need = min(len(self) + more, self.max_keys + 1)
        if need > self.capacity:
            self._grow(min(max(64, 2 * self.capacity, need), self.max_keys + 1))

    def _add(self, key: Key, service: str | None, owner: Hashable | None = None) -> int:
        idx = len(self.host)
        self.reserve(1)
        host, pid, device, model, op_type, op_name, label = key
        self.host.append(host)
        self.service.append(service)
        self.type.append(op_type)
        self.name.append(op_name)
        self.model_label.append(label)
        self.owner.append(owner)
        self.pid[idx], self.device[idx], self.model[idx] = pid, device, model
        self._index[key] = idx
        return idx

    def get(self, key: Key, service: str | None, owner: Hashable | None = None) -> int:
        """The key's integer: registered now if new and under the cap and ``owner``'s share
        (counted when not), else the "other" key."""
        idx = self._index.get(key)
        if idx is None:
            idx = self._add(key, service, owner) if len(self) <= self.max_keys and self.shares.take(owner) \
                else self.other
        return idx

    def resolve(self, src: KeySource, dm: np.ndarray, codes: np.ndarray, names: dict[int, str]) -> np.ndarray:
        """Global key of each distinct (``dm`` = model << 32 | device, ``codes`` = name << 32
        | type) pair of one batch. Cached pairs are found
        with one vectorised search; the others go through the registry, a Python step each,
        bounded: at most ``max_keys`` registrations in the registry's life, and at most
        FULL_LOOKUPS per batch once it is full (the rest are "other"). Raises KeyError(id) for
        a name id that ``names`` does not define."""
        # one C pass: pair_hash, the search and the check of each hit (issue 21)
        n = len(codes)
        dm = np.ascontiguousarray(dm, dtype=np.uint64)
        codes = np.ascontiguousarray(codes, dtype=np.uint64)
        h = np.empty(n, np.uint64)
        out = np.empty(n, I64)
        missbuf = np.empty(n, I64)
        known = src.hashes
        nmiss = _cache_lookup(known, src.dms, src.codes, src.keys, dm, codes, h, out, missbuf)
        if not nmiss:
            return out
        miss = missbuf[:nmiss]
        mc = codes[miss]
        ids = src.defined(names)
        for part in ((mc >> np.uint64(32)).astype(np.int64), (mc & np.uint64(0xFFFFFFFF)).astype(np.int64)):
            bad = ~np.isin(part, ids)
            if bad.any():
                raise KeyError(int(part[bad][0]))
        new_keys = np.full(len(miss), self.other, I64)
        # room left in the registry, plus FULL_LOOKUPS lookups of keys it may already hold
        todo = min(len(miss), max(0, self.max_keys + 1 - len(self)) + FULL_LOOKUPS)
        labels, owner = src.model_labels, src.owner
        self.reserve(self.shares.room(owner, todo))  # what the sender's share lets it add at most
        for j, (d, code) in enumerate(zip(dm[miss[:todo]].tolist(), mc[:todo].tolist())):
            new_keys[j] = self.get((src.host, src.pid, d & 0xFFFFFFFF, d >> 32, names[code & 0xFFFFFFFF],
                                    names[code >> 32], labels.get(d >> 32, "")), src.service, owner)
        out[miss] = new_keys
        if len(known) + todo > CACHE_MAX:
            src.hashes = src.dms = src.codes = np.zeros(0, np.uint64)
            src.keys = np.zeros(0, I64)
        hashes = np.concatenate([src.hashes, h[miss[:todo]]])
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        # a hash met twice (two pairs, or a pair cached and looked up again, never here: the
        # batch's pairs are distinct) keeps its first entry: the other pair always misses
        # and goes through the registry (correct, only slower)
        first = np.ones(len(hashes), bool)
        np.not_equal(hashes[1:], hashes[:-1], out=first[1:])
        order = order[first]
        src.hashes = hashes[first]
        src.dms = np.concatenate([src.dms, dm[miss[:todo]]])[order]
        src.codes = np.concatenate([src.codes, mc[:todo]])[order]
        src.keys = np.concatenate([src.keys, new_keys[:todo]])[order]
        return out

    def compact(self, keep: np.ndarray) -> None:
        """Keep only the keys ``keep`` (ascending, the "other" key among them), renumbered
        0, 1, ... in that order; the others' shares are given back (counted as evicted).
        The lists change in place: the detector holds :attr:`owner`'s ``__getitem__``."""
        kept = keep.tolist()
        gone = np.setdiff1d(np.arange(len(self)), keep).tolist()
        for k in gone:
            self.shares.give_back(self.owner[k])
        for lst in (self.owner, self.host, self.service, self.type, self.name, self.model_label):
            lst[:] = [lst[k] for k in kept]
        m = len(kept)
        for attr in ("pid", "device", "model"):
            arr = getattr(self, attr)
            new = np.zeros(self.capacity, I64)
            new[:m] = arr[keep]
            setattr(self, attr, new)
        self._index = {(self.host[i], int(self.pid[i]), int(self.device[i]), int(self.model[i]), self.type[i],
                        self.name[i], self.model_label[i]): i for i in range(m)}
        self.other = int(np.searchsorted(keep, self.other))

    def recache(self, src: KeySource, remap: np.ndarray) -> None:
        """A sender's cached pairs after :meth:`compact` (``remap``: old key -> new, -1 gone):
        renumbered; those of keys gone, and those that went to "other" for want of room (there
        is room now), are forgotten: they are looked up again at their next records."""
        if len(src.keys):
            new = remap[src.keys]
            ok = (new >= 0) & (new != self.other)
            # a subset of a hash-sorted cache stays sorted
            src.hashes, src.dms, src.codes, src.keys = src.hashes[ok], src.dms[ok], src.codes[ok], new[ok]

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
        if flt.device is not None:
            mask &= self.device[:n] == flt.device
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
        """Key k as saved in the aggregates file: host, pid, device, model, type, name,
        service, model label."""
        return [self.host[k], int(self.pid[k]), int(self.device[k]), int(self.model[k]),
                self.type[k], self.name[k], self.service[k], self.model_label[k]]


def grow(arr: np.ndarray, old: int, cap: int | tuple[int, ...], fill: int = 0) -> np.ndarray:
    """A new int64 array of shape ``cap`` filled with ``fill``, holding ``arr``'s first ``old`` rows."""
    # zeros: calloc'd pages the kernel zeroes as rows are first used; np.full writes every
    # page now (the per-key histograms at 4096 keys are ~10 MB: a 4096-new-key batch spent
    # ~60 ms of its loop turn in page faults)
    new = np.zeros(cap, dtype=I64) if fill == 0 else np.full(cap, fill, dtype=I64)
    if old:
        new[:old] = arr[:old]
    return new
