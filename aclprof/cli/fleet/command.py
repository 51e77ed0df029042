"""``aclprof fleet``: a live, top-like table of per-operator timings across hosts, from the
Prometheus server that scrapes every host's ``aclprofd`` (README "Fleet").

Each refresh sends the instant queries of :func:`aclprof.cli.fleet.data.queries` (per host:
calls/s, calls in the window, device time, p50, p99; for the fleet: p50 and p99 over the
summed buckets) and shows one row per (service, op type): calls/s, p50, p99, share of the
fleet's device time, hosts reporting, and the outlier column (hosts whose p99 departs from
the fleet's by the robust z-score of :mod:`aclprof.cli.fleet.data`). ``--host H`` shows that
host's rows next to the fleet's. Keys in the live view: ``d c 5 9 o`` sort by device share,
calls, p50, p99, outlier; ``q`` quits. This module is the command (options, checks);
:mod:`aclprof.cli.fleet.view` the refresh, the table and the live loop.

Prometheus unreachable, an HTTP error, a reply that is not JSON or too big: one line on
stderr, exit 1 (in the live view: shown in the caption, retried at the next refresh).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from aclprof.cli.argtypes import FLOAT_MAX, MAX_PID, integer, name, number, regex, row_limit, seconds
from aclprof.cli.common import EXIT_OK, CliError
from aclprof.cli.fleet.data import (
    RULE_WINDOWS,
    SORTS,
    Thresholds,
    selector,
    valid_label,
    valid_window,
)
from aclprof.cli.fleet.prom import DEFAULT_MAX_BYTES, PromClient, PrometheusError, check_url
from aclprof.cli.fleet.view import Fleet, pipe_width, print_table, render, run_live

__all__ = ["add_parser", "cmd_fleet"]

EXIT_USAGE = 2

_EXAMPLES = """examples:
  aclprof fleet --prometheus http://prom:9090               live; keys: d c 5 9 o sort, q quit
  aclprof fleet --prometheus http://prom:9090 --host npu-07  that host's rows beside the fleet's
  aclprof fleet --prometheus http://prom:9090 --once --json | jq '.outliers'
  aclprof fleet --prometheus http://prom:9090 --service llm --type 'MatMul.*' --window 5m
  aclprof fleet --prometheus http://prom:9090 --rules --window 10m   large fleets: the recording rules

outliers: a host's p99 of an op type is scored against the other hosts' (robust z-score:
0.6745 * (p99 - median) / max(MAD, mad-floor * median)) among the hosts with at least
--min-count calls in the window, when at least --min-hosts hosts qualify; flagged at
|z| >= --z (defaults 100 calls, 3 hosts, 3.5, 5 %: a host ~26 % off the median).

