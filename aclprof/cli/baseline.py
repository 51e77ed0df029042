"""aclprof baseline: save the daemon's recent op-latency histograms under a name, and list
the saved ones. A saved baseline can be pinned for the regression detector
(detector_baseline = "NAME" in the daemon's config) and compared with aclprof diff.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from aclprof.cli.argtypes import checked
from aclprof.cli.common import EXIT_OK, CliError, add_socket_arg, connect
from aclprof.protocol.baselinefmt import check_name
from aclprof.protocol.safetext import safe
from aclprof.protocol.wire import Kind

__all__ = ["add_parser", "cmd_baseline"]

_EXAMPLES = """examples:
  aclprof baseline save good-v42          the last ~10 minutes per (service, model, op type, op name)
  aclprof baseline save now --source current   only the detector's current window (30 s)
  aclprof baseline list
  aclprof diff baseline:good-v42 live:current   what changed since
then pin it: detector_baseline = "good-v42" in the daemon's config, and `kill -HUP` the daemon.
"""


def add_parser(sub: Any, fmt: Any) -> None:
    p = sub.add_parser("baseline", help="save or list op-latency baselines (regression detector, diff)",
                       formatter_class=fmt, description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
                       epilog=_EXAMPLES)
    sp = p.add_subparsers(dest="baseline_command", metavar="ACTION", required=True)
    s = sp.add_parser("save", help="save the daemon's recent histograms as NAME (replaces an older NAME)",
                      formatter_class=fmt, epilog=_EXAMPLES)
    s.add_argument("name", type=checked(check_name), metavar="NAME", help="1-64 letters, digits, '.', '_', '-'")
    s.add_argument("--source", choices=("recent", "current", "trailing"), default="recent",
                   help="recent: trailing baseline + current window (default); current: the current window; "
                        "trailing: the decayed trailing baseline")
    s.add_argument("--json", action="store_true", help="the daemon's reply as JSON")
    add_socket_arg(s)
    s.set_defaults(func=cmd_baseline)
    ls = sp.add_parser("list", help="the saved baselines and the one the detector uses", formatter_class=fmt)
    ls.add_argument("--json", action="store_true", help="the daemon's reply as JSON")
    add_socket_arg(ls)
    ls.set_defaults(func=cmd_baseline)


def cmd_baseline(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.baseline_command == "save":
            reply = client.request(Kind.BASELINE_SAVE, {"name": args.name, "source": args.source},
                                   Kind.BASELINE_SAVE_REPLY)
            if args.json:
                print(json.dumps(reply))
            else:
                print(f"saved baseline {safe(reply.get('name'))}: {reply.get('rows')} ops "
                      f"({reply.get('source')}), {reply.get('bytes')} bytes in {safe(reply.get('path'))}")
                cut = reply.get("truncated")
                if isinstance(cut, dict) and cut.get("rows"):
                    print(f"note: {cut['rows']} ops of {cut.get('services', '?')} services left out: the document "
                          "is at its size budget (each service gets a fair share; see daemon/README.md "
                          "\"Regression detection\")", file=sys.stderr)
                if not reply.get("rows"):
                    print("note: the detector had no histograms yet (no op records in the last minutes)",
                          file=sys.stderr)
            return EXIT_OK
        reply = client.request(Kind.BASELINE_LIST, {}, Kind.BASELINE_LIST_REPLY)
    if args.json:
        print(json.dumps(reply))
        return EXIT_OK
    items = reply.get("baselines")
    if not isinstance(items, list):
        raise CliError("the daemon's BASELINE_LIST reply has no 'baselines' list")
    print(f"detector baseline in use: {safe(reply.get('active'))}   (directory {safe(reply.get('dir'))})")
    if not items:
        print("no saved baselines (aclprof baseline save NAME)")
    for b in items:
        if not isinstance(b, dict):
            continue
        if b.get("error"):
            print(f"  {safe(b.get('name')):<24} unreadable: {safe(b['error'])}")
            continue
        ts = b.get("saved_ts")
        ok = isinstance(ts, (int, float)) and 0 <= ts < 1e11  # a daemon's number: not trusted blindly
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ok else "?"
        cut = b.get("truncated")
        print(f"  {safe(b.get('name')):<24} {when}  {b.get('rows')} ops  {safe(b.get('source'))}  "
              f"{b.get('bytes')} bytes" + (f"  ({cut} ops left out at the size budget)" if cut else ""))
    return EXIT_OK
