"""``aclprof requests``: the slowest requests the daemon kept, with their top op types
(issue 25: the bills ``aclprof.request`` and the agent produce; daemon/PROTOCOL.md
"Request bills")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from aclprof.cli import argtypes
from aclprof.cli.argtypes import point_in_time
from aclprof.cli.common import EXIT_OK, EXIT_UNREACHABLE, CliError, add_socket_arg, connect, format_ns
from aclprof.protocol import wire
from aclprof.protocol.safetext import safe

__all__ = ["add_parser", "cmd_requests", "render"]

_EXAMPLES = """examples:
  aclprof requests                              the 20 slowest requests kept, with their top op types
  aclprof requests --service chat --since -10m  one service, the last ten minutes
  aclprof requests --attr version=B --top 50    requests marked aclprof.request(..., version="B")
  aclprof requests --model 3 --json             as JSON lines (one bill each)

The daemon keeps the last 256 bills per service; a bill is one request's ops, attributed by
the thread and time window aclprof.request marked (see the README's "Request bills").
"""


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof requests`` on the subparsers ``sub``."""
    p = sub.add_parser("requests", help="the slowest requests and the op types that made them slow",
                       formatter_class=fmt, epilog=_EXAMPLES,
                       description="The slowest requests the daemon kept (aclprof.request bills): wall time, "
                                   "device time and share, op count and the op types with the most device time.")
    p.add_argument("--service", type=argtypes.name("service"), default=None, help="only this service")
    p.add_argument("--model", type=argtypes.integer("model id", 0, 2**32 - 1), default=None,
                   help="only requests that ran this model id")
    p.add_argument("--attr", type=argtypes.key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="only requests with this attribute (repeatable: all must match)")
    p.add_argument("--since", type=point_in_time, metavar="T", default=None,
                   help="only bills received since T (e.g. -10m, 2026-11-29T10:00:00)")
    p.add_argument("--top", type=argtypes.integer("--top", 1, 1000), default=20, help="how many (default 20)")
    p.add_argument("--json", action="store_true", help="one JSON object per bill")
    add_socket_arg(p)
    p.set_defaults(func=cmd_requests)


def render(bills: list[dict[str, Any]]) -> list[str]:
    """The table's lines."""
    lines = [f"{'REQUEST':<24} {'SERVICE':<14} {'WALL':>9} {'DEVICE':>9} {'SHARE':>6} {'OPS':>6}  TOP OP TYPES"]
    for b in bills:
        wall, dev = b.get("wall_ns") or 0, b.get("device_ns") or 0
        share = f"{dev / wall:.0%}" if wall else "-"
        top = ", ".join(f"{t} {format_ns(ns)} x{n}" for t, ns, n in (b.get("types") or [])[:3]) or "(no ops)"
        mark = "" if b.get("complete", True) else " (incomplete)"
        lines.append(safe(f"{str(b.get('id'))[:24]:<24} {str(b.get('service') or '-')[:14]:<14} "
                          f"{format_ns(wall):>9} {format_ns(dev):>9} {share:>6} {b.get('ops', 0):>6}  {top}{mark}"))
    return lines


def cmd_requests(args: argparse.Namespace) -> int:
    """Exit 0 with the bills (or a note that there are none)."""
    client = connect(args)
    try:
        protocol = int(client.welcome.get("protocol", 1))
        if protocol < 4:
            raise CliError(f"aclprof requests: the daemon speaks protocol {protocol}; request bills need 4 "
                           "(upgrade aclprofd)", EXIT_UNREACHABLE)
        reply = client.request(wire.Kind.REQUESTS, {"service": args.service, "model": args.model,
                                                    "attrs": dict(args.attr), "since": args.since,
                                                    "top": args.top}, wire.Kind.REQUESTS_REPLY)
    finally:
        client.close()
    bills = reply.get("bills") or []
    if args.json:
        for b in bills:
            print(json.dumps(b, separators=(",", ":")))
        return EXIT_OK
    if not bills:
        print(f"no request bills kept (received {reply.get('total', 0)}); mark requests with aclprof.request "
              "in a service streaming with aclprof.agent (it bills them), or send bills with "
              "aclprof.agent.report_bills")
        return EXIT_OK
    print("\n".join(render(bills)))
    return EXIT_OK
