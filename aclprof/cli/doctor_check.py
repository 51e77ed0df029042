"""``aclprof doctor --check``: the library self-check (:mod:`aclprof.api.selfcheck`) from the
command line, with a report file a user can attach to an issue (JSON, and the same as text
beside it).

Exit status: 0 every check passed; 1 a check failed (the report names it and why);
2 bad arguments, or the report file cannot be written.

With :mod:`aclprof.cli.doctor`, the only CLI modules that touch the binding (and the api
layer, for the subscription), and only inside the command.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from aclprof.cli.argtypes import input_path, integer, output_path, seconds
from aclprof.cli.common import EXIT_ERROR, EXIT_OK, EXIT_UNREACHABLE

__all__ = ["add_check_args", "cmd_check", "DEFAULT_REPORT", "EXIT_BAD_USE"]

DEFAULT_REPORT = "aclprof-check.json"
#: Bad arguments or an unwritable report (argparse's own usage errors exit 2 as well).
EXIT_BAD_USE = EXIT_UNREACHABLE  # the CLI's code 2


def add_check_args(p: Any) -> None:
    """The ``--check`` options of ``aclprof doctor``."""
    g = p.add_argument_group("self-check (--check)")
    g.add_argument("--check", action="store_true",
                   help="instead of the deployment checks: report the CANN version, the library set "
                        "and which file gave each function group, run a short profiling session and, "
                        "with --model, a short subscription (layout self-check, clock calibration, "
                        "record rate); write the report to --report")
    g.add_argument("--model", metavar="FILE", type=input_path,
                   help="a model file to load, run and subscribe to (.om; on the mock, a mock model "
                        "description). A model your own process loaded is checked from that process: "
                        "aclprof.api.selfcheck.run_check(model_id=..., run=...)")
    g.add_argument("--device", type=integer("a device id", 0, 63), default=0,
                   help="the device to profile and run on (default 0)")
    g.add_argument("--executions", type=integer("a count of executions", 1, 100000), default=20,
                   help="how often --model is executed, with empty datasets (default 20)")
    g.add_argument("--report", type=output_path, default=DEFAULT_REPORT, metavar="PATH",
                   help=f"the JSON report (the text one goes beside it, .txt; default {DEFAULT_REPORT})")
    g.add_argument("--check-timeout", type=seconds(0.1), default=10.0, metavar="SECONDS",
                   help="how long the subscription's close may take (default 10)")


def cmd_check(args: argparse.Namespace) -> int:
    """Run the self-check, print it, write the report; the exit status of the module docstring."""
    from aclprof.api.selfcheck import run_check

    if args.model is not None and not os.path.isfile(args.model):
        print(f"aclprof doctor --check: --model {args.model}: no such file", file=sys.stderr)
        return EXIT_BAD_USE
    where = os.path.dirname(os.path.abspath(args.report))
    if not os.path.isdir(where) or not os.access(where, os.W_OK):
        # said before the check runs (a session and a subscription), not after
        print(f"aclprof doctor --check: cannot write the report {args.report}: {where} is not a "
              "writable directory", file=sys.stderr)
        return EXIT_BAD_USE
    report = run_check(device=args.device, model_file=args.model, executions=args.executions,
                       timeout=args.check_timeout)
    print(report.text(), end="")
    try:
        json_path, text_path = report.write(args.report)
    except OSError as exc:
        print(f"aclprof doctor --check: cannot write the report {args.report}: {exc}", file=sys.stderr)
        return EXIT_BAD_USE
    print(f"report: {json_path} and {text_path} (attach both to an issue)")
    return EXIT_OK if report.ok else EXIT_ERROR
