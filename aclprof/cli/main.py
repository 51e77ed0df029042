"""The ``aclprof`` entry point: the argument parser, logging set-up and dispatch to a command.

Each command module contributes its subparser (``add_parser``) and its function
(``set_defaults(func=...)``); :func:`main` maps every failure to one line on stderr and an
exit status (see :mod:`aclprof.cli`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from aclprof.cli import baseline, captures, demo, diff, doctor, export, otlp, requests, reset, status, tail, trace
from aclprof.cli.client import DaemonError
from aclprof.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_UNREACHABLE, CliError, print_error, quiet_broken_pipe
from aclprof.cli.fleet import command as fleet
from aclprof.cli.signals import Terminated, ending_signals, exit_status
from aclprof.cli.top import command as top

__all__ = ["main", "build_parser"]


def _configure_logging(level: str) -> None:
    """structlog to stderr: readable on a terminal, JSON lines otherwise."""
    import logging

    import structlog

    shared: list[Any] = [structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
              structlog.processors.TimeStamper(fmt="iso")]
    if sys.stderr.isatty():
        renderer: Any = structlog.dev.ConsoleRenderer()
    else:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.dict_tracebacks)
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``aclprof`` parser with every command's subparser."""
    from aclprof.protocol.version import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="aclprof", formatter_class=fmt,
        description="Live per-operator timings of Ascend inference processes (via the aclprofd daemon).",
        epilog="""examples:
  aclprof demo --duration 20          try everything on the built-in mock
  aclprof top                          live table of op timings (aclprof top --help: keys)
  aclprof top --group service          by service (also type, name, process, device, model)
  aclprof tail --type MatMul --json    live op records as JSON lines
  aclprof tail -F --device 0           every op of device 0; reconnects when the daemon restarts
  aclprof status                       is the daemon healthy? who is connected?
  aclprof captures                     records kept around each latency regression flag
  aclprof requests --since -10m        the slowest requests and the op types that made them slow
  aclprof export --since -10m --format ascend -o prof/   for MindStudio Insight, msprof-analyze
  aclprof otlp --endpoint http://collector:4318/v1/metrics --since -1m   to OpenTelemetry
  aclprof diff baseline:good live:current   p50/p99 shifts per op type, with intervals
  aclprof trace --service bert --duration 5s   a Profiler session in that service's processes
  aclprof fleet --prometheus http://prom:9090   every host's ops, outliers flagged
  aclprof doctor                       diagnose the library, the environment and the daemon
  aclprof reset                        admin: wipe the daemon's shared aggregates (asks first)

exit codes: 0 ok, 1 error or unhealthy, 2 usage error or daemon unreachable, 130 interrupted (Ctrl-C),
143 terminated (SIGTERM), 129 hung up (SIGHUP); an export stopped by any of these leaves nothing behind""")
    parser.add_argument("--version", action="version", version=f"aclprof {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("ACLPROF_LOG_LEVEL", "warning"),
                        choices=["debug", "info", "warning", "error"], help="log level (default warning)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # The order of `aclprof --help`.
    for command in (tail, top, status, requests, export, otlp, diff, baseline, captures, trace, demo, doctor, reset,
                    fleet):
        command.add_parser(sub, fmt)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    argv = _join_negative_times(list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_UNREACHABLE
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_UNREACHABLE
    _configure_logging(args.log_level)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        with ending_signals():  # SIGTERM and SIGHUP clean up as Ctrl-C does
            return func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Terminated as exc:
        return exit_status(exc.signum)
    except BrokenPipeError:
        return quiet_broken_pipe()
    except CliError as exc:
        print_error(str(exc))
        return exc.code
    except DaemonError as exc:
        print_error(str(exc))
        return EXIT_ERROR
    except OSError as exc:
        print_error(f"{exc.strerror or exc}" + (f": {exc.filename}" if getattr(exc, "filename", None) else ""))
        return EXIT_ERROR


_NEGATIVE = re.compile(r"^-\s*(?:[\d.]|inf|nan)", re.IGNORECASE)


def _join_negative_times(argv: list[str]) -> list[str]:
    """``--since -5m`` -> ``--since=-5m``, and so for every long option followed by a value
    that starts like a negative number (``--timeout -1s``, ``--interval -inf``): argparse
    would take it for an option and say "expected one argument" instead of refusing the
    value by name (``--since -5m`` is valid: five minutes ago)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":  # the rest are operands
            out.extend(argv[i:])
            break
        if a.startswith("--") and "=" not in a and i + 1 < len(argv) and _NEGATIVE.match(argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out
