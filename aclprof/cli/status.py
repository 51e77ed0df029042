"""``aclprof status``: the daemon's health, connected processes, drops, lag and disk use."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from aclprof.cli.common import EXIT_ERROR, EXIT_OK, EXIT_UNREACHABLE, CliError, add_socket_arg, connect, format_ns
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
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the daemon (default 5)")
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


def format_status(st: dict[str, Any]) -> str:
    """The STATUS reply as the human summary of ``aclprof status``."""
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
    lines.append(f"processes: {len(agents)}")
    for a in agents:
        lag = a.get("lag_ns")
        lag_s = format_ns(lag) if isinstance(lag, (int, float)) else "-"
        labels = ",".join(f"{k}={v}" for k, v in (a.get("labels") or {}).items())
        lines.append(f"  pid {a.get('pid')} {a.get('service') or '-'} @{a.get('host', '?')}"
                     f"{' [' + labels + ']' if labels else ''}: {a.get('records', 0):,} records, "
                     f"{float(a.get('records_per_s', 0)):,.0f}/s, dropped {a.get('dropped', 0):,}, lag {lag_s}, "
                     f"{'steps ' + format(a['steps'], ',') + ', ' if a.get('steps') else ''}"
                     f"connected {float(a.get('connected_s', 0)):.0f}s")
        if a.get("trace_pauses"):  # aclprof trace paused its subscriptions: ops not streamed
            gap = f"{a.get('trace_gap_records', 0):,} ops not streamed"
            if a.get("trace_gap_unknown"):
                gap += f" (+ unknown in {a['trace_gap_unknown']} pauses)"
            paused = float(a.get("trace_paused_seconds", 0))
            lines.append(f"    traced: {a['trace_pauses']} pauses, {paused:.1f}s, {gap}")
        for m in a.get("models") or []:
            ml = ",".join(f"{k}={v}" for k, v in (m.get("labels") or {}).items())
            lines.append(f"    model {m.get('model_id')} on device {m.get('device')}{' [' + ml + ']' if ml else ''}")
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
    conns = st.get("connections") or {}
    shown = [f"{what} {conns[k]:,}" for k, what in (
        ("refused", "refused"), ("idle_closed", "idle closed"), ("accept_errors", "accept errors"),
        ("internal_errors", "internal errors")) if conns.get(k)]
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
        lines.append(f"memory: {_bytes(float(mem.get('used_bytes', 0)))} of {_bytes(float(mem.get('budget_bytes', 0)))}"
                     f" budget held for clients"
                     + ("; refused: " + ", ".join(f"{k} {v:,}" for k, v in sorted(refused.items())) if refused else ""))
    # Service, host, labels and problems carry peers' strings: each line is escaped as a
    # whole, so none can drive the terminal or forge another line.
    return "\n".join(safe(line) for line in lines)


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
            if not args.json:  # (--json already printed {"reachable": false, ...})
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
    except DaemonError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    finally:
        client.close()
    if args.json:
        print(json.dumps(st, indent=indent))
    else:
        print(format_status(st))
    return EXIT_OK if st.get("healthy") else EXIT_ERROR
