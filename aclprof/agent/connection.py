"""The agent's connection to the daemon: handshake, non-blocking writes, what the daemon
says back (ERROR, GOODBYE), and the accounting of what each connection carried.

One :class:`Connection` object lives as long as the agent and holds at most one socket
at a time; ``gen`` counts the sockets (a WATCH and the name ids are per socket). It is
used by the sender thread only (``stats()`` reads its counters without a lock: each is
one int, written by one thread).
"""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Callable
from typing import Any

from aclprof._log import get_logger
from aclprof.agent.buffer import RecordBuffer
from aclprof.agent.frames import FrameBuffer
from aclprof.agent.names import NameMap
from aclprof.agent.watched import Watched
from aclprof.binding.agentpath import PUMP_ERROR, Pump, PumpResult
from aclprof.protocol import wire

__all__ = ["Connection"]

_log = get_logger("aclprof.agent")
#: the kernel send buffer asked for on the daemon's socket (Linux gives twice what is asked,
#: at most twice ``net.core.wmem_max``): a frame of the sender's interval at 100 k ops/s
#: (~280 KB at 50 ms) then reaches the daemon whole. In the default ~208 KiB it went in
#: pieces, and the daemon was woken for each: two loop turns a frame (issue 21: 206 turns
#: in 5 s for 98 frames, 109 with this; the daemon's CPU 23.2 -> 20.6 ms/s)
SEND_BUFFER = 1 << 20


class _Refused(OSError):
    """The daemon answered HELLO with ERROR (a limit: too many agents for this uid, ...)."""


def _version() -> str:
    from aclprof.protocol.version import __version__

    return __version__


