"""Soak attacks on trace routing (issue 19, item 9) for ``bench_daemon_soak.py``: each is a
function ``(socket path) -> one-line description`` in :data:`ATTACKS`.

- **TRACE impostor**: a second agent announces a traced service's name and answers
  TRACE_START with forged ``PROF_*`` directories (another user's data dir, and the right
  layout for a directory that does not exist) beside the service's real agent, which answers
  with a real session directory. The soak runs every client as one user, so the impostor is
  of the owner's uid and is asked (another uid is never asked: tests/test_hostile2_identity.py);
  its forged directories must be refused, never reported as the service's.
- **Silent tracer**: a service with one agent that answers and one that never does, traced
  twice: the first trace must end ``trace_straggler_grace`` after the good answer (not
  ``duration + 10 s``) and name the silent one; the second must run at once without it.

Reported, not asserted: the soak's table shows the descriptions.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Any

from aclprof.protocol.wire import FrameReader, Kind, decode_json, encode_json, recv_frame

__all__ = ["ATTACKS"]


def _connect(path: str, role: str, service: str | None) -> tuple[socket.socket, FrameReader, list[Any]]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    s.sendall(encode_json(Kind.HELLO, {"role": role, "version": "0.1.0", "pid": os.getpid(), "host": "soak",
                                       "service": service, "labels": {}}))
    r: FrameReader = FrameReader(ignore_unknown=True)
    pend: list[Any] = []
    frame = recv_frame(s, r, pend)
    assert frame is not None and frame[0] == Kind.WELCOME, frame
    return s, r, pend


def _serve_trace(ctl: socket.socket, agents: dict[socket.socket, Callable[[int], list[str] | None]],
                 readers: dict[socket.socket, tuple[FrameReader, list[Any]]], timeout: float = 30.0) -> dict[str, Any]:
    """Until the TRACE_REPLY on ``ctl``: answer each agent's TRACE_START with what its
    callable gives for the trace id (None: stay silent). The reply."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([ctl, *agents], [], [], 0.5)
        for s in ready:
            r, pend = readers[s]
            frame = recv_frame(s, r, pend)
            if frame is None:
                raise EOFError("the daemon closed a connection")
            kind, payload = frame
            if s is ctl and kind == Kind.TRACE_REPLY:
                return decode_json(payload)
            if s is not ctl and kind == Kind.TRACE_START:
                tid = decode_json(payload)["trace_id"]
                dirs = agents[s](tid)
                if dirs is not None:
                    s.sendall(encode_json(Kind.TRACE_DONE, {"trace_id": tid, "dirs": dirs, "pause_ns": 1}))
    raise TimeoutError(f"no TRACE_REPLY within {timeout:g} s")


def _real_session(root: str) -> Callable[[int], list[str]]:
    def make(tid: int) -> list[str]:
        d = os.path.join(tempfile.mkdtemp(prefix=f"aclprof-trace-{tid}-", dir=root), "PROF_000001_soak")
        os.mkdir(d)
        return [d]
    return make


def _attack_trace_impostor(path: str) -> str:
    root = tempfile.mkdtemp(prefix="soak-trace-")
    conns = {}
    try:
        real = _connect(path, "agent", "soak-traced")
        fake = _connect(path, "agent", "soak-traced")
        ctl = _connect(path, "control", None)
        for c in (real, fake, ctl):
            conns[c[0]] = (c[1], c[2])

        def forged(tid: int) -> list[str]:
            return ["/var/lib/private/aclprof/PROF_000001_victim",
                    os.path.join(root, f"aclprof-trace-{tid}-nothere", "PROF_000001_forged"), "../../etc/PROF_x"]

        ctl[0].sendall(encode_json(Kind.TRACE, {"service": "soak-traced", "pid": None, "duration_s": 0.1}))
        reply = _serve_trace(ctl[0], {real[0]: _real_session(root), fake[0]: forged}, conns)
        procs = reply.get("processes", [])
        shown = [d for p in procs for d in p.get("dirs", [])]
        believed_forged = [d for d in shown if not d.startswith(root) or "nothere" in d]
        refused = sum(len(p.get("dirs_refused", [])) for p in procs)
        return (f"{len(procs)} processes, {len(shown)} dirs reported, {len(believed_forged)} forged believed, "
                f"{refused} refused")
    finally:
        for s in conns:
            s.close()
        shutil.rmtree(root, ignore_errors=True)


def _attack_silent_tracer(path: str) -> str:
    root = tempfile.mkdtemp(prefix="soak-silent-")
    conns = {}
    try:
        good = _connect(path, "agent", "soak-silent")
        silent = _connect(path, "agent", "soak-silent")
        ctl = _connect(path, "control", None)
        for c in (good, silent, ctl):
            conns[c[0]] = (c[1], c[2])
        out = []
        for _ in range(2):
            t0 = time.monotonic()
            ctl[0].sendall(encode_json(Kind.TRACE, {"service": "soak-silent", "pid": None, "duration_s": 0.1}))
            reply = _serve_trace(ctl[0], {good[0]: _real_session(root), silent[0]: lambda tid: None}, conns)
            named = any(p.get("error") for p in reply.get("processes", [])) or bool(reply.get("excluded"))
            out.append(f"{time.monotonic() - t0:.1f} s ({'silent one named' if named else 'SILENT NOT NAMED'})")
        return "traces answered after " + ", ".join(out)
    finally:
        for s in conns:
            s.close()
        shutil.rmtree(root, ignore_errors=True)


ATTACKS: dict[str, Callable[[str], str]] = {
    "TRACE impostor with forged PROF dirs": _attack_trace_impostor,
    "silent tracer (traced twice)": _attack_silent_tracer,
}
