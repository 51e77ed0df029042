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
from aclprof.cli.failurefmt import tensors_text
from aclprof.cli.fit import Col, Fitted, cut, fit, hidden_note, wrap_lines
from aclprof.cli.fit import cells as cells_of
from aclprof.protocol.failurenames import failure_code_name
from aclprof.protocol.safetext import safe

if TYPE_CHECKING:
    from aclprof.cli.client import Client

__all__ = ["add_parser", "cmd_tail", "tail_line", "tail_layout", "RECONNECTED", "STOPPED", "CLOSED_RUNNING",
           "FAILURE_MARK",
           "REQUEST_MARK", "request_line"]

_EXAMPLES = """examples:
  aclprof tail                                  every op of every process
  aclprof tail --type 'Conv|MatMul' --min-duration 100us
  aclprof tail --pid 4242 --model 1 --json | jq .duration_ns
  aclprof tail | head -20                       (exits quietly on a closed pipe)
  aclprof tail -F --device 0                    follow the daemon across restarts
  aclprof tail --service api | grep '^== request'   request bills only, as they close
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
                                   "received it, service, pid, device, model, op type, duration, op name); "
                                   "op failures ('!! FAILED') and, as each closes, the bills of requests "
                                   "marked with aclprof.request ('== request': id, wall and device time, "
                                   "top op types, slowest op) on lines of their own.",
                       epilog=_EXAMPLES)
    add_filter_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line (the record of daemon/PROTOCOL.md)")
    p.add_argument("--wire", choices=("auto", "jsonl", "binary"), default="auto",
                   help="how records travel from the daemon: auto (default) binary when the daemon offers it, "
                        "written here as the same JSON; jsonl: the daemon's JSON Lines (older daemons, or to "
                        "compare); binary: binary or an error. The output is the same either way")
    p.add_argument("-F", "--follow-restarts", action="store_true",
                   help="when the daemon stops or restarts, reconnect (backoff up to 2 s) and go on, saying so "
                        "on stderr, instead of exiting 1; records of the gap are not replayed")
    add_socket_arg(p)
    p.set_defaults(func=cmd_tail)


#: the fields of a tail line, as columns of :mod:`aclprof.cli.fit` (fixed widths: the lines
#: stay aligned whatever the record): numbers whole, the service, op type and op name
#: shortened, the model and then the device hidden first when a terminal is too narrow
_COLS = (Col("time", 0, width=13, justify="left"),
         Col("service", 3, whole=False, min_width=6, width=16, justify="left"),
         Col("pid", 2, width=11, justify="left"), Col("dev", 4, width=6, justify="left"),
         Col("model", 5, width=10, justify="left"),
         Col("op type", 1, whole=False, min_width=8, width=16, justify="left"),
         Col("duration", 0, width=10, justify="left"),
         Col("op name", 1, whole=False, min_width=20, cut="middle", justify="left"))
_NAME = len(_COLS) - 1
_SERVICE = 1


def tail_layout(width: int | None) -> Fitted | None:
    """Which fields a line shows, and how wide, in a terminal ``width`` cells wide (None: a
    pipe: the op type and name whole, for grep and awk)."""
    if width is None:
        return None
    natural = [c.width for c in _COLS[:_NAME]] + [max(width, 1)]
    return fit(_COLS, natural, width, gap=1)


def _line(cells: list[str], layout: Fitted | None, colour_at: dict[int, str], width: int | None) -> str:
    """The shown cells padded to their widths, the op name (last) in what is left."""
    shown = layout.shown if layout is not None else list(range(len(cells)))
    out: list[str] = []
    used = 0
    for i in shown:
        if i == _NAME or i >= len(cells):
            continue
        text = cells[i]
        w = layout.widths[i] if layout is not None else _COLS[i].width
        # into a pipe only the service is cut (at 16, as ever: it is a peer's free text); the
        # op type and name stay whole for grep and awk
        if not _COLS[i].whole and (layout is not None or i == _SERVICE):
            text = cut(text, w, _COLS[i].cut)
        pad = " " * max(0, w - cells_of(text))
        used += cells_of(text) + len(pad) + 1
        out.append(f"{colour_at[i]}{text}\x1b[0m{pad}" if i in colour_at else text + pad)
    line = " ".join(out)
    if len(cells) > _NAME and _NAME in shown:
        name = cells[_NAME]
        if width is not None:
            name = cut(name, max(0, width - used), "middle")
        line += " " + name
    return line.rstrip(" ") if width is not None else line


def _who(r: dict[str, Any], t: str) -> list[str]:
    return [t + " ", safe(r.get("service") or "-"), f"pid {safe(r.get('pid', '?'))}",
            f"dev {safe(r.get('device', '?'))}", f"model {safe(r.get('model', '?'))}"]


def _gap_line(r: dict[str, Any], colour: bool, layout: Fitted | None = None, width: int | None = None) -> str:
    """A ``{"kind": "gap"}`` line (PROTOCOL.md): aclprof trace paused a process's subscriptions."""
    ts = r.get("ts")
    t = time.strftime("%H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) else "-"
    n = r.get("gap_records")
    mark = "\x1b[31m-- gap\x1b[0m" if colour else "-- gap"
    count = "an unknown number of" if n is None else safe(n)
    full = (f"{t}  {safe(r.get('service') or '-')} pid {safe(r.get('pid', '?'))} {mark}: subscriptions paused "
            f"{format_ns(r.get('pause_ns'))} for aclprof trace, {count} ops not streamed --")
    if width is None or cells_of(_strip(full)) <= width:
        return full
    # narrow: the same numbers in fewer words, the service shortened
    rest = f" pid {safe(r.get('pid', '?'))} {mark}: paused {format_ns(r.get('pause_ns'))} (trace), " \
           f"{'? ' if n is None else count + ' '}ops not streamed --"
    room = width - cells_of(t) - 1 - cells_of(_strip(rest))
    if room < 6:  # narrower still: the count alone
        return f"{t} {mark}: {'?' if n is None else count} ops not streamed --"
    return f"{t} {cut(safe(r.get('service') or '-'), room)}{rest}"


def _strip(text: str) -> str:
    return (text.replace("\x1b[1;31m", "").replace("\x1b[31m", "").replace("\x1b[33m", "").replace("\x1b[1;36m", "")
            .replace("\x1b[0m", ""))


#: what starts a failure line (``grep '^!! '`` finds them among the records)
FAILURE_MARK = "!! FAILED"


def _clock_ms(ts: Any) -> str:
    """Local time of a line's ``ts`` (Unix seconds) to the millisecond, or "-"."""
    if not isinstance(ts, (int, float)):
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"


def _failure_line(r: dict[str, Any], colour: bool, width: int | None = None) -> str:
    """A ``{"kind": "failure"}`` line (PROTOCOL.md "Op failures"): an AI Core exception of an
    op, on a line of its own that starts with a marker; shortened to ``width`` from the
    right (the tensors go first, then the op name), the marker, op type and code kept."""
    t = _clock_ms(r.get("ts"))
    mark = f"\x1b[1;31m{FAILURE_MARK}\x1b[0m" if colour else FAILURE_MARK
    code = r.get("code")
    name = r.get("code_name") or failure_code_name(code)
    op_type = safe(r.get("op_type") or "?")
    op_name = safe(r.get("op_name")) if r.get("op_name") is not None else f"task {safe(r.get('task', '?'))}"
    head = (f"{mark} {t} {safe(r.get('service') or '-')} pid {safe(r.get('pid', '?'))} "
            f"dev {safe(r.get('device', '?'))} model {safe(r.get('model') or '?')} {op_type} {op_name}")
    what = f" {safe(code)} {safe(name)}"
    tensors = f" in [{tensors_text(r.get('inputs'))}] out [{tensors_text(r.get('outputs'))}]"
    full = head + what + tensors
    if width is None or cells_of(_strip(full)) <= width:
        return full
    if cells_of(_strip(head + what)) <= width:
        room = width - cells_of(_strip(head + what))
        return head + what + (cut(tensors, room) if room > 8 else "")
    # narrower: the marker, time, device, op type and code (its name while it fits), then
    # the op name in what is left
    dev = f"dev {safe(r.get('device', '?'))}"
    for short in (f"{mark} {t} {dev} {op_type}{what}", f"{mark} {t} {dev} {op_type} {safe(code)}",
                  f"{mark} {t[:8]} {cut(op_type, 12)} {safe(code)}"):
        if cells_of(_strip(short)) <= width:
            break
    room = width - cells_of(_strip(short)) - 1
    return short + (" " + cut(op_name, room, "middle") if room > 4 else "")


#: what starts a request bill's line (``grep '^== request '`` finds them among the records)
REQUEST_MARK = "== request"


def request_line(r: dict[str, Any], colour: bool, width: int | None = None) -> str:
    """A ``{"kind": "request"}`` line (PROTOCOL.md "Request bills"): the bill of a request
    of ``aclprof.request`` as it closes, on a line of its own after the ops it billed: id,
    wall and device time, ops, top op types, slowest op, attributes. Shortened to ``width``
    from the right (attributes first, then the slowest op, then the op types)."""
    t = _clock_ms(r.get("ts"))
    mark = f"\x1b[1;36m{REQUEST_MARK}\x1b[0m" if colour else REQUEST_MARK
    wall, dev = r.get("wall_ns"), r.get("device_ns")
    share = f" ({100 * dev / wall:.0f}%)" if isinstance(wall, int) and isinstance(dev, int) and wall > 0 else ""
    head = (f"{mark} {safe(r.get('id', '?'))} {t} {safe(r.get('service') or '-')} pid {safe(r.get('pid', '?'))} "
            f"wall {format_ns(wall)} device {format_ns(dev)}{share} {safe(r.get('ops', '?'))} ops"
            + ("" if r.get("complete", True) else " (incomplete)"))
    types = r.get("types") or []
    top = " ".join(f"{safe(t_[0])} {format_ns(t_[1])} x{safe(t_[2])}" for t_ in types[:3] if len(t_) == 3)
    slow = r.get("slowest")
    parts = [head, f"| {top}" if top else "",
             f"| slowest {safe(slow[0])} {safe(slow[1])} {format_ns(slow[2])}" if slow else "",
             ("| " + " ".join(f"{safe(k)}={safe(v)}" for k, v in (r.get("attrs") or {}).items()))
             if r.get("attrs") else ""]
    parts = [p for p in parts if p]
    while width is not None and len(parts) > 1 and cells_of(_strip(" ".join(parts))) > width:
        parts.pop()
    line = " ".join(parts)
    if width is not None and cells_of(_strip(line)) > width:
        return cut(_strip(line), width)
    return line


def tail_line(r: dict[str, Any], colour: bool, layout: Fitted | None = None, width: int | None = None) -> str:
    """One record (a decoded JSON Lines object) as one human line; with a ``layout``
    (:func:`tail_layout`) at most ``width`` cells: names shortened, numbers whole, the
    least important fields left out."""
    if r.get("kind") == "gap":
        return _gap_line(r, colour, layout, width)
    if r.get("kind") == "failure":
        return _failure_line(r, colour, width)
    if r.get("kind") == "request":
        return request_line(r, colour, width)
    t = _clock_ms(r.get("ts"))
    dur = format_ns(r.get("duration_ns"))
    # the service, op type and name are peers' strings: escaped (no terminal control, no
    # forged line), and cut so that the columns stay aligned
    who = _who(r, t)
    if r.get("kind") == "keypoint":
        # A step boundary (CANN's keypoint_op record): the step's span, not an op.
        mark = "\x1b[33m-- step\x1b[0m" if colour else "-- step"
        head = _line(who, layout, {}, width)
        span = f" ({r.get('start', '?')} .. {r.get('end', '?')})"
        step = f" {mark} {dur}{span} --"
        if width is not None and cells_of(head) + cells_of(_strip(step)) > width:
            step = f" {mark} {dur} --"  # the step's bounds left out, its duration kept
        return head + step
    cells = [*who, safe(r.get("op_type", "?")), f"{dur:>9} ", safe(r.get("op_name", "?"))]
    colours = {5: "\x1b[36m", 6: "\x1b[1m"} if colour else {}
    return _line(cells, layout, colours, width)


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
    layout: Fitted | None = None
    shown_width: int | None = None
    hidden: list[str] = []
    try:
        # --json: the JSON Lines (the daemon's, or written here from binary records) go out as they
        # are, no decoding
        for payload, skipped in client.stream_jsonl(filt, getattr(args, "wire", "auto")):
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
                width = _terminal_width(out)  # again per frame: the terminal may be resized
                if width != shown_width:
                    layout, shown_width = tail_layout(width), width
                    if width is not None and layout is not None and layout.hidden and layout.hidden != hidden:
                        hidden = layout.hidden
                        note = "# " + hidden_note(hidden, "widen the terminal or --json") + "; names shortened"
                        print("\n".join(wrap_lines([note], width)), file=sys.stderr, flush=True)
                lines = str(payload, "utf-8").splitlines()
                out.write("".join(tail_line(json.loads(line), colour, layout, width) + "\n" for line in lines))
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


def _terminal_width(out: Any) -> int | None:
    """The terminal's width when ``out`` is one (lines are fitted to it), else None (a pipe
    or a file: the op type and name whole, for grep and awk)."""
    import os

    try:
        return os.get_terminal_size(out.fileno()).columns if out.isatty() else None
    except (OSError, ValueError, AttributeError):  # no fileno (embedding), or not a terminal after all
        return None
