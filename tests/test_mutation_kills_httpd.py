"""The /metrics HTTP listener (``aclprofd/httpd.py``) in process (issue 20, mutation run): raw
requests over a socket and the exact responses, refusals and their counters. Little timing:
the timeouts and eviction are waited for by polling with a deadline, with timeouts of a
fraction of a second (tests/test_hostile2_metrics.py checks them against whole daemons).

A listener thread that dies (an exception) fails the test at once, not after a client's
timeout: every wait here checks for it (:func:`recv`, :func:`wait_for`), so that a mutant
that crashes the loop costs the mutation run a fraction of a second, not its time limit.
"""

from __future__ import annotations

import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from aclprofd.httpd import EVICT_AFTER_S, MAX_HEAD, HttpServer, Request, Response
from helpers import procs

BODY = b"hello metrics\n"


OWNER = object()  # what a large body belongs to (a rendering, in the daemon)
BIG = (b"x" * (1 << 20),) * 32


LIVE: list[Server] = []  # the servers of the running test


def check_listeners() -> None:
    """Fail now if an exception escaped a thread of a live server (its listener died)."""
    for server in LIVE:
        assert server.thread_errors == [], f"a thread died: {server.thread_errors!r}"


def wait_for(predicate, timeout: float = 5.0):
    """helpers.procs.wait_for, failing at once if a listener died."""
    def check():
        check_listeners()
        return predicate()
    return procs.wait_for(check, timeout=timeout)


def recv(s: socket.socket, n: int, timeout: float = 10.0) -> bytes:
    """``s.recv(n)`` within ``timeout``, failing at once if a listener died."""
    deadline = time.monotonic() + timeout
    s.settimeout(0.1)
    while True:
        try:
            return s.recv(n)
        except TimeoutError:
            check_listeners()
            if time.monotonic() > deadline:
                raise


