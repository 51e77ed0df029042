"""The in-process agent: stream the op records of this process's models to the host daemon.

    import aclprof.agent as agent
    agent.start(service="resnet50", labels={"team": "vision"})
    agent.watch(model_id)             # aclprof.subscribe(model_id) + streaming
    ...
    agent.stop()                      # flush (bounded), close subscriptions, join

It never slows or breaks the service it runs in:

- The subscription's ``batch_callback`` only appends the decoded batch to a bounded buffer
  (a lock, a deque append, a counter). When the buffer holds more than ``buffer_records``
  records the *oldest* records are dropped and counted: the newest are kept.
- One sender thread converts batches to the wire format (``aclprof.protocol.wire``), maps the
  subscription's interned name ids to connection-scoped ids (NAMES frames carry only new
  ones) and writes with non-blocking sends. A slow daemon fills the buffer, never the
  service's threads.
- With no daemon (not started yet, restarting, gone) the agent keeps the newest records
  up to the bound, counts what it drops, and reconnects with exponential backoff
  (0.1 s doubling to 5 s). Each (re)connection sends HELLO, WATCH for every live model,
  then a LOSS frame with everything lost since the last LOSS that got through, then the
  buffered batches (with the NAMES they need). Starting with no daemon is not an error.

Accounting: every record the library delivered for a watched model is either written to
the daemon's socket or counted in a LOSS frame (the subscription's own drops included), so
``records emitted = records received by the daemon + sum of LOSS.dropped``. A daemon that
stops gracefully (SIGTERM, SIGINT, a restart) first reads what its agents wrote, then sends
each a GOODBYE frame with the number of records (and of LOSS-reported drops) it received on
that connection: the agent counts what it wrote beyond that as lost (``dropped_unread``)
and reports it, with any LOSS the daemon did not read, on its next connection. Only a
daemon that *crashes* (``kill -9``) can lose records uncounted: what sat in the kernel's
socket buffer (at most one buffer, ~200 KB) plus what the daemon had not flushed to disk.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from aclprof._log import get_logger
from aclprof.protocol.paths import resolve_socket_path

__all__ = ["start", "watch", "unwatch", "stop", "stats", "running", "Agent", "AgentStats"]

_log = get_logger(__name__)



DEFAULT_BUFFER_RECORDS = 1 << 17  # ~7 MiB of OP_DTYPE records
_MAX_FRAME_RECORDS = 1 << 15      # records per BATCH frame (1.8 MiB)
_BACKOFF_MIN, _BACKOFF_MAX = 0.1, 5.0
_CHECK_DROPS_EVERY = 0.2          # s between polls of the subscriptions' own drop counters
_COALESCE_S = 0.01                # while records flow: at most this long between sends
_WAKE_RECORDS = 8192              # ... or until this many records are buffered


@dataclass(frozen=True)
class AgentStats:
    """Counters of the agent (read at any time).

    ``records_in`` counts records the subscriptions delivered to the agent; each of them
    is eventually ``records_sent``, ``dropped_buffer`` (buffer full / daemon absent /
    unsent at stop), ``dropped_unread`` (written to a connection, but the daemon's GOODBYE
    said it stopped without reading them) or still ``buffered``. ``dropped_subscription``
    is what the subscriptions themselves dropped. ``loss_reported`` is the sum of the
    ``dropped`` fields of LOSS frames written (less those a GOODBYE said were not read);
    ``loss_pending`` what no LOSS has carried yet. ``goodbyes`` counts GOODBYE frames.
    """

    socket_path: str
    connected: bool
    connections: int
    connect_failures: int
    records_in: int
    records_sent: int
    buffered: int
    dropped_buffer: int
    dropped_subscription: int
    loss_reported: int
    loss_pending: int
    frames_sent: int
    bytes_sent: int
    models: tuple[int, ...]
    dropped_unread: int = 0
    goodbyes: int = 0

    @property
    def dropped(self) -> int:
        return self.dropped_buffer + self.dropped_subscription + self.dropped_unread


class _Watched:
    """One watched model: its subscription and its name-id map on the current connection."""

    __slots__ = ("model_id", "device", "labels", "sub", "live", "announced", "name_map",
                 "map_gen", "sub_dropped_seen")

    def __init__(self, model_id: int, device: int, labels: dict[str, str]):
        self.model_id = model_id
        self.device = device
        self.labels = labels
        self.sub: Any = None
        self.live = True
        self.announced = -1   # connection generation on which WATCH was sent
        self.name_map: Any = None  # numpy uint32: subscription name id -> connection id
        self.map_gen = -1          # connection generation name_map belongs to
        self.sub_dropped_seen = 0


class Agent:
    """The agent's state and its sender thread. Use the module functions."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *,
                 service: str | None = None, labels: Mapping[str, str] | None = None,
                 buffer_records: int = DEFAULT_BUFFER_RECORDS, connect_timeout: float = 1.0,
                 backoff_max: float = _BACKOFF_MAX):
        import numpy as np  # noqa: F401  (the agent needs it; fail here, not on the thread)

        if buffer_records < 1:
            raise ValueError("buffer_records must be at least 1")
        self.socket_path = resolve_socket_path(socket_path)
        self.service = service
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self.buffer_records = int(buffer_records)
        self.connect_timeout = connect_timeout
        self.backoff_max = backoff_max

        self._lock = threading.Lock()
        self._items: collections.deque[list] = collections.deque()  # [kind, watched, data]
        self._buffered = 0
        self._watched: dict[int, _Watched] = {}
        self._sleeping = False
        self._wake_at = 1  # buffered records that wake a sleeping sender
        self._pumped = 0   # records moved by the last _pump
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

        # Counters: _records_in/_dropped_buffer/_dropped_unread under _lock; the rest
        # sender-thread only.
        self._records_in = 0
        self._dropped_buffer = 0
        self._dropped_unread = 0
        self._goodbyes = 0
        self._dropped_subscription = 0
        self._records_sent = 0
        self._loss_reported = 0
        self._frames_sent = 0
        self._bytes_sent = 0
        self._connections = 0
        self._connect_failures = 0

        self._sock: socket.socket | None = None
        self._gen = 0
        self._conn_names: dict[str, int] = {}
        self._out = bytearray()       # bytes of the frame being written
        self._out_records = 0         # records inside self._out (lost if the connection dies)
        self._out_loss = 0            # LOSS.dropped inside self._out
        # What whole frames carried on the current connection: a GOODBYE compares them to
        # what the daemon read.
        self._conn_records = 0
        self._conn_loss = 0
        self._in_reader: Any = None   # frames from the daemon (WELCOME, ERROR, GOODBYE)
        self._in_pending: list = []
        self._goodbye_seen = False

        self._stopping = False
        self._flush_deadline = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aclprof-agent", daemon=True)
        self._thread.start()

    # -- service-facing API --------------------------------------------------------------------
    def watch(self, model_id: int, labels: Mapping[str, str] | None = None,
              device: int | None = None) -> None:
        from aclprof.api.subscription import resolve_device, subscribe

        model_id = int(model_id)
        device = resolve_device(device)
        w = _Watched(model_id, device, {str(k): str(v) for k, v in (labels or {}).items()})
        item = ["watch", w, None]
        # The WATCH item goes in before the subscription can deliver anything.
        with self._lock:
            if self._stopping:
                raise RuntimeError("the aclprof agent is stopping")
            if model_id in self._watched and self._watched[model_id].live:
                raise ValueError(f"model {model_id} is already watched")
            self._watched[model_id] = w
            self._items.append(item)
        try:
            w.sub = subscribe(model_id, device=device, batch_callback=lambda b, w=w: self._enqueue(w, b))
        except BaseException:
            with self._lock:
                w.live = False
                self._watched.pop(model_id, None)
                try:
                    self._items.remove(item)
                except ValueError:
                    pass
            raise
        self._wake()

    def unwatch(self, model_id: int, timeout: float = 5.0) -> None:
        with self._lock:
            w = self._watched.get(int(model_id))
            if w is None or not w.live:
                raise ValueError(f"model {model_id} is not watched")
        self._close_watched(w, timeout)
        self._wake()

    def _close_watched(self, w: _Watched, timeout: float) -> None:
        try:
            w.sub.close(timeout)  # the library flushes; the callback enqueues the rest
        except Exception as exc:
            _log.warning("closing the subscription failed", model_id=w.model_id, error=str(exc))
        with self._lock:
            w.live = False
            self._dropped_subscription += w.sub.stats.dropped - w.sub_dropped_seen
            w.sub_dropped_seen = w.sub.stats.dropped
            self._items.append(["unwatch", w, None])
            if self._watched.get(w.model_id) is w:
                del self._watched[w.model_id]

    def _enqueue(self, w: _Watched, batch: Any) -> None:
        """The subscriptions' batch_callback (reader threads): append, trim, wake. Cheap."""
        data = batch.data
        n = len(data)
        if not n:
            return
        with self._lock:
            self._records_in += n
            self._items.append(["batch", w, data, batch.names])
            self._buffered += n
            if self._buffered > self.buffer_records:
                self._trim_locked()
            if self._sleeping and self._buffered >= self._wake_at:
                self._sleeping = False
                try:
                    os.write(self._wake_w, b"x")
                except OSError:
                    pass

    def _trim_locked(self) -> None:
        """Drop the oldest buffered records until the bound holds (keeps control items)."""
        excess = self._buffered - self.buffer_records
        items = self._items
        for item in items:
            if excess <= 0:
                break
            if item[0] != "batch":
                continue
            data = item[2]
            n = len(data)
            if n == 0:
                continue
            k = min(n, excess)
            item[2] = data[k:]
            excess -= k
            self._buffered -= k
            self._dropped_buffer += k
        while items and items[0][0] == "batch" and len(items[0][2]) == 0:
            items.popleft()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # -- stats ------------------------------------------------------------------------------
    def stats(self) -> AgentStats:
        with self._lock:
            records_in, dropped_buffer, buffered = self._records_in, self._dropped_buffer, self._buffered
            dropped_unread = self._dropped_unread
            models = tuple(sorted(m for m, w in self._watched.items() if w.live))
            sub_dropped = self._dropped_subscription + sum(
                (w.sub.stats.dropped - w.sub_dropped_seen) for w in self._watched.values()
                if w.live and w.sub is not None)
        total_lost = dropped_buffer + sub_dropped + dropped_unread
        return AgentStats(
            socket_path=self.socket_path, connected=self._sock is not None,
            connections=self._connections, connect_failures=self._connect_failures,
            records_in=records_in, records_sent=self._records_sent, buffered=buffered,
            dropped_buffer=dropped_buffer, dropped_subscription=sub_dropped,
            loss_reported=self._loss_reported,
            loss_pending=max(0, total_lost - self._loss_reported),
            frames_sent=self._frames_sent, bytes_sent=self._bytes_sent, models=models,
            dropped_unread=dropped_unread, goodbyes=self._goodbyes)

    # -- stop --------------------------------------------------------------------------------
    def stop(self, timeout: float = 5.0) -> AgentStats:
        """Close every subscription (their records are buffered), send what can be sent
        within ``timeout`` seconds (unsent records are counted as dropped), join."""
        with self._lock:
            already = self._stopping
            self._stopping = True
            watched = [w for w in self._watched.values() if w.live]
        if not already:
            for w in watched:
                self._close_watched(w, min(timeout, 5.0))
            with self._lock:
                self._flush_deadline = time.monotonic() + timeout
        self._wake()
        self._thread.join(timeout + 2.0)
        if self._thread.is_alive():
            _log.error("the aclprof agent's sender thread did not stop")
        else:
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._wake_r = self._wake_w = -1
        return self.stats()

    # -- sender thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # never let the thread die silently with records in hand
            _log.exception("the aclprof agent's sender failed; records are dropped from now on")
            with self._lock:
                self._stopping = True
        finally:
            self._finish()
            self._stopped.set()

    def _loop(self) -> None:
        backoff = _BACKOFF_MIN
        next_attempt = 0.0
        next_drop_check = 0.0
        while True:
            now = time.monotonic()
            with self._lock:
                stopping = self._stopping
                deadline = self._flush_deadline
            if stopping and deadline and now >= deadline:
                return
            if self._sock is None:
                if now >= next_attempt or (stopping and deadline):
                    if self._connect():
                        backoff = _BACKOFF_MIN
                    else:
                        next_attempt = time.monotonic() + backoff
                        backoff = min(backoff * 2, self.backoff_max)
                        if stopping and deadline:
                            return  # no daemon: nothing more can be flushed
                if self._sock is None:
                    self._sleep(max(0.0, next_attempt - time.monotonic()), connected=False)
                    continue
            if now >= next_drop_check:
                self._poll_subscription_drops()
                next_drop_check = now + _CHECK_DROPS_EVERY
            if not self._pump():
                continue  # connection lost; loop reconnects
            if self._out:
                self._wait_writable()
                continue
            if stopping and deadline and self._idle():
                self._poll_subscription_drops()
                if self._send_loss() and not self._out and self._idle():
                    return
                continue
            # While records flow, gather them for _COALESCE_S between sends (fewer, larger
            # frames and wake-ups: less GIL and CPU taken from the service); when idle,
            # sleep until the first record arrives.
            busy = self._pumped > 0
            with self._lock:
                if self._items and (stopping or not busy or self._buffered >= _WAKE_RECORDS):
                    continue
                self._wake_at = _WAKE_RECORDS if busy else 1
                self._sleeping = True
            self._sleep(_COALESCE_S if busy else _CHECK_DROPS_EVERY, connected=True)

    def _idle(self) -> bool:
        with self._lock:
            return not self._items

    def _sleep(self, timeout: float, connected: bool) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        sock = self._sock
        if connected and sock is not None:
            poller.register(sock, select.POLLIN)  # EOF or ERROR from the daemon
        events = poller.poll(int(timeout * 1000) + 1)
        with self._lock:
            self._sleeping = False
        for fd, _ in events:
            if fd == self._wake_r:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except OSError:
                    pass
            elif sock is not None and fd == sock.fileno():
                self._check_incoming()

    def _check_incoming(self) -> None:
        """The socket is readable: the daemon said something (ERROR, GOODBYE) or closed."""
        if self._sock is None:
            return
        ended = self._receive()
        if ended:
            self._disconnect(ended)

    def _receive(self) -> str | None:
        """Read and handle what the daemon sent, without blocking. Returns why the
        connection is over (GOODBYE, EOF, an error), or None while it lasts."""
        from aclprof.protocol import wire

        sock = self._sock
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
            elif kind == wire.Kind.GOODBYE and not self._goodbye_seen:
                self._goodbye(obj)
                ended = "the daemon is stopping (GOODBYE)"
            # any other kind: ignored (added to the protocol after this agent)
        return ended

    def _goodbye(self, obj: dict[str, Any]) -> None:
        """GOODBYE: the daemon read ``records`` records and LOSS frames worth ``dropped``
        on this connection, and reads no more. What this connection carried beyond that
        (whole frames, and the frame being written) is lost: counted now, reported on the
        next connection. Runs before anything more is written, so the count is exact."""
        n, m = obj.get("records"), obj.get("dropped")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return  # not a GOODBYE we understand: the connection just ends
        self._goodbye_seen = True
        self._goodbyes += 1
        written = self._conn_records + self._out_records
        unread = max(0, written - n)
        # records_sent counts what the daemon got: the frame in flight joins it, minus unread
        self._records_sent += self._out_records - unread
        with self._lock:
            self._dropped_unread += unread
        self._out_records = 0
        if isinstance(m, int) and not isinstance(m, bool):
            # LOSS frames the daemon did not read are reported again (loss_pending grows)
            loss_unread = max(0, self._conn_loss + self._out_loss - m)
            self._loss_reported += self._out_loss - loss_unread
            self._out_loss = 0
        self._out.clear()
        if unread:
            _log.info("the aclprof daemon stopped before reading some records; counted as lost",
                       unread=unread)

    def _connect(self) -> bool:
        from aclprof.protocol import wire

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(self.connect_timeout)
            sock.connect(self.socket_path)
            hello = {"role": "agent", "version": _version(), "pid": os.getpid(),
                     "host": socket.gethostname(), "service": self.service, "labels": self.labels}
            sock.sendall(wire.encode_json(wire.Kind.HELLO, hello))
            reader, pending = wire.FrameReader(ignore_unknown=True), []
            frame = wire.recv_frame(sock, reader, pending)
            if frame is None:
                raise OSError("the daemon closed the connection during the handshake")
            kind, payload = frame
            if kind == wire.Kind.ERROR:
                raise OSError(f"the daemon refused: {wire.decode_json(payload).get('message')}")
            if kind != wire.Kind.WELCOME:
                raise OSError(f"unexpected {kind.name} during the handshake")
            sock.setblocking(False)
        except (OSError, wire.ProtocolError) as exc:
            sock.close()
            self._connect_failures += 1
            if self._connect_failures == 1 or self._connect_failures % 100 == 0:
                _log.info("aclprof daemon not reachable; buffering", socket=self.socket_path,
                          error=str(exc), failures=self._connect_failures)
            return False
        self._sock = sock
        self._gen += 1
        self._connections += 1
        self._conn_names = {}
        # the handshake's reader may hold what followed WELCOME (a GOODBYE at once)
        self._in_reader, self._in_pending = reader, pending
        self._conn_records = self._conn_loss = 0
        self._goodbye_seen = False
        with self._lock:
            watched = list(self._watched.values())
        _log.info("connected to the aclprof daemon", socket=self.socket_path,
                  connection=self._connections)
        # WATCH for live models first, then the LOSS of what was lost meanwhile.
        for w in watched:
            if w.live:
                self._announce(w)
        self._poll_subscription_drops()
        self._send_loss()
        return True

    def _disconnect(self, reason: str) -> None:
        if self._sock is None:
            return
        if not self._goodbye_seen:
            # A send failed or the peer hung up: a stopping daemon sent GOODBYE before
            # closing, and it is still queued on our side. Read it to count exactly.
            self._receive()
        sock, self._sock = self._sock, None
        try:
            sock.close()
        except OSError:
            pass
        if self._out_records:
            with self._lock:
                self._dropped_buffer += self._out_records
        self._out.clear()
        self._out_records = 0
        self._out_loss = 0
        _log.info("lost the aclprof daemon connection; buffering", reason=reason)

    def _poll_subscription_drops(self) -> None:
        with self._lock:
            watched = [w for w in self._watched.values() if w.live and w.sub is not None]
        for w in watched:
            dropped = w.sub.stats.dropped
            if dropped != w.sub_dropped_seen:
                with self._lock:
                    self._dropped_subscription += dropped - w.sub_dropped_seen
                    w.sub_dropped_seen = dropped

    def _lost_total(self) -> int:
        with self._lock:
            return self._dropped_buffer + self._dropped_subscription + self._dropped_unread

    def _send_loss(self) -> bool:
        """Queue a LOSS frame if anything was lost since the last one; False if the
        connection broke."""
        lost = self._lost_total() - self._loss_reported - self._out_loss
        if lost <= 0 or self._sock is None:
            return self._sock is not None
        from aclprof.protocol import wire

        self._queue_frame(wire.encode_json(wire.Kind.LOSS, {"dropped": lost, "reason": self._loss_reason()}),
                          records=0, loss=lost)
        return self._flush_out()

    def _loss_reason(self) -> str:
        with self._lock:
            parts = []
            if self._dropped_buffer:
                parts.append("agent buffer full or daemon unreachable")
            if self._dropped_subscription:
                parts.append("subscription drops")
            if self._dropped_unread:
                parts.append("daemon stopped before reading them")
        return "; ".join(parts) or "unknown"

    def _announce(self, w: _Watched) -> None:
        from aclprof.protocol import wire

        self._queue_frame(wire.encode_json(wire.Kind.WATCH, {
            "model_id": w.model_id, "device": w.device, "labels": w.labels}))
        w.announced = self._gen

    def _queue_frame(self, frame: bytes, records: int = 0, loss: int = 0) -> None:
        self._out += frame
        self._out_records += records
        self._out_loss += loss

    def _flush_out(self) -> bool:
        """Write as much of the pending bytes as the socket takes now; False if it broke."""
        sock = self._sock
        if sock is None:
            return False
        view = memoryview(self._out)
        sent_total = 0
        try:
            while sent_total < len(view):
                n = sock.send(view[sent_total:], socket.MSG_NOSIGNAL)
                if n <= 0:
                    break
                sent_total += n
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            view.release()
            self._disconnect(f"send failed: {exc}")
            return False
        view.release()
        self._bytes_sent += sent_total
        if sent_total == len(self._out):
            self._out.clear()
            self._records_sent += self._out_records
            self._loss_reported += self._out_loss
            self._conn_records += self._out_records
            self._conn_loss += self._out_loss
            self._out_records = 0
            self._out_loss = 0
            self._frames_sent += 1
        elif sent_total:
            del self._out[:sent_total]
        return True

    def _wait_writable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        poller.register(self._wake_r, select.POLLIN)
        events = poller.poll(50)
        for fd, ev in events:
            if fd == sock.fileno() and ev & (select.POLLERR | select.POLLHUP):
                self._disconnect("the daemon closed the connection")
                return
        self._flush_out()

    def _pump(self) -> bool:
        """Move buffered items into one outgoing chunk of frames and write it. Returns
        False if the connection broke."""
        self._pumped = 0
        if self._out:
            return self._flush_out()
        import numpy as np

        from aclprof.protocol import wire

        frames: list[bytes] = []
        records = 0
        with self._lock:
            items = self._items
            while items and records < _MAX_FRAME_RECORDS:
                item = items[0]
                if item[0] == "batch":
                    n = len(item[2])
                    if records and records + n > _MAX_FRAME_RECORDS:
                        break
                    items.popleft()
                    self._buffered -= n
                    records += n
                    frames.append(item)  # converted below, outside the lock
                else:
                    items.popleft()
                    frames.append(item)
        if not frames:
            return True
        self._pumped = records
        out_records = 0
        pending_batches: list[np.ndarray] = []

        def flush_batches() -> None:
            nonlocal out_records
            if pending_batches:
                data = pending_batches[0] if len(pending_batches) == 1 else np.concatenate(pending_batches)
                self._queue_frame(wire.encode(wire.Kind.BATCH, data.tobytes()), records=len(data))
                out_records += len(data)
                pending_batches.clear()

        for item in frames:
            kind, w = item[0], item[1]
            if kind == "watch":
                if w.announced != self._gen and w.live:
                    flush_batches()
                    self._announce(w)
            elif kind == "unwatch":
                flush_batches()
                if w.announced == self._gen:
                    self._queue_frame(wire.encode_json(wire.Kind.UNWATCH, {"model_id": w.model_id}))
            else:
                data = item[2]
                if not len(data):
                    continue
                if w.announced != self._gen:
                    flush_batches()
                    self._announce(w)
                converted, new_names = self._convert(w, data, item[3])
                if new_names:
                    flush_batches()
                    self._queue_frame(wire.encode_json(wire.Kind.NAMES, {"names": new_names}))
                pending_batches.append(converted)
        flush_batches()
        return self._flush_out()

    def _convert(self, w: _Watched, data: Any, names: Any) -> tuple[Any, dict[str, str]]:
        """OP_DTYPE -> wire.RECORD_DTYPE with name ids mapped to this connection's ids and
        step keypoint records marked by ``wire.FLAG_KEYPOINT`` in ``flag``."""
        import numpy as np

        from aclprof.protocol import wire

        # The wire has no keypoint column: the mark travels as a bit of ``flag``.
        out = data[list(wire.RECORD_DTYPE.names)].astype(wire.RECORD_DTYPE)  # a copy
        keypoint = data["keypoint"]
        if keypoint.any():
            out["flag"][keypoint] |= wire.FLAG_KEYPOINT
        top = int(max(data["op_name"].max(), data["op_type"].max()))
        new: dict[str, str] = {}
        if w.map_gen != self._gen:  # a new connection: its name ids start afresh
            w.name_map, w.map_gen = None, self._gen
        mapping = w.name_map
        have = 0 if mapping is None else len(mapping)
        if top >= have:
            extra = np.empty(top + 1 - have, np.uint32)
            conn = self._conn_names
            for i in range(have, top + 1):
                text = names[i]
                cid = conn.get(text)
                if cid is None:
                    cid = len(conn)
                    conn[text] = cid
                    new[str(cid)] = text
                extra[i - have] = cid
            mapping = extra if mapping is None else np.concatenate([mapping, extra])
            w.name_map = mapping
        out["op_name"] = mapping[data["op_name"]]
        out["op_type"] = mapping[data["op_type"]]
        return out, new

    def _finish(self) -> None:
        """At thread exit: whatever is still buffered or unsent is lost (counted); report
        it if the daemon is still there, and close."""
        with self._lock:
            leftover = self._buffered
            self._dropped_buffer += leftover
            self._buffered = 0
            self._items.clear()
        if self._sock is not None:
            if self._out:
                # Bytes of a half-written frame cannot be followed by another frame: close.
                self._disconnect("stopping with a frame half written")
            else:
                self._send_loss()
                deadline = time.monotonic() + 0.5
                while self._out and self._sock is not None and time.monotonic() < deadline:
                    self._wait_writable()
                if self._out:
                    self._disconnect("stopping")
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None


