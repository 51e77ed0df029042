"""``aclprof fleet``: a live, top-like table of per-operator timings across hosts, from the
Prometheus server that scrapes every host's ``aclprofd`` (README "Fleet").

Each refresh sends the instant queries of :func:`aclprof.cli.fleetdata.queries` (per host:
calls/s, calls in the window, device time, p50, p99; for the fleet: p50 and p99 over the
summed buckets) and shows one row per (service, op type): calls/s, p50, p99, share of the
fleet's device time, hosts reporting, and the outlier column (hosts whose p99 departs from
the fleet's by the robust z-score of :mod:`aclprof.cli.fleetdata`). ``--host H`` shows that
host's rows next to the fleet's. Keys in the live view: ``d c 5 9 o`` sort by device share,
calls, p50, p99, outlier; ``q`` quits.

Prometheus unreachable, an HTTP error, a reply that is not JSON or too big: one line on
stderr, exit 1 (in the live view: shown in the caption, retried at the next refresh).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any, Literal

from aclprof.cli.common import EXIT_OK, CliError, format_ns, regex_problem, use_colour
from aclprof.cli.fleetdata import (
    RULE_WINDOWS,
    SORTS,
    FleetDataError,
    FleetRow,
    Thresholds,
    build_rows,
    parse_vector,
    queries,
    selector,
    sort_rows,
    to_json,
    valid_label,
    valid_window,
)
from aclprof.cli.fleetprom import DEFAULT_MAX_BYTES, PromClient, PrometheusError, check_url
from aclprof.protocol.safetext import safe

__all__ = ["add_parser", "cmd_fleet", "Fleet"]

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
"""

