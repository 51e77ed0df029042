"""The daemon's connections at the socket level: accept, receive (frames out of each
connection's :class:`aclprof.protocol.wire.FrameReader`; an agent's large frames read whole,
each payload into a ``bytes`` of its own: :meth:`Transport._read_whole`), non-blocking send
with an outgoing buffer, protocol-error handling (ERROR, then close this connection only) and
close.

:class:`Transport` knows sockets and frames, not what frames mean: the daemon
(:class:`aclprofd.server.Daemon`) owns one and gives it three callables: what to do with a
frame (HELLO, then the dispatch table of the connection's role), with a closed connection,
and with one closed for a protocol error. It is the :class:`Outbox` the daemon's parts
answer clients through; its :meth:`Transport.queue` minds the memory budget
(:class:`aclprofd.memory.Memory`, which it owns). Kept apart so that the I/O rules (read
budgets, HELLO limits, never blocking on a client) are in one place and the event loop
reads as a loop.

The connection limits per role are :class:`aclprofd.connlimits.ConnLimits` (:attr:`Transport.limits`).
When accept() fails (EMFILE, ENFILE, ...) the
listener is left alone for a growing pause (50 ms to 1 s) instead of being retried in a
busy loop, and the failure is logged rate-limited.

No exception from one connection's frame, request or reply leaves the loop: it closes that
connection (:meth:`Transport.internal_error`), counted in ``internal_errors`` and logged
rate-limited.
"""

from __future__ import annotations

import array
import fcntl
import math
import os
import selectors
import socket
import sys
import termios
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import structlog

from aclprof.protocol.wire import HEADER, Kind, ProtocolError, encode_json

from .conn import Conn
from .connlimits import ConnLimits
from .memory import UNREAD_REPLIES, Memory
from .ratelimit import LogLimiter
from .replyfit import cut_text

__all__ = ["Transport", "Outbox", "LogLimiter", "goodbye_frame"]

_log = structlog.get_logger("aclprofd")

_RECV = 1 << 20                 # bytes per recv() at most
READ_BUDGET = 8 << 20           # bytes read from one connection before serving the others
#: One connection's slice of a loop turn: at most this many frames and this long handling
#: them, then the others' turn (its frames left wait in :attr:`Transport.pending`). One
#: agent's 10,050 WATCH + BATCH pairs (2 MB, under READ_BUDGET) at ~1 ms each were one
#: 13.7 s turn (issue 19). A good agent's BATCH of ~2048 records takes well under SLICE_S.
FRAMES_PER_TURN = 64
SLICE_S = 0.005
_HELLO_MAX = 64 << 10           # bytes buffered before HELLO
#: an agent frame at least this large, queued whole in the socket, is read header first and
#: then its payload into a bytes object of its own (:meth:`Transport._read_whole`)
WHOLE_MIN = 64 << 10
_ACCEPT_PAUSE_MIN = 0.05        # after a failed accept(), leave the listener alone this long ...
_ACCEPT_PAUSE_MAX = 1.0         # ... doubling up to this


class Outbox(Protocol):
    """What the daemon's parts use of the transport to answer clients (a :class:`Transport`,
    whose :meth:`queue` minds the memory budget): the open connections, queueing and sending
    frames, closing a connection after a bug, and the rate-limited log of peer-caused events."""

    @property
    def conns(self) -> Mapping[int, Conn]: ...
    @property
    def limiter(self) -> LogLimiter: ...
    def queue(self, conn: Conn, frame: bytes) -> None: ...
    def send(self, conn: Conn) -> None: ...
    def internal_error(self, conn: Conn, where: str, exc: BaseException) -> None: ...


def goodbye_frame(conn: Conn) -> bytes:
    """GOODBYE to an agent (daemon/PROTOCOL.md): how many records and LOSS-reported drops
    this connection delivered; the agent counts what it wrote beyond that as lost."""
    return encode_json(Kind.GOODBYE, {"records": conn.records, "dropped": conn.dropped})


#: what the transport does with a frame: ``(conn, kind, payload)``; raises ProtocolError
#: what to do with one frame; a handler whose work is cut into steps returns them (an
#: iterator run a slice's worth per loop turn before the connection's next frame: Conn.work)
FrameHandler = Callable[[Conn, Kind, memoryview], Iterator[None] | None]


