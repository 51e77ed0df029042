"""``aclprof demo``: the daemon, simulated inference services and ``top``, on the mock.

Starts the installed ``aclprofd`` on a temporary socket and data directory (Prometheus
off), then N services (``aclprof.demo.service``: a ResNet-like and a
transformer-like mock model in simulated real time, each streaming through
``aclprof.agent``), shows ``top`` live (a table every few seconds when stdout is not a
terminal), and after ``--duration`` prints a summary. Every child process is stopped on
every exit path (Ctrl-C included); they also die with this process (PR_SET_PDEATHSIG).
Children run in the demo's temporary directory, so the current directory (a source checkout,
say) can never shadow the installed package; if the daemon fails to start, that directory
and its log are kept and named.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from aclprof.cli.argtypes import integer, number, seconds
from aclprof.cli.common import EXIT_OK, CliError, format_ns
from aclprof.cli.fit import wrap_lines
from aclprof.cli.launch import CommandNotFound, daemon_argv
from aclprof.cli.signals import deferred

__all__ = ["add_parser", "cmd_demo"]

_EXAMPLES = """examples:
  aclprof demo                         20 s, two services (ResNet-like + transformer-like), live top
  aclprof demo --duration 60 --services 4
  aclprof demo --duration 10 | cat     (not a terminal: a table every 2 s, then the summary)
  aclprof demo --requests              every inference a request; the summary sets a slow request's
                                       bill next to a fast one's (issue 25)
"""


def add_parser(sub: Any, fmt: Any) -> None:
    p = sub.add_parser("demo", help="daemon + simulated inference services + live top, no setup",
                       formatter_class=fmt, description=__doc__.split("\n\n", 1)[0].replace("``", ""),
                       epilog=_EXAMPLES)
    p.add_argument("--duration", type=seconds(), default=20.0, help="seconds before it ends by itself (default 20)")
    p.add_argument("--services", type=integer("a number of services", 1, 64), default=2,
                   help="simulated inference services (default 2)")
    p.add_argument("--rate", type=number("a rate", 0.0, 100_000.0, inclusive=False), default=150.0,
                   help="inferences per second per service (default 150: ~10-20 k ops/s each)")
    p.add_argument("--interval", type=seconds(), default=1.0, help="seconds between top refreshes (default 1)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (segments, logs)")
    p.add_argument("--requests", action="store_true",
                   help="services mark each inference as a request (every 10th slow: it also runs a re-ranking "
                        "model); the summary shows the slowest request's bill next to a typical fast one's")
    p.set_defaults(func=cmd_demo)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _spawn(cmd: list[str], env: dict[str, str], log: Any, cwd: str, stdout: Any = subprocess.DEVNULL,
           stdin: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    # A new session: Ctrl-C reaches only us, and we stop the children in order.
    return subprocess.Popen(cmd, env=env, stdout=stdout, stderr=log, stdin=stdin, cwd=cwd,
                            start_new_session=True, preexec_fn=_die_with_parent, close_fds=True)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    except ProcessLookupError:
        pass


def _wait_ready(socket_path: str, daemon: subprocess.Popen[bytes], log_path: str, timeout: float = 15.0) -> None:
    from aclprof.cli.client import Client, DaemonError

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise CliError(f"the daemon exited with status {daemon.returncode} at start "
                           f"(log: {log_path}): {_tail(log_path)}")
        try:
            with Client(socket_path, timeout=1.0) as c:
                c.status()
                return
        except DaemonError as exc:
            last = str(exc)
        time.sleep(0.05)
    raise CliError(f"the daemon did not answer within {timeout:.0f}s ({last}); log: {log_path}")


def _tail(path: str, n: int = 3) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-n:])
    except OSError:
        return ""


def cmd_demo(args: argparse.Namespace) -> int:
    tmp = tempfile.mkdtemp(prefix="aclprof-demo-")
    socket_path = os.path.join(tmp, "aclprofd.sock")
    data_dir = os.path.join(tmp, "data")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROFD_", "ACLMOCK_"))}
    env.update(ACLPROF_BACKEND="mock", ACLPROF_SOCKET=socket_path, PYTHONUNBUFFERED="1")
    env.pop("ACLPROF_LIBRARY", None)
    children: list[subprocess.Popen[bytes]] = []
    services: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []

    keep = args.keep
    try:  # SIGTERM and SIGHUP unwind this too (aclprof.cli.signals): children stopped, tmp removed
        daemon_log_path = os.path.join(tmp, "daemon.log")
        daemon_log = open(daemon_log_path, "ab")
        logs.append(daemon_log)
        try:
            daemon_cmd = daemon_argv()
        except CommandNotFound as exc:
            raise CliError(str(exc)) from None
        with deferred():  # a signal in the fork's hooks would be lost; the child is recorded to stop
            daemon = _spawn([*daemon_cmd, "--socket", socket_path, "--data-dir", data_dir,
                             "--prometheus-port", "0", "--log-format", "json"], env, daemon_log, tmp)
            children.append(daemon)
        try:
            _wait_ready(socket_path, daemon, daemon_log_path)
        except CliError:
            keep = True  # the log explains the failure: never delete it
            raise
        kinds = ["resnet", "transformer"]
        service_log = open(os.path.join(tmp, "services.log"), "ab")
        logs.append(service_log)
        for i in range(args.services):
            kind = kinds[i % 2]
            name = f"{kind}-{i // 2}" if args.services > 2 else kind
            with deferred():
                proc = _spawn([sys.executable, "-m", "aclprof.demo.service", "--socket", socket_path,
                               "--model", kind, "--service", name, "--device", str(i % 8),
                               "--rate", str(args.rate), "--watch-stdin",
                               *(["--requests"] if args.requests else [])],
                              env, service_log, tmp, stdout=subprocess.PIPE, stdin=subprocess.PIPE)
                children.append(proc)
                services.append(proc)
        started = time.monotonic()
        stop_at = started + args.duration
        _show(socket_path, args, stop_at, started)
        results = _stop_services(services)
        summary = _summary(socket_path, results, time.monotonic() - started)
        print(summary, flush=True)
        if args.requests:
            print(request_bills_text(socket_path, results), flush=True)
        if args.keep:
            print(f"kept {tmp} (daemon.log, services.log, data/)")
        return EXIT_OK
    finally:
        with deferred():  # a second signal waits for the children to stop and tmp to go
            for proc in reversed(children):  # services first, then the daemon
                _stop(proc)
            for f in logs:
                f.close()
            if not keep:
                shutil.rmtree(tmp, ignore_errors=True)


def _show(socket_path: str, args: argparse.Namespace, stop_at: float, started: float) -> None:
    from aclprof.cli.client import Client
    from aclprof.cli.top.live import run_live
    from aclprof.cli.top.view import TopView, print_table

    view = TopView("10s", "type", "total")
    with Client(socket_path, timeout=10.0) as client:
        def extra() -> str:
            return f"   [demo: {max(0.0, stop_at - time.monotonic()):.0f}s left]"

        if sys.stdout.isatty():
            run_live(client, view, args.interval, stop_at=stop_at, title_extra=extra)
            return
        next_print = started + min(2.0, args.duration / 2)
        while time.monotonic() < stop_at:
            time.sleep(max(0.0, min(next_print, stop_at) - time.monotonic()))
            if time.monotonic() >= next_print:
                print_table(client.snapshot(view.window, view.group, {}), view, 12,
                            f"   [t={time.monotonic() - started:.0f}s]")
                print(flush=True)
                next_print += 2.0


def _stop_services(services: list[subprocess.Popen[bytes]]) -> list[dict[str, Any]]:
    for proc in services:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    results = []
    for proc in services:
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        for line in (out or b"").decode("utf-8", "replace").splitlines():
            try:
                results.append(json.loads(line))
            except ValueError:
                pass
    return results


def _service_lines(results: list[dict[str, Any]], elapsed: float) -> tuple[list[str], int, int]:
    """The summary's lines per service, and the op records they emitted and reported lost."""
    lines = [f"\naclprof demo: {elapsed:.1f}s, {len(results)} services"]
    emitted = sum(int(r.get("emitted", 0)) for r in results)
    lost = 0
    for r in results:
        a = r.get("agent") or {}
        lost += int(a.get("loss_reported", 0)) + int(a.get("loss_pending", 0))
        dropped = sum(int(a.get(k, 0)) for k in ("dropped_buffer", "dropped_subscription", "dropped_unread"))
        lines.append(f"  {r.get('service')} (pid {r.get('pid')}): {r.get('inferences', 0):,} inferences, "
                     f"{int(r.get('emitted', 0)):,} op records emitted, {int(a.get('records_sent', 0)):,} sent, "
                     f"{dropped:,} dropped")
    return lines, emitted, lost


def _summary(socket_path: str, results: list[dict[str, Any]], elapsed: float) -> str:
    from aclprof.cli.client import Client, DaemonError

    lines, emitted, lost = _service_lines(results, elapsed)
    try:
        with Client(socket_path, timeout=5.0) as c:
            deadline = time.monotonic() + 3.0
            st = c.status()
            while st.get("records_total", 0) + lost < emitted and time.monotonic() < deadline:
                time.sleep(0.05)
                st = c.status()
            snap = c.snapshot("all", "type", {})
            by_service = c.snapshot("all", "service", {})
    except DaemonError as exc:
        lines.append(f"  (daemon unreachable at the end: {exc})")
        return "\n".join(wrap_lines(lines, summary_width()))
    return summary_text(results, elapsed, st, snap, by_service, summary_width())


