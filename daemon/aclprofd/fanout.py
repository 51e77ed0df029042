"""Records out to control clients: live STREAM fan-out and EXPORT from the segment files,
both as JSON Lines frames (:mod:`aclprofd.records`), both ended by an END frame; or, for a
STREAM client that asked for it, the records as they arrived (binary, 56 bytes each, with
their sources and names: :mod:`aclprof.protocol.streambin`), which the client renders.

Nothing waits on a client. A STREAM client has a bounded outgoing buffer: records beyond
it are skipped before they are encoded, counted, and reported in a STREAM_SKIPPED frame
once its buffer has drained. An EXPORT is produced a frame at a time, only while the
client's buffer is small and for at most ``EXPORT_SLICE_S`` per loop turn, interleaved
with ingestion.

Records are encoded in C into whole frames (:func:`aclprofd.records.encode_frames`), once
per batch for every STREAM client whose filter selects the same records, and the one
``bytes`` is queued for each of them. While a STREAM client's filter admits an agent's records
(by host, pid, service), that agent is told so (``LIVE``) and sends more often, so
``aclprof tail`` shows records sooner.

Whatever goes wrong while producing one client's frames (a bug, stored data that is not
what it should be) costs that client its connection (:meth:`Transport.internal_error`:
logged rate-limited and counted), never the daemon: these pumps run in the loop itself,
outside any frame handler.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from aclprof.protocol.streambin import MAX_BATCH_RECORDS, batch_prefix, names_frames, source_end_frame, source_frame
from aclprof.protocol.wire import Kind, encode_json, widen_send_buffer

from .config import Settings
from .conn import Conn, OutQueue
from .filters import Filter, NameMatcher
from .memory import Memory
from .records import FRAME_RECORDS, NameJson, append_frame, encode_frames, identity_head
from .status import Counters
from .storage import Storage
from .transport import Outbox

__all__ = ["Fanout", "FanoutHost", "EXPORT_OUT_LOW", "STREAM_SNDBUF"]

EXPORT_OUT_LOW = 2 << 20   # produce more EXPORT frames only below this many buffered bytes
EXPORT_SLICE_S = 0.02      # at most this long per loop turn on EXPORT encoding
EST_RECORD_JSON = 220      # bytes per record in JSON, to decide skipping before encoding
EST_RECORD_BIN = 58        # ... in a binary STREAM: 56, and the frame's head shared by a batch
#: after the last STREAM client left, agents are told (LIVE false) only this much later: a
#: client that reconnects at once (or one that connects and leaves in a loop) toggles
#: nothing, so agents' sender threads are not woken by a flood of LIVE frames
LIVE_LINGER_S = 5.0
#: a STREAM client's kernel send buffer, asked for at STREAM (Linux gives twice what is
#: asked, at most twice ``net.core.wmem_max``): 1 MiB holds an agent frame's JSON at 100 k
#: ops/s (:func:`aclprof.protocol.wire.widen_send_buffer`): it leaves in one ``sendmsg``,
#: where the default ~208 KiB took three, each partial send costing the loop a turn woken
#: only to send the rest (issue 21: ~100 sends and ~108 turns a second at 100 k ops/s for
#: ~40 frames); that memory is the kernel's, bounded per client, and not the daemon's
#: resident size (daemon/README.md "Memory budget")
STREAM_SNDBUF = 1 << 20


class FanoutHost(Protocol):
    """What STREAM and EXPORT read of the daemon's changing state (:class:`aclprofd.server.Daemon`)."""

    settings: Settings  # ``stream_buffer`` (SIGHUP may change it)
    storage: Storage | None  # EXPORT reads the segment files (None before start, after close)