_KEY_SORT = {"d": "share", "c": "calls", "5": "p50", "9": "p99", "o": "outlier"}


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
    p.add_argument("--host", metavar="H", help="drill down: host H's rows beside the fleet's")
    p.add_argument("--host-label", default="host", type=_label_arg, metavar="LABEL",
                   help="the label that names a host (default host, aclprofd's; `instance` "
                        "for daemons without it)")
    p.add_argument("--rules", action="store_true",
                   help="read the recording rules of daemon/prometheus (window 1m or 10m) instead of the raw "
                        "histograms: far cheaper for Prometheus on a large fleet")
    p.add_argument("--service", metavar="NAME", help="only this service")
    p.add_argument("--type", metavar="REGEX", type=_regex_arg,
                   help="only op types matching this regex (RE2, anchored by Prometheus)")
    p.add_argument("--sort", choices=tuple(SORTS), default="share", help="row order (default share of device time)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.add_argument("--json", action="store_true", help="with --once: the rows, hosts and outliers as JSON")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--limit", type=int, default=0, help="at most this many rows (default: fit the screen)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds for each query, reply included (default 5)")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                   help=f"largest reply read (default {DEFAULT_MAX_BYTES >> 20} MiB)")
    g = p.add_argument_group("outlier thresholds")
    g.add_argument("--min-count", type=float, default=Thresholds.min_count,
                   help="calls in the window a host needs to be scored (default %(default)g)")
    g.add_argument("--min-hosts", type=int, default=Thresholds.min_hosts,
                   help="hosts that must qualify before any is scored (default %(default)d)")
    g.add_argument("--z", type=float, default=Thresholds.z, help="|z| that flags a host (default %(default)g)")
    g.add_argument("--mad-floor", type=float, default=Thresholds.mad_floor,
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


def _regex_arg(text: str) -> str:
    problem = regex_problem(text)  # RE2, as Prometheus (Go's regexp has RE2's syntax)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _label_arg(text: str) -> str:
    if not valid_label(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Prometheus label name")
    return text


def _check(args: argparse.Namespace) -> Thresholds:
    if args.json and not args.once:
        raise CliError("--json needs --once (the live view is a table)", EXIT_USAGE)
    for name in ("interval", "timeout"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise CliError(f"--{name} must be a positive number of seconds", EXIT_USAGE)
    if args.max_bytes < 1024:
        raise CliError("--max-bytes must be at least 1024", EXIT_USAGE)
    if args.limit < 0:
        raise CliError("--limit must be 0 (fit the screen) or positive", EXIT_USAGE)
    if args.rules and (args.window not in RULE_WINDOWS or args.host_label != "host"):
        raise CliError(f"--rules: the recording rules have --window {' or '.join(RULE_WINDOWS)} and the host "
                       "label 'host'", EXIT_USAGE)
    if args.min_hosts < 2:
        raise CliError("--min-hosts must be at least 2 (one host has nothing to depart from)", EXIT_USAGE)
    for name in ("min_count", "z", "mad_floor"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            raise CliError(f"--{name.replace('_', '-')} must be a finite number >= 0", EXIT_USAGE)
    return Thresholds(args.min_count, args.min_hosts, args.z, args.mad_floor)


class Fleet:
    """One refresh: the queries, the rows and their rendering."""

    def __init__(self, client: PromClient, window: str, host_label: str = "host", sel: str = "",
                 thresholds: Thresholds | None = None, rules: bool = False):
        self.client = client
        self.window = window
        self.host_label = host_label
        self.rules = rules
        self.queries = queries(window, host_label, sel, rules)
        self.thresholds = thresholds or Thresholds()
        self.time = 0.0
        self.warnings: list[str] = []

    def fetch(self) -> list[FleetRow]:
        """Every query at one evaluation time (so the columns agree), parsed into rows, all
        within one ``--timeout`` (so a refresh, and a ``q`` pressed during it, waits at most
        that long). Prometheus' own warnings and a missing host label end up in
        :attr:`warnings`."""
        self.time = time.time()
        deadline = time.monotonic() + self.client.timeout
        samples = {}
        warnings: list[str] = []
        for name, expr in self.queries.items():
            reply = self.client.query(expr, at=self.time, deadline=deadline)
            try:
                samples[name] = parse_vector(reply)
            except FleetDataError as exc:
                raise PrometheusError(f"Prometheus at {self.client.url}: unexpected reply to the {name} query: "
                                      f"{safe(exc)}") from None
            extra = reply.get("warnings")
            for w in extra if isinstance(extra, list) else []:
                text = f"Prometheus warns: {safe(str(w))[:300]}"
                if text not in warnings:
                    warnings.append(text)
        per_host = [m for name in ("calls", "p99") for m, _ in samples[name]]
        if per_host and not any(self.host_label in m for m in per_host):
            warnings.append(f"no series has the label {self.host_label!r}: all hosts show as one; "
                            "try --host-label instance (daemons without a host label)")
        self.warnings = warnings[:10]
        return build_rows(samples, self.host_label, self.thresholds)

    def document(self, rows: list[FleetRow], sort: str, host: str | None) -> dict[str, Any]:
        rows = sort_rows(rows, sort)
        if host is not None:
            rows = [r for r in rows if any(h.host == host for h in r.hosts)]
        return to_json(rows, prometheus=self.client.url, window=self.window, host_label=self.host_label,
                       source="recording rules" if self.rules else "histograms", time=round(self.time, 3),
                       drill_down_host=host, thresholds=self.thresholds.as_dict(), warnings=self.warnings)


def _dur(seconds: float | None) -> str:
    return format_ns(seconds * 1e9) if seconds is not None and math.isfinite(seconds) else "-"


def _outlier_cell(r: FleetRow, th: Thresholds) -> str:
    flagged = sorted(r.outliers, key=lambda h: -abs(h.z or 0))
    if flagged:
        med = r.median_host_p99_s
        parts = []
        for h in flagged[:2]:
            ratio = f" x{h.p99_s / med:.1f}" if med and math.isfinite(med) and med > 0 else ""
            parts.append(f"{h.host}{ratio} z={h.z:+.1f}")
        more = f" +{len(flagged) - 2}" if len(flagged) > 2 else ""
        return ", ".join(parts) + more
    if r.scored_hosts < th.min_hosts:
        return f"({r.scored_hosts}/{th.min_hosts} hosts)"
    return "-"


def render(fleet: Fleet, rows: list[FleetRow], sort: str, host: str | None, limit: int = 0,
           caption: str | None = None) -> Any:
    """A rich Table of the rows; every peer-supplied string is escaped (labels are any bytes
    a service or a host sent). ``caption``: lines under the table (keys, the last error)."""
    from rich.table import Table
    from rich.text import Text

    rows = sort_rows(rows, sort)
    if host is not None:
        rows = [r for r in rows if any(h.host == host for h in r.hosts)]
    hosts = {h.host for r in rows for h in r.hosts if h.calls_per_s > 0}
    total = len(rows)
    if limit and total > limit:
        rows = rows[:limit]
    where = f", host {host}" if host is not None else ""
    title = (f"aclprof fleet: {len(hosts)} hosts, window {fleet.window}{where}, sorted by {sort}  "
             f"({fleet.client.url})")
    table = Table(title=Text(safe(title)), title_justify="left", expand=False,
                  caption=Text("\n".join(safe(line) for line in caption.split("\n"))) if caption else None,
                  caption_justify="left")
    columns: list[tuple[str, Literal["left", "right"]]] = [("Service", "left"), ("Op type", "left")]
    if host is None:
        columns += [("Calls/s", "right"), ("p50", "right"), ("p99", "right"), ("% device", "right"),
                    ("Hosts", "right"), ("Outliers (p99)", "left")]
    else:
        columns += [("Calls/s", "right"), ("p50", "right"), ("p99", "right"), ("Fleet p99", "right"),
                    ("z", "right"), ("", "left")]
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis",
                         max_width=40 if justify == "left" else None)
    for r in rows:
        head = [Text(safe(r.service or "-")), Text(safe(r.op_type))]
        if host is None:
            table.add_row(*head, f"{r.calls_per_s:,.1f}", _dur(r.p50_s), _dur(r.p99_s), f"{100 * r.share:.1f}",
                          str(r.hosts_reporting), Text(safe(_outlier_cell(r, fleet.thresholds)),
                                                       style="bold red" if r.outliers else ""))
        else:
            h = next(h for h in r.hosts if h.host == host)
            z = f"{h.z:+.1f}" if h.z is not None else "-"
            table.add_row(*head, f"{h.calls_per_s:,.1f}", _dur(h.p50_s), _dur(h.p99_s), _dur(r.p99_s), z,
                          Text("OUTLIER", style="bold red") if h.outlier else "")
    if total > len(rows):
        table.add_row(Text(f"... {total - len(rows)} more", style="dim"), *[""] * (len(columns) - 1))
    if not rows:
        none = f"(no op series for host {host})" if host is not None else "(no aclprofd op series in this window)"
        table.add_row(Text(safe(none), style="dim"), *[""] * (len(columns) - 1))
    return table


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
                _print(render(fleet, rows, args.sort, args.host, args.limit, "\n".join(fleet.warnings)))
            return EXIT_OK
        if not sys.stdout.isatty():
            while True:  # a pipe: a plain table every interval; `| head` ends it quietly (EPIPE)
                rows = fleet.fetch()
                _print(render(fleet, rows, args.sort, args.host, args.limit, "\n".join(fleet.warnings)))
                print(flush=True)
                time.sleep(args.interval)
        _live(fleet, args)
        return EXIT_OK
    except PrometheusError as exc:
        raise CliError(str(exc)) from None


def _print(table: Any) -> None:
    from aclprof.cli.topview import _pipe_console

    console = _pipe_console(no_color=not use_colour(), highlight=False,
                            width=None if sys.stdout.isatty() else 160)
    console.print(table)
    sys.stdout.flush()


def _live(fleet: Fleet, args: argparse.Namespace) -> None:
    """The terminal view: refresh every interval, keys change the sort, q quits. A failed
    refresh keeps the last table and shows the error in the caption (retried next time)."""
    from rich.console import Console
    from rich.live import Live

    from aclprof.cli.topview import _Cbreak

    console = Console()
    stdin = sys.stdin if sys.stdin is not None and sys.stdin.isatty() else None
    sort = args.sort
    rows: list[FleetRow] = []
    error = ""
    keys = "keys: d c 5 9 o sort (device share, calls, p50, p99, outlier), q quit"
    with _Cbreak(stdin) as term, Live(console=console, auto_refresh=False) as live:
        next_refresh = 0.0
        redraw = True
        while True:
            now = time.monotonic()
            if now >= next_refresh:
                try:
                    rows = fleet.fetch()
                    error = ""
                except PrometheusError as exc:
                    error = f"refresh failed: {exc}"
                next_refresh = now + args.interval
                redraw = True
            if redraw:
                limit = args.limit or max(5, console.size.height - 8)
                caption = "\n".join([keys, *fleet.warnings] + ([error] if error else []))
                live.update(render(fleet, rows, sort, args.host, limit, caption), refresh=True)
                redraw = False
            key = term.read_key(min(max(next_refresh - time.monotonic(), 0.0), 0.25))
            if key in ("q", "Q", "\x03"):
                return
            if key in _KEY_SORT:
                sort = _KEY_SORT[key]
                redraw = True
