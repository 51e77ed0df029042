"""What every ``aclprof`` command shares: exit codes, :class:`CliError`, the socket and filter
options (their value types are :mod:`aclprof.cli.argtypes`, whose parsers of durations and
times are re-exported here), formatting of durations, and the connection to the daemon.

Command modules import this one, never each other or :mod:`aclprof.cli.main`, so the
package has no import cycle.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, TYPE_CHECKING, Any

from aclprof.cli import argtypes
from aclprof.cli.argtypes import parse_duration_ns, parse_time, regex_problem
from aclprof.protocol.filterkeys import FILTER_KEYS

if TYPE_CHECKING:
    from aclprof.cli.client import Client

__all__ = ["EXIT_OK", "EXIT_ERROR", "EXIT_UNREACHABLE", "EXIT_INTERRUPTED", "CliError",
           "parse_duration_ns", "parse_time", "format_ns", "add_socket_arg", "add_filter_args",
           "filter_from_args", "regex_problem", "connect", "use_colour", "quiet_broken_pipe", "print_error"]

EXIT_OK, EXIT_ERROR, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CliError(Exception):
    """A failure to report as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# -- parsing: aclprof.cli.argtypes (re-exported here for the command modules) ------------------

def format_ns(ns: float | int | None) -> str:
    """A duration with a readable unit: 850ns, 12.3us, 4.56ms, 1.23s."""
    if ns is None:
        return "-"
    ns = float(ns)
    if ns < 1_000:
        return f"{ns:.0f}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}us"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e9:.2f}s"


def add_socket_arg(p: argparse.ArgumentParser) -> None:
    """``--socket PATH``: which daemon to talk to."""
    p.add_argument("--socket", metavar="PATH", default=None, type=argtypes.socket_path,
                   help="the daemon's socket (default: $ACLPROF_SOCKET, else "
                        "$XDG_RUNTIME_DIR/aclprof/aclprofd.sock, else /run/aclprof/aclprofd.sock)")


def add_filter_args(p: argparse.ArgumentParser, min_duration: bool = True) -> None:
    """The record filters shared by ``tail``, ``top`` and ``export``."""
    g = p.add_argument_group("filters (all must match)")
    g.add_argument("--model", type=argtypes.model_id, metavar="ID", help="model id")
    g.add_argument("--pid", type=argtypes.pid, metavar="PID", help="process id of the inference service")
    g.add_argument("--device", type=argtypes.device_id, metavar="N", help="device id (0, 1, ...)")
    g.add_argument("--type", type=argtypes.regex, metavar="REGEX", help="op type regex (RE2 syntax, searched)")
    g.add_argument("--name", type=argtypes.regex, metavar="REGEX", help="op name regex (RE2 syntax, searched)")
    if min_duration:
        g.add_argument("--min-duration", type=argtypes.min_duration, metavar="DUR",
                       help="only ops at least this long (100us, 1.5ms, ...)")
    g.add_argument("--service", type=argtypes.name("service name"), metavar="NAME",
                   help="service name given to aclprof.agent.start")
    g.add_argument("--host", type=argtypes.name("host name"), metavar="HOST", help="host name")


#: filter keys whose option is named otherwise (``--min-duration``); the rest share the key
_OPTION_DEST = {"min_duration_ns": "min_duration"}


def filter_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The daemon-side filter (a JSON object) of the options :func:`add_filter_args` added."""
    f: dict[str, Any] = {}
    for key in FILTER_KEYS:
        value = getattr(args, _OPTION_DEST.get(key, key), None)
        if value is not None and not (key == "min_duration_ns" and value == 0):  # 0: no bound
            f[key] = value
    return f


def connect(args: argparse.Namespace, timeout: float | None = 5.0) -> Client:
    """A control client, or CliError(code 2) if no daemon is reachable."""
    from aclprof.cli.client import Client, DaemonUnreachable

    try:
        return Client(getattr(args, "socket", None), timeout=timeout)
    except DaemonUnreachable as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None


def use_colour(stream: IO[str] | None = None) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set or ``TERM=dumb``."""
    stream = stream or sys.stdout
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def quiet_broken_pipe() -> int:
    """After EPIPE on stdout: stop Python from complaining at exit; exit status 0."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass
    return EXIT_OK


def print_error(message: str) -> None:
    """``aclprof: error: ...`` on stderr; silent if stderr itself is gone."""
    try:
        print(f"aclprof: error: {message}", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass
