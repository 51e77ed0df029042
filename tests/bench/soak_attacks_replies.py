"""Soak attacks of issue 19, items 3, 6 and 10 (replies, baselines, values), for
``bench_daemon_soak.py`` (the integrator wires :data:`ATTACKS` in), and a stand-alone
run that measures the event loop's worst stall during each:

    python tests/bench/soak_attacks_replies.py [--repeat 3]

Each attack is ``(socket path) -> one-line description``. Stand-alone, each runs against
a fresh ``aclprofd`` child while a probe thread sends STATUS every 20 ms on one kept
connection and records the round trips (the worst bounds the loop's longest stall); the
table gives the worst and p99 round trip and the attack's own line.

- ``ctrl_watches``: one agent's 100 WATCHes of 64 labels of 256 control characters each
  way (STATUS was 19.6 MB and failed for every client), then STATUS and SNAPSHOT;
- ``baseline_long_cells``: one agent's 4096 cells of 4 KiB control-character op names and
  types (a 202 MB document), then ``baseline save`` and BASELINE_GET ``@recent``;
- ``forged_values``: TRACE_DONE with 2^62 counts and LOSS of 2^70 (both refused now);
- ``trace_paths``: 20 agents of a service answer a TRACE with 64 forged paths of ~3,800
  control characters each (TRACE_REPLY was 30 MB: the client got none);
- ``names_1mib``: 5 tables of 55,000 short names, in NAMES frames of up to 1 MiB, back to back
  (within the connection's share of names: 5 x ~11.5 MB charged of 64 MiB).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from aclprof.cli.launch import daemon_argv
from aclprof.protocol.wire import (
    MAX_LABELS,
    MAX_NAMES_PAYLOAD,
    RECORD_DTYPE,
    FrameReader,
    Kind,
    decode_json,
    encode_batch,
    encode_json,
    encode_names,
    recv_frame,
)

__all__ = ["ATTACKS"]

_CTRL = "".join(chr(1 + i % 30) for i in range(256))


def _connect(path: str, role: str, service: str | None = "svc") -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(path)
    s.sendall(encode_json(Kind.HELLO, {"role": role, "version": "0.1.0", "pid": os.getpid(), "host": "soak",
                                       "service": service, "labels": {}}))
    assert recv_frame(s, FrameReader(), [])[0] == Kind.WELCOME
    return s


def _request(s: socket.socket, kind: Kind, obj: dict, reader: FrameReader | None = None) -> tuple[Kind, bytes]:
    s.sendall(encode_json(kind, obj))
    frame = recv_frame(s, reader or FrameReader(), [])
    assert frame is not None, "daemon closed the connection"
    return frame


def _records(n: int, types: np.ndarray, names: np.ndarray) -> np.ndarray:
    r = np.zeros(n, RECORD_DTYPE)
    r["model_id"], r["op_type"], r["op_name"], r["duration"] = 1, types, names, 1000
    r["end"] = time.monotonic_ns()
    r["start"] = r["end"] - 1000
    return r


def _attack_ctrl_watches(path: str) -> str:
    a = _connect(path, "agent", "hostile-watches")
    for i in range(100):
        labels = {f"{i:04d}{j:02d}" + _CTRL[6:]: _CTRL for j in range(MAX_LABELS)}
        a.sendall(encode_json(Kind.WATCH, {"model_id": i, "device": 0, "labels": labels}))
    c = _connect(path, "control", None)
    try:
        time.sleep(0.5)  # the WATCHes are read
        kind, payload = _request(c, Kind.STATUS, {})
        st = decode_json(payload) if kind == Kind.STATUS_REPLY else {}
        kind2, payload2 = _request(c, Kind.SNAPSHOT, {"window": "all", "group_by": "model"})
        return (f"STATUS {kind.name} {len(payload) / 1e6:.1f} MB, truncated {st.get('truncated')}; "
                f"SNAPSHOT {kind2.name} {len(payload2) / 1e3:.0f} kB")
    finally:
        a.close()
        c.close()


def _attack_baseline_long_cells(path: str, cells: int = 4096) -> str:
    a = _connect(path, "agent", "hostile-cells")
    names = {}
    for i in range(cells):
        names[2 * i + 10] = f"t{i:05d}" + _CTRL * 16
        names[2 * i + 11] = f"n{i:05d}" + _CTRL * 16
    for frame in encode_names(names):
        a.sendall(frame)
    ids = np.arange(cells)
    for lo in range(0, cells, 256):
        sl = ids[lo:lo + 256]
        a.sendall(encode_batch(_records(len(sl) * 3, np.repeat(2 * sl + 10, 3), np.repeat(2 * sl + 11, 3))))
    c = _connect(path, "control", None)
    try:
        _wait_read(c, "hostile-cells", cells * 3)  # the records were read ...
        time.sleep(1.5)  # ... and reached the detector's histograms (its 1 s tick)
        # the stall of the save and the GET alone, not of the ingest before; probed from a
        # process of its own (decoding the 12 MB reply here must not delay the probe)
        stop, out = mp.Event(), mp.Queue()
        prober = mp.Process(target=_probe_process, args=(path, stop, out))
        prober.start()
        time.sleep(0.3)
        t0 = time.perf_counter()
        kind, payload = _request(c, Kind.BASELINE_SAVE, {"name": "soak-replies"})
        save_s = time.perf_counter() - t0
        saved = decode_json(payload)
        t0 = time.perf_counter()
        kind2, payload2 = _request(c, Kind.BASELINE_GET, {"name": "@recent"})
        get_s = time.perf_counter() - t0
        time.sleep(0.1)
        stop.set()
        worst = out.get(timeout=30)
        prober.join(10)
        if kind != Kind.BASELINE_SAVE_REPLY:
            return (f"save {kind.name}: {saved.get('message', '')[:80]} ({save_s:.2f} s); worst STATUS during "
                    f"save and GET {worst:.0f} ms")
        return (f"save {saved['bytes'] / 1e6:.1f} MB in {save_s:.2f} s (truncated {saved.get('truncated')}); "
                f"GET @recent {kind2.name} {len(payload2) / 1e6:.1f} MB in {get_s:.2f} s; worst STATUS during "
                f"save and GET {worst:.0f} ms")
    finally:
        a.close()
        c.close()


def _probe_process(path: str, stop: Any, out: mp.Queue) -> None:
    """A :class:`_Probe` until ``stop`` is set; puts the worst round trip (ms)."""
    probe = _Probe(path)
    stop.wait(600)
    probe.stop()
    out.put(max(probe.rtts, default=float("nan")))


def _wait_read(c: socket.socket, service: str, n: int, timeout: float = 120.0) -> None:
    """Until the daemon has read ``n`` records from ``service`` (STATUS)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = decode_json(_request(c, Kind.STATUS, {})[1])
        if sum(a["records"] for a in st["agents"] if a["service"] == service) >= n:
            return
        time.sleep(0.1)


