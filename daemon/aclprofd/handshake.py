"""HELLO: a connection says who it is (role, pid, host, service, labels) and gets WELCOME;
plus the payload checks the agent and control handlers share.

PROTOCOL_VERSION is what WELCOME announces (daemon/PROTOCOL.md). It is not the frame
header's version: the framing is unchanged since protocol 1, so agents are unaffected
by a change of the control records (protocol 2).
"""

from __future__ import annotations

import os
from typing import Any, TypeGuard

import structlog

from aclprof.protocol.wire import Kind, ProtocolError, check_identity, encode_json

from . import __version__
from .aggregate import KeySource
from .conn import Conn

__all__ = ["PROTOCOL_VERSION", "hello", "is_int", "is_labels"]

#: 2: STREAM/EXPORT payloads are JSON Lines; both end with END; STREAM_SKIPPED (PROTOCOL.md)
PROTOCOL_VERSION = 2
_log = structlog.get_logger("aclprofd")


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def is_labels(v: Any) -> TypeGuard[dict[str, str]]:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


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
    conn.role, conn.pid, conn.host, conn.service, conn.labels = role, pid, host, service, labels
    if role == "agent":
        conn.keysrc = KeySource(host, pid, service)
    _log.info("connected", role=role, pid=pid, host=host, service=service)
    return encode_json(Kind.WELCOME, {"version": __version__, "protocol": PROTOCOL_VERSION,
                                      "pid": os.getpid(), "started_ts": started_ts})
