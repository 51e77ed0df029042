"""Op failures agents report (OP_FAILURE frames, protocol 3; issue 24).

Each frame is one AI Core exception of the agent's process: device, stream, task and thread
ids, the error code, and when GE knew the op its name and tensor descriptions. The daemon
counts failures per (service, device, model label, op type, code) and keeps the last
``KEEP`` with their tensors, for STATUS, ``/metrics`` (``aclprofd_op_failures_total``) and
``aclprof status``. Which model and op type: the agent knows only the op name (CANN's
exception info names a stream and a task, not a model), so the daemon looks the name up among
the aggregate keys of the same connection and device; found once, the failure gets that
model and type, else ``model="", op_type=""`` and it counts as ``unresolved``.

Bounded whatever agents send: a frame is checked against wire.py's limits (a bad one is a
protocol error: the connection closes, as for any malformed frame), at most ``MAX_KEYS``
count keys (later ones count under "(other)", counted in ``keys_refused``), and an agent
that dropped failures says how many (``dropped_before``), so the totals include them.
Loop thread only.

STREAM clients (``aclprof tail``) whose filter takes the failure get a ``{"kind": "failure"}``
line, after the records of that connection already pending (they ran before the failure):
the filter's host, pid, service, device, model id, op type and op name apply (an unresolved
failure has no model or type: a ``model``/``type`` filter does not take it); it has no
duration, so ``min_duration`` does not hide it. A client that does not read gets no line
(``lines_skipped``), as for gap lines. Listeners (the flight recorder) get each entry.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from aclprof.protocol.failurenames import failure_code_name
from aclprof.protocol.safetext import scrub
from aclprof.protocol.wire import (
    OP_FAILURE_MAX_DIMS,
    OP_FAILURE_MAX_NAME,
    OP_FAILURE_MAX_TENSORS,
    Kind,
    ProtocolError,
    decode_json,
)

from .config import Settings
from .conn import Conn

if TYPE_CHECKING:
    from .aggregate.keys import KeyRegistry
    from .fanout import Fanout
    from .filters import Filter
    from .ratelimit import LogLimiter
    from .transport import Outbox

__all__ = ["Failures", "FailuresHost", "MAX_KEYS", "MAX_ROW_KEYS", "KEEP", "OTHER", "stream_line_matches"]

#: per SNAPSHOT grouping, a row's identity from a row key (see ``Failures.rows``)
_ROW_OF: dict[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]] = {
    "type": lambda k: (k[7],), "name": lambda k: (k[8],), "service": lambda k: (k[2] or None,),
    "process": lambda k: (k[0], k[1], k[2] or None), "device": lambda k: (k[3],),
    "model": lambda k: (k[2] or None, k[5], k[6], k[1]),
}
#: the same fields of a SNAPSHOT row (aclprofd.aggregate.groups.FIELDS)
_ROW_FIELDS: dict[str, tuple[str, ...]] = {
    "type": ("op_type",), "name": ("op_name",), "service": ("service",), "process": ("host", "pid", "service"),
    "device": ("device",), "model": ("service", "model", "model_id", "pid"),
}

MAX_KEYS = 1024  # count keys (service, device, model, op type, code); each one is a series
#: SNAPSHOT's count keys (host, pid, service, device, model, op type, op name): per row of any
#: grouping; beyond it failures count in ``row_keys_refused`` and in no row
MAX_ROW_KEYS = 4096
KEEP = 64  # last failures kept with their tensors
OTHER = "(other)"
_U32 = 0xFFFFFFFF
_MAX_DROPPED = 1 << 32  # failures one frame may say the agent dropped before it
_RESOLVE_CACHE = 4096  # (connection, device, op name) lookups remembered


def _u32(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _U32


def _i32(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31


def _tensors(v: Any, side: str) -> list[dict[str, Any]]:
    if not isinstance(v, list) or len(v) > OP_FAILURE_MAX_TENSORS:
        raise ProtocolError(f"OP_FAILURE {side} must be a list of at most {OP_FAILURE_MAX_TENSORS} tensors")
    out = []
    for t in v:
        if not (isinstance(t, list) and len(t) == 3 and _i32(t[0]) and _i32(t[1])):
            raise ProtocolError(f"OP_FAILURE {side}: each tensor is [dtype, format, shape or null] (int32s)")
        shape = t[2]
        if shape is not None and not (isinstance(shape, list) and len(shape) <= OP_FAILURE_MAX_DIMS
                                      and all(isinstance(d, int) and not isinstance(d, bool)
                                              and -2 <= d < 2**63 for d in shape)):
            raise ProtocolError(f"OP_FAILURE {side}: a shape is null or at most {OP_FAILURE_MAX_DIMS} "
                                f"dimensions in [-2, 2**63)")
        out.append({"dtype": t[0], "format": t[1], "shape": shape})
    return out


class FailuresHost(Protocol):
    """What the failure lines read of the daemon's changing state (:class:`aclprofd.server.Daemon`)."""

    settings: Settings  # ``stream_buffer``, the failure line's bound (SIGHUP may change it)


