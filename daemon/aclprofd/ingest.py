"""Agent ingest: the frames an agent sends after HELLO (NAMES, BATCH, LOSS, WATCH,
UNWATCH), dispatched by frame kind.

A BATCH payload is decoded with ``np.frombuffer`` on the frame reader's view (no copy) for
the aggregates. Storage (until the next flush) and STREAM clients (until the next loop turn)
keep the records beyond the frame: they share the payload's own ``bytes`` when the transport
read the frame whole into one (its large frames: ``aclprofd.transport.WHOLE_MIN``), else one
copy of them, made here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, TypeGuard

import numpy as np
import structlog

from aclprof.protocol._batchgroup import batch_facts, count_bad
from aclprof.protocol.safetext import scrub, truncate
from aclprof.protocol.wire import (
    MAX_NAME_BYTES,
    MAX_NAMES_PAYLOAD,
    RECORD_DTYPE,
    Kind,
    ProtocolError,
    check_identity,
    decode_batch,
    decode_json,
    utf8_cut,
)

from .aggregate.aggregator import Aggregator
from .aggregate.keys import model_label_of
from .conn import Conn
from .fanout import Fanout
from .handshake import is_int, is_labels
from .memory import Memory
from .persist import Persistence
from .ratelimit import LogLimiter
from .replyfit import json_size
from .status import Counters, Health

__all__ = ["Ingest", "note_lag"]

_log = structlog.get_logger("aclprofd")
STORE_PENDING_MAX = 4 << 20  # write a connection's records before the tick beyond this many bytes
#: a connection whose name table is charged this much has each batch stored at once
STORE_EACH_BATCH_NAMES = 8 << 20
#: An op longer than this (~13 days) is a corrupt value, not an op: durations are u64 on the
#: wire but summed as int64, so one 2**64-1 would wrap every aggregate it joins.
MAX_DURATION_NS = 1 << 50
_BAD_ID = 0xFFFFFFFF  # the C API's "no id" (-1 as u32): never a real model or device
#: What a name table entry costs beyond its characters (dict slot, str header, the
#: definition-order tuple, the JSON cache): charged against the memory budget.
NAME_OVERHEAD = 200
_MAX_MODELS = 4096  # watched models per connection (WATCH without UNWATCH must not grow the daemon)
_LOSS_REASON_MAX = 200  # characters of a LOSS reason kept for the log
#: the most one LOSS may report: 2**48 records (years of a full-speed agent's drops)
MAX_LOSS = 1 << 48
_INT64_MAX = (1 << 63) - 1
#: a NAMES frame at least this large ends its connection's reading for the loop turn
#: (~55,000 names in 1 MiB cost the loop 15-50 ms each: 8 MiB of them at once held every
#: client ~0.4-1 s)
_NAMES_YIELD = 64 << 10
#: names of one NAMES frame defined per step: a 1 MiB frame (~55,000 names) was defined in
#: one piece, 65-78 ms of the loop under load (issue 19); now its steps are spread over loop
#: turns (aclprofd.transport), the other clients served between them
NAMES_STEP = 8192

#: one agent frame; a handler whose work is cut into steps returns them (aclprofd.transport
#: runs a slice's worth per loop turn, before the connection's next frame)
Handler = Callable[[Conn, memoryview], Iterator[None] | None]


def note_lag(conn: Conn, recs: np.ndarray | None, device: int = -1, max_end: int = 0) -> None:
    """Op times are the device's counter, not this host's clock (audit row 11): the lag is
    the receive time minus the newest op end, beyond the smallest such gap seen for that
    device on this connection (the clock offset plus the fastest delivery). Never
    negative; None until a batch with times arrived. ``device`` >= 0: every record has that
    device id and ``max_end`` is their largest end (``batch_facts``: no pass here)."""
    now = time.monotonic_ns()
    if device >= 0:
        groups = [device]
    else:
        assert recs is not None  # device -1: the records tell
        dev = recs["device_id"]
        groups = [int(dev[0])] if (dev == dev[0]).all() else np.unique(dev).tolist()
    lag = None
    for dv in groups:
        if device >= 0:
            end = max_end
        else:
            assert recs is not None
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


def _int_text(k: str) -> bool:
    try:
        int(k)
    except ValueError:
        return False
    return True


def _u32(v: Any) -> TypeGuard[int]:
    """A model or device id: the C API's ids are u32 (a 400-digit one is a forged frame)."""
    return is_int(v) and 0 <= v <= 0xFFFFFFFF