def _version() -> str:
    from aclprof.protocol.version import __version__

    return __version__


_agent: Agent | None = None
_agent_lock = threading.Lock()


def start(socket_path: str | os.PathLike[str] | None = None, *, service: str | None = None,
          labels: Mapping[str, str] | None = None, buffer_records: int = DEFAULT_BUFFER_RECORDS,
          backoff_max: float = _BACKOFF_MAX) -> Agent:
    """Start the agent (idempotent: a running agent is returned as is).

    Args:
        socket_path: the daemon's socket (default: ``ACLPROF_SOCKET``, else
            ``$XDG_RUNTIME_DIR/aclprof/aclprofd.sock``, else ``/run/aclprof/aclprofd.sock``).
        service: a service name shown by ``aclprof status`` and used in filters.
        labels: free-form ``str -> str`` labels of this process.
        buffer_records: the most records kept while the daemon is slow or absent.
        backoff_max: the longest wait between two connection attempts (they start at
            0.1 s and double).

    The daemon does not need to be running: the agent connects when it appears.
    """
    global _agent
    with _agent_lock:
        if _agent is not None:
            return _agent
        _agent = Agent(socket_path, service=service, labels=labels, buffer_records=buffer_records,
                       backoff_max=backoff_max)
        return _agent


def _require() -> Agent:
    agent = _agent
    if agent is None:
        raise RuntimeError("the aclprof agent is not started; call aclprof.agent.start() first")
    return agent


