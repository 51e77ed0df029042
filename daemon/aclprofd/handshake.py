"""HELLO: a connection says who it is (role, pid, host, service, labels) and gets WELCOME;
plus the payload checks the agent and control handlers share (who may send which control
request: :mod:`aclprofd.authz`).

The peer's real pid, uid and gid come from the Unix socket (``SO_PEERCRED``), not from
HELLO: the connection's pid is always the kernel's (in the daemon's pid namespace), whatever
namespace the peer is in (:mod:`aclprofd.peerid`); a HELLO pid that is not the peer's own
(its pid in its own namespace) is logged, and kept only as ``hello_pid`` in STATUS.

PROTOCOL_VERSION is what WELCOME announces (daemon/PROTOCOL.md). It is not the frame
header's version: the framing is unchanged since protocol 1, so agents are unaffected
by a change of the control records (protocol 2).
"""

from __future__ import annotations

import os
import socket
import struct
from typing import TYPE_CHECKING, Any, TypeGuard

import structlog

from aclprof.protocol.safetext import scrub
from aclprof.protocol.streambin import FORMATS
from aclprof.protocol.wire import Kind, ProtocolError, check_identity, decode_json, encode_json

from . import __version__, peerid
from .aggregate.aggregator import KeySource
from .conn import Conn
from .shares import owner_of

if TYPE_CHECKING:
    pass

__all__ = ["PROTOCOL_VERSION", "hello", "admit", "is_int", "is_labels", "peer_credentials"]

#: 2: STREAM/EXPORT payloads are JSON Lines; both end with END; STREAM_SKIPPED (PROTOCOL.md)
#: 3: agents may send OP_FAILURE; 4: REQUEST_BILL; 5: binary STREAM records on request
#: (WELCOME's ``stream_formats``, aclprof.protocol.streambin)
PROTOCOL_VERSION = 5
_log = structlog.get_logger("aclprofd")
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def is_labels(v: Any) -> TypeGuard[dict[str, str]]:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


def peer_credentials(sock: socket.socket) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the process that connected ``sock``, from the kernel; None if
    the socket cannot say (not a Unix socket)."""
    try:
        return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    except (OSError, AttributeError, struct.error):
        return None


def hello(conn: Conn, obj: dict[str, Any], started_ts: float) -> bytes:
    """Apply a HELLO to ``conn``; the WELCOME frame to send. ProtocolError if malformed."""
    role, pid, host = obj.get("role"), obj.get("pid"), obj.get("host", "")
    service, labels = obj.get("service"), obj.get("labels") or {}
    if role not in ("agent", "control"):
        raise ProtocolError(f"HELLO role must be 'agent' or 'control', not {role!r}")
    if not is_int(pid) or not isinstance(host, str):
        raise ProtocolError("HELLO needs an integer pid and a string host")
    assert isinstance(pid, int)
    if (service is not None and not isinstance(service, str)) or not is_labels(labels):
        raise ProtocolError("HELLO service must be a string or null, labels an object of strings")
    check_identity("HELLO", host=host, service=service, labels=labels)  # limits: wire.py
    conn.peer = peer = peer_credentials(conn.sock)
    conn.hello_pid = pid
    if peer is not None:
        # the kernel's pid, never the stated one: a peer in a nested pid namespace (``unshare
        # -Urpf``) may be pid N there for any N, a victim's pid in ours included (issue 19)
        conn.pid_ns, conn.ns_pid = peerid.pid_namespace(conn.sock, peer[0])
        own = peer[0] if conn.pid_ns == peerid.SAME else conn.ns_pid
        if own is None or pid != own:
            _log.warning("HELLO pid is not the peer's pid; using the peer's", hello_pid=pid, peer_pid=peer[0],
                         peer_uid=peer[1], pid_ns=conn.pid_ns, ns_pid=conn.ns_pid, service=service)
        pid = max(peer[0], 0)  # 0: a peer outside our namespace, never the pid it claims
    conn.role, conn.pid, conn.host, conn.service, conn.labels = role, pid, host, service, labels
    if role == "agent":
        # its share of the shared tables: (uid, pid) from the kernel, not from HELLO
        conn.keysrc = KeySource(host, pid, service, owner=owner_of(peer, pid))
    _log.info("connected", role=role, pid=pid, host=host, service=service,
              peer_pid=peer[0] if peer else None, peer_uid=peer[1] if peer else None, pid_ns=conn.pid_ns)
    return encode_json(Kind.WELCOME, {"version": __version__, "protocol": PROTOCOL_VERSION,
                                      "pid": os.getpid(), "started_ts": started_ts,
                                      "stream_formats": list(FORMATS)})


def admit(conn: Conn, payload: memoryview, started_ts: float) -> bytes:
    """The HELLO frame ``payload``: :func:`hello`, then the peer's identity made safe to
    write (lone surrogates would make every UTF-8 writer of it, CLI and /metrics, raise).
    The WELCOME frame to send; ProtocolError if malformed."""
    welcome = hello(conn, decode_json(payload), started_ts)
    conn.host = scrub(conn.host)
    conn.service = None if conn.service is None else scrub(conn.service)
    conn.labels = {scrub(k): scrub(v) for k, v in conn.labels.items()}
    if conn.keysrc is not None:
        conn.keysrc.host, conn.keysrc.service = conn.host, conn.service
    return welcome
