"""The /metrics HTTP listener: one thread, one ``selectors`` loop, non-blocking sockets.

``prometheus_client``'s server took a thread per request with no timeout: each half-sent
request held a daemon thread for ever (476 threads after 10 s of slow clients). Here:

- at most ``max_connections`` connections; one more evicts the one that has waited longest
  for a request, if at least ``EVICT_AFTER_S`` (counted ``evicted``), else it waits: it is
  held accepted but unread (its request stays in the kernel's buffer) and the listener stops
  accepting, so later ones wait in the listen backlog, until a connection ends or becomes
  evictable. A burst of scrapes (20 at once, each answered in well under a second) thus
  delays a scraper instead of failing it; one held past ``read_timeout`` (every connection
  busy sending to clients that do not read) gets 503 and is closed (counted ``connections``);
- a request's head (request line and headers, at most ``MAX_HEAD`` bytes, else 431) must
  arrive within ``read_timeout`` of the connection or of the previous response;
- a response must be taken by the client within ``write_timeout`` (a scraper that never
  reads is closed); the body is the shared rendering's chunks, sent as they are;
- only ``GET`` and ``HEAD`` (405 otherwise) of ``/metrics`` (404 otherwise); a request with a
  body is 400; HTTP/1.1 keeps the connection (unless ``Connection: close``), HTTP/1.0 closes.

Every refusal and timeout is counted by reason (:attr:`HttpServer.refused`). What to answer
is the ``respond`` callback's (:class:`aclprofd.metrics.Metrics`), called on this thread.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HttpServer", "Request", "Response", "MAX_HEAD"]

MAX_HEAD = 8 << 10              # request line + headers, at most
EVICT_AFTER_S = 1.0             # at the cap, a connection waiting this long for a request may be evicted
_RECV = 16 << 10
_TICK_S = 0.5                   # deadlines are checked at least this often
_ACCEPT_PAUSE_S = 0.1           # after a failed accept (out of descriptors), the listener rests this
                                # long at least (until the first loop pass after it: at most _TICK_S)
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    peer: tuple[str, int]
    local: tuple[str, int]
    arrived: float              # time.monotonic() when the head was complete


@dataclass
class Response:
    status: int
    body: tuple[bytes, ...] = ()
    size: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    #: what the body belongs to (a rendering), held while it is sent: memory accounting
    owner: Any = None
    #: the refusal counter's label of a non-200 answer
    reason: str = ""


def _text(status: int, message: str, reason: str, **headers: str) -> Response:
    body = (message + "\n").encode()
    return Response(status, (body,), len(body), {"Content-Type": "text/plain; charset=utf-8", **headers},
                    reason=reason)


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: tuple[str, int]
    local: tuple[str, int]
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    out: list[memoryview] = field(default_factory=list)
    writing: bool = False
    keep: bool = True
    owner: Any = None


class HttpServer:
    """Binds at construction (OSError if it cannot); :meth:`start` runs the loop on a
    daemon thread; :meth:`close` stops it and closes every socket."""

    def __init__(self, host: str, port: int, respond: Callable[[Request], Response], *,
                 max_connections: int, read_timeout: float, write_timeout: float):
        self.respond = respond
        self.max_connections = max_connections
        self.read_timeout, self.write_timeout = read_timeout, write_timeout
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        self.listener = socket.socket(info[0], socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(info[4])
            self.listener.listen(128)
            self.listener.setblocking(False)
        except OSError:
            self.listener.close()
            raise
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.conns: dict[int, _Conn] = {}
        #: refusals and timeouts by reason; answered requests
        self.refused: dict[str, int] = {}
        self.served = 0
        self._stop = False
        self._resume_accept: float | None = None  # when a paused listener is watched again
        #: at the cap: the one connection accepted but not admitted yet, and since when
        self._held: tuple[socket.socket, tuple[str, int], float] | None = None
        self._thread = threading.Thread(target=self._run, name="aclprofd-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop = True
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(10)
        for c in list(self.conns.values()):
            self._drop(c)
        if self._held is not None:
            self._held[0].close()
            self._held = None
        self.sel.close()
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()

    def count(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    # ---- the loop ----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop:
            for key, mask in self.sel.select(_TICK_S):
                if key.data is None:
                    self._accept()
                elif key.data == "wake":
                    try:
                        self._wake_r.recv(64)
                    except OSError:
                        pass
                else:
                    c: _Conn = key.data
                    if c.writing and mask & selectors.EVENT_WRITE:
                        self._write(c)
                        if not c.writing and c.buf and c.sock.fileno() >= 0:
                            self._serve_buffered(c)  # a pipelined request already read
                    elif not c.writing and mask & selectors.EVENT_READ:
                        self._read(c)
            now = time.monotonic()
            if self._resume_accept is not None and now >= self._resume_accept:
                self._resume_accept = None
                self.sel.register(self.listener, selectors.EVENT_READ, None)
            for c in list(self.conns.values()):
                if now > c.deadline:
                    self.count("write_timeout" if c.writing else "read_timeout")
                    self._drop(c)
            if self._held is not None:
                self._admit_held(now)

    def _accept(self) -> None:
        while self._held is None:
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # out of descriptors (EMFILE, ENFILE) or memory: the connection stays queued and
                # the listener readable, so retrying at once would spin the loop (tens of
                # thousands of failures a second): it rests, connections are served meanwhile
                self.count("accept_error")
                self._pause_listener()
                self._resume_accept = time.monotonic() + _ACCEPT_PAUSE_S
                return
            sock.setblocking(False)
            if len(self.conns) >= self.max_connections and not self._evict_waiting():
                # every connection is busy: this one waits (unread) and the next ones wait in
                # the listen backlog, until a slot frees (_admit_held, each loop pass)
                self._held = (sock, addr[:2], time.monotonic())
                self._pause_listener()
                return
            self._register(sock, addr[:2])

    def _register(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        c = _Conn(sock, peer, sock.getsockname()[:2], time.monotonic() + self.read_timeout)
        self.conns[sock.fileno()] = c
        self.sel.register(sock, selectors.EVENT_READ, c)

    def _pause_listener(self) -> None:
        try:
            self.sel.unregister(self.listener)
        except KeyError:  # already paused (held connection, then an accept error)
            pass

    def _admit_held(self, now: float) -> None:
        """Admit the held connection once a slot is free (or one is evictable); past
        ``read_timeout`` of waiting, answer it 503 instead: the listener accepts again."""
        assert self._held is not None
        sock, peer, since = self._held
        admit = len(self.conns) < self.max_connections or self._evict_waiting()
        if not admit and now - since <= self.read_timeout:
            return
        # the state first, then the socket: whoever sees the 503 (or the admission) sees no
        # connection held (the test saw the answer before this thread cleared it)
        self._held = None
        if admit:
            self._register(sock, peer)
        else:
            self.count("connections")
            try:  # best effort: the client learns why; never waits on it
                sock.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            sock.close()
        if self._resume_accept is None:
            self.sel.register(self.listener, selectors.EVENT_READ, None)

    def _evict_waiting(self) -> bool:
        """At the cap, close the connection that has waited longest for its next request
        (a half-sent head, an idle keep-alive): a client that holds connections without
        asking cannot lock a scraper out; only responses being sent are never cut."""
        # a connection accepted or answered under EVICT_AFTER_S ago may have its request on
        # the way (read after a rendering): not evicted, the new one gets 503 instead
        ripe = time.monotonic() + self.read_timeout - EVICT_AFTER_S
        waiting = [c for c in self.conns.values() if not c.writing and c.deadline <= ripe]
        if not waiting:
            return False
        self.count("evicted")
        self._drop(min(waiting, key=lambda c: c.deadline))
        return True

    def _drop(self, c: _Conn) -> None:
        fd = c.sock.fileno()
        if fd >= 0:
            self.conns.pop(fd, None)
            try:
                self.sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
        c.sock.close()
        c.out.clear()
        c.owner = None

    def _read(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(c)
            return
        if not data:
            self._drop(c)
            return
        c.buf += data
        self._serve_buffered(c)

    def _serve_buffered(self, c: _Conn) -> None:
        """Answer the complete requests in ``c.buf`` until one is still being written."""
        while not c.writing and c.sock.fileno() >= 0 and not self._serve_one(c):
            pass

    def _serve_one(self, c: _Conn) -> bool:
        """Answer one request if its head is complete; True when there is none to answer."""
        end = c.buf.find(b"\r\n\r\n")
        if end < 0:
            # its end is at least one more byte: MAX_HEAD bytes without it can no longer fit
            if len(c.buf) >= MAX_HEAD:
                self._answer(c, _text(431, f"request head over {MAX_HEAD} bytes", "too_large"), keep=False)
            return True
        if end + 4 > MAX_HEAD:
            self._answer(c, _text(431, f"request head over {MAX_HEAD} bytes", "too_large"), keep=False)
            return True
        head = bytes(c.buf[:end])
        del c.buf[:end + 4]
        req, keep, problem = self._parse(head, c)
        if problem is not None:
            self._answer(c, problem, keep=keep)
            return False
        assert req is not None
        try:
            resp = self.respond(req)
        except Exception as exc:  # a bug must not kill the listener: answer 500, count it
            self.count("internal_error")
            body = f"internal error: {type(exc).__name__}\n".encode()
            resp = Response(500, (body,), len(body), {"Content-Type": "text/plain; charset=utf-8"})
            keep = False
        if req.method == "HEAD":
            resp = Response(resp.status, (), resp.size, resp.headers, None, resp.reason)
            resp.headers = {**resp.headers, "Content-Length": str(resp.size)}
        self._answer(c, resp, keep=keep and resp.status < 500)
        return False

    def _parse(self, head: bytes, c: _Conn) -> tuple[Request | None, bool, Response | None]:
        try:
            text = head.decode("latin-1")
            line, *rest = text.split("\r\n")
            method, target, version = line.split(" ")
        except ValueError:
            return None, False, _text(400, "bad request line", "bad_request")
        if version not in ("HTTP/1.0", "HTTP/1.1"):
            return None, False, _text(400, "only HTTP/1.0 and HTTP/1.1", "bad_request")
        headers: dict[str, str] = {}
        for h in rest:
            name, sep, value = h.partition(":")
            if not sep or not name or name != name.strip():
                return None, False, _text(400, "bad header line", "bad_request")
            headers[name.lower()] = value.strip()
        conn_hdr = headers.get("connection", "").lower()
        keep = (version == "HTTP/1.1" and "close" not in conn_hdr) or "keep-alive" in conn_hdr
        if method not in ("GET", "HEAD"):
            return None, False, _text(405, "only GET and HEAD", "method", Allow="GET, HEAD")
        if "transfer-encoding" in headers or headers.get("content-length", "0").strip() not in ("", "0"):
            return None, False, _text(400, "a request body is not accepted", "bad_request")
        path = target.split("?", 1)[0]
        if path != "/metrics":
            return None, keep, _text(404, "only /metrics is served here", "not_found")
        return Request(method, path, headers, c.peer, c.local, time.monotonic()), keep, None

    def _answer(self, c: _Conn, resp: Response, keep: bool) -> None:
        if resp.status != 200:
            self.count(resp.reason or str(resp.status))
        else:
            self.served += 1
        hdrs = {"Content-Length": str(resp.size), **resp.headers,
                "Connection": "keep-alive" if keep else "close"}
        top = f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, 'Error')}\r\n" + \
            "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        c.out = [memoryview(top.encode("latin-1"))] + [memoryview(b) for b in resp.body if b]
        c.owner, c.keep, c.writing = resp.owner, keep, True
        c.deadline = time.monotonic() + self.write_timeout
        self.sel.modify(c.sock, selectors.EVENT_WRITE, c)
        self._write(c)

    def _write(self, c: _Conn) -> None:
        while c.out:
            try:
                n = c.sock.send(c.out[0])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(c)
                return
            if n < len(c.out[0]):
                c.out[0] = c.out[0][n:]
                return
            c.out.pop(0)
        c.owner, c.writing = None, False
        if not c.keep:
            self._drop(c)
            return
        c.deadline = time.monotonic() + self.read_timeout
        self.sel.modify(c.sock, selectors.EVENT_READ, c)

    def drop_owner(self, owner: Any, reason: str) -> int:
        """Close every connection still sending ``owner``'s body (this thread only); counted."""
        gone = [c for c in self.conns.values() if c.owner is owner]
        for c in gone:
            self.count(reason)
            self._drop(c)
        return len(gone)

    def held(self) -> list[Any]:
        """The owners of the responses being sent now (any thread: one list copy)."""
        return [c.owner for c in list(self.conns.values()) if c.owner is not None]
