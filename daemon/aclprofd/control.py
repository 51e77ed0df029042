"""Control requests (the ``aclprof`` CLI): STATUS, SNAPSHOT, STREAM, EXPORT and RESET,
dispatched by frame kind (:attr:`Control.handlers`).

A kind missing from the table is not allowed from a control client: the loop turns that
into a protocol error that closes this connection only (daemon/PROTOCOL.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import structlog

from aclprof.protocol.streambin import FORMATS, JSONL
from aclprof.protocol.wire import Kind, ProtocolError, decode_json, encode, encode_json

from .aggregate.aggregator import Aggregator
from .authz import authorize, is_admin
from .bills import RequestBills, hurt_summary
from .capture.recorder import CaptureService
from .config import Settings
from .conn import Conn
from .detector.service import DetectorService
from .failures import Failures
from .fanout import Fanout
from .filters import Filter
from .persist import Persistence
from .replyfit import REPLY_BUDGET, take, take_encoded
from .status import STATUS_CAPTURES_BUDGET, STATUS_FLAGS_BUDGET, Counters, CountersSnapshot, status_reply
from .transport import Outbox

__all__ = ["Control", "ControlHost"]

_log = structlog.get_logger("aclprofd")

#: a request's handler; one whose reply is built in steps returns them (the transport runs
#: them over loop turns before the connection's next frame: Conn.work)
Handler = Callable[[Conn, dict[str, Any]], "Iterator[None] | None"]


class ControlHost(Protocol):
    """What the control requests use of the daemon (:class:`aclprofd.server.Daemon`)."""

    settings: Settings  # who may send what, STATUS's settings (SIGHUP may change them)
    counters: Counters  # truncations: what replies left out to fit their frame

    @property
    def aggregator(self) -> Aggregator: ...
    @property
    def detection(self) -> DetectorService: ...
    @property
    def captures(self) -> CaptureService: ...
    @property
    def failures(self) -> Failures: ...
    @property
    def bills(self) -> RequestBills: ...
    @property
    def fanout(self) -> Fanout: ...
    @property
    def persist(self) -> Persistence: ...
    def publish(self) -> CountersSnapshot: ...
    def flush(self) -> None: ...


class Control:
    """The control request handlers of one daemon; each gets the decoded JSON request."""

    def __init__(self, host: ControlHost, outbox: Outbox):
        self.host, self.outbox = host, outbox
        self.handlers: dict[Kind, Handler] = {
            Kind.STATUS: self.status, Kind.SNAPSHOT: self.snapshot, Kind.STREAM: self.stream,
            Kind.EXPORT: self.export, Kind.RESET: self.reset,
            **host.detection.handlers,  # BASELINE_* (aclprofd.detector.service)
        }

    def handle(self, conn: Conn, kind: Kind, payload: memoryview) -> Iterator[None] | None:
        authorize(self.host.settings, conn, kind)  # who may send what: daemon/README.md "Security model"
        handler = self.handlers.get(kind)
        if handler is None:
            raise ProtocolError(f"{kind.name} is not allowed from a control client")
        return handler(conn, decode_json(payload))

    def status(self, conn: Conn, req: dict[str, Any]) -> None:
        snap = self.host.publish()  # STATUS and /metrics read the same snapshot
        cut: dict[str, int] = {}  # what the reply leaves out to fit its frame (aclprofd.replyfit)
        reply = status_reply(snap, self.host.settings.socket, cut)
        reply["detector"] = det = self.host.detection.status()
        # each flag names the requests it hurt most (issue 25): copies, the view is shared
        det["flags"] = [{**f, "requests": hurt_summary(self.host.bills, f, self.host.settings.detector_window_s)}
                        for f in det.get("flags") or []]
        det["flags"], cut["flags"], _ = take(det.get("flags") or [], STATUS_FLAGS_BUDGET)
        reply["captures"] = cap = self.host.captures.status()  # the flight recorder (aclprofd.capture.recorder)
        cap["items"], cut["captures"], _ = take(cap.get("items") or [], STATUS_CAPTURES_BUDGET)
        if cut["captures"]:  # the newest is the first item: shown above, or too large too
            cap["newest"] = cap["items"][0] if cap["items"] else None
        self.host.counters.truncations.note(reply, "status", cut)
        s = self.host.settings
        # what `aclprof doctor` checks a deployment against: the groups this daemon uses, what
        # this peer may send, and where /metrics listens (daemon/README.md "Security model")
        reply["access"] = {"socket_group": s.socket_group, "admin_group": s.admin_group,
                           "daemon_uid": os.geteuid(), "peer_is_admin": is_admin(s, conn.peer)}
        # and what the endpoint left out or refused (aclprofd.metrics.Metrics.stats)
        reply["metrics"] = {"host": s.prometheus_host, "port": s.prometheus_port, **snap.metrics}
        self.outbox.queue(conn, encode_json(Kind.STATUS_REPLY, reply))

    def snapshot(self, conn: Conn, req: dict[str, Any]) -> Iterator[None]:
        window = req.get("window", "all")
        group_by = req.get("group_by", "type")
        flt = Filter.parse(req.get("filter"))
        try:
            reply = self.host.aggregator.snapshot(window, group_by, flt)
        except (ValueError, TypeError) as exc:
            raise ProtocolError(str(exc)) from None
        self.host.detection.detector.annotate(reply, getattr(flt, "service", None))  # shift_p99 per op type
        self.host.failures.annotate(reply, flt)  # op failures per row (issue 24)
        return self._snapshot_reply(conn, reply)

    def _snapshot_reply(self, conn: Conn, reply: dict[str, Any]) -> Iterator[None]:
        """The reply's rows encoded once, a step per ~256 KB of JSON (replyfit.take_encoded),
        over loop turns: 100 models of 64 labels of control characters were a 10 MB reply,
        measured then encoded again in one step (78 ms of the loop's CPU, issue 19).
        Rows are sorted by total_ns: the cut keeps the heaviest (long op names in JSON
        escapes could otherwise pass the frame limit and fail top for every user)."""
        parts: list[str] = []
        _, left_out = yield from take_encoded(reply["rows"], REPLY_BUDGET, parts)
        reply["rows"] = []
        self.host.counters.truncations.note(reply, "snapshot", {"rows": left_out})
        # the rows spliced into the rest (the first '"rows":[]' is the key's: a string's
        # quotes are escaped in JSON, and only scalars come before it)
        head = json.dumps(reply, separators=(",", ":"))
        text = head.replace('"rows":[]', '"rows":[' + ",".join(parts) + "]", 1)
        del parts
        self.outbox.queue(conn, encode(Kind.SNAPSHOT_REPLY, text.encode()))

    def stream(self, conn: Conn, req: dict[str, Any]) -> None:
        fmt = req.get("format", JSONL)
        if fmt not in FORMATS:
            # a client asks for a format only when WELCOME listed it: this is a client's bug,
            # told plainly (ERROR, then close) rather than answered in a format it cannot read
            raise ProtocolError(f"STREAM format {str(fmt)[:40]!r} is not one this daemon streams "
                                f"({', '.join(FORMATS)})")
        self.host.fanout.start_stream(conn, Filter.parse(req.get("filter")), binary=fmt != JSONL)
        _log.info("stream started", pid=conn.pid, format=fmt)

    def export(self, conn: Conn, req: dict[str, Any]) -> None:
        since, until = req.get("since_ts"), req.get("until_ts")
        for v in (since, until):
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise ProtocolError("since_ts/until_ts must be numbers or null")
        flt = Filter.parse(req.get("filter"))
        if conn.export is not None:
            raise ProtocolError("an EXPORT is already running on this connection")
        self.host.flush()  # include what was received until now
        self.host.fanout.start_export(conn, since, until, flt)

    def reset(self, conn: Conn, req: dict[str, Any]) -> None:
        self.host.aggregator.reset()
        self.host.detection.reset()  # the detector's cells of gone agents go at its next tick
        self.host.persist.save_aggregates(wait=True)  # a restart must not bring the old figures back
        _log.info("aggregates reset", by_pid=conn.pid)
        self.outbox.queue(conn, encode_json(Kind.RESET_REPLY, {}))