class Ingest:
    """The agent frame handlers of one daemon; :attr:`handlers` is the dispatch table.

    Given what they use: the daemon's ``counters`` and ``health``, the ``aggregator`` a batch
    joins, ``persist`` (a connection's records into the segment file), ``fanout`` (STREAM
    clients), the ``memory`` budget (NAMES, WATCH) and ``limiter`` (log lines a peer causes)."""

    def __init__(self, counters: Counters, health: Health, aggregator: Aggregator, persist: Persistence,
                 fanout: Fanout, memory: Memory, limiter: LogLimiter):
        self.counters, self.health = counters, health
        self.aggregator, self.persist, self.fanout = aggregator, persist, fanout
        self.memory, self.limiter = memory, limiter
        self.handlers: dict[Kind, Handler] = {
            Kind.BATCH: self.batch, Kind.NAMES: self.names, Kind.LOSS: self.loss,
            Kind.WATCH: self.watch, Kind.UNWATCH: self.unwatch,
        }
        self.names_truncated = 0  # op names/types cut to MAX_NAME_BYTES

    def rejects(self, recs: np.ndarray) -> np.ndarray | None:
        """Refuse records whose values no op can have (counted per reason in
        ``counters.records_rejected``): the good records, or None if all are good. One
        service's corrupt values must not reach the aggregates it shares with others."""
        if recs.flags.c_contiguous and count_bad(recs, MAX_DURATION_NS) == 0:
            return None  # the usual batch: one C pass instead of ten numpy calls
        too_long = recs["duration"] > np.uint64(MAX_DURATION_NS)
        backwards = recs["end"] < recs["start"]
        bad_id = (recs["model_id"] == np.uint32(_BAD_ID)) | (recs["device_id"] == np.uint32(_BAD_ID))
        bad = too_long | backwards | bad_id
        if not bad.any():
            return None
        rej = self.counters.records_rejected
        for reason, m in (("duration_too_large", too_long), ("end_before_start", backwards & ~too_long),
                          ("bad_id", bad_id & ~too_long & ~backwards)):
            k = int(np.count_nonzero(m))
            if k:
                rej[reason] = rej.get(reason, 0) + k
        return recs[~bad]

    def batch(self, conn: Conn, payload: memoryview) -> None:
        if not payload:
            return
        now = time.time()
        assert conn.keysrc is not None
        # the usual frame: its aggregates, window slot, detector rows and facts in one C call
        # (~15 Python and numpy steps a frame before, each 2-5x slower after the loop slept
        # in select: issue 21); None: a frame for the steps below, nothing done yet
        facts = self.aggregator.ingest_frame(conn.keysrc, payload, now, MAX_DURATION_NS)
        if facts is None:
            self._batch_steps(conn, payload, now)
            return
        n = len(payload) // RECORD_DTYPE.itemsize
        conn.records += n
        self.counters.records_total += n
        conn.rate.add(n, now)
        self.counters.rate.add(n, now)
        steps, device, max_end = facts
        conn.steps += steps
        self.counters.steps_total += steps
        # mixed devices (rare): note_lag reads each device's newest end from the records
        note_lag(conn, decode_batch(payload) if device < 0 else None, device, max_end)
        self._keep(conn, payload, now)

    def _batch_steps(self, conn: Conn, payload: memoryview, now: float) -> None:
        """A BATCH frame in Python steps (refused records, new keys, a new second: what
        :meth:`Aggregator.ingest_frame` leaves), the reference its C call is tested against."""
        recs = decode_batch(payload)  # a view of the reader's buffer
        n = len(recs)
        read = n
        good = self.rejects(recs)
        if good is not None:
            # Refused records were read (records_total and GOODBYE count them) and are
            # counted per reason; they are neither aggregated nor stored nor streamed.
            conn.rejected += n - len(good)
            recs, payload, n = good, memoryview(good.tobytes()), len(good)
            if not n:
                conn.records += read
                self.counters.records_total += read
                return
        assert conn.keysrc is not None
        try:
            self.aggregator.ingest(conn.keysrc, recs, conn.names, now)
        except KeyError as exc:
            raise ProtocolError(f"batch uses name id {exc.args[0]} that was never defined") from None
        conn.records += read
        self.counters.records_total += read
        conn.rate.add(n, now)
        self.counters.rate.add(n, now)
        # the steps count and the lag clock's figures in one C pass (was ~8 numpy calls);
        # recs is contiguous: the payload's view, or the good records' copy
        steps, device, max_end = batch_facts(recs)
        conn.steps += steps
        self.counters.steps_total += steps
        note_lag(conn, recs, device, max_end)
        self._keep(conn, payload, now)

    def _keep(self, conn: Conn, payload: memoryview, now: float) -> None:
        """The frame's records (all good) to storage and the STREAM clients."""
        # storage and streams keep the records past this frame: the payload's own bytes when
        # it has them (a frame read whole: aclprofd.transport), else the one copy
        obj = payload.obj
        owned = obj if type(obj) is bytes and len(obj) == payload.nbytes else bytes(payload)
        conn.pending_store.append((now, owned))
        conn.pending_bytes += len(owned)
        if conn.pending_bytes >= STORE_PENDING_MAX or conn.names_bytes >= STORE_EACH_BATCH_NAMES:
            # bounded memory at any rate: a fast agent's records go out before the tick; and
            # an agent with a large name table has each batch stored at once, with the names
            # it uses (aclprofd.storage STATE_USED_ONLY), so a flush never writes many batches'
            # worth of long names in one go
            self.persist.store(conn)
        if self.fanout.streaming:
            self.fanout.offer(conn, np.frombuffer(owned, dtype=RECORD_DTYPE), now)

    def names(self, conn: Conn, payload: memoryview) -> Iterator[None] | None:
        if len(payload) > MAX_NAMES_PAYLOAD:
            # parsed in one go on the loop: a 16 MiB table would hold every client ~1.5 s
            raise ProtocolError(f"NAMES frame of {len(payload)} bytes: at most {MAX_NAMES_PAYLOAD} per frame "
                                f"(send a larger table in several NAMES frames)")
        if conn.names_bytes + len(payload) > self.memory.names_share():
            # each name costs more than its JSON: refused before the (slow) decode
            self.memory.refuse("names")
            raise ProtocolError(f"NAMES refused: a {len(payload)}-byte table on top of ~{conn.names_bytes} bytes of "
                                f"names passes this connection's share ({self.memory.names_share()} bytes) of the "
                                f"daemon's memory_budget; define only the names your records use")
        names = decode_json(payload).get("names")
        if not isinstance(names, dict):
            raise ProtocolError("NAMES needs an object of names")
        # Whole-table steps in C (map, set, join, dict.update) instead of a Python loop per
        # name: a 1 MiB frame of ~55,000 names took ~100 ms of the loop, now ~15 ms
        # (issue 19; tests/bench/soak_attacks_replies.py names_1mib)
        vals = list(names.values())
        if vals and set(map(type, vals)) != {str}:
            raise ProtocolError("every name of NAMES must be a string")
        cost = sum(map(len, vals)) + NAME_OVERHEAD * len(vals)
        share = self.memory.names_share()
        if conn.names_bytes + cost > share or not self.memory.fits(cost):
            self.memory.refuse("names")
            raise ProtocolError(
                f"NAMES refused: this connection's name table would hold ~{conn.names_bytes + cost} bytes, "
                f"over its share ({share} bytes) of the daemon's memory_budget "
                f"({self.memory.budget} bytes) or over the budget itself; "
                f"define only the names your records use")
        conn.names_bytes += cost
        large = len(payload) >= _NAMES_YIELD
        if len(names) <= NAMES_STEP:
            self._define(conn, names)
            conn.yield_read = large  # one large table frame per loop turn: the other clients go first
            return None
        return self._define_steps(conn, names, large)

    def _define_steps(self, conn: Conn, names: dict[str, str], large: bool) -> Iterator[None]:
        """A large table's names, ``NAMES_STEP`` a step (in the frame's order, so the
        connection's table and its definition order end as one piece would leave them; a
        bad name ends the connection at its step, as it would have ended it at once)."""
        items = iter(names.items())
        while part := dict(islice(items, NAMES_STEP)):
            self._define(conn, part)
            yield
        conn.yield_read = large

    def _define(self, conn: Conn, names: dict[str, str]) -> None:
        """Define ``names`` (JSON id text -> name, every name a str, already charged)."""
        vals = list(names.values())
        try:
            ids = list(map(int, names))
        except ValueError:
            bad = next(k for k in names if not _int_text(k))
            raise ProtocolError(f"name id {bad[:40]!r} is not an integer") from None
        if ids and (min(ids) < 0 or max(ids) > 0xFFFFFFFF):
            raise ProtocolError("name ids must be u32 (0 to 2**32-1)")
        try:
            "".join(vals).encode("utf-8")
        except UnicodeEncodeError:
            vals = [scrub(v) for v in vals]  # a lone surrogate would make every UTF-8 writer raise
        if vals and max(map(len, vals)) > MAX_NAME_BYTES // 4:  # only these can pass the byte limit
            for i, v in enumerate(vals):
                cut = utf8_cut(v, MAX_NAME_BYTES)
                if cut is not None:
                    # a real (if odd) name: kept, cut to the limit (wire.py), counted and logged
                    vals[i] = cut
                    self.names_truncated += 1
                    self.limiter.log("warning", "op name truncated", pid=conn.pid, limit=MAX_NAME_BYTES,
                                     names_truncated=self.names_truncated)
        table = dict(zip(ids, vals))
        if len(table) != len(ids):  # one id twice in the frame ("1" and "01"): the same name or an error
            seen: dict[int, str] = {}
            for nid, v in zip(ids, vals):
                if seen.setdefault(nid, v) != v:
                    raise ProtocolError(f"name id {nid} redefined")
        for nid in table.keys() & conn.names.keys():
            if conn.names[nid] != table[nid]:
                raise ProtocolError(f"name id {nid} redefined")
            del table[nid]
        conn.names.update(table)
        conn.names_order.extend(table.items())

    def loss(self, conn: Conn, payload: memoryview) -> None:
        obj: dict[str, Any] = decode_json(payload)
        n = obj.get("dropped")
        if not is_int(n) or not 0 <= n <= MAX_LOSS:
            # 2**70 was accepted: the sums (STATUS, GOODBYE, Prometheus) are int64s
            raise ProtocolError(f"LOSS needs an integer dropped in [0, {MAX_LOSS}]")
        if conn.dropped + n > _INT64_MAX or self.counters.dropped_total + n > _INT64_MAX:
            raise ProtocolError("LOSS: the drops reported would pass an int64 in all")
        if n == 0:
            return
        conn.dropped += n
        self.counters.add_drops(conn.pid or 0, conn.service or "", n)
        self.health.drops(conn.pid or 0, conn.service, n, time.time())
        reason = obj.get("reason")
        _log.info("agent reported loss", pid=conn.pid, service=conn.service, dropped=n,
                  reason=truncate(reason, _LOSS_REASON_MAX) if isinstance(reason, str) else None)

    def watch(self, conn: Conn, payload: memoryview) -> None:
        obj = decode_json(payload)
        # no device: the agent does not know it (yet: a later WATCH of the model gives it)
        mid, dev = obj.get("model_id"), obj.get("device")
        labels = obj.get("labels") or {}
        if not _u32(mid) or not (dev is None or _u32(dev)) or not is_labels(labels):
            raise ProtocolError("WATCH needs a model_id and a device (or none) in [0, 2**32) and string labels")
        check_identity("WATCH", labels=labels)
        labels = {scrub(k): scrub(v) for k, v in labels.items()}
        if len(conn.models) >= _MAX_MODELS and mid not in conn.models:
            self.memory.refuse("models")
            raise ProtocolError(f"WATCH refused: more than {_MAX_MODELS} watched models on one connection")
        conn.models[mid] = entry = {"model_id": mid, "device": dev, "labels": labels}
        conn.model_bytes[mid] = json_size(entry)  # measured once: STATUS cuts by it (aclprofd.replyfit)
        if conn.keysrc is not None:
            # the model's next records count under its label (a new label: new keys)
            conn.keysrc.set_label(mid, model_label_of(labels))
        _log.info("model watched", pid=conn.pid, service=conn.service, model_id=mid, device=dev)

    def unwatch(self, conn: Conn, payload: memoryview) -> None:
        mid = decode_json(payload).get("model_id")
        if not is_int(mid):
            raise ProtocolError("UNWATCH needs an integer model_id")
        conn.models.pop(mid, None)
        conn.model_bytes.pop(mid, None)
        if conn.keysrc is not None:
            # the agent sends UNWATCH after the model's last records: a reused id starts afresh
            conn.keysrc.set_label(mid, "")
