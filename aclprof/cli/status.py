"""``aclprof status``: the daemon's health, connected processes, drops, lag and disk use, and
a per-device section (records/s and share of op time per device)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from aclprof.cli.argtypes import seconds
from aclprof.cli.capturefmt import hurt_text, status_lines
from aclprof.cli.common import EXIT_ERROR, EXIT_OK, EXIT_UNREACHABLE, CliError, add_socket_arg, connect, format_ns
from aclprof.cli.failurefmt import failure_lines
from aclprof.cli.fit import wrap_lines
from aclprof.cli.top.header import as_list, num, window_seconds
from aclprof.protocol.safetext import safe

__all__ = ["add_parser", "cmd_status", "format_status"]

_EXAMPLES = """examples:
  aclprof status                 human summary; exit 0 healthy, 1 unhealthy, 2 unreachable
  aclprof status --json | jq '.agents[] | {pid, service, records_per_s, dropped}'
  aclprof status -l 5            again every 5 s until Ctrl-C (like nvidia-smi -l)
  aclprof status -l 1 --json     one compact JSON object per line, every second
"""


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof status`` on the subparsers ``sub``."""
    p = sub.add_parser("status", help="daemon health, processes, drops, lag", formatter_class=fmt,
                       description="The daemon's health, connected processes and their models, "
                                   "records/s, drops, lag and disk use.", epilog=_EXAMPLES)
    p.add_argument("--json", action="store_true", help="the raw STATUS reply as JSON")
    p.add_argument("--timeout", type=seconds(), default=5.0, help="seconds to wait for the daemon (default 5)")
    p.add_argument("-l", "--loop", type=_loop_arg, metavar="SECONDS", default=None,
                   help="repeat every SECONDS until Ctrl-C (exit 130; 0 when the reader of a pipe goes); "
                        "an unreachable daemon is reported and the loop goes on")
    add_socket_arg(p)
    p.set_defaults(func=cmd_status)


