"""``aclprof reset``: the admin's explicit command that wipes the daemon's shared aggregates
(every window and the since-start totals, also the copy in its data directory).

``top``'s ``r`` never does this (it is a view-local baseline): the aggregates belong to every
user of the host. So this command says what it is about to wipe, asks on a terminal, refuses
without ``--yes`` when there is no terminal to ask on (exit 2), and says what it wiped.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from aclprof.cli.common import EXIT_ERROR, EXIT_OK, EXIT_UNREACHABLE, CliError, add_socket_arg, connect
from aclprof.protocol.safetext import safe

__all__ = ["add_parser", "cmd_reset"]

_EXAMPLES = """examples:
  aclprof reset                  shows what would be wiped and asks (y/N)
  aclprof reset --yes            no question (scripts; needed when stdin is not a terminal)

The stored records (segments on disk: export, tail) are kept, and Prometheus' series go on;
only the aggregates that top and status read start again. Needs the daemon's admin rights.
"""


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof reset`` on the subparsers ``sub``."""
    p = sub.add_parser("reset", help="admin: wipe the daemon's aggregates (asks first)", formatter_class=fmt,
                       description="Wipe the daemon's shared aggregates for every user: its windows and "
                                   "since-start totals, also the copy saved in its data directory.",
                       epilog=_EXAMPLES)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask (required when stdin is not a terminal)")
    add_socket_arg(p)
    p.set_defaults(func=cmd_reset)


def _what(client: Any) -> tuple[str, int]:
    """What a RESET would wipe, as one phrase, and the record count in it."""
    st = client.status()
    snap = client.snapshot("all", "type", {})
    rows = snap.get("rows") or []
    records = sum(int(r.get("count") or 0) for r in rows)
    agg = st.get("aggregates") or {}
    since = agg.get("since_ts")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else ""
    windows = ", ".join(str(w) for w in agg.get("windows") or []) or "all windows"
    data = (st.get("storage") or {}).get("dir")
    return (f"{records:,} op records in {int(agg.get('keys') or len(rows)):,} aggregate keys{when} "
            f"(windows {windows}{', and the copy saved in ' + str(data) if data else ''}) of aclprofd pid "
            f"{st.get('pid', '?')} on {client.socket_path}"), records


def _confirm(question: str) -> bool:
    print(safe(question) + " [y/N] ", end="", flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def cmd_reset(args: argparse.Namespace) -> int:
    """Exit 0 after a reset, 1 if declined or refused by the daemon, 2 for no terminal to
    ask on without ``--yes`` (or no daemon)."""
    interactive = sys.stdin is not None and sys.stdin.isatty()
    if not args.yes and not interactive:
        raise CliError("reset wipes the daemon's aggregates for every user: stdin is not a terminal to confirm "
                       "on; pass --yes to reset without asking", EXIT_UNREACHABLE)
    client = connect(args)
    try:
        what, _ = _what(client)
        if not args.yes and not _confirm(f"Wipe {what} for every user?"):
            print("nothing reset")
            return EXIT_ERROR
        client.reset()
    finally:
        client.close()
    print(safe(f"reset: wiped {what}; the stored records and Prometheus' series are kept"))
    return EXIT_OK
