"""The ``filter`` object of control requests (daemon/PROTOCOL.md), parsed once and applied
to record arrays without a per-record Python loop.

Connection-level fields (host, pid, service) are decided once per batch; model, device
and duration are compared per record with one vectorised test each; ``type``/``name`` regexes
are evaluated once per distinct name id and cached, then applied with ``np.isin``.

Regexes run on RE2 (``google-re2``), whose time is linear in the text: a pattern such as
``^(a+)+$`` would hold the loop for 9-36 s per op name on Python's backtracking ``re``.
RE2 has no backreferences or lookaround; such a pattern is refused with a reason.
Patterns are at most MAX_REGEX_BYTES long, names at most MAX_NAME_BYTES, so one match costs
microseconds and each name id is matched once per filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclprof.protocol.filterkeys import FILTER_KEYS
from aclprof.protocol.filterregex import BadFilterRegex, compile_filter_regex
from aclprof.protocol.wire import ProtocolError

__all__ = ["Filter", "NameMatcher", "compile_regex"]

def compile_regex(pattern: str, what: str) -> Any:
    """A pattern compiled for RE2 (``.search`` like ``re``); ProtocolError naming ``what``
    for one that is too long or that RE2 does not support."""
    try:
        return compile_filter_regex(pattern)
    except BadFilterRegex as exc:
        raise ProtocolError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class Filter:
    model: int | None = None
    pid: int | None = None
    device: int | None = None
    type_re: Any = None  # compiled by compile_regex (RE2)
    name_re: Any = None
    min_duration_ns: int | None = None
    host: str | None = None
    service: str | None = None

    @classmethod
    def parse(cls, obj: Any) -> Filter:
        """A filter from a request's ``filter`` value (None or {} match everything);
        ProtocolError for anything malformed (unknown keys, wrong types, bad regex)."""
        if obj is None:
            return cls()
        if not isinstance(obj, dict):
            raise ProtocolError("filter must be a JSON object")
        unknown = set(obj) - FILTER_KEYS.keys()
        if unknown:
            raise ProtocolError(f"unknown filter keys: {', '.join(sorted(unknown))}")
        kw: dict[str, Any] = {}
        for k, kind in FILTER_KEYS.items():
            v = obj.get(k)
            if v is None:
                continue
            if kind == "int":
                if not isinstance(v, int) or isinstance(v, bool):
                    raise ProtocolError(f"filter {k} must be an integer")
                kw[k] = v
            elif not isinstance(v, str):
                raise ProtocolError(f"filter {k} must be a {'regex ' if kind == 'regex' else ''}string")
            elif kind == "regex":
                kw[f"{k}_re"] = compile_regex(v, f"filter {k}")
            else:
                kw[k] = v
        return cls(**kw)

    @property
    def empty(self) -> bool:
        return self == Filter()

    def source_matches(self, host: str, pid: int, service: str | None) -> bool:
        """Whether records from this sender can match at all."""
        return ((self.host is None or self.host == host) and (self.pid is None or self.pid == pid)
                and (self.service is None or self.service == service))

    def mask(self, records: np.ndarray, matcher: NameMatcher, names: Mapping[int, str]) -> np.ndarray | None:
        """Boolean mask over ``records`` (RECORD_DTYPE) for the record-level fields, or None
        when every record matches. ``matcher`` caches this filter's regex results per name id
        of ``names`` (the sender's name table)."""
        m: np.ndarray | None = None
        def both(x):
            return x if m is None else (m & x)
        if self.model is not None:
            m = both(records["model_id"] == self.model)
        if self.device is not None:
            m = both(records["device_id"] == self.device)
        if self.min_duration_ns is not None:
            m = both(records["duration"] >= self.min_duration_ns)
        if self.type_re is not None:
            m = both(np.isin(records["op_type"], matcher.ids(self.type_re, "type", names)))
        if self.name_re is not None:
            m = both(np.isin(records["op_name"], matcher.ids(self.name_re, "name", names)))
        return m


@dataclass
class NameMatcher:
    """Per (filter, name table): the ids whose string matches each regex, cached and
    extended as the name table grows (tables only grow; ids are never redefined)."""

    seen: dict[str, int] = field(default_factory=dict)
    matching: dict[str, list[int]] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def ids(self, rx: Any, which: str, names: Mapping[int, str]) -> np.ndarray:
        n = len(names)
        if self.seen.get(which, -1) != n:
            done = self.seen.get(which, 0)
            lst = self.matching.setdefault(which, [])
            # names is insertion ordered: only look at the new entries
            for i, (nid, s) in enumerate(names.items()):
                if i >= done and rx.search(s):
                    lst.append(nid)
            self.seen[which] = n
            self.arrays[which] = np.asarray(lst, dtype=np.uint32)
        return self.arrays[which]