class Server:
    """An HttpServer answering BODY, with headers that make the callback fail (``X-Fail``),
    answer a large body that ``OWNER`` holds (``X-Big``), or close the connections still
    sending OWNER's body first (``X-Drop``, as the daemon does for superseded renderings).
    Any exception that escapes a thread while it lives (the listener's loop must never die)
    fails :meth:`close`."""

    def __init__(self, max_connections: int = 8, read_timeout: float = 30.0, write_timeout: float = 30.0,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[Request] = []
        self.dropped: list[int] = []
        self.thread_errors: list[BaseException | None] = []
        self._hook = threading.excepthook
        threading.excepthook = lambda args: self.thread_errors.append(args.exc_value)
        try:
            self.http = HttpServer(host, port, self.respond, max_connections=max_connections,
                                   read_timeout=read_timeout, write_timeout=write_timeout)
        except BaseException:
            threading.excepthook = self._hook
            raise
        self.http.start()
        LIVE.append(self)

    def close(self) -> None:
        try:
            self.http.close()
        finally:
            threading.excepthook = self._hook
            LIVE.remove(self)
        assert self.thread_errors == []

    def respond(self, req: Request) -> Response:
        self.requests.append(req)
        if req.headers.get("x-fail"):
            raise RuntimeError("bug")
        if req.headers.get("x-drop"):
            self.dropped.append(self.http.drop_owner(OWNER, "superseded"))
        if req.headers.get("x-big"):
            return Response(200, BIG, sum(map(len, BIG)), {}, owner=OWNER)
        if req.headers.get("x-status"):  # the callback's own refusal (as metrics_access's 401/403)
            status = int(req.headers["x-status"])
            return Response(status, (b"no\n",), 3, {"Content-Type": "text/plain"}, reason=f"refused_{status}")
        return Response(200, (BODY[:5], b"", BODY[5:]), len(BODY), {"Content-Type": "text/plain; version=0.0.4"})

    def connect(self) -> socket.socket:
        s = socket.create_connection(self.http.address, timeout=10)
        return s


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.close()


def read_response(s: socket.socket, buf: bytearray, head_only: bool = False) -> tuple[str, dict[str, str], bytes]:
    """One response from ``s`` (``buf`` keeps what was read beyond it)."""
    while b"\r\n\r\n" not in buf:
        data = recv(s, 65536)
        assert data, f"closed before a response: {bytes(buf)!r}"
        buf += data
    end = buf.index(b"\r\n\r\n")
    top, *lines = buf[:end].decode("latin-1").split("\r\n")
    del buf[:end + 4]
    headers = dict(ln.split(": ", 1) for ln in lines)
    n = 0 if head_only else int(headers["Content-Length"])
    while len(buf) < n:
        data = recv(s, 65536)
        assert data
        buf += data
    body = bytes(buf[:n])
    del buf[:n]
    return top, headers, body


def closed(s: socket.socket) -> bool:
    try:
        return recv(s, 1, timeout=5) == b""
    except ConnectionResetError:
        return True


def exchange(server: Server, raw: bytes, head_only: bool = False) -> tuple[str, dict[str, str], bytes, bool]:
    with server.connect() as s:
        s.sendall(raw)
        top, headers, body = read_response(s, bytearray(), head_only)
        return top, headers, body, (headers["Connection"] == "close" and closed(s))


def test_get_metrics_is_the_body_with_its_length_and_keeps_the_connection(server: Server):
    with server.connect() as s:
        me = s.getsockname()[:2]
        buf = bytearray()
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept:  text/plain \r\n\r\n")
        top, headers, body = read_response(s, buf)
        assert top == "HTTP/1.1 200 OK"
        assert headers == {"Content-Length": str(len(BODY)), "Content-Type": "text/plain; version=0.0.4",
                           "Connection": "keep-alive"}
        assert body == BODY
        # the same connection serves the next request; two pipelined in one send are both answered
        s.sendall(b"GET /metrics?x=1 HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n")
        assert read_response(s, buf)[2] == BODY
        assert read_response(s, buf)[2] == BODY
        assert buf == b""
    assert server.http.served == 3 and server.http.refused == {}
    req = server.requests[0]
    assert (req.method, req.path, req.headers) == ("GET", "/metrics", {"host": "x", "accept": "text/plain"})
    assert req.peer == me and req.local == server.http.address
    assert server.requests[1].path == "/metrics"  # the query is not part of the path


def test_head_has_the_length_and_no_body(server: Server):
    with server.connect() as s:
        buf = bytearray()
        s.sendall(b"HEAD /metrics HTTP/1.1\r\n\r\n")
        top, headers, _ = read_response(s, buf, head_only=True)
        assert top == "HTTP/1.1 200 OK" and headers["Content-Length"] == str(len(BODY))
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")  # nothing of a body came before this answer
        assert read_response(s, buf) == ("HTTP/1.1 200 OK", headers, BODY)


@pytest.mark.parametrize("raw, keep", [
    (b"GET /metrics HTTP/1.0\r\n\r\n", False),
    (b"GET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", True),
    (b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n", False),
    (b"GET /metrics HTTP/1.1\r\nConnection: Close\r\n\r\n", False),
    (b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", True),
    (b"GET /metrics HTTP/1.1\r\nContent-Length:\r\n\r\n", True),
], ids=["1.0", "1.0 keep-alive", "1.1 close", "1.1 Close", "empty body", "no length"])
def test_which_connections_are_kept(server: Server, raw: bytes, keep: bool):
    top, headers, body, was_closed = exchange(server, raw)
    assert (top, body) == ("HTTP/1.1 200 OK", BODY)
    assert headers["Connection"] == ("keep-alive" if keep else "close")
    assert was_closed is (not keep)


@pytest.mark.parametrize("raw, status, message, reason, keep", [
    (b"POST /metrics HTTP/1.1\r\n\r\n", "405 Method Not Allowed", "only GET and HEAD", "method", False),
    (b"GET /other HTTP/1.1\r\n\r\n", "404 Not Found", "only /metrics is served here", "not_found", True),
    (b"GET /other HTTP/1.0\r\n\r\n", "404 Not Found", "only /metrics is served here", "not_found", False),
    (b"GET /metrics\r\n\r\n", "400 Bad Request", "bad request line", "bad_request", False),
    (b"\r\n\r\n", "400 Bad Request", "bad request line", "bad_request", False),
    (b"GET  /metrics HTTP/1.1\r\n\r\n", "400 Bad Request", "bad request line", "bad_request", False),
    (b"GET /metrics HTTP/2.0\r\n\r\n", "400 Bad Request", "only HTTP/1.0 and HTTP/1.1", "bad_request", False),
    (b"GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n", "400 Bad Request", "bad header line", "bad_request", False),
    (b"GET /metrics HTTP/1.1\r\n: v\r\n\r\n", "400 Bad Request", "bad header line", "bad_request", False),
    (b"GET /metrics HTTP/1.1\r\nX-A : v\r\n\r\n", "400 Bad Request", "bad header line", "bad_request", False),
    (b"GET /metrics HTTP/1.1\r\n X-A: v\r\n\r\n", "400 Bad Request", "bad header line", "bad_request", False),
    (b"GET /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody", "400 Bad Request",
     "a request body is not accepted", "bad_request", False),
    (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "400 Bad Request",
     "a request body is not accepted", "bad_request", False),
], ids=["POST", "404", "404 1.0", "two words", "empty head", "empty word", "HTTP/2", "no colon", "no name",
        "space in name", "folded", "body", "chunked"])
def test_refusals_are_answered_counted_and_close_unless_harmless(server: Server, raw, status, message, reason, keep):
    top, headers, body, was_closed = exchange(server, raw)
    assert top == f"HTTP/1.1 {status}"
    assert body == (message + "\n").encode()
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["Content-Length"] == str(len(body))
    assert headers["Connection"] == ("keep-alive" if keep else "close") and was_closed is (not keep)
    if status.startswith("405"):
        assert headers["Allow"] == "GET, HEAD"
    assert server.http.refused == {reason: 1} and server.http.served == 0
    assert server.requests == []


def test_a_head_over_the_limit_is_431(server: Server):
    too_large = ("HTTP/1.1 431 Request Header Fields Too Large", f"request head over {MAX_HEAD} bytes\n".encode(), True)
    # no end of head within MAX_HEAD bytes
    top, headers, body, was_closed = exchange(server, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * MAX_HEAD)
    assert (top, body, was_closed) == too_large and headers["Connection"] == "close"
    # a complete head one byte over, and one exactly at the limit
    line = b"GET /metrics HTTP/1.1\r\nX: "
    over = line + b"a" * (MAX_HEAD - len(line) - 3) + b"\r\n\r\n"
    assert len(over) == MAX_HEAD + 1
    top, headers, body, was_closed = exchange(server, over)
    assert (top, body, was_closed) == too_large and headers["Connection"] == "close"
    assert exchange(server, over[:-5] + b"\r\n\r\n")[0] == "HTTP/1.1 200 OK"
    assert server.http.refused == {"too_large": 2} and server.http.served == 1


def test_exactly_max_head_bytes_without_the_end_of_the_head_is_431_at_once(server: Server):
    """Its end (at least one more byte) would take the head over the limit: answered now,
    not after the client's stall reaches the read timeout (30 s here)."""
    line = b"GET /metrics HTTP/1.1\r\nX: "
    head = line + b"a" * (MAX_HEAD - len(line) - 3) + b"\r\n\r"
    assert len(head) == MAX_HEAD
    top, _, _, was_closed = exchange(server, head)
    assert (top, was_closed) == ("HTTP/1.1 431 Request Header Fields Too Large", True)
    assert server.http.refused == {"too_large": 1}


def test_a_failing_callback_is_a_500_and_the_listener_goes_on(server: Server):
    top, headers, body, was_closed = exchange(server, b"GET /metrics HTTP/1.1\r\nX-Fail: 1\r\n\r\n")
    assert (top, body, was_closed) == ("HTTP/1.1 500 Error", b"internal error: RuntimeError\n", True)
    assert headers == {"Content-Length": str(len(body)), "Content-Type": "text/plain; charset=utf-8",
                       "Connection": "close"}
    assert server.http.refused == {"internal_error": 1, "500": 1}
    assert exchange(server, b"GET /metrics HTTP/1.1\r\n\r\n")[2] == BODY


def test_beyond_the_connection_cap_a_new_connection_waits_for_a_slot():
    """Every connection busy (answered under EVICT_AFTER_S ago): the new one is held, not
    refused, and answered as soon as the busy one ends; later ones wait in the backlog."""
    server = Server(max_connections=1)
    try:
        with server.connect() as first:
            first.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_response(first, bytearray())[2] == BODY  # accepted and answered: not ripe for eviction
            with server.connect() as second, server.connect() as third:
                second.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                third.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                wait_for(lambda: server.http._held is not None)
                second.settimeout(0.3)
                with pytest.raises(TimeoutError):  # held: its request stays unread
                    second.recv(1)
                assert len(server.requests) == 1
                first.close()
                assert read_response(second, bytearray())[2] == BODY
                second.close()
                assert read_response(third, bytearray())[2] == BODY
            assert server.http.refused == {}
    finally:
        server.close()


def test_a_connection_held_past_the_read_timeout_gets_503():
    """Every slot sending to a client that does not read: the held connection is answered
    503 after ``read_timeout`` (counted), and the listener accepts again."""
    server = Server(max_connections=1, read_timeout=0.4)
    try:
        with server.connect() as busy:
            busy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            busy.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: 1\r\n\r\n")
            wait_for(lambda: len(server.requests) == 1)
            with server.connect() as second:
                t0 = time.monotonic()
                data = b""
                while part := recv(second, 4096):
                    data += part
                assert data == b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                assert time.monotonic() - t0 >= 0.4
            assert server.http.refused == {"connections": 1}
            assert server.http._held is None
            busy.close()
        with server.connect() as third:
            third.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_response(third, bytearray())[2] == BODY
    finally:
        server.close()


def test_close_stops_the_loop_and_closes_every_socket():
    server = Server()
    s = server.connect()
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        read_response(s, bytearray())
        server.close()
        assert closed(s)
        assert not server.http._thread.is_alive()
        assert server.http.listener.fileno() == -1
        with pytest.raises(OSError):
            socket.create_connection(server.http.address, timeout=2).close()
    finally:
        s.close()


def test_the_listener_thread_is_a_named_daemon_thread(server: Server):
    t = server.http._thread
    assert (t.name, t.daemon, t.is_alive()) == ("aclprofd-metrics", True, True)


def test_a_connection_that_asks_nothing_is_closed_at_the_read_timeout():
    server = Server(read_timeout=0.3)
    try:
        with server.connect() as idle:
            assert closed(idle)  # within 5 s: the timeout, checked at least every 0.5 s
        wait_for(lambda: server.http.refused == {"read_timeout": 1}, timeout=5)
        assert server.http.conns == {}
    finally:
        server.close()


def test_a_scraper_that_does_not_read_holds_the_body_until_the_write_timeout():
    server = Server(write_timeout=0.5)
    try:
        with server.connect() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: 1\r\n\r\n")
            wait_for(lambda: server.http.held() == [OWNER], timeout=5)  # 32 MiB cannot all be sent
            wait_for(lambda: server.http.refused == {"write_timeout": 1}, timeout=10)
            assert server.http.held() == [] and server.http.conns == {}
    finally:
        server.close()


def test_at_the_cap_the_connection_waiting_longest_is_evicted_for_a_new_one():
    server = Server(max_connections=2)
    try:
        with server.connect() as oldest, server.connect() as older:
            time.sleep(EVICT_AFTER_S + 0.2)  # both idle longer than EVICT_AFTER_S: ripe for eviction
            with server.connect() as new:
                new.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                assert read_response(new, bytearray())[2] == BODY
                assert closed(oldest)
                older.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")  # the younger one was kept
                assert read_response(older, bytearray())[2] == BODY
        assert server.http.refused == {"evicted": 1}
    finally:
        server.close()


def drain(s: socket.socket) -> int:
    """Bytes read from ``s`` until the server closed it (EOF or reset)."""
    n = 0
    try:
        while data := recv(s, 1 << 20):
            n += len(data)
    except ConnectionResetError:
        pass
    return n


def test_dropping_an_owner_closes_only_the_connections_sending_its_body():
    """What the daemon does to the scrapers of a superseded rendering (metrics.py): from the
    callback, on the listener's thread; the asking connection and the others are served."""
    server = Server()
    try:
        with server.connect() as slow, server.connect() as idle, server.connect() as asking:
            slow.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: 1\r\n\r\n")
            wait_for(lambda: server.http.held() == [OWNER], timeout=5)  # 32 MiB cannot all be sent
            idle.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_response(idle, bytearray())[2] == BODY
            asking.sendall(b"GET /metrics HTTP/1.1\r\nX-Drop: 1\r\n\r\n")
            assert read_response(asking, bytearray())[2] == BODY
            assert server.dropped == [1]
            assert drain(slow) < sum(map(len, BIG))  # cut off before its body's end
            assert server.http.held() == []
            assert server.http.refused == {"superseded": 1}
            for s in (idle, asking):  # kept and still served
                s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                assert read_response(s, bytearray())[2] == BODY
        wait_for(lambda: server.http.conns == {}, timeout=5)
    finally:
        server.close()


@pytest.mark.parametrize("how", ["close", "close after half a request", "reset"])
def test_a_client_that_goes_away_is_forgotten_and_its_place_is_free(how: str):
    """At a cap of one connection: once a client is gone (closed, or reset), the next one is
    served, not refused (its connection was dropped, not left counting against the cap)."""
    server = Server(max_connections=1)
    try:
        s = server.connect()
        if how == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if how == "close after half a request":
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost:")
        wait_for(lambda: len(server.http.conns) == 1, timeout=5)
        s.close()
        wait_for(lambda: server.http.conns == {}, timeout=5)
        top, _, body, _ = exchange(server, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert (top, body) == ("HTTP/1.1 200 OK", BODY)
        assert server.http.refused == {} and server.http.served == 1
    finally:
        server.close()


def test_a_restarted_listener_binds_its_port_again_at_once():
    """The server closed the connection first (HTTP/1.0): its side of it waits in TIME_WAIT
    for a minute, holding the port; a daemon restarted on the same port must still bind it."""
    first = Server()
    port = first.http.address[1]
    try:
        assert exchange(first, b"GET /metrics HTTP/1.0\r\n\r\n")[3]  # answered, closed by the server
    finally:
        first.close()
    again = Server(port=port)
    try:
        assert again.http.address == ("127.0.0.1", port)
        assert exchange(again, b"GET /metrics HTTP/1.1\r\n\r\n")[2] == BODY
    finally:
        again.close()


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_on_ipv6_the_addresses_are_host_and_port_pairs():
    """IPv6 socket addresses have four fields (flow info, scope id): the listener's address
    and a request's peer and local address are (host, port), as for IPv4."""
    server = Server(host="::1")
    try:
        port = server.http.address[1]
        assert server.http.address == ("::1", port)
        with socket.create_connection(("::1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_response(s, bytearray())[2] == BODY
            me = s.getsockname()[:2]
        req = server.requests[0]
        assert (req.peer, req.local) == (me, ("::1", port))
    finally:
        server.close()


@pytest.mark.parametrize("status, keep", [(403, True), (499, True), (500, False), (503, False)])
def test_the_callbacks_refusals_are_counted_by_its_reason_and_a_5xx_closes(server: Server, status: int, keep: bool):
    raw = f"GET /metrics HTTP/1.1\r\nX-Status: {status}\r\n\r\n".encode()
    top, headers, body, was_closed = exchange(server, raw)
    assert top.startswith(f"HTTP/1.1 {status} ") and body == b"no\n"
    assert headers["Connection"] == ("keep-alive" if keep else "close") and was_closed is (not keep)
    assert server.http.refused == {f"refused_{status}": 1} and server.http.served == 0


def test_a_refused_head_request_is_counted_by_the_callbacks_reason(server: Server):
    top, headers, _, _ = exchange(server, b"HEAD /metrics HTTP/1.1\r\nX-Status: 403\r\n\r\n", head_only=True)
    assert (top, headers["Content-Length"]) == ("HTTP/1.1 403 Forbidden", "3")
    assert server.http.refused == {"refused_403": 1}


def test_a_request_pipelined_after_a_kept_refusal_is_answered(server: Server):
    """A 404 keeps the connection: the request sent behind it in the same packet is served
    without waiting for more bytes."""
    with server.connect() as s:
        buf = bytearray()
        s.sendall(b"GET /other HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n")
        assert read_response(s, buf)[0] == "HTTP/1.1 404 Not Found"
        assert read_response(s, buf)[2] == BODY
    assert server.http.refused == {"not_found": 1} and server.http.served == 1


def test_request_parsing_keeps_colons_in_values_and_cuts_the_query_at_its_first_mark(server: Server):
    before = time.monotonic()
    top, _, body, _ = exchange(server, b"GET /metrics?a=1?b=2 HTTP/1.1\r\nHost: example:9464\r\n"
                                       b"Authorization: Bearer a:b\r\n\r\n")
    after = time.monotonic()
    assert (top, body) == ("HTTP/1.1 200 OK", BODY)
    req = server.requests[0]
    assert (req.path, req.headers) == ("/metrics", {"host": "example:9464", "authorization": "Bearer a:b"})
    assert before <= req.arrived <= after  # when the head was complete (the metrics cache's freshness)


def test_a_body_larger_than_the_socket_buffers_arrives_whole_in_order():
    """32 MiB cannot be sent in one call: the rest goes out as the client reads, from where
    each partial send stopped."""
    server = Server()
    try:
        with server.connect() as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: 1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n")
            buf = bytearray()
            top, headers, body = read_response(s, buf)
            assert (top, headers["Content-Length"]) == ("HTTP/1.1 200 OK", str(32 << 20))
            assert len(body) == 32 << 20 and body.count(b"x") == len(body)
            assert read_response(s, buf)[2] == BODY  # the pipelined request, after the whole body
        assert server.http.served == 2 and server.http.refused == {}
    finally:
        server.close()


def test_a_client_that_resets_while_its_body_is_sent_is_dropped():
    server = Server(max_connections=1)
    try:
        s = server.connect()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: 1\r\n\r\n")
        wait_for(lambda: server.http.held() == [OWNER], timeout=5)
        s.close()  # a reset: the server's next send fails
        wait_for(lambda: server.http.conns == {}, timeout=5)
        assert server.http.held() == [] and server.http.refused == {}
        top, _, body, _ = exchange(server, b"GET /metrics HTTP/1.1\r\n\r\n")  # its place is free
        assert (top, body) == ("HTTP/1.1 200 OK", BODY)
    finally:
        server.close()


def test_an_accept_that_fails_is_counted_and_the_client_is_taken_once_it_can_be():
    """Out of file descriptors (EMFILE), accept() fails: counted ``accept_error``, the
    listener rests between attempts (it does not spin, failing tens of thousands of times a
    second), serves its connections, and takes the waiting one once a descriptor is free."""
    server = Server()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # the client's descriptor, before the limit
    old = server.connect()
    try:
        s.settimeout(10)
        wait_for(lambda: len(server.http.conns) == 1, timeout=5)  # `old` accepted before the limit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest_free = os.dup(0)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # no new descriptor in this process
        try:
            s.connect(server.http.address)  # the kernel completes it; accept() gets no descriptor for it
            wait_for(lambda: server.http.refused.get("accept_error"), timeout=5)
            old.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")  # an accepted connection is served meanwhile
            assert read_response(old, bytearray())[2] == BODY
            time.sleep(0.3)
            assert server.http.refused["accept_error"] <= 10  # one attempt per rest (0.1-0.5 s), not a spin
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert read_response(s, bytearray())[2] == BODY
        assert set(server.http.refused) == {"accept_error"} and server.http.served == 2
    finally:
        old.close()
        s.close()
        server.close()
