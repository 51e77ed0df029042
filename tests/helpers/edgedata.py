"""Op records of known values sent to a daemon by separate processes, and the figures every
output must show computed from them here, independently of the code under test (issue 20:
degenerate records, multi-device/multi-service data, units).

:class:`Op` is one record as a service produced it; :func:`send` streams a service's ops
from a child process of its own (so each service has its own real pid, as in production:
the daemon takes the pid from the socket), and returns that pid. The expectations
(:func:`totals`) are plain sums over the ops: no code of aclprof computes them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .procs import cli, env

__all__ = ["Op", "Service", "send", "totals", "by", "started", "cli_ok", "us", "screen_rows", "us_cell", "metrics_text",
           "series", "snapshot"]


@dataclass(frozen=True)
class Op:
    op_type: str
    op_name: str
    device: int
    model: int
    start: int   # ns, the library's clock
    dur: int     # ns; end = start + dur


@dataclass
class Service:
    name: str
    ops: list[Op]
    host: str = "edgehost"
    model_labels: dict[int, dict[str, str]] = field(default_factory=dict)  # model id -> WATCH labels
    pid: int = 0  # set by send()
    bills: list[dict[str, Any]] = field(default_factory=list)  # REQUEST_BILL payloads, sent after the ops


_SENDER = r'''
import json, os, socket, sys, numpy as np
from aclprof.protocol import wire
from aclprof.protocol.wire import Kind
spec = json.loads(sys.stdin.read())
ids = {}
for op in spec["ops"]:
    for n in (op["op_type"], op["op_name"]):
        ids.setdefault(n, len(ids) + 1)
r = np.zeros(len(spec["ops"]), dtype=wire.RECORD_DTYPE)
for i, op in enumerate(spec["ops"]):
    r[i]["op_type"], r[i]["op_name"] = ids[op["op_type"]], ids[op["op_name"]]
    r[i]["model_id"], r[i]["device_id"] = op["model"], op["device"]
    r[i]["start"], r[i]["end"], r[i]["duration"] = op["start"], op["start"] + op["dur"], op["dur"]
    r[i]["thread_id"] = 7
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(spec["socket"])
out = [wire.encode_json(Kind.HELLO, {"role": "agent", "version": "0.1.0", "pid": os.getpid(), "host": spec["host"],
                                     "service": spec["service"], "labels": {}})]
for mid, labels in spec["watch"].items():
    out.append(wire.encode_json(Kind.WATCH, {"model_id": int(mid), "device": 0, "labels": labels}))
out += wire.encode_names({v: k for k, v in ids.items()})
if len(r):
    out.append(wire.encode_batch(r))
out += [wire.encode_json(Kind.REQUEST_BILL, b) for b in spec["bills"]]
s.sendall(b"".join(out))
s.shutdown(socket.SHUT_WR)
reader, pending, kinds = wire.FrameReader(ignore_unknown=True), [], []
while True:
    f = wire.recv_frame(s, reader, pending)
    if f is None:
        break
    kinds.append(Kind(f[0]).name)
    if f[0] == Kind.ERROR:
        sys.exit("daemon: " + wire.decode_json(f[1]).get("message", ""))
print(json.dumps({"pid": os.getpid(), "kinds": kinds}))
'''


def send(socket_path: str, svc: Service) -> int:
    """Stream ``svc``'s ops to the daemon from a child process; its pid (also set in ``svc``)."""
    spec = {"socket": socket_path, "host": svc.host, "service": svc.name,
            "watch": {str(k): v for k, v in svc.model_labels.items()},
            "ops": [op.__dict__ for op in svc.ops], "bills": svc.bills}
    p = subprocess.run([sys.executable, "-c", _SENDER], input=json.dumps(spec), capture_output=True, text=True,
                       timeout=60, env=env())
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert "WELCOME" in out["kinds"], out
    svc.pid = out["pid"]
    return svc.pid


def by(services: Iterable[Service], key: Callable[[Service, Op], Any]) -> dict[Any, list[int]]:
    """Durations (ns) of every op grouped by ``key(service, op)``."""
    out: dict[Any, list[int]] = {}
    for s in services:
        for op in s.ops:
            out.setdefault(key(s, op), []).append(op.dur)
    return out


def totals(services: Iterable[Service], key: Callable[[Service, Op], Any]) -> dict[Any, dict[str, int]]:
    """{group: {"count", "total", "min", "max"}} over every op, grouped by ``key``."""
    return {k: {"count": len(v), "total": sum(v), "min": min(v), "max": max(v)}
            for k, v in by(services, key).items()}


def started(services: list[Service], *args: str, prometheus_port: int = 0) -> Any:
    """A child daemon (``helpers.daemons.Daemon``) with ``services`` sent and stored: every
    record read (STATUS) and flushed to the segment files (an export sees them all). The
    caller cleans it up (``d.cleanup()``)."""
    from .daemons import Client, Daemon, status
    from .procs import wait_for

    d = Daemon(None, "--prometheus-host-label", "edgehost", *args, prometheus_port=prometheus_port).start()
    try:
        for s in services:
            send(d.socket, s)
        n = sum(len(s.ops) for s in services)
        wait_for(lambda: status(d.socket)["records_total"] == n, what=f"{n} records read")

        def exported() -> bool:
            # over the wire, not `aclprof export` in a child (a Python start, under coverage
            # a second or two, per daemon): the tests run the CLI's exports themselves
            c = Client(d.socket)
            try:
                return len(c.export()) == n
            finally:
                c.close()
        wait_for(exported, timeout=20, interval=0.1, what=f"{n} records stored")
    except BaseException:
        d.cleanup()
        raise
    return d


def cli_ok(d: Any, *args: str) -> str:
    """``aclprof ARGS --socket`` of the daemon ``d`` (from :func:`started`): its stdout; it must
    exit 0."""
    p = cli(*args, "--socket", d.socket, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def us(ns: int) -> str:
    """Exact microseconds with three decimals, by integer arithmetic."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def screen_rows(text: str) -> dict[str, list[str]]:
    """top's table: first cell -> the other cells (header and rule lines skipped)."""
    lines = text.splitlines()
    head = next(i for i, x in enumerate(lines) if "Count" in x and "Total" in x)
    return {x.split()[0]: x.split()[1:] for x in lines[head + 2:] if x.strip()}


def us_cell(cell: str) -> float:
    """A duration cell of a screen (``19.2us``, ``≤6.0us``, ``1.5ms``) in microseconds."""
    m = re.fullmatch(r"≤?([\d.,]+)(ns|us|µs|ms|s)", cell)
    assert m, cell
    return float(m.group(1).replace(",", "")) * {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}[m.group(2)]


def metrics_text(port: int) -> str:
    """The daemon's /metrics page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def series(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of ``name`` in an exposition text: {sorted (label, value) pairs: value}."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1))))
            out[labels] = float(m.group(2))
    return out


def snapshot(socket_path: str, group: str) -> dict[str, Any]:
    """The daemon's SNAPSHOT of the whole run (``all``) grouped by ``group``, over the wire
    (what ``aclprof top --once --json`` prints, without starting the CLI)."""
    from aclprof.protocol.wire import Kind

    from .daemons import Client

    c = Client(socket_path)
    try:
        return c.request(Kind.SNAPSHOT, {"window": "all", "group_by": group})
    finally:
        c.close()