def _loop_arg(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds (example: -l 5)")
    return seconds


def _bytes(n: float) -> str:
    """A byte count with a binary unit: 512 B, 1.5 KiB, 3.2 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def device_lines(st: dict[str, Any], devices: dict[str, Any] | None = None) -> list[str]:
    """The per-device section. ``devices`` is what :func:`device_snapshot` got from the daemon
    (SNAPSHOT grouped by device: records/s and share of op time over a window); without it,
    records/s per device come from STATUS (the processes' rates, by the devices of the models
    they watch; a process watching models on several devices cannot be split, and STATUS has
    no op time)."""
    if devices is not None:
        seconds = devices["seconds"]
        lines = [f"devices (window {devices['window']}, from the daemon's aggregates):"]
        rows = [r for r in as_list(devices["rows"]) if isinstance(r, dict)]
        for r in sorted(rows, key=lambda r: (not isinstance(r.get("device"), int), num(r.get("device")))):
            rate = num(r.get("count")) / seconds if seconds else 0.0
            # rows carry "device"; the "(other)" row of records beyond the key cap has none
            name = f"device {r['device']}" if isinstance(r.get("device"), int) else str(r.get("key"))
            lines.append(f"  {name}: {rate:,.0f} records/s, {num(r.get('pct_time')):.1f}% of op time")
        if len(lines) == 1:
            lines.append(f"  (no op records in window {devices['window']})")
        return lines
    per: dict[str, list[float]] = {}  # devices -> [records/s, processes]
    for a in as_list(st.get("agents")):
        if not isinstance(a, dict):
            continue
        devs = sorted({m["device"] for m in as_list(a.get("models")) if isinstance(m, dict)
                       and isinstance(m.get("device"), int)})
        if not devs:
            continue
        name = f"device {devs[0]}" if len(devs) == 1 else "devices " + "+".join(str(d) for d in devs)
        acc = per.setdefault(name, [0.0, 0])
        acc[0] += num(a.get("records_per_s"))
        acc[1] += 1
    if not per:
        return []
    total = sum(v[0] for v in per.values())
    lines = ["devices (from the connected processes; op time per device needs an aclprofd with per-service "
             "keys, and the daemon's user or root):"]
    for name, (rate, procs) in sorted(per.items()):
        share = f", {100 * rate / total:.1f}% of records" if total else ""
        lines.append(f"  {name}: {rate:,.0f} records/s{share} ({procs:.0f} process{'es' if procs != 1 else ''})")
    return lines


def device_snapshot(client: Any, st: dict[str, Any]) -> dict[str, Any] | None:
    """SNAPSHOT grouped by device over the daemon's shortest window, or None when the daemon
    would refuse it: one without per-service keys (its SNAPSHOT has no ``summary``; an unknown
    grouping would be a protocol error there) or a user who may not send SNAPSHOT (only
    STATUS is open to all: try only as root or as the daemon's user)."""
    import os

    from aclprof.cli.client import DaemonError

    try:
        owner = os.stat(client.socket_path).st_uid
    except OSError:
        return None
    if os.geteuid() not in (0, owner):
        return None
    agg: dict[str, Any] = st["aggregates"] if isinstance(st.get("aggregates"), dict) else {}
    windows = [w for w in as_list(agg.get("windows")) if isinstance(w, str) and window_seconds(w)]
    window = "10s" if "10s" in windows else (windows[0] if windows else "10s")

    try:
        if not isinstance(client.snapshot(window, "type", {}).get("summary"), dict):
            return None
        rows = as_list(client.snapshot(window, "device", {}).get("rows"))
    except DaemonError:
        return None
    return {"window": window, "seconds": window_seconds(window) or 0.0, "rows": rows}


def format_status(st: dict[str, Any], devices: dict[str, Any] | None = None, width: int | None = None) -> str:
    """The STATUS reply as the human summary of ``aclprof status`` (with :func:`device_lines`),
    in ``width`` terminal cells when given (lines broken at blanks, never inside a number:
    :func:`aclprof.cli.fit.wrap_lines`)."""
    lines = []
    health = "healthy" if st.get("healthy") else "UNHEALTHY"
    lines.append(f"aclprofd {st.get('version', '?')} (pid {st.get('pid', '?')}): {health}, "
                 f"up {float(st.get('uptime_s', 0)):.0f}s")
    for problem in st.get("problems") or []:
        lines.append(f"  problem: {problem}")
    extra = ""
    if st.get("stream_skipped"):
        extra += f"; skipped for slow stream clients: {st['stream_skipped']:,}"
    if st.get("protocol_errors"):
        extra += f"; connections closed for protocol errors: {st['protocol_errors']:,}"
    lines.append(f"records: {st.get('records_total', 0):,} total, {float(st.get('records_per_s', 0)):,.0f}/s; "
                 f"dropped by agents: {st.get('dropped_by_agents', 0):,}{extra}")
    agents = st.get("agents") or []
    cut = st.get("truncated") or {}
    lines.append(f"processes: {len(agents)}" + "".join(
        f"; {cut[k]:,} {what} not shown" for k, what in (("agents", "more processes"), ("models", "models"))
        if cut.get(k)) + ("" if not (cut.get("agents") or cut.get("models")) else
                          " (the reply was cut to fit its frame: some peers send very long labels)"))
    for a in agents:
        lag = a.get("lag_ns")
        lag_s = format_ns(lag) if isinstance(lag, (int, float)) else "-"
        labels = ",".join(f"{k}={v}" for k, v in (a.get("labels") or {}).items())
        lines.append(f"  pid {a.get('pid')} {a.get('service') or '-'} @{a.get('host', '?')}"
                     f"{' [' + labels + ']' if labels else ''}: {a.get('records', 0):,} records, "
                     f"{float(a.get('records_per_s', 0)):,.0f}/s, dropped {a.get('dropped', 0):,}, lag {lag_s}, "
                     f"{'steps ' + format(a['steps'], ',') + ', ' if a.get('steps') else ''}"
                     f"connected {float(a.get('connected_s', 0)):.0f}s")
        ns = a.get("pid_ns")
        if ns not in (None, "same"):  # the pid is the kernel's (daemon's namespace); say what the process calls itself
            claim = a.get("hello_pid")
            own = a.get("ns_pid")
            said = f", it said pid {claim}" if claim is not None and claim != own else ""
            lines.append(f"    pid namespace: {ns}" + (f" (pid {own} there{said})" if own is not None else
                                                        f" (it said pid {claim})"))
        if a.get("trace_pauses"):  # aclprof trace paused its subscriptions: ops not streamed
            gap = f"{a.get('trace_gap_records', 0):,} ops not streamed"
            if a.get("trace_gap_unknown"):
                gap += f" (+ unknown in {a['trace_gap_unknown']} pauses)"
            paused = float(a.get("trace_paused_seconds", 0))
            lines.append(f"    traced: {a['trace_pauses']} pauses, {paused:.1f}s, {gap}")
        for m in a.get("models") or []:
            ml = ",".join(f"{k}={v}" for k, v in (m.get("labels") or {}).items())
            dev = m.get("device")
            where = f"on device {dev}" if isinstance(dev, int) else "on an unknown device (watched without device=)"
            lines.append(f"    model {m.get('model_id')} {where}{' [' + ml + ']' if ml else ''}")
        if a.get("models_truncated"):
            lines.append(f"    ... {a['models_truncated']:,} more models not shown (this process's share of the reply)")
    lines += device_lines(st, devices)
    storage = st.get("storage") or {}
    if storage:
        oldest = storage.get("oldest_ts")
        age = f", oldest {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(oldest))}" if oldest else ""
        cap = " (at disk cap: the oldest segments make room)" if storage.get("at_cap") else ""
        lines.append(f"storage: {storage.get('dir', '?')}: {_bytes(float(storage.get('bytes', 0)))} in "
                     f"{storage.get('segments', 0)} segments{age}{cap}")
    if storage:
        trouble = [f"{storage[k]:,} {what}" for k, what in (
            ("records_lost", "records lost (failed writes)"), ("corrupt_chunks", "corrupt chunks met reading"),
            ("names_skipped", "segment names skipped (taken by something else)"))
            if storage.get(k)]
        if trouble:
            lines.append("storage trouble: " + ", ".join(trouble))
    lines += status_lines(st.get("captures"))  # the flight recorder
    conns = st.get("connections") or {}
    shown = [f"{what} {conns[k]:,}" for k, what in (
        ("refused", "refused"), ("idle_closed", "idle closed"), ("accept_errors", "accept errors"),
        ("internal_errors", "internal errors"), ("peer_gone", "left before reading their replies"))
        if conns.get(k)]
    if shown:
        lines.append("connections: " + ", ".join(shown))
    if st.get("names_truncated"):
        lines.append(f"op names truncated at ingest: names truncated {st['names_truncated']:,}")
    agg = st.get("aggregates") or {}
    if agg:
        lines.append(f"aggregates: {agg.get('keys', 0):,} keys (cap {agg.get('cap', '?'):,}), "
                     f"{agg.get('other_bucket_records', 0):,} records in the 'other' bucket")
    rejected = st.get("records_rejected") or {}
    if rejected:
        lines.append("records refused for impossible values: "
                     + ", ".join(f"{k} {v:,}" for k, v in sorted(rejected.items())))
    mem = st.get("memory") or {}
    if mem:
        refused = mem.get("refused") or {}
        share = (f" (clients' share {_bytes(float(mem['clients_share_bytes']))}; the daemon's own "
                 f"{_bytes(float(mem.get('base_bytes', 0)) + float(mem.get('tables_bytes', 0)))})"
                 if "clients_share_bytes" in mem else "")
        lines.append(f"memory: {_bytes(float(mem.get('used_bytes', 0)))} of {_bytes(float(mem.get('budget_bytes', 0)))}"
                     f" budget held for clients{share}"
                     + ("; refused: " + ", ".join(f"{k} {v:,}" for k, v in sorted(refused.items())) if refused else ""))
    other_cuts = [f"{cut[k]:,} {what}" for k, what in (("problems", "problems"), ("flags", "detector flags"),
                                                        ("captures", "captures")) if cut.get(k)]
    if other_cuts:
        lines.append("not shown (the reply was cut to fit its frame): " + ", ".join(other_cuts))
    rt = (st.get("replies_truncated") or {}).get("replies")
    if rt:
        lines.append(f"replies cut to fit their frame since the start: {rt:,}")
    lines += metrics_lines(st)
    lines += detector_lines(st)
    lines += failure_lines(st)
    # Service, host, labels and problems carry peers' strings: each line is escaped as a
    # whole, so none can drive the terminal or forge another line.
    escaped = [safe(line) for line in lines]
    return "\n".join(escaped if width is None else wrap_lines(escaped, width))


_MAX_FLAG_LINES = 10


def metrics_lines(st: dict[str, Any]) -> list[str]:
    """/metrics' refusals (STATUS ``metrics``; daemon/README.md "Prometheus series budget"):
    said only when the series budget left series out or requests were refused."""
    m = st.get("metrics")
    if not isinstance(m, dict):
        return []
    out = []
    series = {k: v for k, v in (m.get("series_refused") or {}).items() if v}
    if series:
        out.append(f"/metrics: {m.get('series', 0):,} series shown, left out by the series budget: "
                   + ", ".join(f"{k} {v:,}" for k, v in sorted(series.items()))
                   + f" ({m.get('agents_over_share', 0):,} agents over their share)")
    refused = {k: v for k, v in (m.get("requests_refused") or {}).items() if v}
    if refused:
        out.append("/metrics requests refused: " + ", ".join(f"{k} {v:,}" for k, v in sorted(refused.items())))
    return out


def detector_lines(st: dict[str, Any]) -> list[str]:
    """The regression detector's flags (STATUS ``detector``; daemon/PROTOCOL.md): one line
    per flagged (service, model, op type, quantile), the first ten, worst shift first."""
    det = st.get("detector")
    if not isinstance(det, dict):
        return []
    flags = [f for f in det.get("flags") or [] if isinstance(f, dict)]
    count = det.get("flags_count", len(flags))
    if not count and not det.get("errors"):
        return []  # like the other trouble lines: said only when there is something to say
    lines = [f"regressions: {count:,} flagged against the {det.get('baseline', '?')} baseline"
             + (f"; detector errors {det['errors']:,}" if det.get("errors") else "")]
    flags.sort(key=lambda f: -f["shift"] if isinstance(f.get("shift"), (int, float)) else 0.0)
    for f in flags[:_MAX_FLAG_LINES]:
        since = f.get("since_ts")
        when = time.strftime(" since %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else ""
        lines.append(f"  {f.get('service') or '-'}/{f.get('model', '?')} {f.get('op_type', '?')} "
                     f"{f.get('quantile', '?')} {_pct(f.get('shift'))} "
                     f"[{_pct(f.get('lower'))}, {_pct(f.get('upper'))}]{when}")
        hurt = hurt_text(f.get("requests"))
        if hurt:
            lines.append(f"    hurt most: {hurt}")
    if isinstance(count, int) and count > min(len(flags), _MAX_FLAG_LINES):
        lines.append(f"  ... {count - min(len(flags), _MAX_FLAG_LINES):,} more (aclprof status --json)")
    return lines


def _pct(ratio: Any) -> str:
    return f"{100.0 * (ratio - 1.0):+.1f}%" if isinstance(ratio, (int, float)) else "?"


def cmd_status(args: argparse.Namespace) -> int:
    """Exit 0 when the daemon is healthy, 1 when it reports problems, 2 when unreachable;
    with ``--loop`` the report is repeated until Ctrl-C (KeyboardInterrupt: exit 130) or a
    closed pipe (BrokenPipeError: exit 0), both mapped by :func:`aclprof.cli.main`."""
    if args.loop is None:
        return _status_once(args)
    while True:
        started = time.monotonic()
        if not args.json:
            print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} ---")
        try:
            _status_once(args, loop=True)
        except CliError as exc:  # unreachable now; a daemon being restarted comes back
            if exc.code != EXIT_UNREACHABLE:
                print(f"aclprof status: {exc}")
            elif not args.json:  # (--json already printed {"reachable": false, ...})
                print(f"aclprofd unreachable: {exc}")
        if not args.json:
            print()  # a blank line between reports
        sys.stdout.flush()
        time.sleep(max(0.0, args.loop - (time.monotonic() - started)))


def _status_once(args: argparse.Namespace, loop: bool = False) -> int:
    from aclprof.cli.client import DaemonError

    indent = None if loop else 2  # in a loop: one JSON object per line (JSON Lines)
    try:
        client = connect(args, timeout=args.timeout)
    except CliError as exc:
        if args.json:
            print(json.dumps({"reachable": False, "error": str(exc)}, indent=None))
        raise
    try:
        st = client.status()
        devices = None if args.json else device_snapshot(client, st)
    except DaemonError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    finally:
        client.close()
    if args.json:
        print(json.dumps(st, indent=indent))
    else:
        try:
            text = format_status(st, devices, _terminal_width())
        except (TypeError, ValueError, AttributeError, KeyError) as exc:  # not the documented reply
            raise CliError(f"the daemon's STATUS reply is not as daemon/PROTOCOL.md says ({type(exc).__name__}: "
                           f"{safe(str(exc))[:200]}): an aclprofd of another version? (--json shows it)") from None
        print(text)
    return EXIT_OK if st.get("healthy") else EXIT_ERROR


def _terminal_width() -> int | None:
    """stdout's terminal width (the report is fitted to it), or None into a pipe or a file."""
    import os

    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError, AttributeError):
        return None
