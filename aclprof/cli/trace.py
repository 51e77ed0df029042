"""``aclprof trace``: ask the agents of a service to run a profiling session now and say
where its ``PROF_*`` directories are (the daemon's TRACE request, daemon/PROTOCOL.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from aclprof.cli.argtypes import name, pid, seconds
from aclprof.cli.common import EXIT_ERROR, EXIT_OK, CliError, add_socket_arg, connect, format_ns
from aclprof.protocol import trace as proto
from aclprof.protocol.safetext import safe

__all__ = ["add_parser", "cmd_trace", "format_trace"]

_EXAMPLES = f"""examples:
  aclprof trace --service resnet50 --duration 5s
  aclprof trace --service resnet50 --pid 4242 --duration 2s --data-types ACL_API,TASK_TIME,AICPU --json

While the session runs, the process's op subscriptions are paused (CANN refuses API
profiling next to a subscription, error 148047): `top`/`tail` miss its ops for that long,
and `aclprof status` counts the pause (trace_pauses, trace_paused_seconds, trace_gap_records).
Duration: {proto.MIN_DURATION_S:g}s to {proto.MAX_DURATION_S:g}s. Data types (aclprof.DataType):
  {", ".join(proto.DATA_TYPE_NAMES)}
exit codes: 0 every process traced, 1 some did not (or none matched), 2 usage error or no daemon
"""


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof trace`` on the subparsers ``sub``."""
    p = sub.add_parser("trace", help="run a profiling session in a service's processes now",
                       formatter_class=fmt, epilog=_EXAMPLES,
                       description="Ask the agents of a service to run an aclprof.Profiler session for "
                                   "DURATION and print the PROF_* directories they wrote.")
    p.add_argument("--service", required=True, metavar="NAME", type=name("service name"),
                   help="service name given to aclprof.agent.start")
    p.add_argument("--pid", type=pid, metavar="PID", help="only this process of the service")
    p.add_argument("--duration", type=seconds(proto.MIN_DURATION_S, proto.MAX_DURATION_S, inclusive=True),
                   default=5.0, metavar="DUR",
                   help="how long the session runs (default 5s; e.g. 500ms, 30s)")
    p.add_argument("--data-types", type=_types_arg, default=list(proto.DEFAULT_DATA_TYPES), metavar="LIST",
                   help="comma-separated aclprof.DataType names (default ACL_API,TASK_TIME)")
    p.add_argument("--json", action="store_true", help="the daemon's TRACE_REPLY as JSON")
    add_socket_arg(p)
    p.set_defaults(func=cmd_trace)


def _types_arg(text: str) -> list[str]:
    names = [t.strip().upper().removeprefix("ACL_PROF_") for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in proto.DATA_TYPE_NAMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown data types {unknown or [text]}; known: "
                                         f"{', '.join(proto.DATA_TYPE_NAMES)}")
    return list(dict.fromkeys(names))


def format_trace(reply: dict[str, Any]) -> str:
    """The TRACE_REPLY as lines for a human."""
    lines = []
    if not reply.get("processes"):
        return f"trace refused: {reply.get('error')}"
    lines.append(f"trace {reply.get('trace_id')}: {reply.get('duration_s')} s of "
                 f"{','.join(reply.get('data_types') or [])} in service {reply.get('service')}")
    for p in reply["processes"]:
        head = f"  pid {p.get('pid')} {p.get('service') or '-'} @{p.get('host', '?')}: "
        if p.get("error"):
            lines.append(head + f"ERROR {p['error']}")
        else:
            lines.append(head + "ok")
        for d in p.get("dirs") or []:
            lines.append(f"    {d}")
        for r in p.get("dirs_refused") or []:  # not believed: not where its agent makes them, or not its uid's
            lines.append(f"    NOT BELIEVED {r.get('path')}: {r.get('reason')}")
        if p.get("pause_ns"):
            gap = p.get("gap_records")
            lines.append(f"    subscriptions of models {p.get('models')} paused {format_ns(p['pause_ns'])}: "
                         f"{'an unknown number of' if gap is None else format(gap, ',')} ops not streamed")
    excluded = reply.get("excluded") or []
    if excluded:  # matched but not asked (another user announcing the service, silent, busy)
        lines.append(f"  not traced ({reply.get('excluded_total', len(excluded))}):")
        for x in excluded:
            lines.append(f"    pid {x.get('pid')} uid {x.get('uid')} {x.get('service') or '-'}: {x.get('reason')}")
    return "\n".join(safe(line) for line in lines)


def cmd_trace(args: argparse.Namespace) -> int:
    from aclprof.cli.client import DaemonError
    from aclprof.protocol import wire

    req = {"service": args.service, "pid": args.pid, "duration_s": args.duration, "data_types": args.data_types}
    client = connect(args, timeout=5.0)
    try:
        # the reply comes once every process answered, or at the daemon's own deadline
        client.settimeout(args.duration + proto.REPLY_GRACE_S + 10.0)
        try:
            reply = client.request(wire.Kind.TRACE, req, wire.Kind.TRACE_REPLY)
        except DaemonError as exc:
            raise CliError(str(exc), EXIT_ERROR) from None
    finally:
        client.close()
    if args.json:
        print(json.dumps(reply, indent=2))
    elif not reply.get("processes"):  # refused before anything ran: one line on stderr
        raise CliError(format_trace(reply), EXIT_ERROR)
    else:
        print(format_trace(reply))
    return EXIT_OK if reply.get("ok") else EXIT_ERROR
