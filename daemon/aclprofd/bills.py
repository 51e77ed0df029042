"""Request bills agents send (REQUEST_BILL frames, protocol 4; issue 25).

Each frame is the compact bill of one request of the agent's process (``aclprof.request``):
its id and attributes, wall and device time, op count, device time and count of its top op
types, the slowest op and the models it ran. The daemon keeps the last ``KEEP`` bills of each
service (at most ``MAX_SERVICES`` services; the bills of later ones are counted in
``services_refused`` and not kept) for STATUS's slowest requests and ``aclprof requests``.

Bounded whatever agents send: a frame is checked against wire.py's ``REQUEST_BILL_*`` limits
(a bad one is a protocol error: the connection closes, as for any malformed frame), and an
agent that dropped bills says how many (``dropped_before``), so the totals include them.
Loop thread only.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from aclprof.protocol.safetext import scrub
from aclprof.protocol.wire import (
    REQUEST_BILL_MAX_ATTRS,
    REQUEST_BILL_MAX_MODELS,
    REQUEST_BILL_MAX_TEXT,
    REQUEST_BILL_MAX_TYPES,
    REQUEST_BILL_MAX_WINDOWS,
    Kind,
    ProtocolError,
    decode_json,
    encode_json,
)

from .aggregate.quantiles import NPROM, PROM_EXPONENTS
from .conn import Conn

if TYPE_CHECKING:
    from .fanout import Fanout
    from .filters import Filter
    from .transport import Outbox

__all__ = ["RequestBills", "KEEP", "MAX_SERVICES", "MAX_TOP", "MAX_HIST_SETS", "OTHER_SET", "HURT_TOP",
           "line_matches", "hurt_summary", "models_label"]

KEEP = 256  # bills kept per service
MAX_SERVICES = 256
_MAX_NS = 1 << 62
_MAX_DROPPED = 1 << 32
_U32 = 0xFFFFFFFF
MAX_TOP = 1000  # bills one REQUESTS reply may carry
_SHORT = 64
HURT_TOP = 3  # requests a regression flag names (STATUS detector.flags[].requests)
#: (service, models) label sets of the request device-time histogram (31 series each); the
#: bills of later ones are observed under OTHER_SET, counted in ``hist_sets_refused``
MAX_HIST_SETS = 1024
OTHER_SET = ("", "(other)")
_LOW = PROM_EXPONENTS[0]


def models_label(conn: Conn, models: list[int]) -> str:
    """The ``model`` label of a bill: the labels (WATCH ``labels``, else the id as text) of
    the models it ran, in id order, joined by "+" ("" for a request without ops)."""
    return "+".join(_labels(conn, sorted(set(models))))


def _labels(conn: Conn, models: list[int]) -> list[str]:
    """Each model's label (as the detector's flags and the op histograms name it)."""
    named = conn.keysrc.model_labels if conn.keysrc is not None else {}
    return [named.get(m) or str(m) for m in models]


def _bucket(ns: int) -> int:
    """The index of the first power-of-two bucket (le = 2**7 .. 2**34 ns, then +Inf) that holds ``ns``."""
    return min(max((ns - 1).bit_length() - _LOW, 0), NPROM - 1)


def _count(v: Any, top: int = _MAX_NS) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= top


def _text(v: Any, what: str) -> str:
    if not isinstance(v, str) or len(v) > REQUEST_BILL_MAX_TEXT:
        raise ProtocolError(f"REQUEST_BILL {what} must be a string of at most {REQUEST_BILL_MAX_TEXT} characters")
    return scrub(v)


def line_matches(flt: Filter, entry: dict[str, Any]) -> bool:
    """Whether a STREAM filter takes a bill's ``{"kind": "request"}`` line: its host, pid and
    service match, its model (if any) is one the request ran, and it selects no device, op
    type, op name or minimum duration (those select ops; a bill is not one)."""
    if not flt.source_matches(entry["host"], entry["pid"], entry["service"] or None):
        return False
    if flt.device is not None or flt.type_re is not None or flt.name_re is not None \
            or flt.min_duration_ns is not None:
        return False
    return flt.model is None or flt.model in entry["models"]


def hurt_summary(bills: RequestBills, flag: dict[str, Any], window_s: float) -> list[dict[str, Any]]:
    """The requests a detector ``flag`` hurt most, compact (STATUS, capture summaries): the
    bills received from one detector window before it was raised on (its evidence) that
    spent the most device time in its op type."""
    since = float(flag.get("since_ts") or 0.0) - window_s
    return [{**{k: b[k] for k in ("id", "pid", "ts", "op_type", "op_ns", "device_ns", "wall_ns")},
             # a few attributes, cut: STATUS carries up to its flags budget of these
             "attrs": {k[:_SHORT]: v[:_SHORT] for k, v in list(b["attrs"].items())[:4]}}
            for b in bills.hurt(str(flag.get("service") or ""), str(flag.get("model") or ""),
                                str(flag.get("op_type") or ""), since)]


class RequestBills:
    """The last bills per service, their counters, and the REQUEST_BILL handler."""

    def __init__(self, outbox: Outbox | None = None, keep: int = KEEP, max_services: int = MAX_SERVICES,
                 fanout: Fanout | None = None):
        self.outbox, self.keep, self.max_services, self.fanout = outbox, keep, max_services, fanout
        self.lines_sent = 0  # request lines queued for STREAM clients (aclprof tail)
        self.lines_skipped = 0  # not queued for a STREAM client that does not read
        #: (service, model label) -> [bucket counts (NPROM), count, sum of device ns], with the
        #: (host, pid) that created it (its owner in the /metrics series budget), in creation order
        self.hist: dict[tuple[str, str], tuple[np.ndarray, list[int], tuple[str, int]]] = {}
        self.hist_sets_refused = 0  # bills observed under OTHER_SET
        self.by_service: dict[str, deque[dict[str, Any]]] = {}
        self.total = 0  # bills received, including those agents said they dropped
        self.agent_dropped = 0
        self.services_refused = 0  # bills of services beyond MAX_SERVICES (counted, not kept)
        self.agent_handlers = {Kind.REQUEST_BILL: self.bill}
        self.control_handlers = {Kind.REQUESTS: self.request}

    def request(self, conn: Conn, req: dict[str, Any]) -> None:
        """REQUESTS (control): the slowest kept bills matching the filters."""
        if not isinstance(req, dict):
            raise ProtocolError("REQUESTS must be a JSON object")
        service, since, until, model = req.get("service"), req.get("since"), req.get("until"), req.get("model")
        attrs, top = req.get("attrs") or {}, req.get("top", 20)
        if service is not None and not isinstance(service, str):
            raise ProtocolError("REQUESTS service must be a string or null")
        if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))):
            raise ProtocolError("REQUESTS since must be a unix time (number) or null")
        if until is not None and (isinstance(until, bool) or not isinstance(until, (int, float))):
            raise ProtocolError("REQUESTS until must be a unix time (number) or null")
        if model is not None and not _count(model, _U32):
            raise ProtocolError("REQUESTS model must be a u32 or null")
        if not isinstance(attrs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()):
            raise ProtocolError("REQUESTS attrs must be an object of strings")
        if not _count(top, MAX_TOP) or top == 0:
            raise ProtocolError(f"REQUESTS top must be an integer in [1, {MAX_TOP}]")
        matching = self._matching(service=service, since=since, until=until, attrs=attrs, model=model)
        if self.outbox is not None:
            self.outbox.queue(conn, encode_json(Kind.REQUESTS_REPLY, {
                "bills": [dict(b) for b in matching[:top]], "matched": len(matching), "total": self.total,
                "agent_dropped": self.agent_dropped, "services_refused": self.services_refused}))

    def bill(self, conn: Conn, payload: memoryview) -> None:
        obj = decode_json(payload)
        if not isinstance(obj, dict):
            raise ProtocolError("REQUEST_BILL must be a JSON object")
        rid = _text(obj.get("id"), "id")
        attrs = obj.get("attrs", {})
        if not isinstance(attrs, dict) or len(attrs) > REQUEST_BILL_MAX_ATTRS:
            raise ProtocolError(f"REQUEST_BILL attrs must be an object of at most {REQUEST_BILL_MAX_ATTRS} strings")
        attrs = {_text(k, "attribute name"): _text(v, "attribute value") for k, v in attrs.items()}
        tp = obj.get("traceparent")
        if tp is not None:
            tp = _text(tp, "traceparent")
        nums = [obj.get(k) for k in ("wall_ns", "device_ns", "ops")]
        if not all(_count(v) for v in nums):
            raise ProtocolError("REQUEST_BILL needs wall_ns, device_ns and ops as integers >= 0")
        models = obj.get("models", [])
        if (not isinstance(models, list) or len(models) > REQUEST_BILL_MAX_MODELS
                or not all(_count(m, _U32) for m in models)):
            raise ProtocolError(f"REQUEST_BILL models must be at most {REQUEST_BILL_MAX_MODELS} u32s")
        types = obj.get("types", [])
        if not isinstance(types, list) or len(types) > REQUEST_BILL_MAX_TYPES + 1:
            raise ProtocolError(f"REQUEST_BILL types must be at most {REQUEST_BILL_MAX_TYPES + 1} entries")
        clean_types = []
        for t in types:
            if not (isinstance(t, list) and len(t) == 3 and _count(t[1]) and _count(t[2])):
                raise ProtocolError("REQUEST_BILL types are [op type, device ns, count]")
            clean_types.append([_text(t[0], "op type"), t[1], t[2]])
        slowest = obj.get("slowest")
        if slowest is not None:
            if not (isinstance(slowest, list) and len(slowest) == 3 and _count(slowest[2])):
                raise ProtocolError("REQUEST_BILL slowest is null or [op type, op name, device ns]")
            slowest = [_text(slowest[0], "slowest op type"), _text(slowest[1], "slowest op name"), slowest[2]]
        windows = _windows(obj)
        dropped = obj.get("dropped_before", 0)
        if not _count(dropped, _MAX_DROPPED):
            raise ProtocolError(f"REQUEST_BILL dropped_before must be an integer in [0, {_MAX_DROPPED}]")
        start = obj.get("start_unix_ns")
        if start is not None and not _count(start):
            raise ProtocolError("REQUEST_BILL start_unix_ns must be null or an integer in [0, 2**62]")
        ts = obj.get("ts")
        service = conn.service or ""
        self.total += 1 + dropped
        self.agent_dropped += dropped
        entry = {"ts": ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else time.time(),
                 "host": conn.host, "pid": conn.pid or 0, "service": service, "id": rid, "attrs": attrs,
                 "traceparent": tp, "start_unix_ns": start, "wall_ns": nums[0], "device_ns": nums[1],
                 "ops": nums[2], "models": models, "model_labels": _labels(conn, models),
                 "types": clean_types, "slowest": slowest, "complete": obj.get("complete") is True}
        self._observe(conn, service, models, obj["device_ns"])  # an int >= 0: checked above
        if self.fanout is not None:  # aclprof tail: the bill as a line of its own, as it closes
            sent, skipped = self.fanout.stream_line({"kind": "request", **entry}, lambda f: line_matches(f, entry))
            self.lines_sent += sent
            self.lines_skipped += skipped
        kept = self.by_service.get(service)
        if kept is None:
            if len(self.by_service) >= self.max_services:
                self.services_refused += 1
                return
            kept = self.by_service[service] = deque(maxlen=self.keep)
        if windows is not None:
            entry["windows"], entry["windows_cut"], entry["window_margin"] = windows
        kept.append(entry)

    def _observe(self, conn: Conn, service: str, models: list[int], device_ns: int) -> None:
        """The bill's device time into its (service, models) histogram (/metrics)."""
        key = (service, models_label(conn, models))
        h = self.hist.get(key)
        if h is None:
            if len(self.hist) >= MAX_HIST_SETS - 1:  # the last set is kept for OTHER_SET
                self.hist_sets_refused += 1
                key = OTHER_SET
                h = self.hist.get(key)
            if h is None:
                h = self.hist[key] = (np.zeros(NPROM, np.int64), [0, 0], (conn.host, conn.pid or 0))
        h[0][_bucket(device_ns)] += 1
        h[1][0] += 1
        h[1][1] += device_ns

    def prometheus_series(self) -> tuple[list[tuple[tuple[str, str], np.ndarray, int, int]],
                                         list[tuple[int, str, int]]]:
        """The histogram's label sets for :func:`aclprofd.promtext.histogram_text`: ((service,
        model), cumulative bucket counts, count, sum ns) and their owners (order, host, pid).
        Copies: the counters snapshot /metrics reads is immutable."""
        series, owners = [], []
        for i, (key, (counts, (n, total), (host, pid))) in enumerate(self.hist.items()):
            series.append((key, np.cumsum(counts), n, total))
            owners.append((i, host, pid))
        return series, owners

    def hurt(self, service: str, model: str, op_type: str, since: float, until: float | None = None,
             top: int = HURT_TOP) -> list[dict[str, Any]]:
        """The kept bills of ``service`` received in [since, until] that ran ``model`` (label or
        id as text, as a detector flag names it) and spent the most device time in ``op_type``:
        the requests a regression of that op type hurt most, most device time in it first
        (copies). A type the agent folded into "(other)" (beyond its top 16) is not seen."""
        found = []
        for b in self.by_service.get(service, ()):
            if b["ts"] < since or (until is not None and b["ts"] > until) or model not in b["model_labels"]:
                continue
            ns = next((t[1] for t in b["types"] if t[0] == op_type), None)
            if ns:
                found.append((ns, b))
        found.sort(key=lambda x: (-x[0], x[1]["id"]))
        return [{**b, "op_type": op_type, "op_ns": ns} for ns, b in found[:top]]

    def slowest(self, top: int = 20, service: str | None = None, since: float | None = None,
                attrs: dict[str, str] | None = None, model: int | None = None) -> list[dict[str, Any]]:
        """The ``top`` kept bills with the longest wall time, filtered."""
        return [dict(b) for b in self._matching(service=service, since=since, attrs=attrs, model=model)[:top]]

    def _matching(self, service: str | None = None, since: float | None = None, until: float | None = None,
                  attrs: dict[str, str] | None = None, model: int | None = None) -> list[dict[str, Any]]:
        """The kept bills the filters take (received in [since, until]), longest wall time first."""
        out = []
        for svc, kept in self.by_service.items():
            if service is not None and svc != service:
                continue
            for b in kept:
                if since is not None and b["ts"] < since:
                    continue
                if until is not None and b["ts"] > until:
                    continue
                if attrs and any(b["attrs"].get(k) != v for k, v in attrs.items()):
                    continue
                if model is not None and model not in b["models"]:
                    continue
                out.append(b)
        out.sort(key=lambda b: -b["wall_ns"])
        return out

    def summary(self, top: int = 20) -> dict[str, Any]:
        """For STATUS and the counters snapshot (copies: the snapshot is immutable)."""
        return {"total": self.total, "agent_dropped": self.agent_dropped, "services": len(self.by_service),
                "services_refused": self.services_refused, "lines_sent": self.lines_sent,
                "lines_skipped": self.lines_skipped, "hist_sets": len(self.hist),
                "hist_sets_refused": self.hist_sets_refused, "slowest": self.slowest(top)}