def watch(model_id: int, labels: Mapping[str, str] | None = None, device: int | None = None) -> None:
    """Subscribe ``model_id`` and stream its op records to the daemon."""
    _require().watch(model_id, labels=labels, device=device)


def unwatch(model_id: int) -> None:
    """Stop streaming ``model_id`` (its subscription is closed; its records are flushed)."""
    _require().unwatch(model_id)


def stats() -> AgentStats:
    """The running (or last stopped) agent's counters."""
    agent = _agent if _agent is not None else _last
    if agent is None:
        raise RuntimeError("the aclprof agent was never started")
    return agent.stats()


def running() -> bool:
    return _agent is not None


_last: Agent | None = None


def stop(timeout: float = 5.0) -> AgentStats | None:
    """Flush (at most ``timeout`` seconds), close every subscription, join the sender.
    Returns the final counters (None if the agent was not running)."""
    global _agent, _last
    with _agent_lock:
        agent, _agent = _agent, None
    if agent is None:
        return None
    _last = agent
    return agent.stop(timeout)


def _forget_after_fork() -> None:
    """In a forked child the sender thread and the subscriptions do not exist: forget the
    parent's agent (the child may start its own) instead of waiting on it at exit."""
    global _agent, _agent_lock
    _agent = None
    _agent_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _stop_at_exit() -> None:
    try:
        stop(timeout=2.0)
    except Exception as exc:  # pragma: no cover - best effort at exit
        _log.warning("stopping the aclprof agent at exit failed", error=str(exc))


def _dumps(obj: Any) -> str:  # pragma: no cover - debugging helper
    return json.dumps(obj, default=str)