def stream_line_matches(flt: Filter, entry: dict[str, Any]) -> bool:
    """Whether a STREAM filter takes a failure ``entry`` (of :meth:`Failures.failure`)."""
    if not flt.source_matches(entry["host"], entry["pid"], entry["service"] or None):
        return False
    if flt.device is not None and flt.device != entry["device"]:
        return False
    if flt.model is not None and flt.model != entry.get("model_id"):
        return False
    if flt.type_re is not None and not (entry["op_type"] and flt.type_re.search(entry["op_type"])):
        return False
    return flt.name_re is None or bool(entry["op_name"] and flt.name_re.search(entry["op_name"]))


class Failures:
    """The op failures of one daemon: counts, the last ones, and the OP_FAILURE handler.

    ``host``, ``fanout`` and ``outbox`` (all or none): the STREAM failure lines;
    ``listeners``: called with each entry (the flight recorder), after the line is queued."""

    def __init__(self, keys: KeyRegistry, limiter: LogLimiter, max_keys: int = MAX_KEYS, keep: int = KEEP,
                 host: FailuresHost | None = None, fanout: Fanout | None = None, outbox: Outbox | None = None):
        self.keys, self.limiter, self.max_keys = keys, limiter, max_keys
        self.host, self.fanout, self.outbox = host, fanout, outbox
        self.listeners: list[Callable[[Conn, dict[str, Any]], None]] = []
        self.lines_sent = 0  # failure lines queued for STREAM clients
        self.lines_skipped = 0  # failure lines not queued for a STREAM client that does not read
        self.counts: dict[tuple[str, int, str, str, int], int] = {}
        self.total = 0  # failures received, including those agents said they dropped
        self.agent_dropped = 0  # of total: reported by dropped_before, no details
        self.keys_refused = 0  # failures counted under "(other)" (MAX_KEYS reached)
        self.unresolved = 0  # failures whose model and op type the daemon could not find
        self.last: deque[dict[str, Any]] = deque(maxlen=keep)
        self._resolved: dict[tuple[str, int, str], tuple[str, str, int | None, str | None]] = {}
        #: (host, pid, service, device, model, model label or None, model id, op type, op name) -> count
        self.rows: dict[tuple[Any, ...], int] = {}
        self.row_keys_refused = 0
        self.agent_handlers = {Kind.OP_FAILURE: self.failure}

    # ---- OP_FAILURE (agent) ---------------------------------------------------------------
    def failure(self, conn: Conn, payload: memoryview) -> None:
        obj = decode_json(payload)
        ids: list[Any] = [obj.get(k) for k in ("device", "stream", "task", "thread", "code")]
        name, dropped = obj.get("op_name"), obj.get("dropped_before", 0)
        if not all(_u32(v) for v in ids) or not _i32(obj.get("op_desc_code", 0)):
            raise ProtocolError("OP_FAILURE needs device, stream, task, thread and code as u32s")
        if name is not None and (not isinstance(name, str) or len(name) > OP_FAILURE_MAX_NAME):
            raise ProtocolError(f"OP_FAILURE op_name must be null or a string of at most {OP_FAILURE_MAX_NAME} "
                                f"characters")
        if not isinstance(dropped, int) or isinstance(dropped, bool) or not 0 <= dropped <= _MAX_DROPPED:
            raise ProtocolError(f"OP_FAILURE dropped_before must be an integer in [0, {_MAX_DROPPED}]")
        ts = obj.get("ts")
        inputs, outputs = _tensors(obj.get("inputs", []), "inputs"), _tensors(obj.get("outputs", []), "outputs")
        device, stream, task, thread, code = ids
        name = None if name is None else scrub(name)
        service = conn.service or ""
        model, op_type, model_id, label = self._resolve(conn, device, name)
        self._count((service, device, model, op_type, code), 1 + dropped)
        if model_id is not None:  # a SNAPSHOT row has a known op type and model
            row = (conn.host, conn.pid or 0, service, device, model, label, model_id, op_type, name)
            if row in self.rows or len(self.rows) < MAX_ROW_KEYS:
                self.rows[row] = self.rows.get(row, 0) + 1 + dropped
            else:
                self.row_keys_refused += 1 + dropped
        self.agent_dropped += dropped
        entry = {"ts": ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else time.time(),
                 "host": conn.host, "pid": conn.pid or 0, "service": service, "device": device,
                 "stream": stream, "task": task, "thread": thread, "code": code,
                 "code_name": failure_code_name(code), "op_name": name,
                 "op_type": op_type, "model": model, "model_id": model_id,
                 "op_desc_code": obj.get("op_desc_code", 0), "inputs": inputs, "outputs": outputs,
                 "dropped_before": dropped}
        self.last.append(entry)
        self.limiter.log("warning", "op failure", pid=conn.pid, service=service, device=device, op=name,
                         op_type=op_type or None, model=model or None, code=code)
        self._stream(entry)
        for listener in self.listeners:
            listener(conn, entry)

    def _stream(self, entry: dict[str, Any]) -> None:
        """A ``{"kind": "failure"}`` line for every STREAM client whose filter takes it,
        after the records it already has pending (they ran before the failure)."""
        fan, outbox, host = self.fanout, self.outbox, self.host
        if fan is None or outbox is None or host is None:
            return
        sent, skipped = fan.stream_line({"kind": "failure", **entry}, lambda flt: stream_line_matches(flt, entry))
        self.lines_sent += sent
        self.lines_skipped += skipped

    def _count(self, key: tuple[str, Any, str, str, Any], n: int) -> None:
        if key not in self.counts and len(self.counts) >= self.max_keys:
            self.keys_refused += n
            key = (OTHER, 0, "", OTHER, 0)
        self.counts[key] = self.counts.get(key, 0) + n
        self.total += n

    def _resolve(self, conn: Conn, device: Any, name: str | None) -> tuple[str, str, int | None, str | None]:
        """(model label or id, op type, model id, model label or None) of op ``name`` among this
        connection's aggregate keys on ``device``: found only when exactly one model and type
        have that name."""
        if name is None:
            self.unresolved += 1
            return "", "", None, None
        cache_key = (conn.id, device, name)
        found: tuple[str, str, int | None, str | None] | None
        if cache_key in self._resolved:
            found = self._resolved[cache_key]
        else:
            found = self._lookup(conn, device, name)
            if found is not None:  # an unknown name may be learned later: not cached
                if len(self._resolved) >= _RESOLVE_CACHE:
                    self._resolved.clear()
                self._resolved[cache_key] = found
        if found is None:
            self.unresolved += 1
            return "", "", None, None
        return found

    def _lookup(self, conn: Conn, device: Any, name: str) -> tuple[str, str, int | None, str | None] | None:
        reg, n = self.keys, len(self.keys)
        hits = np.flatnonzero((reg.pid[:n] == (conn.pid or 0)) & (reg.device[:n] == device))
        found = {(reg.model_label[i] or str(int(reg.model[i])), reg.type[i], int(reg.model[i]),
                  reg.model_label[i] or None)
                 for i in hits.tolist() if reg.name[i] == name and reg.host[i] == conn.host}
        if len({f[:2] for f in found}) != 1:
            return None
        # one model label and type but several model ids (reloaded): no one model row
        return found.pop() if len(found) == 1 else (*next(iter(found))[:2], None, None)

    def closed(self, conn: Conn) -> None:
        """Forget the connection's cached lookups (its ids may be reused)."""
        if self._resolved:
            self._resolved = {k: v for k, v in self._resolved.items() if k[0] != conn.id}

    # ---- reading --------------------------------------------------------------------------
    def annotate(self, reply: dict[str, Any], flt: Filter) -> None:
        """SNAPSHOT: each row gets ``failures``, the failures since the daemon started (every
        window: a failure has no duration to put in one) of the ops in that row and the
        request's filter (its min_duration aside). One pass over the row keys, one lookup a row."""
        of, fields = _ROW_OF.get(reply.get("group_by", "")), _ROW_FIELDS.get(reply.get("group_by", ""))
        if of is None or fields is None:
            return
        per: dict[tuple[Any, ...], int] = {}
        for k, n in self.rows.items():
            host, pid, service, device, _, _, model_id, op_type, name = k
            if not flt.source_matches(host, pid, service or None) \
                    or (flt.device is not None and flt.device != device) \
                    or (flt.model is not None and flt.model != model_id) \
                    or (flt.type_re is not None and not flt.type_re.search(op_type)) \
                    or (flt.name_re is not None and not (name and flt.name_re.search(name))):
                continue
            ident = of(k)
            per[ident] = per.get(ident, 0) + n
        for r in reply.get("rows", []):
            r["failures"] = per.get(tuple(r.get(f) for f in fields), 0)


    def summary(self, last: int = 8) -> dict[str, Any]:
        """For STATUS and the counters snapshot (copies: the snapshot is immutable)."""
        return {"total": self.total, "agent_dropped": self.agent_dropped, "keys": len(self.counts),
                "keys_refused": self.keys_refused, "unresolved": self.unresolved,
                "lines_sent": self.lines_sent, "lines_skipped": self.lines_skipped,
                "row_keys_refused": self.row_keys_refused,
                "by_key": [[*k, n] for k, n in self.counts.items()],
                "last": [dict(e) for e in list(self.last)[-last:]]}