def _windows(obj: dict[str, Any]) -> tuple[list[list[int]], int, list[int]] | None:
    """A bill's optional ``windows`` ([[thread id, start, end]], the op records' clock),
    ``windows_cut`` and ``window_margin`` ([early, late]), checked; None when the agent sent
    no windows."""
    windows, cut, margin = obj.get("windows"), obj.get("windows_cut", 0), obj.get("window_margin", [0, 0])
    if windows is None:
        return None
    if (not isinstance(windows, list) or len(windows) > REQUEST_BILL_MAX_WINDOWS
            or not all(isinstance(w, list) and len(w) == 3 and _count(w[0], _U32) and _count(w[1]) and _count(w[2])
                       and w[1] <= w[2] for w in windows)):
        raise ProtocolError(f"REQUEST_BILL windows must be at most {REQUEST_BILL_MAX_WINDOWS} "
                            "[thread id (u32), start, end >= start] lists")
    if not _count(cut, _MAX_DROPPED):
        raise ProtocolError(f"REQUEST_BILL windows_cut must be an integer in [0, {_MAX_DROPPED}]")
    if not (isinstance(margin, list) and len(margin) == 2 and all(_count(v) for v in margin)):
        raise ProtocolError("REQUEST_BILL window_margin must be [early, late], integers in [0, 2**62]")
    return [list(w) for w in windows], cut, list(margin)