def _attack_forged_values(path: str) -> str:
    out = []
    for kind, obj in ((Kind.TRACE_DONE, {"trace_id": 1, "pause_ns": (1 << 62) - 1, "session_ns": 1,
                                         "gap_records": (1 << 62) - 1, "dirs": [], "models": []}),
                      (Kind.LOSS, {"dropped": 1 << 70, "reason": "forged"})):
        a = _connect(path, "agent", "forger")
        a.sendall(encode_json(kind, obj) * 4)
        try:
            frame = recv_frame(a, FrameReader(ignore_unknown=True), [])
            out.append(f"{kind.name}: {frame[0].name if frame else 'closed'}")
        except OSError as exc:
            out.append(f"{kind.name}: {exc}")
        a.close()
    c = _connect(path, "control", None)
    st = decode_json(_request(c, Kind.STATUS, {})[1])
    c.close()
    return (", ".join(out) + f"; dropped_by_agents {st['dropped_by_agents']}, trace_gap_records "
            f"{st['traces']['trace_gap_records']}, protocol_errors {st['protocol_errors']}, internal_errors "
            f"{st['connections']['internal_errors']}")


def _attack_names_1mib(path: str, tables: int = 5) -> str:
    # encoded first: the frames arrive back to back, as fast as the daemon reads (a slow
    # sender would show the cost of one frame per loop turn whatever the daemon does)
    frames = [frame for t in range(tables)
              for frame in encode_names({t * 55_000 + i + 1: f"n{t * 55_000 + i:08d}" for i in range(55_000)})]
    assert all(len(f) <= MAX_NAMES_PAYLOAD + 12 for f in frames)
    a = _connect(path, "agent", "names")
    t0 = time.perf_counter()
    try:
        a.sendall(b"".join(frames))
        c = _connect(path, "control", None)
        _request(c, Kind.STATUS, {})  # after the agent's frames: all of them were parsed
        c.close()
    except OSError as exc:
        return f"{len(frames)} NAMES frames, then {exc}"
    finally:
        a.close()
    return f"{len(frames)} NAMES frames of up to 1 MiB (~55,000 names each) in {time.perf_counter() - t0:.2f} s"


