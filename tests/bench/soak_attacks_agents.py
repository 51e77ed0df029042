"""Soak attacks of issue 19, items 4 and 5, for tests/bench/bench_daemon_soak.py: each is a
function ``(socket path) -> one-line description of what happened`` in :data:`ATTACKS`.

- ``idle_agents``: 4096 idle agent connections from one uid (``nobody`` when the bench runs
  as root: the per-uid cap exempts root), held for ``HOLD_S``, while an agent of another
  uid connects and ``aclprof status`` asks; both must get in.
- ``op_names``: one agent defines 4096 op names and sends records of each for ``HOLD_S``:
  it must take only its share of the aggregate keys and the detector's cells.

The users are made by forking a child that drops to that uid and to the socket's group (so
that the 0660 socket lets it in; the socket's directory must be searchable by others); without
root, the caller's own uid is used and the line says so.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from aclprof.protocol.wire import (
    RECORD_DTYPE,
    FrameReader,
    Kind,
    decode_json,
    encode_batch,
    encode_json,
    encode_names,
    recv_frame,
)

__all__ = ["ATTACKS", "HOLD_S"]

HOLD_S = 10.0
AGENTS = 4096
HOG_UID, OTHER_UID = 65534, 65533  # nobody, and a uid next to it


def _hello(role: str, service: str) -> bytes:
    return encode_json(Kind.HELLO, {"role": role, "version": "0.1.0", "pid": os.getpid(), "host": "soak",
                                    "service": service, "labels": {}})


def _first_frame(s: socket.socket) -> tuple[Kind | None, dict[str, Any]]:
    try:
        frame = recv_frame(s, FrameReader(), [])
    except OSError:
        return None, {}
    if frame is None:
        return None, {}
    return frame[0], decode_json(frame[1]) if frame[0] != Kind.WELCOME else {}


def _as_user(uid: int, path: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()`` in a forked child running as ``uid`` and the socket's group (as root), else in
    a child of the caller's uid; its result (a JSON object) comes back through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(r)
            if os.geteuid() == 0:
                gid = os.stat(path).st_gid
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            out = fn()
        except BaseException as exc:  # reported, not raised: the child must exit here
            out, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        os.write(w, json.dumps(out).encode())
        os._exit(code)
    os.close(w)
    chunks = []
    while data := os.read(r, 1 << 16):
        chunks.append(data)
    os.close(r)
    os.waitpid(pid, 0)
    return dict(json.loads(b"".join(chunks) or b"{}"))


def _attack_idle_agents(path: str) -> str:
    def hog() -> dict[str, Any]:
        kept: list[socket.socket] = []
        refused: dict[str, int] = {}
        for start in range(0, AGENTS, 200):
            batch = []
            for _ in range(min(200, AGENTS - start)):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)  # blocking: waits for room in the listen backlog
                s.settimeout(10)
                s.sendall(_hello("agent", "idle-hog"))
                batch.append(s)
            for s in batch:
                kind, obj = _first_frame(s)
                if kind == Kind.WELCOME:
                    kept.append(s)
                else:
                    why = str(obj.get("message", "closed")).split(":")[0]
                    refused[why] = refused.get(why, 0) + 1
                    s.close()
        # the other user's agent and STATUS run meanwhile (the parent waits for this line)
        os.write(ready_w, b"1")
        time.sleep(HOLD_S)
        for s in kept:
            s.close()
        return {"admitted": len(kept), "refused": refused}

    def other() -> dict[str, Any]:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        s.sendall(_hello("agent", "other-user"))
        kind, obj = _first_frame(s)
        s.close()
        return {"kind": kind.name if kind is not None else "closed", "message": obj.get("message")}

    ready_r, ready_w = os.pipe()
    root = os.geteuid() == 0
    hog_pid = os.fork()
    if hog_pid == 0:
        os.close(ready_r)
        _as_user(HOG_UID, path, hog)  # (its figures are in STATUS: refused_by)
        try:
            os.write(ready_w, b"1")  # if the hog failed before its byte: the parent goes on
        except OSError:
            pass  # the parent read the hog's byte and closed its end
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)  # the hog holds its connections now
    os.close(ready_r)
    t0 = time.monotonic()
    got = _as_user(OTHER_UID, path, other)
    other_ms = (time.monotonic() - t0) * 1e3
    try:
        st = _status(path)
        status_ok = "ok"
        conns = st.get("connections", {})
    except OSError as exc:
        status_ok, conns = f"failed ({exc})", {}
    os.waitpid(hog_pid, 0)
    who = f"uid {HOG_UID} vs uid {OTHER_UID}" if root else f"one uid ({os.geteuid()}; not root: same user)"
    return (f"{AGENTS} idle agents of {who}: other user's agent {got.get('kind')} in {other_ms:.0f} ms, "
            f"status {status_ok}; agents open {conns.get('agents')}, refused_by {conns.get('refused_by')}")


def _status(path: str) -> dict[str, Any]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(path)
        r, p = FrameReader(), []  # type: ignore[var-annotated]
        s.sendall(_hello("control", ""))
        if recv_frame(s, r, p) is None:
            raise OSError("closed before WELCOME")
        s.sendall(encode_json(Kind.STATUS, {}))
        frame = recv_frame(s, r, p)
        if frame is None:
            raise OSError("closed before STATUS_REPLY")
        return dict(decode_json(frame[1]))
    finally:
        s.close()


def _attack_op_names(path: str) -> str:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(_hello("agent", "op-names"))
    if _first_frame(s)[0] != Kind.WELCOME:
        s.close()
        return "op_names: not admitted"
    names = {i: f"hostile/op_{i:05d}" for i in range(1, AGENTS + 1)} | {AGENTS + 1: "HostileType"}
    for frame in encode_names(names):
        s.sendall(frame)
    r = np.zeros(AGENTS, RECORD_DTYPE)
    r["op_type"], r["op_name"], r["model_id"] = AGENTS + 1, np.arange(1, AGENTS + 1), 1
    sent = 0
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end:
        r["end"] = time.monotonic_ns()
        r["duration"] = 1000
        r["start"] = r["end"] - 1000
        s.sendall(encode_batch(r))
        sent += AGENTS
        time.sleep(0.1)
    tables = _status(path).get("tables", {})
    s.close()
    keys, cells = tables.get("aggregate_keys", {}), tables.get("detector_cells", {})
    return (f"{AGENTS} op names, {sent} records: keys refused {keys.get('refused')} (share {keys.get('per_agent')}), "
            f"cells refused {cells.get('refused')} (share {cells.get('per_agent')}, in use {cells.get('in_use')} "
            f"of {cells.get('cap')})")


ATTACKS: dict[str, Callable[[str], str]] = {"idle_agents": _attack_idle_agents, "op_names": _attack_op_names}
