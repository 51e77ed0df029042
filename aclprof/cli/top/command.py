"""``aclprof top``: a live, sortable table of per-operator timings (like ``py-spy top``).

Each refresh asks the daemon for a SNAPSHOT of its windowed aggregates, grouped by op type,
op name, service, process, device or model, under a header (records/s, processes,
services, devices, drops, daemon health: :mod:`aclprof.cli.top.header`). The keys are the
table :data:`aclprof.cli.top.keys.KEYS` (listed by ``--help``); ``r`` is a view-local reset
that never changes the daemon's shared aggregates (``aclprof reset`` does, for admins).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
import time
from typing import Any

from aclprof.cli.argtypes import row_limit, seconds
from aclprof.cli.client import DEVICE_NEEDS_KEYS
from aclprof.cli.common import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    CliError,
    add_filter_args,
    add_socket_arg,
    connect,
    filter_from_args,
)
from aclprof.cli.top.cells import RESOLUTION
from aclprof.cli.top.header import Header
from aclprof.cli.top.keys import BASIC_GROUPS, GROUPS, help_text
from aclprof.cli.top.live import header_for, refresh_header, run_live
from aclprof.cli.top.view import (
    SORT_KEYS,
    WINDOWS,
    TopView,
    learn_groups,
    learn_windows,
    print_table,
    snapshot,
    sort_rows,
)

__all__ = ["add_parser", "cmd_top"]

EXIT_USAGE = EXIT_UNREACHABLE  # 2: a usage error, as argparse's (see aclprof.cli's exit codes)

_EXAMPLES = f"""keys (live view):
{help_text()}

{textwrap.fill(RESOLUTION, 96)}

examples:
  aclprof top                             live, by op type, window 10s
  aclprof top --group service             which service spends the time (also process, device, model)
  aclprof top --group name --sort p99 --window 1m --device 0
  aclprof top --once                      one table, then exit
  aclprof top --once --json | jq '.rows[0]'
  aclprof top | head -20                  a table per interval; exits 0 quietly on a closed pipe
"""


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof top`` on the subparsers ``sub``."""
    p = sub.add_parser("top", help="live sortable table of op timings", formatter_class=fmt,
                       description="A live table of per-operator timings aggregated by the daemon: "
                                   "count, total, avg, p50, p99, max and share of time, by op type, op name, "
                                   "service, process, device or model, under a header with records/s, "
                                   "processes, services, devices, drops and the daemon's health.",
                       epilog=_EXAMPLES)
    # Options are checked here (exit 2, the valid values named), never left for the daemon to
    # refuse: a refused SNAPSHOT costs the connection and counts as a protocol error there.
    p.add_argument("--window", type=_window_arg, default="10s", metavar="W",
                   help="aggregation window: 10s, 1m or all with the daemon's default windows "
                        "(`aclprof status --json` lists them under aggregates.windows; default 10s)")
    p.add_argument("--group", choices=GROUPS, default="type",
                   help="group rows by " + ", ".join(GROUPS) + " (default type; all but type and name "
                        "need a daemon with per-service keys)")
    p.add_argument("--sort", choices=tuple(SORT_KEYS), default="total",
                   help="sort column: " + ", ".join(SORT_KEYS) + " (default total)")
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="with --once: the SNAPSHOT reply as JSON")
    p.add_argument("--interval", type=seconds(), default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--limit", type=row_limit, default=0, help="at most this many rows (default: fit the screen)")
    add_filter_args(p, min_duration=False)  # aggregates keep no single records
    add_socket_arg(p)
    p.set_defaults(func=cmd_top)


_WINDOW = re.compile(r"^(all|[1-9][0-9]*[smh])$")


def _window_arg(text: str) -> str:
    """A window name as the daemon spells them (aclprofd.aggregate.windows.window_name)."""
    if not _WINDOW.match(text):  # argparse prefixes "argument --window:" and exits 2
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a window: one of {', '.join(WINDOWS)} with the daemon's default windows "
            "(a daemon started with --windows may offer others, such as 5m or 1h)")
    return text


def _check_window(view: TopView) -> None:
    """``--window`` against the windows this daemon offers (learnt from STATUS)."""
    if view.window not in view.windows:
        raise CliError(f"--window {view.window!r}: this daemon aggregates over "
                       f"{', '.join(view.windows)} (valid values; see its --windows setting)", EXIT_USAGE)


def _check_group(client: Any, view: TopView, status: dict[str, Any] | None) -> None:
    """``--group`` and ``--device`` against what this daemon offers (before any SNAPSHOT
    with them: an older daemon would refuse it as malformed)."""
    if view.group in BASIC_GROUPS and "device" not in view.base_filter:
        return
    learn_groups(client, view, status)
    if view.group not in view.groups:
        raise CliError(f"--group {view.group}: this daemon groups by {', '.join(view.groups)} only "
                       "(grouping by service, process, device or model needs an aclprofd with per-service "
                       "keys: upgrade it)", EXIT_USAGE)
    if "device" in view.base_filter and view.groups == BASIC_GROUPS:
        raise CliError(DEVICE_NEEDS_KEYS, EXIT_USAGE)


def cmd_top(args: argparse.Namespace) -> int:
    """One table (``--once``), a table per interval into a pipe, or the live view on a terminal."""
    if args.json and not args.once:
        raise CliError("--json needs --once (the live view is a table)", 2)
    base = filter_from_args(args)
    view = TopView(args.window, args.group, args.sort, base_filter=base)
    client = connect(args)
    header = Header()
    try:
        refresh_header(client, header)
        if learn_windows(client, view, header.status):
            _check_window(view)
        _check_group(client, view, header.status)
        if args.once:
            snap = snapshot(client, view)
            if args.json:
                snap = dict(snap)
                snap["rows"] = sort_rows(snap.get("rows") or [], args.sort)
                print(json.dumps(snap, indent=2))
            else:
                print_table(snap, view, args.limit, header=header_for(header, snap, view))
            return EXIT_OK
        if not sys.stdout.isatty():
            # In a pipe: a plain table every interval (like `nvtop --snapshot --loop`).
            while True:
                refresh_header(client, header)
                snap = snapshot(client, view)
                print_table(snap, view, args.limit, header=header_for(header, snap, view))
                print(flush=True)
                time.sleep(args.interval)
        run_live(client, view, args.interval, args.limit)
        return EXIT_OK
    finally:
        client.close()
