"""Agent ingest: the frames an agent sends after HELLO (NAMES, BATCH, LOSS, WATCH,
UNWATCH), dispatched by frame kind.

A BATCH payload is decoded with ``np.frombuffer`` on the frame reader's view (no copy) for
the aggregates; the records are copied exactly once, into an owned ``bytes``, because
storage (until the next flush) and STREAM clients (until the next loop turn) keep them
beyond the reader's buffer; both share that one copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import structlog

from aclprof.protocol.wire import (
    FLAG_KEYPOINT,
    MAX_NAME_BYTES,
    RECORD_DTYPE,
    Kind,
    ProtocolError,
    check_identity,
    decode_batch,
    decode_json,
)

from .conn import Conn
from .handshake import is_int, is_labels

if TYPE_CHECKING:
    from .server import Daemon

__all__ = ["Ingest", "note_lag"]

_log = structlog.get_logger("aclprofd")
STORE_PENDING_MAX = 4 << 20  # write a connection's records before the tick beyond this many bytes

Handler = Callable[[Conn, memoryview], None]


def note_lag(conn: Conn, recs: np.ndarray) -> None:
    """Op times are the device's counter, not this host's clock (audit row 11): the lag is
    the receive time minus the newest op end, beyond the smallest such gap seen for that
    device on this connection (the clock offset plus the fastest delivery). Never
    negative; None until a batch with times arrived."""
    now = time.monotonic_ns()
    dev = recs["device_id"]
    groups = [int(dev[0])] if (dev == dev[0]).all() else np.unique(dev).tolist()
    lag = None
    for dv in groups:
        ends = recs["end"] if len(groups) == 1 else recs["end"][dev == dv]
        end = int(ends.max())
        if end == 0:
            continue  # no times (timeInfo off)
        gap = now - end
        off = min(conn.clock_offsets.get(dv, gap), gap)
        conn.clock_offsets[dv] = off
        lag = max(lag or 0, gap - off)
    if lag is not None:
        conn.lag_ns = lag


class Ingest:
    """The agent frame handlers of one daemon; :attr:`handlers` is the dispatch table."""

    def __init__(self, daemon: Daemon):
        self.d = daemon
        self.handlers: dict[Kind, Handler] = {
            Kind.BATCH: self.batch, Kind.NAMES: self.names, Kind.LOSS: self.loss,
            Kind.WATCH: self.watch, Kind.UNWATCH: self.unwatch,
        }
        self.names_truncated = 0  # op names/types cut to MAX_NAME_BYTES

    def batch(self, conn: Conn, payload: memoryview) -> None:
        recs = decode_batch(payload)  # a view of the reader's buffer
        n = len(recs)
        if n == 0:
            return
        d = self.d
        now = time.time()
        assert conn.keysrc is not None
        try:
            d.aggregator.ingest(conn.keysrc, recs, conn.names, now)
        except KeyError as exc:
            raise ProtocolError(f"batch uses name id {exc.args[0]} that was never defined") from None
        conn.records += n
        conn.rate.add(n, now)
        d.counters.records_total += n
        d.counters.rate.add(n, now)
        steps = int(np.count_nonzero(recs["flag"] & np.uint32(FLAG_KEYPOINT)))
        conn.steps += steps
        d.counters.steps_total += steps
        note_lag(conn, recs)
        owned = bytes(payload)  # the one copy: storage and streams keep it past this frame
        conn.pending_store.append((now, owned))
        conn.pending_bytes += len(owned)
        if conn.pending_bytes >= STORE_PENDING_MAX:
            # bounded memory at any rate: a fast agent's records go out before the tick
            d.persist.store(conn)
        if d.fanout.streaming:
            d.fanout.offer(conn, np.frombuffer(owned, dtype=RECORD_DTYPE), now)

    def names(self, conn: Conn, payload: memoryview) -> None:
        names = decode_json(payload).get("names")
        if not isinstance(names, dict):
            raise ProtocolError("NAMES needs an object of names")
        for k, v in names.items():
            try:
                nid = int(k)
            except ValueError:
                raise ProtocolError(f"name id {k!r} is not an integer") from None
            if not isinstance(v, str) or not 0 <= nid <= 0xFFFFFFFF:
                raise ProtocolError(f"name id {k!r} must be a u32 and name a string")
            if len(v) > MAX_NAME_BYTES and len(b := v.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
                # a real (if odd) name: kept, cut to the limit (wire.py), counted and logged
                v = b[:MAX_NAME_BYTES].decode("utf-8", "ignore")
                self.names_truncated += 1
                self.d.limiter.log("warning", "op name truncated", pid=conn.pid, limit=MAX_NAME_BYTES,
                                   names_truncated=self.names_truncated)
            old = conn.names.get(nid)
            if old is None:
                conn.names[nid] = v
                conn.names_order.append((nid, v))
            elif old != v:
                raise ProtocolError(f"name id {nid} redefined")

    def loss(self, conn: Conn, payload: memoryview) -> None:
        obj: dict[str, Any] = decode_json(payload)
        n = obj.get("dropped")
        if not is_int(n) or n < 0:
            raise ProtocolError("LOSS needs a non-negative integer dropped")
        if n == 0:
            return
        conn.dropped += n
        self.d.counters.add_drops(conn.pid or 0, conn.service or "", n)
        self.d.health.drops(conn.pid or 0, conn.service, n, time.time())
        _log.info("agent reported loss", pid=conn.pid, service=conn.service, dropped=n, reason=obj.get("reason"))

    def watch(self, conn: Conn, payload: memoryview) -> None:
        obj = decode_json(payload)
        mid, dev = obj.get("model_id"), obj.get("device", 0)
        labels = obj.get("labels") or {}
        if not is_int(mid) or not is_int(dev) or not is_labels(labels):
            raise ProtocolError("WATCH needs an integer model_id and device and string labels")
        check_identity("WATCH", labels=labels)
        conn.models[mid] = {"model_id": mid, "device": dev, "labels": labels}
        _log.info("model watched", pid=conn.pid, service=conn.service, model_id=mid, device=dev)

    def unwatch(self, conn: Conn, payload: memoryview) -> None:
        mid = decode_json(payload).get("model_id")
        if not is_int(mid):
            raise ProtocolError("UNWATCH needs an integer model_id")
        conn.models.pop(mid, None)
