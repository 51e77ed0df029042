"""Issue 17: a client that leaves before reading the daemon's first reply is gone at once.

Before, a control client that closed before WELCOME could be written (``aclprof status
--timeout 0``, a Ctrl-C) stayed in the daemon's control table as a closed connection: the
idle reaper then "closed" it again at every flush and counted a protocol error each time
(5 such clients: 45 protocol errors in 9 s, ``top`` "degraded", ``AclprofdProtocolErrors``
firing on a daemon with no hostile client). Here with real sockets against a real
``aclprofd`` process: the daemon is stopped (SIGSTOP) while the clients connect, send their
HELLO and STATUS and close, so that it meets every one of them gone when it writes WELCOME
(EPIPE), whatever the machine's timing.
"""

from __future__ import annotations

import os
import select
import signal
import socket

from helpers.daemons import Client, running, status
from helpers.procs import short_tmpdir, wait_for

from aclprof.protocol.wire import Kind, encode_json

GONE = 5


def _hello_status_and_leave(path: str, *, half_close: bool = False) -> None:
    """A control client that sends HELLO and STATUS and closes without reading anything
    (``half_close``: shuts its sending side first, then closes)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(encode_json(Kind.HELLO, {"role": "control", "version": "0.1.0", "pid": os.getpid(),
                                           "host": "gone", "service": None, "labels": {}})
                  + encode_json(Kind.STATUS, {}))
        if half_close:
            s.shutdown(socket.SHUT_WR)
    finally:
        s.close()


def test_clients_that_leave_before_welcome_are_gone_and_no_protocol_error():
    root = short_tmpdir()
    # idle timeout: short, so that the reaper runs soon; long enough that our own STATUS
    # clients (a request right after WELCOME) are not reaped on a loaded machine
    with running(root, "--control-idle-timeout", "2s") as d:
        assert d.proc is not None
        os.kill(d.proc.pid, signal.SIGSTOP)  # the clients come and go while it cannot answer
        try:
            for i in range(GONE):
                _hello_status_and_leave(d.socket, half_close=i % 2 == 1)
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)

        def gone_lines() -> list[dict]:
            return [ln for ln in d.log_lines() if ln.get("event") == "connection closed"
                    and ln.get("role") == "control" and ln.get("reason") != "peer closed"]
        wait_for(lambda: len(gone_lines()) >= GONE, timeout=60, what=f"{GONE} gone clients closed")

        # An idle client of ours, newer than the gone ones: once the idle reaper has closed
        # it, it has looked at every older control client (before: the gone ones, each
        # "closed" again and counted as a protocol error at every flush from then on).
        idle = Client(d.socket)
        try:
            assert idle.closed_by_peer(timeout=60), "the idle client was not closed"
        finally:
            idle.close()
        st = wait_for(lambda: (s := status(d.socket))["connections"]["idle_closed"] >= 1 and s, timeout=60,
                      what="idle close counted")
        assert st["protocol_errors"] == 0, st  # before: 1 for the idle client, 1 per gone one per flush
        assert st["connections"]["peer_gone"] == GONE, st["connections"]
        # the tables hold this STATUS request's connection only
        assert (st["connections"]["open"], st["connections"]["control"], st["connections"]["without_hello"]) \
            == (1, 1, 0), st["connections"]
        assert st["healthy"] and st["problems"] == [], st["problems"]
        # and it stays so: further flushes count nothing more
        again = Client(d.socket)
        try:
            assert again.closed_by_peer(timeout=60)
        finally:
            again.close()
        st = wait_for(lambda: (s := status(d.socket))["connections"]["idle_closed"] >= 2 and s, timeout=60,
                      what="second idle close counted")
        assert st["protocol_errors"] == 0 and st["connections"]["peer_gone"] == GONE, st
        # one line per gone client, saying what happened; none again later
        assert [ln["reason"] for ln in gone_lines()] == ["peer left before reading its replies"] * GONE

        # a client that leaves with a reply unread in its socket: the daemon's read fails
        # with ECONNRESET; that peer is gone too, not a protocol error
        c = Client(d.socket)
        c.send_json(Kind.STATUS, {})
        assert select.select([c.sock], [], [], 60)[0], "no STATUS reply"
        c.close()
        st = wait_for(lambda: (s := status(d.socket))["connections"]["peer_gone"] == GONE + 1 and s,
                      timeout=60, what="the reset peer counted")
        assert st["protocol_errors"] == 0 and st["connections"]["open"] == 1, st