class Connection:
    """The socket to the daemon (``sock``, None while disconnected) and the frames
    waiting for it (``out``)."""

    def __init__(self, socket_path: str, buffer: RecordBuffer, *, service: str | None,
                 labels: dict[str, str], connect_timeout: float):
        self.socket_path = socket_path
        self.buffer = buffer
        self.service = service
        self.labels = labels
        self.connect_timeout = connect_timeout
        self.sock: socket.socket | None = None
        self.gen = 0
        self.daemon_protocol = 1  # the WELCOME's "protocol" of the current connection
        self.names = NameMap()
        self.out = FrameBuffer(wire.HEADER.size + (1 << 15) * wire.RECORD_DTYPE.itemsize + (1 << 16))
        # totals over every connection
        self.records_sent = 0
        self.loss_reported = 0
        self.frames_sent = 0
        self.bytes_sent = 0
        self.connections = 0
        self.connect_failures = 0
        self.goodbyes = 0
        self.last_error = ""  # why the last connection attempt failed (for the warnings)
        self.last_denied = False  # ... and whether it was EACCES/EPERM (a missing group, not a stopped daemon)
        self.last_refused = False  # ... or the daemon's ERROR to HELLO (one of its limits: it says which)
        #: TRACE_START handler (aclprof.agent.trace.Tracer.on_start; cheap, never blocks)
        self.on_trace_start: Callable[[dict[str, Any]], None] | None = None
        # What whole chunks of frames carried on the current connection: a GOODBYE
        # compares them (plus the chunk in flight) to what the daemon read.
        self._conn_records = 0
        self._conn_loss = 0
        self._in_reader: Any = None   # frames from the daemon (WELCOME, ERROR, GOODBYE)
        self._in_pending: list[Any] = []
        self._goodbye_seen = False
        #: the daemon said a STREAM client watches (LIVE): the sender sends more often
        self.live = False

    # -- connect / disconnect ----------------------------------------------------------------
    def connect(self) -> bool:
        """One attempt: connect, HELLO, wait for WELCOME (blocking, ``connect_timeout``)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(self.connect_timeout)
            sock.connect(self.socket_path)
            hello = {"role": "agent", "version": _version(), "pid": os.getpid(),
                     "host": socket.gethostname(), "service": self.service, "labels": self.labels}
            sock.sendall(wire.encode_json(wire.Kind.HELLO, hello))
            reader, pending = wire.FrameReader(ignore_unknown=True), []  # type: ignore[var-annotated]
            frame = wire.recv_frame(sock, reader, pending)
            if frame is None:
                raise OSError("the daemon closed the connection during the handshake")
            kind, payload = frame
            if kind == wire.Kind.ERROR:
                raise _Refused(f"the daemon refused: {wire.decode_json(payload).get('message')}")
            if kind != wire.Kind.WELCOME:
                raise OSError(f"unexpected {kind.name} during the handshake")
            sock.setblocking(False)
            wire.widen_send_buffer(sock, SEND_BUFFER)
        except (OSError, wire.ProtocolError) as exc:
            sock.close()
            self.connect_failures += 1
            self.last_error = str(exc)
            self.last_denied = isinstance(exc, PermissionError)
            self.last_refused = isinstance(exc, _Refused)
            if self.connect_failures == 1 or self.connect_failures % 100 == 0:
                _log.info("aclprof daemon not reachable; buffering", socket=self.socket_path,
                          error=str(exc), failures=self.connect_failures)
            return False
        self.sock = sock
        try:  # what this daemon understands: OP_FAILURE needs protocol 3 (daemon/PROTOCOL.md)
            protocol = wire.decode_json(payload).get("protocol")
        except wire.ProtocolError:
            protocol = None
        self.daemon_protocol = protocol if isinstance(protocol, int) and not isinstance(protocol, bool) else 1
        self.gen += 1
        self.connections += 1
        self.names.reset(self.gen)
        # the handshake's reader may hold what followed WELCOME (a GOODBYE at once)
        self._in_reader, self._in_pending = reader, pending
        self._conn_records = self._conn_loss = 0
        self._goodbye_seen = False
        self.live = False  # until this daemon says otherwise (LIVE may follow WELCOME at once)
        for kind, payload in pending:
            if kind == wire.Kind.LIVE:
                try:
                    self.live = wire.decode_json(payload).get("live") is True
                except wire.ProtocolError:
                    pass
        _log.info("connected to the aclprof daemon", socket=self.socket_path,
                  connection=self.connections)
        return True

    def disconnect(self, reason: str) -> None:
        """Close the socket; the records of a frame not fully written are lost (counted)."""
        if self.sock is None:
            return
        if not self._goodbye_seen:
            # A send failed or the peer hung up: a stopping daemon sent GOODBYE before
            # closing, and it is still queued on our side. Read it to count exactly.
            self.receive()
        sock, self.sock = self.sock, None
        try:
            sock.close()
        except OSError:
            pass
        if self.out.records:
            with self.buffer.lock:
                self.buffer.dropped += self.out.records
        self.out.clear()
        _log.info("lost the aclprof daemon connection; buffering", reason=reason)

    def close(self) -> None:
        """At the agent's exit: half-close (the daemon reads to EOF), then close."""
        if self.sock is None:
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.sock.close()
        self.sock = None

    # -- frames out ------------------------------------------------------------------------
    def queue_json(self, kind: wire.Kind, obj: Any, loss: int = 0) -> None:
        self.out.append(wire.encode_json(kind, obj), loss=loss)

    def announce(self, w: Watched) -> None:
        """Queue WATCH for ``w`` on this connection (without ``device`` while it is unknown:
        a daemon that predates that rule reads a missing device as 0, as before)."""
        obj: dict[str, Any] = {"model_id": w.model_id, "labels": w.labels}
        if w.device is not None:
            obj["device"] = w.device
        self.queue_json(wire.Kind.WATCH, obj)
        w.announced = self.gen

    def send_loss(self) -> bool:
        """Queue and write a LOSS frame if anything was lost since the last one; False if
        the connection broke."""
        lost = self.buffer.lost_total() - self.loss_reported - self.out.loss
        if lost <= 0 or self.sock is None:
            return self.sock is not None
        self.queue_json(wire.Kind.LOSS, {"dropped": lost, "reason": self._loss_reason()}, loss=lost)
        return self.flush()

    def _loss_reason(self) -> str:
        b = self.buffer
        with b.lock:
            parts = []
            if b.totals()[1]:  # the C queue's drops too (agent mode)
                parts.append("agent buffer full or daemon unreachable")
            if b.dropped_subscription:
                parts.append("subscription drops")
            if b.dropped_unread:
                parts.append("daemon stopped before reading them")
        return "; ".join(parts) or "unknown"

    def flush(self) -> bool:
        """Write as much of the pending bytes as the socket takes now (never blocks);
        False if the connection broke. A chunk of frames counts as sent once all of it
        is written."""
        sock = self.sock
        if sock is None:
            return False
        out = self.out
        if not out:
            return True
        sent_total = 0
        try:
            while out:
                n = sock.send(out.pending(), socket.MSG_NOSIGNAL)
                if n <= 0:
                    break
                out.consume(n)
                sent_total += n
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            self.disconnect(f"send failed: {exc}")
            return False
        self.bytes_sent += sent_total
        if not out:
            self._chunk_sent(out.records, out.loss, out.frames)
            out.clear()
        return True

    def _chunk_sent(self, records: int, loss: int, frames: int) -> None:
        """Whole chunks of frames carrying these were written (a GOODBYE compares them)."""
        self.records_sent += records
        self.loss_reported += loss
        self._conn_records += records
        self._conn_loss += loss
        self.frames_sent += frames

    def pump(self, pump: Pump, *, py_fd: int, coalesce_s: float, wake_rows: int, until: float,
             max_rows: int, max_devices: int) -> PumpResult:
        """Agent mode: run the sender's C loop (:class:`~aclprof.binding.agentpath.Pump`) on
        this connection until Python is needed, and take in what it did: the buffer's pending
        bytes, what the whole chunks it wrote carried (as :meth:`flush` counts them), and a
        failed send (the connection is closed). The caller handles the result's code."""
        sock = self.sock
        if sock is None:
            raise RuntimeError("Connection.pump: not connected")
        out = self.out
        out.end_batch()
        r = pump.run(out.buf, (out.start, out.end, out.records, out.loss, out.frames), sock=sock.fileno(),
                     py_fd=py_fd, gen=self.gen, coalesce_s=coalesce_s, wake_rows=wake_rows, until=until,
                     max_rows=max_rows, max_devices=max_devices)
        out.start, out.end, out.records, out.loss, out.frames = r.start, r.end, r.records, r.loss, r.frames
        with self.buffer.lock:  # agent.stats() adds the pump's live counters to these under it
            self.bytes_sent += r.sent_bytes
            self._chunk_sent(r.sent_records, r.sent_loss, r.sent_frames)
            pump.clear_sent()
        if r.code == PUMP_ERROR:
            self.disconnect(f"send failed: {os.strerror(r.err)}")
        return r

    def wait_writable(self, wake_fd: int) -> None:
        """Wait (at most 50 ms, or until ``wake_fd`` is readable) for room, then write."""
        sock = self.sock
        if sock is None:
            return
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        poller.register(wake_fd, select.POLLIN)
        for fd, ev in poller.poll(50):
            if fd == wake_fd:
                # consumed here, or every later poll returns at once: a busy loop for as
                # long as the daemon does not read (the sender's loop rechecks its state)
                self.buffer.drain_wake()
            elif ev & (select.POLLERR | select.POLLHUP):
                self.disconnect("the daemon closed the connection")
                return
        self.flush()

    # -- frames in -------------------------------------------------------------------------
    def check_incoming(self) -> None:
        """The socket is readable: the daemon said something (ERROR, GOODBYE) or closed."""
        if self.sock is None:
            return
        ended = self.receive()
        if ended:
            self.disconnect(ended)

    def receive(self) -> str | None:
        """Read and handle what the daemon sent, without blocking. Returns why the
        connection is over (GOODBYE, EOF, an error), or None while it lasts."""
        sock = self.sock
        if sock is None:
            return "not connected"
        frames, self._in_pending = self._in_pending, []
        ended = None
        while ended is None:
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                ended = f"receive failed: {exc}"  # ECONNRESET comes after the queued data
                break
            if not data:
                ended = "the daemon closed the connection"
                break
            try:
                frames += self._in_reader.feed(data)
            except wire.ProtocolError as exc:
                ended = f"bad frame from the daemon: {exc}"
        for kind, payload in frames:
            try:
                obj = wire.decode_json(payload)
            except wire.ProtocolError:
                continue
            if kind == wire.Kind.ERROR:
                _log.warning("the daemon reported an error", message=obj.get("message"))
            elif kind == wire.Kind.TRACE_START and self.on_trace_start is not None:
                self.on_trace_start(obj)  # aclprof trace: the session runs on its own thread
            elif kind == wire.Kind.GOODBYE and not self._goodbye_seen:
                self._goodbye(obj)
                ended = "the daemon is stopping (GOODBYE)"
            elif kind == wire.Kind.LIVE:
                self.live = obj.get("live") is True
            # any other kind: ignored (added to the protocol after this agent)
        return ended

    def _goodbye(self, obj: dict[str, Any]) -> None:
        """GOODBYE: the daemon read ``records`` records and LOSS frames worth ``dropped``
        on this connection, and reads no more. What this connection carried beyond that
        (whole chunks, and the chunk being written) is lost: counted now, reported on the
        next connection. Runs before anything more is written, so the count is exact."""
        n, m = obj.get("records"), obj.get("dropped")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return  # not a GOODBYE we understand: the connection just ends
        out = self.out
        self._goodbye_seen = True
        self.goodbyes += 1
        # The chunk in flight counts as written: the daemon may have read part of it.
        written = self._conn_records + out.records
        unread = max(0, written - n)
        # records_sent counts what the daemon got: the chunk in flight joins it, minus unread
        self.records_sent += out.records - unread
        with self.buffer.lock:
            self.buffer.dropped_unread += unread
        out.records = 0
        if isinstance(m, int) and not isinstance(m, bool):
            # LOSS frames the daemon did not read are reported again (loss_pending grows)
            loss_unread = max(0, self._conn_loss + out.loss - m)
            self.loss_reported += out.loss - loss_unread
            out.loss = 0
        out.clear()
        if unread:
            _log.info("the aclprof daemon stopped before reading some records; counted as lost",
                      unread=unread)