resolution: p50 and p99 are Prometheus' histogram_quantile over aclprofd's fine buckets
(8 per power of two, each 9 % wide; the value is interpolated linearly inside it): within
5 % of the exact quantile on lognormal and bimodal streams, at most 9 % off for any stream,
and it can exceed the max `aclprof top` shows on the host (Prometheus keeps no max).
"""

def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof fleet`` on the subparsers ``sub``."""
    p = sub.add_parser("fleet", help="live op timings across hosts, from Prometheus", formatter_class=fmt,
                       description="A live table of per-operator timings across every host whose aclprofd "
                                   "Prometheus scrapes: calls/s, p50, p99, share of device time, hosts "
                                   "reporting, and hosts whose p99 is an outlier.", epilog=_EXAMPLES)
    p.add_argument("--prometheus", required=True, metavar="URL", type=_url_arg,
                   help="base URL of the Prometheus server (http://host:9090, with any path prefix)")
    p.add_argument("--window", default="1m", type=_window_arg, metavar="W",
                   help="rate and quantile window, a PromQL range such as 30s, 1m, 10m (default 1m; "
                        "at least a few scrape intervals)")
    p.add_argument("--host", metavar="H", type=name("host name"), help="drill down: host H's rows beside the fleet's")
    p.add_argument("--host-label", default="host", type=_label_arg, metavar="LABEL",
                   help="the label that names a host (default host, aclprofd's; `instance` "
                        "for daemons without it)")
    p.add_argument("--rules", action="store_true",
                   help="read the recording rules of daemon/prometheus (window 1m or 10m) instead of the raw "
                        "histograms: far cheaper for Prometheus on a large fleet")
    p.add_argument("--service", metavar="NAME", type=name("service name"), help="only this service")
    p.add_argument("--type", metavar="REGEX", type=regex,
                   help="only op types matching this regex (RE2, anchored by Prometheus)")
    p.add_argument("--sort", choices=tuple(SORTS), default="share", help="row order (default share of device time)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.add_argument("--json", action="store_true", help="with --once: the rows, hosts and outliers as JSON")
    p.add_argument("--interval", type=seconds(), default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--limit", type=row_limit, default=0, help="at most this many rows (default: fit the screen)")
    p.add_argument("--timeout", type=seconds(), default=5.0, help="seconds for each query, reply included (default 5)")
    p.add_argument("--max-bytes", type=integer("a reply size in bytes", 1024, 2**30), default=DEFAULT_MAX_BYTES,
                   help=f"largest reply read (default {DEFAULT_MAX_BYTES >> 20} MiB)")
    g = p.add_argument_group("outlier thresholds")
    g.add_argument("--min-count", type=number("a call count", 0.0, FLOAT_MAX), default=Thresholds.min_count,
                   help="calls in the window a host needs to be scored (default %(default)g)")
    g.add_argument("--min-hosts", type=integer("a host count (one host has nothing to depart from)", 2, MAX_PID),
                   default=Thresholds.min_hosts,
                   help="hosts that must qualify before any is scored (default %(default)d)")
    g.add_argument("--z", type=number("a |z| threshold", 0.0, FLOAT_MAX), default=Thresholds.z,
                   help="|z| that flags a host (default %(default)g)")
    g.add_argument("--mad-floor", type=number("a fraction of the median p99", 0.0, FLOAT_MAX),
                   default=Thresholds.mad_floor,
                   help="smallest MAD as a fraction of the median p99 (default %(default)g)")
    p.set_defaults(func=cmd_fleet)


def _url_arg(text: str) -> str:
    try:
        return check_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _window_arg(text: str) -> str:
    if not valid_window(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a window: a whole number of s, m or h (30s, 1m, 10m)")
    return text


def _label_arg(text: str) -> str:
    if not valid_label(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Prometheus label name")
    return text


def _check(args: argparse.Namespace) -> Thresholds:
    if args.json and not args.once:
        raise CliError("--json needs --once (the live view is a table)", EXIT_USAGE)
    if args.rules and (args.window not in RULE_WINDOWS or args.host_label != "host"):
        raise CliError(f"--rules: the recording rules have --window {' or '.join(RULE_WINDOWS)} and the host "
                       "label 'host'", EXIT_USAGE)
    return Thresholds(args.min_count, args.min_hosts, args.z, args.mad_floor)


def cmd_fleet(args: argparse.Namespace) -> int:
    """One table or JSON document (``--once``), a table per interval into a pipe, or the live view."""
    th = _check(args)
    client = PromClient(args.prometheus, timeout=args.timeout, max_bytes=args.max_bytes)
    fleet = Fleet(client, args.window, args.host_label, selector(args.service, args.type), th, args.rules)
    try:
        if args.once:
            rows = fleet.fetch()
            if args.json:
                print(json.dumps(fleet.document(rows, args.sort, args.host), indent=2))
            else:
                print_table(render(fleet, rows, args.sort, args.host, args.limit, "\n".join(fleet.warnings),
                                   width=pipe_width()))
            return EXIT_OK
        if not sys.stdout.isatty():
            while True:  # a pipe: a plain table every interval; `| head` ends it quietly (EPIPE)
                rows = fleet.fetch()
                print_table(render(fleet, rows, args.sort, args.host, args.limit, "\n".join(fleet.warnings),
                                   width=pipe_width()))
                print(flush=True)
                time.sleep(args.interval)
        run_live(fleet, args.sort, args.host, args.interval, args.limit)
        return EXIT_OK
    except PrometheusError as exc:
        raise CliError(str(exc)) from None
