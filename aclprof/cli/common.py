"""What every ``aclprof`` command shares: exit codes, :class:`CliError`, parsing of
durations, times and filters, formatting of durations, and the connection to the daemon.

Command modules import this one, never each other or :mod:`aclprof.cli.main`, so the
package has no import cycle.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from aclprof.protocol.filterregex import RE2_SYNTAX, BadFilterRegex, compile_filter_regex
from aclprof.protocol.wire import MAX_REGEX_BYTES

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


# -- parsing helpers ------------------------------------------------------------------------

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s|min|m|h)?\s*$")


def parse_duration_ns(text: str, default_unit: str | None = None) -> int:
    """``"100us"`` -> 100000. Units: ns, us (or µs), ms, s, m/min, h."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (examples: 100us, 1.5ms, 2s)")
    value, unit = float(m.group(1)), m.group(2) or default_unit
    if unit is None:
        if value == 0:
            return 0
        raise argparse.ArgumentTypeError(f"{text!r} needs a unit (examples: 100us, 1.5ms, 2s)")
    return round(value * _UNITS_NS[unit])


def _duration_arg(text: str) -> int:
    return parse_duration_ns(text)


def _device_arg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device id (0, 1, ...)") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a device id is at least 0")
    return n


def _seconds_arg(text: str) -> float:
    return parse_duration_ns(text, default_unit="s") / 1e9


_RELATIVE = re.compile(r"^\s*(?:-\s*(?P<a>.+?)|(?P<b>.+?)\s+ago)\s*$")


def parse_time(text: str, now: float | None = None) -> float:
    """A point in time as Unix seconds: ISO 8601 (``2026-11-29T10:00:00``, local time unless
    it has an offset or ``Z``), Unix seconds (``1764410000.5``), ``now``, or relative
    (``-5m``, ``10s ago``, ``1h ago``)."""
    now = time.time() if now is None else now
    s = text.strip()
    if s.lower() == "now":
        return now
    m = _RELATIVE.match(s)
    if m:
        amount = m.group("a") or m.group("b")
        try:
            return now - parse_duration_ns(amount, default_unit="s") / 1e9
        except argparse.ArgumentTypeError:
            pass
    try:
        return float(s)
    except ValueError:
        pass
    from datetime import datetime

    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time (examples: 2026-11-29T10:00:00, 1764410000, -5m, '10s ago', now)") from None


def regex_problem(text: str) -> str | None:
    """Why the daemon would refuse ``text`` as a type/name filter, or None. The daemon
    matches with RE2 (linear time; no backreferences or lookaround) and a length limit:
    the same engine here, so a pattern Python's ``re`` accepts but RE2 does not is caught
    before connecting, with the flag named, not as a protocol error from the daemon."""
    try:
        compile_filter_regex(text)
    except BadFilterRegex as exc:
        if exc.size is not None:
            return f"regex is {exc.size} bytes; at most {MAX_REGEX_BYTES}"
        return f"RE2 rejects {text!r}: {exc.detail} ({RE2_SYNTAX})"
    return None


def _regex_arg(text: str) -> str:
    problem = regex_problem(text)
    if problem is not None:  # argparse prefixes the flag: "argument --type: ..." and exits 2
        raise argparse.ArgumentTypeError(problem)
    return text


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
    p.add_argument("--socket", metavar="PATH", default=None,
                   help="the daemon's socket (default: $ACLPROF_SOCKET, else "
                        "$XDG_RUNTIME_DIR/aclprof/aclprofd.sock, else /run/aclprof/aclprofd.sock)")


def add_filter_args(p: argparse.ArgumentParser, min_duration: bool = True) -> None:
    """The record filters shared by ``tail``, ``top`` and ``export``."""
    g = p.add_argument_group("filters (all must match)")
    g.add_argument("--model", type=int, metavar="ID", help="model id")
    g.add_argument("--pid", type=int, metavar="PID", help="process id of the inference service")
    g.add_argument("--device", type=_device_arg, metavar="N", help="device id (0, 1, ...)")
    g.add_argument("--type", type=_regex_arg, metavar="REGEX", help="op type regex (RE2 syntax, searched)")
    g.add_argument("--name", type=_regex_arg, metavar="REGEX", help="op name regex (RE2 syntax, searched)")
    if min_duration:
        g.add_argument("--min-duration", type=_duration_arg, metavar="DUR",
                       help="only ops at least this long (100us, 1.5ms, ...)")
    g.add_argument("--service", metavar="NAME", help="service name given to aclprof.agent.start")
    g.add_argument("--host", metavar="HOST", help="host name")


def filter_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The daemon-side filter (a JSON object) of the options :func:`add_filter_args` added."""
    f: dict[str, Any] = {}
    for key in ("model", "pid", "device", "type", "name", "service", "host"):
        value = getattr(args, key, None)
        if value is not None:
            f[key] = value
    if getattr(args, "min_duration", None):
        f["min_duration_ns"] = args.min_duration
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