def summary_text(results: list[dict[str, Any]], elapsed: float, st: dict[str, Any], snap: dict[str, Any],
                 by_service: dict[str, Any], width: int) -> str:
    """The demo's closing summary: per service what it emitted and sent, the daemon's count,
    and the since-start tables by service and by op type, in ``width`` terminal cells (the
    tables fitted as ``top``'s: numbers whole, names shortened, columns hidden with a note)."""
    from io import StringIO

    from rich.console import Console

    from aclprof.cli.top.view import TopView, render_table

    lines, emitted, lost = _service_lines(results, elapsed)
    total = st.get("records_total", 0)
    lines.append(f"  daemon: {total:,} records received, {st.get('dropped_by_agents', 0):,} reported lost; "
                 f"emitted - received - lost = {emitted - total - lost:,}")
    rows = snap.get("rows") or []
    if rows:
        lines.append(f"  op time since start: {format_ns(snap.get('total_ns'))} over {len(rows)} op types")
    buf = StringIO()
    console = Console(file=buf, width=width, no_color=True, highlight=False)
    console.print(render_table(by_service, TopView("all", "service", "total"), 10, keys=False, width=width))
    console.print(render_table(snap, TopView("all", "type", "total"), 10, keys=False, width=width))
    return "\n".join(wrap_lines(lines, width)) + "\n" + buf.getvalue()


def request_bills_text(socket_path: str, results: list[dict[str, Any]]) -> str:
    """``--requests``: the slowest request's bill next to a typical (median) fast one's, as
    the daemon keeps them (``aclprof requests``), and how many ops the services' agents
    billed to a request (the rest counted, never guessed)."""
    from aclprof.cli.client import Client, DaemonError
    from aclprof.protocol import wire

    try:
        with Client(socket_path, timeout=5.0) as c:
            slow = c.request(wire.Kind.REQUESTS, {"attrs": {"kind": "slow"}, "top": 1},
                             wire.Kind.REQUESTS_REPLY).get("bills") or []
            fast = c.request(wire.Kind.REQUESTS, {"attrs": {"kind": "fast"}, "top": 1000},
                             wire.Kind.REQUESTS_REPLY).get("bills") or []
    except DaemonError as exc:
        return f"  (request bills: daemon unreachable at the end: {exc})"
    agents = [r.get("agent") or {} for r in results]
    billed = sum(int(a.get("bill_ops_attributed", 0)) for a in agents)
    unbilled = sum(int(a.get("bill_ops_unattributed", 0)) for a in agents)
    counts = (f"\n  ops billed to a request: {billed:,} of {billed + unbilled:,}; {unbilled:,} unattributed "
              "(an op within 1 ms of two requests' windows, e.g. requests run back to back when a "
              "service falls behind, is counted, never guessed)")
    fast = [b for b in fast if b.get("ops")]
    if not slow or not fast:
        return "  request bills: none kept (see `aclprof requests`)" + counts
    return bills_side_by_side(slow[0], fast[len(fast) // 2]) + counts


def bills_side_by_side(slow: dict[str, Any], fast: dict[str, Any]) -> str:
    """Two bills as two columns: wall, device time and share, ops, then each op type's
    device time and count (the union of both bills' types, the slow bill's order)."""

    def head(b: dict[str, Any]) -> list[str]:
        wall, dev = b.get("wall_ns") or 0, b.get("device_ns") or 0
        return [str(b.get("id")), f"wall {format_ns(wall)}", f"device {format_ns(dev)}"
                + (f" ({dev / wall:.0%})" if wall else ""), f"{b.get('ops', 0)} ops"]

    types = {t: (ns, n) for t, ns, n in slow.get("types") or []}
    ftypes = {t: (ns, n) for t, ns, n in fast.get("types") or []}
    order = list(types) + [t for t in ftypes if t not in types]
    left, right = head(slow), head(fast)
    for t in order:
        for col, table in ((left, types), (right, ftypes)):
            ns, n = table.get(t, (0, 0))
            col.append(f"{t:<12} {format_ns(ns):>9} x{n}" if n else f"{t:<12} {'-':>9}")
    sl = slow.get("slowest")
    left.append(f"slowest op: {sl[1]} ({sl[0]}) {format_ns(sl[2])}" if sl else "slowest op: -")
    fl = fast.get("slowest")
    right.append(f"slowest op: {fl[1]} ({fl[0]}) {format_ns(fl[2])}" if fl else "slowest op: -")
    width = max(len(x) for x in left) + 4
    lines = ["\nrequest bills (aclprof requests): the slowest request next to a typical fast one",
             f"  {'SLOW':<{width}}FAST"]
    lines += [f"  {a:<{width}}{b}" for a, b in zip(left, right)]
    return "\n".join(lines)


def summary_width() -> int:
    """The summary's width: the terminal's (its tables fitted to it), 120 into a pipe."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 120
    except (OSError, ValueError, AttributeError):
        return 120