class Fanout:
    """STREAM and EXPORT of one daemon; the per-client state lives on each :class:`Conn`.

    ``host``: the settings and the segment files; ``outbox``: the connections and how to
    answer them; ``counters``: ``stream_skipped_total``; ``memory``: the budget streams are
    charged to."""

    def __init__(self, host: FanoutHost, outbox: Outbox, counters: Counters, memory: Memory):
        self.host, self.outbox, self.counters, self.memory = host, outbox, counters, memory
        # the STREAM clients and the running EXPORTs, open ones only, in the order they began
        # (ordered sets): the pumps, the fan-out and a new agent's LIVE check visit these, not
        # every connection, so a loop turn and a handshake cost the same with 10 or 3,800
        # agents connected (a pass over all connections per turn made each handshake
        # O(open connections): 1.4 ms at 3,500 agents against 0.24 ms at 10)
        self._streams: dict[Conn, None] = {}
        self._exports: dict[Conn, None] = {}
        self._live_check_at = 0.0  # monotonic time an agent's LIVE false falls due (0: none)
        # [budget left, stream share left] of this loop turn (None: not read yet), read once
        # per turn by whichever comes first, an offer or the pump, and then lowered by what
        # they charge: it was read per batch and per pump, one pass over every connection
        # each (O(agents) per batch: O(agents^2) a second with every agent sending). Within
        # a turn it does not see other holders grow (frames read, replies queued); those
        # have their own checks, and the next turn reads it afresh (pump_streams ends a turn)
        self._room: list[int] | None = None
        # the identity head of each sender (host, pid, service), formatted once, not per batch
        self._heads: dict[tuple[str, int, str | None], bytes] = {}
        self._sources = 0  # binary STREAMs: the last source id given to an agent connection

    @property
    def streaming(self) -> int:
        """STREAM clients connected (ingest skips the fan-out when 0)."""
        return len(self._streams)

    # ---- LIVE: an agent sends more often while a STREAM client may get its records --------
    def _wants_live(self, agent: Conn, filters: list[Filter]) -> bool:
        return any(f.source_matches(agent.host, agent.pid or 0, agent.service) for f in filters)

    def _update_live(self, agents: list[Conn] | None = None) -> None:
        """Tell each agent (all, or ``agents``) LIVE true at once when a STREAM client's
        filter admits its records, LIVE false LIVE_LINGER_S after none does any more."""
        now = time.monotonic()
        filters = [c.stream for c in self._streams if c.stream is not None and not c.closed]
        due = 0.0
        for a in list(self.outbox.conns.values()) if agents is None else agents:
            if a.role != "agent" or a.closed:
                continue
            if self._wants_live(a, filters):
                a.unlive_at = 0.0
                if not a.live:
                    a.live = True
                    self.outbox.queue(a, encode_json(Kind.LIVE, {"live": True}))
            elif a.live:
                if not a.unlive_at:
                    a.unlive_at = now + LIVE_LINGER_S
                if now >= a.unlive_at:
                    a.live, a.unlive_at = False, 0.0
                    self.outbox.queue(a, encode_json(Kind.LIVE, {"live": False}))
                else:
                    due = a.unlive_at if not due else min(due, a.unlive_at)
        if agents is None:
            self._live_check_at = due
        elif due:
            self._live_check_at = due if not self._live_check_at else min(due, self._live_check_at)

    def agent_admitted(self, conn: Conn) -> None:
        """A new agent connection (after WELCOME): LIVE true if a STREAM client watches it."""
        if self.streaming:
            self._update_live([conn])

    # ---- STREAM -------------------------------------------------------------------------
    def start_stream(self, conn: Conn, flt: Filter, binary: bool = False) -> None:
        """``conn`` streams what ``flt`` selects: JSON Lines, or with ``binary`` the records
        as they arrived (aclprof.protocol.streambin)."""
        if not conn.closed:  # closed: closed() has run, the sets hold open connections only
            self._streams[conn] = None
            widen_send_buffer(conn.sock, STREAM_SNDBUF)
        conn.stream = flt
        conn.stream_binary = binary
        conn.stream_est = EST_RECORD_BIN if binary else EST_RECORD_JSON
        conn.matchers = {}
        self._update_live()

    def closed(self, conn: Conn) -> None:
        """``conn`` is closing (called by the loop, before the connection's names are dropped)."""
        self._exports.pop(conn, None)
        if conn in self._streams:
            del self._streams[conn]
            # ``conn`` is closed already, so its filter no longer counts: LIVE false falls due
            # for the agents no other stream watches
            self._update_live()
        elif conn.role == "agent" and self.streaming:
            self._agent_gone(conn)

    def _agent_gone(self, agent: Conn) -> None:
        """An agent connection closes: its records still pending for STREAM clients go out
        now, while its name table is there (the loop drops it next: they were written with
        ``"#<id>"`` names), then binary clients are told the source is gone, so they drop its
        names (a long ``tail`` would otherwise hold every agent's table it ever saw)."""
        if any(src is agent for c in self._streams for src, _, _ in c.stream_pending):
            self.pump_streams()
        if not agent.stream_source:
            return
        end: bytes | None = None
        for c in self._streams:
            if c.stream_sources.pop(agent, None) is not None and not c.closed:
                end = end or source_end_frame(agent.stream_source)
                c.out += end
                self.outbox.send(c)

    def _stream_room(self) -> tuple[int, int]:
        """(bytes the memory budget has left, bytes all STREAM buffers together may still
        grow): each client's ``stream_buffer`` alone does not bound them (4096 clients x
        8 MiB is 32 GiB), so they are charged to ``memory_budget`` too, and together may
        take at most half of it: agents' name tables and unstored records keep room.
        One pass over the connections per call, one call per loop turn (:meth:`_turn_room`)."""
        return self.memory.stream_room()

    def _turn_room(self) -> list[int]:
        """This loop turn's [budget left, stream share left], lowered in place by the
        caller's charges (read at the turn's first need: see ``_room``)."""
        room = self._room
        if room is None:
            room = self._room = list(self._stream_room())
        return room

    def _head(self, src: Conn) -> bytes:
        key = (src.host, src.pid or 0, src.service)
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= 4096:  # senders come and go: bounded, refilled on demand
                self._heads.clear()
            head = self._heads[key] = identity_head(*key)
        return head

    def _over_budget(self, client: Conn, k: int) -> None:
        """``k`` records not queued for ``client``: the memory budget is spent."""
        client.stream_skipped += k
        client.stream_skipped_all += k
        self.counters.stream_skipped_total += k
        self.memory.refuse("stream")

    def offer(self, src: Conn, recs: np.ndarray, now: float) -> None:
        """A batch an agent sent: queue what each STREAM client's filter selects. Clients
        whose filters select the same records queue the same array object, so the pump
        encodes it once for all of them (:meth:`pump_streams`)."""
        limit = self.host.settings.stream_buffer_bytes
        room: list[int] | None = None  # this turn's (_turn_room), read when a client takes records
        same: dict[bytes, np.ndarray] = {}  # mask bytes -> the selection (b"": everything)
        for client in self._streams:
            flt = client.stream
            if flt is None or client.closed or not flt.source_matches(src.host, src.pid or 0, src.service):
                continue
            matcher = client.matchers.get(src.id)
            if matcher is None:
                matcher = client.matchers[src.id] = NameMatcher()
            m = flt.mask(recs, matcher, src.names)
            if m is not None and m.all():
                m = None  # selects everything: the same array (and encoding) as no filter
            key = b"" if m is None else m.tobytes()
            sel = same.get(key)
            if sel is None:
                sel = same[key] = recs if m is None else recs[m]
            k = len(sel)
            if not k:
                continue
            est = client.stream_est
            if len(client.out) + (client.stream_pending_n + k) * est > limit:
                client.stream_skipped += k
                client.stream_skipped_all += k
                self.counters.stream_skipped_total += k
                continue
            cost = k * est
            if room is None:
                room = self._turn_room()
            if cost > room[0] or cost > room[1]:
                self._over_budget(client, k)
                continue
            room[0] -= cost
            room[1] -= cost
            client.stream_pending.append((src, now, sel))
            client.stream_pending_n += k

    def stream_line(self, obj: dict[str, Any], matches: Callable[[Filter], bool]) -> tuple[int, int]:
        """One JSON line (an op failure, a request bill: PROTOCOL.md) for every STREAM client
        whose filter ``matches``, after the records it already has pending (they came first).
        A client whose buffer is over its ``stream_buffer`` gets no line, so a storm of them
        cannot grow it past the stream's bound. Returns (lines queued, lines skipped)."""
        if not self.streaming:
            return 0, 0
        line: bytes | None = None
        limit = self.host.settings.stream_buffer_bytes
        sent = skipped = 0
        for c in list(self._streams):
            flt = c.stream
            if flt is None or c.closed or not matches(flt):
                continue
            if line is None:
                self.pump_streams()  # the records already pending first: they came before it
                if c.closed:
                    continue
                line = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
            if len(c.out) > limit:
                skipped += 1
                continue
            append_frame(c.out, Kind.STREAM_RECORDS, line)
            sent += 1
            self.outbox.send(c)
        return sent, skipped

    def pump_streams(self) -> None:
        """Encode what each STREAM client has pending (once per loop turn) and send it."""
        if self._live_check_at and time.monotonic() >= self._live_check_at:
            self._update_live()
        if not self.streaming:
            self._room = None
            return
        # (selection, first record) -> (the selection, its frames): a batch queued for several
        # clients (the same array object, see offer) is encoded once in this pump
        encoded: dict[tuple[int, int], tuple[np.ndarray, bytes]] = {}
        try:
            for c in list(self._streams):
                if c.stream is None or c.closed or not (c.stream_pending or (c.stream_skipped and not c.out)):
                    continue
                try:
                    if c.stream_binary:
                        self._pump_binary(c, self._turn_room())
                    else:
                        self._pump_stream(c, self._turn_room(), encoded)
                except Exception as exc:
                    self.outbox.internal_error(c, "STREAM", exc)
        finally:
            self._room = None  # the turn's end: the next one reads the budget afresh

    def _pump_stream(self, c: Conn, room: list[int],
                     encoded: dict[tuple[int, int], tuple[np.ndarray, bytes]]) -> None:
        """``room``: [budget left, stream share left] in bytes, this turn's
        (:meth:`_turn_room`: the pending records were charged at their estimate), lowered
        here by what encoding takes beyond it. ``encoded``: frames this pump made already,
        shared."""
        self._skipped_note(c)
        # Encoded a frame's worth at a time, and only while the client's buffer is within its
        # limit: the estimate that admitted these records (EST_RECORD_JSON) is wrong for long
        # names, and 150 k records with 4 KB names would be a GB of JSON. The rest is skipped
        # and counted like any record a slow client misses.
        # The budget is checked the same way: encoding may exceed the estimate that charged
        # these records, so what no longer fits is skipped and counted (memory refused "stream").
        limit = self.host.settings.stream_buffer_bytes
        skipped = 0
        out = c.out
        for src, ts, recs in c.stream_pending:
            nj = None
            n = len(recs)
            for i in range(0, n, FRAME_RECORDS):
                if self._full(out, limit, room):
                    skipped += n - i
                    break
                k = min(FRAME_RECORDS, n - i)
                hit = encoded.get((id(recs), i))
                if hit is not None and hit[0] is recs:  # the array is kept alive in `encoded`: ids stay unique
                    frames = hit[1]
                else:
                    if nj is None:
                        nj = NameJson(src.names, src.names_json)
                    frames = encode_frames(recs if k == n else recs[i:i + k], ts, self._head(src), nj,
                                           Kind.STREAM_RECORDS)
                    encoded[(id(recs), i)] = (recs, frames)
                out += frames
                c.stream_sent += k
                extra = len(frames) - k * EST_RECORD_JSON  # beyond the charged estimate
                room[0] -= extra
                room[1] -= extra
        self._pumped(c, skipped)

    def _full(self, out: OutQueue, limit: int, room: list[int]) -> bool:
        """Whether a STREAM client can take no more frames in this pump: its buffer is past
        its ``stream_buffer`` (a slow client), or the turn's ``room`` is spent (memory
        refused "stream"); the caller skips and counts the rest."""
        if len(out) > limit:
            return True
        if room[0] < 0 or room[1] < 0:
            self.memory.refuse("stream")
            return True
        return False

    def _pumped(self, c: Conn, skipped: int) -> None:
        """A pump's end, either format: the pending batches are gone (queued, or ``skipped``
        and counted for the client's next STREAM_SKIPPED and the daemon's total)."""
        c.stream_pending.clear()
        c.stream_pending_n = 0
        if skipped:
            c.stream_skipped += skipped
            c.stream_skipped_all += skipped
            self.counters.stream_skipped_total += skipped
        self.outbox.send(c)

    def _skipped_note(self, c: Conn) -> None:
        if c.stream_skipped:
            # before the records that follow the gap
            c.out += encode_json(Kind.STREAM_SKIPPED, {"skipped": c.stream_skipped})
            c.stream_skipped = 0

    def _pump_binary(self, c: Conn, room: list[int]) -> None:
        """A binary STREAM client's pending batches, as :meth:`_pump_stream` does JSON: each
        batch after its source's definition and new names, as the records' own bytes (a batch
        the client takes whole is the agent's batch itself, queued without a copy). The
        buffer limit and the budget are checked per frame, the rest skipped and counted."""
        self._skipped_note(c)
        limit = self.host.settings.stream_buffer_bytes
        skipped = 0
        out = c.out
        sources = c.stream_sources
        size = EST_RECORD_BIN
        for src, ts, recs in c.stream_pending:
            n = len(recs)
            before = len(out)
            sent = sources.get(src)
            for i in range(0, n, MAX_BATCH_RECORDS):
                if self._full(out, limit, room):
                    skipped += n - i
                    break
                if sent is None:
                    if not src.stream_source:
                        # a u32 on the wire: after 2**32 - 1 agent connections it starts at 1 again
                        # (those ended long before: an id is unique among the sources a client holds)
                        self._sources = self._sources % 0xFFFFFFFF + 1
                        src.stream_source = self._sources
                    out += source_frame(src.stream_source, src.host, src.pid or 0, src.service)
                    sent = sources[src] = 0
                if len(src.names_order) > sent:
                    # the names defined since the last batch: before the records that use them
                    for frame in names_frames(src.stream_source, src.names_order[sent:]):
                        out += frame
                    sent = sources[src] = len(src.names_order)
                part = recs if n <= MAX_BATCH_RECORDS else recs[i:i + MAX_BATCH_RECORDS]
                out += batch_prefix(src.stream_source, ts, len(part))
                base = part.base
                # the agent's batch as ingest kept it (np.frombuffer over its bytes): queued
                # as it is; a selection or a slice is a copy of its records
                out += base if type(base) is bytes and len(base) == part.nbytes else part.tobytes()
                c.stream_sent += len(part)
            extra = len(out) - before - n * size  # beyond the charged estimate (names, heads)
            room[0] -= extra
            room[1] -= extra
        self._pumped(c, skipped)

    # ---- EXPORT -------------------------------------------------------------------------
    def start_export(self, conn: Conn, since: float | None, until: float | None, flt: Filter) -> None:
        conn.export = self._export(since, until, flt)
        if not conn.closed:
            self._exports[conn] = None

    @property
    def exports_running(self) -> bool:
        """An EXPORT is under way (the loop's exports step has work)."""
        return bool(self._exports)

    @property
    def exporting(self) -> bool:
        """An EXPORT could produce more now (the loop then does not sleep)."""
        return any(c.export is not None and len(c.out) < EXPORT_OUT_LOW for c in self._exports)

    def pump_exports(self) -> None:
        deadline = time.monotonic() + EXPORT_SLICE_S
        for c in list(self._exports):
            if c.export is None or c.closed:
                self._exports.pop(c, None)
                continue
            try:
                while c.export is not None and not c.closed and len(c.out) < EXPORT_OUT_LOW:
                    frames = next(c.export, None)
                    if frames is None:
                        c.export = None
                        break
                    c.out += frames
                    if time.monotonic() > deadline:
                        break
            except Exception as exc:
                c.export = None
                self._exports.pop(c, None)
                self.outbox.internal_error(c, "EXPORT", exc)
                continue
            if c.export is None:
                self._exports.pop(c, None)
            if c.out and not c.closed:
                self.outbox.send(c)

    def _export(self, since: float | None, until: float | None, flt: Filter) -> Iterator[bytes]:
        """The EXPORT_RECORDS frames (whole frames, up to FRAME_RECORDS records a step), then
        END, with ``lost``: the storage loss periods of the window and senders, if any. A
        stored chunk the filter leaves out is a step too (an empty ``bytes``): one step reads
        at most one chunk."""
        count = 0
        matchers: dict[int, tuple[dict, NameMatcher]] = {}
        storage = self.host.storage
        assert storage is not None
        for chunk in storage.read(since, until):
            meta = chunk.meta
            host, pid, service = meta.get("host", ""), int(meta.get("pid", 0)), meta.get("service")
            if not flt.source_matches(host, pid, service):
                # a step of its own (nothing to send): the pump's slice can end between two
                # chunks, or an EXPORT of one service read the whole store (512 MiB of other
                # senders' chunks: 143 ms of the loop in one step, issue 19) before its first frame
                yield b""
                continue
            ent = matchers.get(id(chunk.names))
            if ent is None or ent[0] is not chunk.names:
                ent = matchers[id(chunk.names)] = (chunk.names, NameMatcher())
            m = flt.mask(chunk.records, ent[1], chunk.names)
            recs, ts = (chunk.records, chunk.ts) if m is None else (chunk.records[m], chunk.ts[m])
            if not len(recs):
                yield b""
                continue
            nj = NameJson(chunk.names)
            head = identity_head(host, pid, service)
            for i in range(0, len(recs), FRAME_RECORDS):  # encode lazily: a step per pump turn
                part = recs[i:i + FRAME_RECORDS]
                count += len(part)
                yield encode_frames(part, ts[i:i + FRAME_RECORDS], head, nj, Kind.EXPORT_RECORDS)
        # records of this window the storage failed to write (a full disk): the export says
        # so instead of looking complete (or empty)
        lost = storage.losses.overlapping(since, until, flt.source_matches)
        yield encode_json(Kind.END, {"records": count, "skipped": 0, **({"lost": lost} if lost else {})})

    # ---- stop ---------------------------------------------------------------------------
    def end_all(self) -> None:
        """The daemon stops: END to every STREAM client (the stream is over, not broken),
        ERROR to every unfinished EXPORT (it is incomplete); best effort, never blocking."""
        self.pump_streams()
        for c in list(self.outbox.conns.values()):
            if c.closed:
                continue
            if c.stream is not None:
                c.out += encode_json(Kind.END, {"records": c.stream_sent, "skipped": c.stream_skipped_all})
            elif c.export is not None:
                c.export = None
                self._exports.pop(c, None)
                c.out += encode_json(Kind.ERROR, {"message": "the daemon is stopping; the export is incomplete"})
            else:
                continue
            try:
                c.sock.send(bytes(c.out))
            except OSError:
                pass
            c.out.clear()
