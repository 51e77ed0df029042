"""``aclprof tail``: a live stream of op records, one line each (with the service), or the
daemon's JSON Lines; with ``-F`` it follows the daemon across restarts (reconnecting with
backoff) instead of ending with it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from aclprof.cli.common import (
    EXIT_ERROR,
    EXIT_UNREACHABLE,
    CliError,
    add_filter_args,
    add_socket_arg,
    connect,
    filter_from_args,
    format_ns,
    use_colour,
)
from aclprof.protocol.safetext import safe

if TYPE_CHECKING:
    from aclprof.cli.client import Client

__all__ = ["add_parser", "cmd_tail", "tail_line", "RECONNECTED", "STOPPED", "CLOSED_RUNNING"]

_EXAMPLES = """examples:
  aclprof tail                                  every op of every process
  aclprof tail --type 'Conv|MatMul' --min-duration 100us
  aclprof tail --pid 4242 --model 1 --json | jq .duration_ns
  aclprof tail | head -20                       (exits quietly on a closed pipe)
  aclprof tail -F --device 0                    follow the daemon across restarts
"""

EXIT_USAGE = EXIT_UNREACHABLE  # 2: a usage error, as argparse's

#: what -F says on stderr each time it is back on a (restarted) daemon
RECONNECTED = "daemon restarted; reconnected (records of the gap are not replayed)"
#: why the stream ended when the daemon stopped, however the socket reported it (END, GOODBYE,
#: EOF, ECONNRESET, EPIPE: which one a stop causes is a matter of timing)
STOPPED = "the daemon ended the stream (it stopped)"
#: the connection ended but the same daemon still listens: it closed this client only
CLOSED_RUNNING = "the daemon closed this stream's connection and is still running (its log says why)"
#: what -F says when it reconnects after CLOSED_RUNNING (not a restart)
RECONNECTED_SAME = "the daemon closed the stream; reconnected (records of the gap are not replayed)"
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 0.1, 2.0


def add_parser(sub: Any, fmt: Any) -> None:
    """Register ``aclprof tail`` on the subparsers ``sub``."""
    p = sub.add_parser("tail", help="live stream of op records", formatter_class=fmt,
                       description="A live stream of op records, one line each (time the daemon "
                                   "received it, service, pid, device, model, op type, duration, op name).",
                       epilog=_EXAMPLES)
    add_filter_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line (the record of daemon/PROTOCOL.md)")
    p.add_argument("-F", "--follow-restarts", action="store_true",
                   help="when the daemon stops or restarts, reconnect (backoff up to 2 s) and go on, saying so "
                        "on stderr, instead of exiting 1; records of the gap are not replayed")
    add_socket_arg(p)
    p.set_defaults(func=cmd_tail)


def _gap_line(r: dict[str, Any], colour: bool) -> str:
    """A ``{"kind": "gap"}`` line (PROTOCOL.md): aclprof trace paused a process's subscriptions."""
    ts = r.get("ts")
    t = time.strftime("%H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) else "-"
    n = r.get("gap_records")
    mark = "\x1b[31m-- gap\x1b[0m" if colour else "-- gap"
    return (f"{t}  {safe(r.get('service') or '-')} pid {safe(r.get('pid', '?'))} {mark}: subscriptions paused "
            f"{format_ns(r.get('pause_ns'))} for aclprof trace, "
            f"{'an unknown number of' if n is None else safe(n)} ops not streamed --")


def tail_line(r: dict[str, Any], colour: bool) -> str:
    """One record (a decoded JSON Lines object) as one human line."""
    if r.get("kind") == "gap":
        return _gap_line(r, colour)
    ts = r.get("ts")
    if isinstance(ts, (int, float)):
        t = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"
    else:
        t = "-"
    dur = format_ns(r.get("duration_ns"))
    # the service is a peer's string: escaped, and cut so that columns stay aligned
    service = safe(r.get("service") or "-")
    service = f"{service[:15] + '…' if len(service) > 16 else service:<16}"
    who = f"{t}  {service} pid {safe(r.get('pid', '?')):<7} dev {safe(r.get('device', '?')):<2} " \
          f"model {safe(r.get('model', '?')):<4}"
    if r.get("kind") == "keypoint":
        # A step boundary (CANN's keypoint_op record): the step's span, not an op.
        mark = "\x1b[33m-- step\x1b[0m" if colour else "-- step"
        return f"{who} {mark} {dur} ({r.get('start', '?')} .. {r.get('end', '?')}) --"
    # op type and name are a peer's strings: escaped (no terminal control, no forged line)
    op_type = safe(r.get("op_type", "?"))
    if colour:
        op_type = f"\x1b[36m{op_type:<16}\x1b[0m"
        dur = f"\x1b[1m{dur:>9}\x1b[0m"
    else:
        op_type = f"{op_type:<16}"
        dur = f"{dur:>9}"
    return f"{who} {op_type} {dur}  {safe(r.get('op_name', '?'))}"


def cmd_tail(args: argparse.Namespace) -> int:
    """Stream until the daemon ends the stream (exit 1; with -F: reconnect and go on) or the
    reader goes (Ctrl-C, closed pipe)."""
    filt = filter_from_args(args)
    client = connect(args, timeout=5.0)  # unreachable at the start: exit 2, even with -F
    if "device" in filt:
        _check_device_filter(client)
    while True:
        ended = _stream(client, args, filt)
        if not args.follow_restarts:
            raise CliError(ended, EXIT_ERROR)
        client = _reconnect(args)
        print(RECONNECTED if ended == STOPPED else RECONNECTED_SAME, file=sys.stderr, flush=True)


def _check_device_filter(client: Client) -> None:
    """``--device`` on a daemon without the device filter: a usage error (exit 2) here, not a
    STREAM the daemon would refuse as malformed (closing it, counting a protocol error)."""
    from aclprof.cli.client import DEVICE_NEEDS_KEYS, DaemonError

    try:
        supported = client.has_per_service_keys()
    except DaemonError:
        client.close()
        raise
    if not supported:
        client.close()
        raise CliError(DEVICE_NEEDS_KEYS, EXIT_USAGE)


def _reconnect(args: argparse.Namespace) -> Client:
    """A new connection to the daemon on the same socket, retried with backoff until it is
    back (Ctrl-C ends the wait)."""
    from aclprof.cli.client import DaemonError

    delay = _BACKOFF_FIRST_S
    while True:
        try:
            return connect(args, timeout=5.0)
        except (CliError, DaemonError):  # not there yet, or starting and not answering yet
            time.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_S)


def _stream(client: Client, args: argparse.Namespace, filt: dict[str, Any]) -> str:
    """Copy the stream to stdout until it ends; closes ``client``; returns why it ended:
    :data:`STOPPED`, :data:`CLOSED_RUNNING` or why it broke (CliError if the daemon refused
    the stream)."""
    from aclprof.cli.client import DaemonClosed, DaemonError, DaemonRejected

    client.settimeout(None)
    colour = use_colour()
    out = sys.stdout
    ended = STOPPED
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
                out.write("".join(tail_line(json.loads(line), colour) + "\n" for line in lines))
                out.flush()
    except DaemonRejected as exc:  # not a restart: following would only repeat it
        raise CliError(str(exc), EXIT_ERROR) from None
    except DaemonClosed:  # EOF, ECONNRESET or EPIPE: a stop, unless the daemon still listens
        if client.daemon_still_listening():
            ended = CLOSED_RUNNING
    except DaemonError as exc:  # a malformed or unexpected frame
        ended = f"the stream broke: {exc}"
    finally:
        client.close()
    return ended