class Transport:
    """Connections by file descriptor, one selector; ``handle`` handles the frames.

    ``on_close(conn)``: ``conn`` was just closed (its socket is gone). ``on_protocol_error(conn)``:
    ``conn`` is being closed for breaking the protocol. ``memory`` (shares the connection
    table: :attr:`conns`) is the budget :meth:`queue` minds. ``max_control``,
    ``control_idle_s``, ``agent_idle_s`` and ``max_agents_per_uid`` are the limits per role
    (:attr:`limits`; a reload may change them)."""

    def __init__(self, handle: FrameHandler, *, on_close: Callable[[Conn], None],
                 on_protocol_error: Callable[[Conn], None], memory_budget: int, memory_refused: dict[str, int],
                 max_control: int = 64, control_idle_s: float = 60.0, agent_idle_s: float = 60.0,
                 max_agents_per_uid: int = 1024) -> None:
        self._handle, self._on_close, self._on_protocol_error = handle, on_close, on_protocol_error
        self.sel = selectors.DefaultSelector()
        self.listener: socket.socket | None = None
        self.conns: dict[int, Conn] = {}
        self.memory = Memory(self.conns, memory_budget, memory_refused)
        self._id_base = f"{time.time_ns():x}-{os.getpid()}"
        self._seq = 0
        self._accept_paused_until = 0.0  # listener unregistered until then (0: registered)
        self._accept_pause = 0.0
        self.limiter = LogLimiter()
        self.limits = ConnLimits(self.fail, self.close_conn, self.limiter, max_control=max_control,
                                 control_idle_s=control_idle_s, agent_idle_s=agent_idle_s,
                                 max_agents_per_uid=max_agents_per_uid)
        self.close_limiter = LogLimiter(burst=50)  # protocol errors: one line each, short of a flood
        self.internal_errors = 0     # connections closed for an exception while serving them
        self.accept_errors = 0
        # peers that were gone when the daemon wrote to them (EPIPE, ECONNRESET): a client
        # that closed before reading its reply (``aclprof status --timeout 0``, a Ctrl-C).
        # Not a protocol error: nothing was sent that breaks the protocol.
        self.peer_gone = 0
        # recv_into one buffer, then an exact-size copy: recv(1 MiB) allocated a fresh 1 MiB
        # object per call that glibc mmap'd and page-faulted each time (~120 us per 100-400 KB
        # read, ~14 us this way); the copy is a fresh bytes, so the frame reader's views of
        # it stay valid as long as they are referenced
        self._rbuf = bytearray(_RECV)
        self._rview = memoryview(self._rbuf)
        self._queued = array.array("i", [0])  # FIONREAD's answer (_read_whole)
        self.whole_reads = 0  # frames read by _read_whole (tests; STATUS does not show it)
        #: connections with frames received but not handled yet (their slice of a turn
        #: ended), by file descriptor, in the order they are served; while there are any
        #: the loop does not sleep in select (:meth:`serve_pending`)
        self.pending: dict[int, Conn] = {}
        self._served: set[Conn] = set()  # connections read in this loop turn
        self.slices_cut = 0  # slices that ended with frames left (STATUS loop.slices_cut)

    def open_counts(self) -> tuple[int, int, int]:
        """Connections open now: (all, control clients, not yet said HELLO). Each table
        holds open connections only, so the three agree with what is connected."""
        return (len(self.conns), *self.limits.counts())

    def accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: pause accepting, keep serving the others
                self._pause_accept(exc)
                return
            self._accept_pause = 0.0
            if not self.limits.room_for_one_more(len(self.conns)):
                sock.close()
                continue
            sock.setblocking(False)
            self._seq += 1
            conn = Conn(sock, f"{self._id_base}-{self._seq}")
            self.conns[sock.fileno()] = conn
            self.limits.connected(conn)
            self.sel.register(sock, selectors.EVENT_READ, conn)

    def _pause_accept(self, exc: OSError) -> None:
        """accept() failed: the listener stays readable, so retrying at once would spin at
        100 % CPU (and log each time) until a descriptor frees up. Unregister it for a pause
        that doubles while the failures go on."""
        self.accept_errors += 1
        self._accept_pause = min(_ACCEPT_PAUSE_MAX, max(_ACCEPT_PAUSE_MIN, 2 * self._accept_pause))
        self._accept_paused_until = time.monotonic() + self._accept_pause
        if self.listener is not None:
            try:
                self.sel.unregister(self.listener)
            except (KeyError, ValueError):
                pass
        self.limiter.log("error", "accept failed; pausing accepts", error=str(exc), pause_s=self._accept_pause,
                         connections=len(self.conns))

    def replace_listener(self, new: socket.socket) -> None:
        """Listen on ``new`` instead of the current listener (closed). During an accept pause
        the listener is out of the selector: ``new`` stays out too, and :meth:`accept_timeout`
        registers it when the pause ends (never twice, never unregistering what is not there)."""
        old = self.listener
        if old is not None:
            if not self._accept_paused_until:
                self.sel.unregister(old)
            old.close()
        self.listener = new
        if not self._accept_paused_until:
            self.sel.register(new, selectors.EVENT_READ, "listen")

    def accept_timeout(self, timeout: float) -> float:
        """Before each select: listen again once an accept pause is over; ``timeout``
        shortened so that the pause ends on time."""
        until = self._accept_paused_until
        if not until:
            return timeout
        now = time.monotonic()
        if now < until:
            return min(timeout, until - now)
        self._accept_paused_until = 0.0
        if self.listener is not None:
            self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        return timeout

    def internal_error(self, conn: Conn, where: str, exc: BaseException) -> None:
        """An exception while serving ``conn`` outside a frame handler (STREAM/EXPORT
        pumps): close that connection, count it, log it rate-limited."""
        self.internal_errors += 1
        self.limiter.log("error", "internal error serving a connection; closing it", where=where,
                         pid=conn.pid, error=f"{type(exc).__name__}: {exc}")
        if not conn.closed:
            self.fail(conn, f"internal error in {where}: {type(exc).__name__}", quiet=True, protocol_error=False)

    def read(self, conn: Conn) -> None:
        """The selector says ``conn`` is readable (or it has frames left from an earlier turn)."""
        self._served.add(conn)
        self.receive(conn, budget=READ_BUDGET)

    def serve_pending(self) -> None:
        """Give every connection with frames left from an earlier turn (:attr:`pending`),
        and not read in this turn, its slice now: the selector does not wake for bytes
        already out of the socket. Then start a new turn."""
        for conn in [c for c in self.pending.values() if c not in self._served]:
            if not conn.closed:
                self.read(conn)
        self._served.clear()

    def receive(self, conn: Conn, budget: int | None, deadline: float | None = None) -> None:
        """Handle the frames left from an earlier turn, then receive and handle until EAGAIN,
        EOF, a closed connection, ``budget`` bytes (so one busy agent cannot starve the others;
        None: no limit) or ``deadline``. With a ``budget``, this connection's slice of the loop
        turn also ends after ``FRAMES_PER_TURN`` frames or ``SLICE_S`` of handling, or after a
        frame whose handler asked for it (a large ``NAMES``): its other frames wait in
        :attr:`pending` for the next turn (many small frames at ~1 ms each, all under the read
        budget, held every client 13.7 s in one turn)."""
        sliced = budget is not None
        end = time.monotonic() + SLICE_S if sliced else math.inf
        frames: int | None = FRAMES_PER_TURN if sliced else sys.maxsize
        if conn.frames is not None:
            frames = self._feed(conn, None, FRAMES_PER_TURN if sliced else sys.maxsize, end)
            if frames is None or conn.frames is not None:
                return
        while not conn.closed and (budget is None or budget > 0) and (
                deadline is None or time.monotonic() < deadline):
            try:
                # an agent's large frames (its BATCH: ~280 KB at 100 k ops/s): the payload in
                # an object of its own, shared by the handler, storage and STREAM clients
                got = self._read_whole(conn) if conn.role == "agent" and not conn.reader.buffered else None
                if isinstance(got, tuple):
                    kind, payload, queued = got
                    n = HEADER.size + len(payload)
                    if budget is not None:
                        budget -= n
                    conn.frames, conn.frames_bytes = iter(((kind, memoryview(payload)),)), n
                    assert frames is not None
                    frames = self._feed(conn, None, frames, end)
                    if frames is None or conn.frames is not None or (sliced and queued == n):
                        return  # closed, the slice is over, or the socket is empty (as below)
                    continue
                n = len(got) if got is not None else conn.sock.recv_into(self._rbuf)
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionResetError:  # the peer closed with our replies unread in its socket
                self.peer_gone += 1
                self.close_conn(conn, "peer left before reading its replies", level="info")
                return
            except OSError as exc:
                self.close_conn(conn, f"receive failed: {exc}", level="info")
                return
            if not n:
                self.close_conn(conn, None)
                return
            data = got if got is not None else bytes(self._rview[:n])
            if budget is not None:
                budget -= n
            assert frames is not None
            frames = self._feed(conn, data, frames, end)
            if frames is None or conn.frames is not None:
                return
            if sliced and n < _RECV:
                # a short read emptied the socket: asking again would only raise EAGAIN (a
                # syscall and an exception per frame); the selector (level-triggered) says
                # when more comes. The stop's drain (no budget) still reads until EAGAIN.
                return

    def _read_whole(self, conn: Conn) -> tuple[Kind, bytes, int] | bytes | None:
        """An agent frame of at least :data:`WHOLE_MIN` bytes that is queued whole in the
        socket: read its header, then its payload with a ``recv`` of exactly its length, so
        the payload lands in a ``bytes`` of its own: ``(kind, payload, bytes queued before)``.
        Otherwise None and nothing read (the header is only peeked): the caller's
        ``recv_into`` takes the bytes, and the frame reader finds any error in them. Bytes
        read that are not a whole frame after all (a short ``recv``, not expected from a
        stream socket whose queued bytes were counted first) are returned for the frame
        reader, which holds them until the rest comes.

        Why: read into the loop's buffer, a frame was copied out of it into a ``bytes``, and
        its records copied once more for storage and the STREAM clients (``Ingest._keep``):
        two copies of ~280 KB per agent frame at 100 k ops/s, ~30 us each after the loop
        slept (issue 21). Costs an ``ioctl`` per read of an agent connection, and a peek when
        64 KiB or more are queued."""
        sock = conn.sock
        try:
            fcntl.ioctl(sock.fileno(), termios.FIONREAD, self._queued)
        except (OSError, ValueError):  # not a socket that answers it: the plain read
            return None
        queued = self._queued[0]
        if queued < WHOLE_MIN:
            return None
        head = self._rview[:HEADER.size]
        if sock.recv_into(head, HEADER.size, socket.MSG_PEEK) != HEADER.size:
            return None
        try:
            kind, length = conn.reader.check_header(head, 0)
        except ProtocolError:
            return None  # the plain read meets it and closes the connection
        if kind is None or length < WHOLE_MIN or HEADER.size + length > queued:
            return None
        sock.recv_into(head, HEADER.size)
        payload = sock.recv(length)
        if len(payload) != length:
            return bytes(head) + payload
        self.whole_reads += 1
        return kind, payload, queued

    def _feed(self, conn: Conn, data: bytes | None, frames: int, end: float) -> int | None:
        """Handle the frames ``data`` completes (None: resume the frames left in
        :attr:`Conn.frames`) until ``frames`` more frames or the ``end`` of the slice
        (monotonic); past it the rest stays in ``conn.frames`` and the connection in
        :attr:`pending`. Returns the frames left to this slice, None once the connection is
        closed."""
        handled = False
        it = conn.frames
        if it is None:
            assert data is not None
            it = conn.reader.feed(data)
            conn.frames_bytes = len(data)  # held while frames of it wait (Conn.held)
        conn.frames = None
        self.pending.pop(conn.sock.fileno(), None)
        try:
            more = True  # this slice may take another frame
            if conn.work is not None:  # a frame begun in an earlier turn
                if not self._steps(conn, end):
                    return None if conn.closed else self._cut(conn, it, frames)
                handled = True
                frames -= 1
                if frames <= 0 or conn.yield_read or time.monotonic() >= end:
                    self._cut(conn, it, frames)  # that frame ended this slice
                    more = False
            for kind, payload in it if more else ():
                conn.work = self._handle(conn, kind, payload)
                if conn.work is not None and not conn.closed and not self._steps(conn, end):
                    return None if conn.closed else self._cut(conn, it, frames)  # its other steps next turn
                if conn.closed:
                    return None
                handled = True
                frames -= 1
                if frames <= 0 or conn.yield_read or time.monotonic() >= end:
                    # this connection's slice is over: the rest of its frames next turn
                    self._cut(conn, it, frames)
                    break
        except ProtocolError as exc:
            self.fail(conn, str(exc))
            return None
        except Exception as exc:  # a bug must cost one connection, never the daemon
            self.internal_errors += 1
            if self.limiter.allow("internal error handling a frame") is not None:
                _log.exception("internal error handling a frame", pid=conn.pid)
            self.fail(conn, f"internal error: {type(exc).__name__}", protocol_error=False)
            return None
        if conn.frames is None:
            conn.frames_bytes = 0
        if conn.role is None and conn.reader.buffered > _HELLO_MAX:
            # an anonymous peer may not make the daemon buffer 16 MiB frames
            self.fail(conn, f"HELLO larger than {_HELLO_MAX} bytes")
            return None
        if handled:
            # a whole frame (a control request, an agent's records or heartbeat): not idle.
            # Bytes of a frame never finished do not count: a trickle cannot hold a slot.
            self.limits.requested(conn, time.monotonic())
        return frames

    def _steps(self, conn: Conn, end: float) -> bool:
        """Run the steps of ``conn``'s frame in hand (:attr:`Conn.work`) until they are done
        (True) or the slice's ``end`` (monotonic) has come (False: the rest next turn)."""
        work = conn.work
        assert work is not None
        for _ in work:
            if conn.closed:
                return False
            if time.monotonic() >= end:
                return False
        conn.work = None
        return True

    def _cut(self, conn: Conn, it: Iterator[tuple[Kind, memoryview]], frames: int) -> int:
        """End ``conn``'s slice: its frames left (and the steps of the one in hand, if any)
        wait in :attr:`pending` for the next turn."""
        conn.yield_read = False
        conn.frames = it
        self.pending[conn.sock.fileno()] = conn
        self.slices_cut += 1
        return frames

    def send(self, conn: Conn) -> None:
        """Send what the socket takes now; watch for writability while more is queued. Once
        all is sent, the client has read its replies (:meth:`queue`)."""
        self._send(conn)
        if not conn.out:
            conn.unread_replies = 0

    def _send(self, conn: Conn) -> None:
        if conn.out:
            try:
                conn.out.send(conn.sock)
            except (BlockingIOError, InterruptedError):
                pass
            except (BrokenPipeError, ConnectionResetError):
                # the peer closed before reading what we owe it: it is gone, nothing more
                self.peer_gone += 1
                self.close_conn(conn, "peer left before reading its replies", level="info")
                return
            except OSError as exc:
                self.close_conn(conn, f"send failed: {exc}", level="info")
                return
        want = bool(conn.out)
        if want != conn.want_write:
            conn.want_write = want
            self.sel.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0), conn)

    def queue(self, conn: Conn, frame: bytes) -> None:
        """Queue a reply and send what the socket takes. A client that does not read its
        replies (any role: STREAM and EXPORT connections too) is closed once its queue passes
        its share of the memory budget, or once the budget as a whole is spent; counted."""
        if conn.out:
            # The socket is full and another reply comes: a CLI reads each reply before its
            # next request, so these bytes count as unread. Without this limit a client
            # pipelining tiny requests makes the loop compute thousands of replies per turn
            # (a stall for everyone), and its stream buffer would hide them from the cap.
            conn.unread_replies += len(frame)
        conn.out += frame
        n = len(conn.out)
        memory = self.memory
        cap = memory.reply_cap()
        if n > len(frame) and (n > cap or conn.unread_replies > UNREAD_REPLIES
                               or not memory.fits(0)):  # one reply alone always goes
            memory.refuse("replies")
            conn.out.clear()
            self.close_conn(conn, f"client does not read its replies ({n} bytes queued, {conn.unread_replies} of them "
                             f"replies; at most {UNREAD_REPLIES} bytes of unread replies and {cap} bytes in all, "
                             f"memory_budget {memory.budget} bytes)", level="warning")
            return
        self.send(conn)

    def send_last(self, conn: Conn, frames: bytes) -> None:
        """What is queued plus ``frames``, in one non-blocking send, before a close."""
        try:
            conn.sock.send(bytes(conn.out) + frames)
        except OSError:
            pass
        conn.out.clear()

    def fail(self, conn: Conn, reason: str, *, quiet: bool = False, protocol_error: bool = True) -> None:
        """Close ``conn`` with an ERROR frame (best effort) and log it with the peer's pid.
        An agent also gets GOODBYE: what it sent after the bad frame is counted as lost.
        ``protocol_error``: the peer broke the protocol (counted in ``protocol_errors``, which
        the ``AclprofdProtocolErrors`` alert watches); the limits (idle, eviction, too many)
        and the daemon's own bugs are counted where they belong instead. A connection
        already closed is left alone and counted nowhere: it is gone, nothing happened."""
        if conn.closed:
            return
        if protocol_error:
            self._on_protocol_error(conn)
        frames = encode_json(Kind.ERROR, {"message": cut_text(reason)})  # it may quote a peer's value
        if conn.role == "agent":
            frames += goodbye_frame(conn)
        self.send_last(conn, frames)
        # quiet: the caller logs (rate-limited); a flood of bad clients is not a flood of lines
        self.close_conn(conn, reason, level="warning", log=not quiet)

    def close_conn(self, conn: Conn, reason: str | None, level: str = "info", *, log: bool = True) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.limits.closed(conn)
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self.conns.pop(conn.sock.fileno(), None)
        self.pending.pop(conn.sock.fileno(), None)
        conn.frames, conn.frames_bytes, conn.work = None, 0, None
        conn.sock.close()
        self._on_close(conn)
        if log and (conn.role is not None or reason):
            kw = dict(reason=reason or "peer closed", role=conn.role, pid=conn.pid, service=conn.service,
                      records=conn.records if conn.role == "agent" else None)
            if level == "warning":
                self.close_limiter.log(level, "connection closed", **kw)
            else:
                getattr(_log, level)("connection closed", **kw)
