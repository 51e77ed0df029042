"""The ``aclprof`` command: live per-operator timings from the host daemon, and tools.

    aclprof demo                  # everything on the built-in mock, no setup
    aclprof tail --type Conv      # a live stream of op records
    aclprof top                   # a live, sortable table of op timings
    aclprof status                # daemon health, connected processes, drops, lag
    aclprof export --since -5m --format chrome -o trace.json
    aclprof doctor                # which libascendcl, CANN variables, daemon reachability

Exit codes: 0 success; 1 an error (or, for ``status``, an unhealthy daemon); 2 a usage
error or no daemon reachable; 130 interrupted (Ctrl-C). Errors are one line on stderr.

This module is an entry point: it configures structlog (once, in :func:`main`); the
commands live in ``aclprof/cli_*.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Callable

__all__ = ["main", "CliError", "parse_duration_ns", "parse_time", "format_ns"]

EXIT_OK, EXIT_ERROR, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CliError(Exception):
    """A failure to report as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
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
    return int(round(value * _UNITS_NS[unit]))


def _duration_arg(text: str) -> int:
    return parse_duration_ns(text)


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


def _regex_arg(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid regular expression: {exc}") from None
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
    p.add_argument("--socket", metavar="PATH", default=None,
                   help="the daemon's socket (default: $ACLPROF_SOCKET, else "
                        "$XDG_RUNTIME_DIR/aclprof/aclprofd.sock, else /run/aclprof/aclprofd.sock)")


def add_filter_args(p: argparse.ArgumentParser, min_duration: bool = True) -> None:
    g = p.add_argument_group("filters (all must match)")
    g.add_argument("--model", type=int, metavar="ID", help="model id")
    g.add_argument("--pid", type=int, metavar="PID", help="process id of the inference service")
    g.add_argument("--type", type=_regex_arg, metavar="REGEX", help="op type regex (re.search)")
    g.add_argument("--name", type=_regex_arg, metavar="REGEX", help="op name regex (re.search)")
    if min_duration:
        g.add_argument("--min-duration", type=_duration_arg, metavar="DUR",
                       help="only ops at least this long (100us, 1.5ms, ...)")
    g.add_argument("--service", metavar="NAME", help="service name given to aclprof.agent.start")
    g.add_argument("--host", metavar="HOST", help="host name")


def filter_from_args(args: argparse.Namespace) -> dict[str, Any]:
    f: dict[str, Any] = {}
    for key in ("model", "pid", "type", "name", "service", "host"):
        value = getattr(args, key, None)
        if value is not None:
            f[key] = value
    if getattr(args, "min_duration", None):
        f["min_duration_ns"] = args.min_duration
    return f


def connect(args: argparse.Namespace, timeout: float | None = 5.0):
    """A control client, or CliError(code 2) if no daemon is reachable."""
    from aclprof.cli.client import Client, DaemonUnreachable

    try:
        return Client(getattr(args, "socket", None), timeout=timeout)
    except DaemonUnreachable as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None


def use_colour(stream=None) -> bool:
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


# -- tail ------------------------------------------------------------------------------------

_TAIL_EXAMPLES = """examples:
  aclprof tail                                  every op of every process
  aclprof tail --type 'Conv|MatMul' --min-duration 100us
  aclprof tail --pid 4242 --model 1 --json | jq .duration_ns
  aclprof tail | head -20                       (exits quietly on a closed pipe)
"""


def _tail_line(r: dict[str, Any], colour: bool) -> str:
    ts = r.get("ts")
    if isinstance(ts, (int, float)):
        t = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"
    else:
        t = "-"
    dur = format_ns(r.get("duration_ns"))
    if r.get("kind") == "keypoint":
        # A step boundary (CANN's keypoint_op record): the step's span, not an op.
        mark = "\x1b[33m-- step\x1b[0m" if colour else "-- step"
        return (f"{t}  pid {r.get('pid', '?'):<7} dev {r.get('device', '?'):<2} model {r.get('model', '?'):<4} "
                f"{mark} {dur} ({r.get('start', '?')} .. {r.get('end', '?')}) --")
    op_type = str(r.get("op_type", "?"))
    if colour:
        op_type = f"\x1b[36m{op_type:<16}\x1b[0m"
        dur = f"\x1b[1m{dur:>9}\x1b[0m"
    else:
        op_type = f"{op_type:<16}"
        dur = f"{dur:>9}"
    return (f"{t}  pid {r.get('pid', '?'):<7} dev {r.get('device', '?'):<2} model {r.get('model', '?'):<4} "
            f"{op_type} {dur}  {r.get('op_name', '?')}")


def cmd_tail(args: argparse.Namespace) -> int:
    from aclprof.cli.client import DaemonError

    client = connect(args, timeout=5.0)
    client.settimeout(None)
    colour = use_colour()
    out = sys.stdout
    filt = filter_from_args(args)
    ended = "the daemon ended the stream (it stopped)"
    try:
        # --json: the daemon's JSON Lines pass through as they came, no decoding
        for payload, skipped in client.stream_jsonl(filt):
            if skipped:
                print(f"# {skipped} records skipped: this client is slower than the stream",
                      file=sys.stderr, flush=True)
            if not payload:
                continue
            if args.json:
                out.flush()
                raw = getattr(out, "buffer", None)  # a text-only stdout (embedding): decode
                if raw is None:
                    out.write(str(payload, "utf-8"))
                    out.flush()
                else:
                    raw.write(payload)
                    raw.flush()
            else:
                lines = str(payload, "utf-8").splitlines()
                out.write("".join(_tail_line(json.loads(line), colour) + "\n" for line in lines))
                out.flush()
    except DaemonError as exc:
        ended = f"the stream broke: {exc} (the daemon stopped?)"
    finally:
        client.close()
    raise CliError(ended, EXIT_ERROR)


# -- status ----------------------------------------------------------------------------------

_STATUS_EXAMPLES = """examples:
  aclprof status                 human summary; exit 0 healthy, 1 unhealthy, 2 unreachable
  aclprof status --json | jq '.agents[] | {pid, service, records_per_s, dropped}'
"""


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def format_status(st: dict[str, Any]) -> str:
    lines = []
    health = "healthy" if st.get("healthy") else "UNHEALTHY"
    lines.append(f"aclprofd {st.get('version', '?')} (pid {st.get('pid', '?')}): {health}, "
                 f"up {float(st.get('uptime_s', 0)):.0f}s")
    for problem in st.get("problems") or []:
        lines.append(f"  problem: {problem}")
    extra = ""
    if st.get("stream_skipped"):
        extra += f"; skipped for slow stream clients: {st['stream_skipped']:,}"
    if st.get("protocol_errors"):
        extra += f"; connections closed for protocol errors: {st['protocol_errors']:,}"
    lines.append(f"records: {st.get('records_total', 0):,} total, {float(st.get('records_per_s', 0)):,.0f}/s; "
                 f"dropped by agents: {st.get('dropped_by_agents', 0):,}{extra}")
    agents = st.get("agents") or []
    lines.append(f"processes: {len(agents)}")
    for a in agents:
        lag = a.get("lag_ns")
        lag_s = format_ns(lag) if isinstance(lag, (int, float)) else "-"
        labels = ",".join(f"{k}={v}" for k, v in (a.get("labels") or {}).items())
        lines.append(f"  pid {a.get('pid')} {a.get('service') or '-'} @{a.get('host', '?')}"
                     f"{' [' + labels + ']' if labels else ''}: {a.get('records', 0):,} records, "
                     f"{float(a.get('records_per_s', 0)):,.0f}/s, dropped {a.get('dropped', 0):,}, lag {lag_s}, "
                     f"{'steps ' + format(a['steps'], ',') + ', ' if a.get('steps') else ''}"
                     f"connected {float(a.get('connected_s', 0)):.0f}s")
        for m in a.get("models") or []:
            ml = ",".join(f"{k}={v}" for k, v in (m.get("labels") or {}).items())
            lines.append(f"    model {m.get('model_id')} on device {m.get('device')}{' [' + ml + ']' if ml else ''}")
    storage = st.get("storage") or {}
    if storage:
        oldest = storage.get("oldest_ts")
        age = f", oldest {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(oldest))}" if oldest else ""
        cap = " (at disk cap: the oldest segments make room)" if storage.get("at_cap") else ""
        lines.append(f"storage: {storage.get('dir', '?')}: {_bytes(float(storage.get('bytes', 0)))} in "
                     f"{storage.get('segments', 0)} segments{age}{cap}")
    agg = st.get("aggregates") or {}
    if agg:
        lines.append(f"aggregates: {agg.get('keys', 0):,} keys (cap {agg.get('cap', '?'):,}), "
                     f"{agg.get('other_bucket_records', 0):,} records in the 'other' bucket")
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    from aclprof.cli.client import DaemonError

    try:
        client = connect(args, timeout=args.timeout)
    except CliError as exc:
        if args.json:
            print(json.dumps({"reachable": False, "error": str(exc)}))
        raise
    try:
        st = client.status()
    except DaemonError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    finally:
        client.close()
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(format_status(st))
    return EXIT_OK if st.get("healthy") else EXIT_ERROR


# -- doctor ----------------------------------------------------------------------------------

def cmd_doctor(args: argparse.Namespace) -> int:
    import stat

    from aclprof.binding import loader as _loader
    from aclprof.protocol.paths import resolve_socket_path

    problems: list[str] = []
    print("library:")
    try:
        candidates, _ = _loader._candidates()
    except ValueError as exc:
        candidates = []
        problems.append(str(exc))
    for origin, path in candidates:
        print(f"  candidate: {path} ({origin})")
    try:
        info = _loader.library_info()
    except Exception as exc:  # LibraryNotFoundError, ValueError (bad ACLPROF_BACKEND)
        print("  not found:")
        for line in str(exc).splitlines():
            print(f"    {line}")
        problems.append("no ACL library can be loaded")
    else:
        print(f"  loaded: {info.name} at {info.path}" + (" (mock)" if info.is_mock else ""))
        print(f"  op record size: {info.op_desc_size}; missing symbols: "
              f"{', '.join(info.missing_symbols) if info.missing_symbols else 'none'}")
    print("environment:")
    names = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH", "XDG_RUNTIME_DIR"]
    names += sorted(k for k in os.environ if k.startswith(("ACLPROF_", "ACLMOCK_")))
    for name in names:
        print(f"  {name}={os.environ[name]}" if name in os.environ else f"  {name} (not set)")
    path = resolve_socket_path(args.socket)
    print("daemon:")
    print(f"  socket: {path}")
    try:
        st_ = os.stat(path)
    except FileNotFoundError:
        print("  socket file: missing")
        problems.append("the daemon socket does not exist (aclprofd not running?)")
    except OSError as exc:
        print(f"  socket file: cannot stat ({exc.strerror})")
        problems.append(f"cannot stat the socket: {exc.strerror}")
    else:
        import grp
        import pwd

        kind = "socket" if stat.S_ISSOCK(st_.st_mode) else "NOT A SOCKET"
        try:
            owner = pwd.getpwuid(st_.st_uid).pw_name
        except KeyError:
            owner = str(st_.st_uid)
        try:
            group = grp.getgrgid(st_.st_gid).gr_name
        except KeyError:
            group = str(st_.st_gid)
        access = os.access(path, os.R_OK | os.W_OK)
        print(f"  socket file: {kind}, mode {stat.S_IMODE(st_.st_mode):04o}, owner {owner}:{group}, "
              f"{'read/write allowed' if access else 'NO read/write access for this user'}")
        if not access:
            problems.append(f"no permission on the socket: join group {group!r}")
    from aclprof.cli.client import DaemonError

    try:
        client = connect(args, timeout=3.0)
        try:
            st = client.status()
        finally:
            client.close()
    except (CliError, DaemonError) as exc:
        print(f"  reachable: no ({exc})")
        problems.append("the daemon is not reachable")
    else:
        print(f"  reachable: yes, aclprofd {st.get('version')} pid {st.get('pid')}, "
              f"{'healthy' if st.get('healthy') else 'UNHEALTHY'}, {len(st.get('agents') or [])} processes")
        if not st.get("healthy"):
            problems.append("the daemon reports problems: " + "; ".join(st.get("problems") or []))
    if problems:
        print("problems:")
        for p in problems:
            print(f"  - {p}")
        return EXIT_ERROR
    print("no problems found")
    return EXIT_OK


# -- entry point -----------------------------------------------------------------------------

def _configure_logging(level: str) -> None:
    import logging

    import structlog

    shared = [structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
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


def _parser() -> argparse.ArgumentParser:
    from aclprof.protocol.version import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="aclprof", formatter_class=fmt,
        description="Live per-operator timings of Ascend inference processes (via the aclprofd daemon).",
        epilog="""examples:
  aclprof demo --duration 20          try everything on the built-in mock
  aclprof top                          live table of op timings (keys: t c a 9 m sort, g group, / filter, r reset, q quit)
  aclprof tail --type MatMul --json    live op records as JSON lines
  aclprof status                       is the daemon healthy? who is connected?
  aclprof export --since -10m --format csv -o op_statistic.csv
  aclprof doctor                       diagnose the library, the environment and the daemon

exit codes: 0 ok, 1 error or unhealthy, 2 usage error or daemon unreachable, 130 interrupted""")
    parser.add_argument("--version", action="version", version=f"aclprof {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("ACLPROF_LOG_LEVEL", "warning"),
                        choices=["debug", "info", "warning", "error"], help="log level (default warning)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("tail", help="live stream of op records", formatter_class=fmt,
                       description="A live stream of op records, one line each (time the daemon "
                                   "received it, pid, device, model, op type, duration, op name).",
                       epilog=_TAIL_EXAMPLES)
    add_filter_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line (daemon/PROTOCOL.md record)")
    add_socket_arg(p)
    p.set_defaults(func=cmd_tail)

    from aclprof.cli import top as cli_top

    cli_top.add_parser(sub, fmt)

    p = sub.add_parser("status", help="daemon health, processes, drops, lag", formatter_class=fmt,
                       description="The daemon's health, connected processes and their models, "
                                   "records/s, drops, lag and disk use.", epilog=_STATUS_EXAMPLES)
    p.add_argument("--json", action="store_true", help="the raw STATUS reply as JSON")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the daemon (default 5)")
    add_socket_arg(p)
    p.set_defaults(func=cmd_status)

    from aclprof.cli import export as cli_export

    cli_export.add_parser(sub, fmt)

    from aclprof.cli import demo as cli_demo

    cli_demo.add_parser(sub, fmt)

    p = sub.add_parser("doctor", help="diagnose the library, CANN variables and the daemon",
                       formatter_class=fmt,
                       description="Which libascendcl is found (or why none is), the CANN environment "
                                   "variables, the daemon socket's permissions and whether the daemon answers.",
                       epilog="examples:\n  aclprof doctor\n  ACLPROF_BACKEND=mock aclprof doctor\n"
                              "\nexit status 0 when no problem is found, else 1.")
    add_socket_arg(p)
    p.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
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
    from aclprof.cli.client import DaemonError

    try:
        return func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return quiet_broken_pipe()
    except CliError as exc:
        _error(str(exc))
        return exc.code
    except DaemonError as exc:
        _error(str(exc))
        return EXIT_ERROR
    except OSError as exc:
        _error(f"{exc.strerror or exc}" + (f": {exc.filename}" if getattr(exc, "filename", None) else ""))
        return EXIT_ERROR


def _join_negative_times(argv: list[str]) -> list[str]:
    """``--since -5m`` -> ``--since=-5m`` (argparse would take ``-5m`` for an option)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--since", "--until") and i + 1 < len(argv) and re.match(r"^-\s*[\d.]", argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _error(message: str) -> None:
    try:
        print(f"aclprof: error: {message}", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
