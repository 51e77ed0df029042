"""``aclprof captures``: the flight recorder's captures (daemon/README.md "Flight recorder"):
for each new regression flag, the daemon kept the records of the seconds around it as a
directory with an ``ascend`` export (MindStudio Insight, ``msprof-analyze``) and a Chrome
trace (``trace.json``: ui.perfetto.dev). The list comes from the STATUS reply's
``captures`` object (daemon/PROTOCOL.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from aclprof.cli.argtypes import seconds
from aclprof.cli.capturefmt import format_captures
from aclprof.cli.common import EXIT_OK, CliError, add_socket_arg, connect

__all__ = ["add_parser", "cmd_captures"]

_DESCRIPTION = """The flight recorder's captures, newest first. For each new regression flag the daemon
keeps the flagged service's records from capture_before before to capture_after after it, in
<data_dir>/captures/<time>_<service>_<op_type>/: capture.json (what was flagged), trace.json
(Chrome trace) and ascend/ (torch_npu's directories). Bounded in count and bytes; see
daemon/README.md "Flight recorder"."""

_EXAMPLES = """examples:
  aclprof captures                      newest first: when, what was flagged, records, size, where
  aclprof captures --json | jq -r '.items[0].path'
  ui.perfetto.dev: open <path>/trace.json;  MindStudio Insight / msprof-analyze: <path>/ascend/
"""


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof captures`` on the subparsers ``sub``."""
    p = sub.add_parser("captures", help="flight recorder: records kept around each regression flag",
                       formatter_class=fmt, description=_DESCRIPTION, epilog=_EXAMPLES)
    p.add_argument("--json", action="store_true", help="the STATUS reply's captures object as JSON")
    p.add_argument("--timeout", type=seconds(), default=5.0, help="seconds to wait for the daemon (default 5)")
    add_socket_arg(p)
    p.set_defaults(func=cmd_captures)


def cmd_captures(args: argparse.Namespace) -> int:
    from aclprof.cli.client import DaemonError

    client = connect(args, timeout=args.timeout)
    try:
        st = client.status()
    except DaemonError as exc:
        raise CliError(str(exc)) from None
    finally:
        client.close()
    cap = st.get("captures")
    if not isinstance(cap, dict):
        raise CliError("this aclprofd has no flight recorder (its STATUS has no captures): upgrade it")
    if args.json:
        print(json.dumps(cap, indent=2))
    else:
        print(format_captures(cap))
    return EXIT_OK