def _attack_trace_paths(path: str, agents: int = 20) -> str:
    """Agents of one service answer a TRACE with 64 forged paths of ~3,800 control
    characters each: TRACE_REPLY quotes every refused path (~1.5 MB of JSON per process)."""
    conns = [_connect(path, "agent", "traced") for _ in range(agents)]
    c = _connect(path, "control", None)
    try:
        c.sendall(encode_json(Kind.TRACE, {"service": "traced", "duration_s": 0.1}))
        for i, a in enumerate(conns):
            reader: FrameReader = FrameReader(ignore_unknown=True)
            while True:
                frame = recv_frame(a, reader, [])
                assert frame is not None
                if frame[0] == Kind.TRACE_START:
                    break
            tid = decode_json(frame[1])["trace_id"]
            a.sendall(encode_json(Kind.TRACE_DONE, {
                "trace_id": tid, "dirs": [f"/{i}/{j}/" + _CTRL * 15 for j in range(64)], "pause_ns": 0,
                "session_ns": 0, "paused_ts": None, "resumed_ts": None, "models": [], "gap_records": None,
                "error": None}))
        c.settimeout(30)
        kind, payload = recv_frame(c, FrameReader(), []) or (Kind.ERROR, b"{}")
        reply = decode_json(payload) if kind == Kind.TRACE_REPLY else {}
        return (f"TRACE_REPLY {kind.name} {len(payload) / 1e6:.1f} MB, {len(reply.get('processes', []))} processes "
                f"listed, truncated {reply.get('truncated')}")
    except OSError as exc:
        return f"no TRACE_REPLY: {exc}"
    finally:
        c.close()
        for a in conns:
            a.close()


ATTACKS: dict[str, Callable[[str], str]] = {
    "trace_paths": _attack_trace_paths,
    "ctrl_watches": _attack_ctrl_watches,
    "baseline_long_cells": _attack_baseline_long_cells,
    "forged_values": _attack_forged_values,
    "names_1mib": _attack_names_1mib,
}


class _Probe:
    """STATUS every 20 ms on one kept connection; the round trips in ms."""

    def __init__(self, path: str) -> None:
        self.sock = _connect(path, "control", None)
        self.reader = FrameReader()
        self.rtts: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                kind, _ = _request(self.sock, Kind.STATUS, {}, self.reader)
                if kind != Kind.STATUS_REPLY:
                    self.errors += 1
            except (OSError, AssertionError):
                self.errors += 1
                return
            self.rtts.append((time.perf_counter() - t0) * 1e3)
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)
        self.sock.close()


def _child(name: str, path: str, out: mp.Queue) -> None:
    try:
        out.put(ATTACKS[name](path))
    except Exception as exc:  # the attack's own failure is part of the result
        out.put(f"attack failed: {type(exc).__name__}: {exc}"[:160])


def _run_one(name: str) -> tuple[str, float, float, int, str]:
    root = tempfile.mkdtemp(prefix="soakr-", dir="/tmp")
    path = os.path.join(root, "d.sock")
    cmd = [*daemon_argv(), "--socket", path, "--data-dir", os.path.join(root, "data"), "--prometheus-port", "0",
           "--log-file", os.path.join(root, "d.log"), "--log-format", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(path):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"aclprofd did not start: {cmd}")
            time.sleep(0.05)
        time.sleep(0.2)
        probe = _Probe(path)
        time.sleep(0.2)
        # the attack in a process of its own: its client-side work (encoding 200 MB of names)
        # must not hold this process's GIL and show up as the daemon's stall in the probe
        out: mp.Queue = mp.Queue()
        child = mp.Process(target=_child, args=(name, path, out))
        child.start()
        try:
            line = out.get(timeout=600)
        except queue.Empty:
            line = "attack did not finish in 600 s"
        child.join(10)
        time.sleep(0.3)
        probe.stop()
        rtts = sorted(probe.rtts) or [float("nan")]
        p99 = rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))]
        return name, rtts[-1], p99, probe.errors, line + ("" if proc.poll() is None else " [DAEMON EXITED]")
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", choices=sorted(ATTACKS), action="append")
    args = ap.parse_args(argv)
    print(f"load: {os.getloadavg()}")
    for _ in range(args.repeat):
        for name in args.only or ATTACKS:
            n, worst, p99, errors, line = _run_one(name)
            print(json.dumps({"attack": n, "worst_status_ms": round(worst, 1), "p99_status_ms": round(p99, 1),
                              "probe_errors": errors, "result": line}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
