"""The table behind ``aclprof top`` (also shown by ``aclprof demo``): the view state
(:class:`TopView`: window, grouping, sort, filter, changed by keys), the rendering of a
SNAPSHOT reply as a rich table, and the live loop that reads keys in cbreak mode.
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import Any, Literal

from aclprof.cli.common import format_ns, regex_problem, use_colour
from aclprof.protocol.safetext import safe

__all__ = ["SORT_KEYS", "WINDOWS", "TopView", "sort_rows", "render_table", "learn_windows", "snapshot",
           "run_live", "print_table"]

SORT_KEYS = {"total": "total_ns", "count": "count", "avg": "mean_ns", "p99": "p99_ns", "max": "max_ns"}
_KEY_SORT = {"t": "total", "c": "count", "a": "avg", "9": "p99", "m": "max"}
WINDOWS = ("10s", "1m", "all")


def sort_rows(rows: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    field = SORT_KEYS[sort]
    return sorted(rows, key=lambda r: (-(r.get(field) or 0), str(r.get("key"))))


class TopView:
    """What ``top`` shows: the settings the keys change, and the rendering."""

    def __init__(self, window: str = "10s", group: str = "type", sort: str = "total",
                 base_filter: dict[str, Any] | None = None, regex: str | None = None):
        self.window, self.group, self.sort = window, group, sort
        self.windows: tuple[str, ...] = WINDOWS  # what "w" cycles through (the daemon's list)
        self.base_filter = dict(base_filter or {})
        self.regex = regex
        self.editing: str | None = None  # the filter being typed after "/"
        self.message = ""
        self.quit = False
        self.reset_requested = False

    def filter(self) -> dict[str, Any]:
        f = dict(self.base_filter)
        if self.regex:
            f[self.group] = self.regex
        return f

    def key(self, ch: str) -> None:
        if self.editing is not None:
            if ch in ("\r", "\n"):
                text = self.editing
                self.editing = None
                problem = regex_problem(text) if text else None
                if problem is not None:  # the daemon's engine (RE2): it would refuse the SNAPSHOT
                    self.message = f"bad regex: {problem}"
                    return
                self.regex = text or None
                self.message = f"filter: {text}" if text else "filter cleared"
            elif ch == "\x1b":
                self.editing = None
            elif ch in ("\x7f", "\b"):
                self.editing = self.editing[:-1]
            elif ch.isprintable():
                self.editing += ch
            return
        if ch in _KEY_SORT:
            self.sort = _KEY_SORT[ch]
        elif ch == "g":
            self.group = "name" if self.group == "type" else "type"
        elif ch == "w":
            ws = self.windows
            self.window = ws[(ws.index(self.window) + 1) % len(ws)] if self.window in ws else ws[0]
        elif ch == "/":
            self.editing = ""
        elif ch == "r":
            self.reset_requested = True
        elif ch in ("q", "Q", "\x03"):
            self.quit = True


def render_table(snap: dict[str, Any], view: TopView, limit: int = 0, title_extra: str = "",
                 keys: bool = True):
    from rich.table import Table
    from rich.text import Text

    rows = sort_rows(snap.get("rows") or [], view.sort)
    total_rows = len(rows)
    if limit and len(rows) > limit:
        rows = rows[:limit]
    heading = {"total": "Total", "count": "Count", "avg": "Avg", "p99": "p99", "max": "Max"}
    filt = view.filter()
    desc = f"window {snap.get('window', view.window)}, by op {view.group}, sorted by {view.sort}"
    if filt:
        desc += ", filter " + " ".join(f"{k}={safe(v)}" for k, v in filt.items())
    table = Table(title=Text(safe(f"aclprof top: {desc}{title_extra}")), title_justify="left", expand=False,
                  caption=(_plain("keys: t c a 9 m sort, g group, w window, / filter, r reset, q quit"
                                  + (f"   [{view.message}]" if view.message else "")) if keys else None),
                  caption_justify="left")
    # (heading, alignment, the sort key it shows)
    columns: list[tuple[str, Literal["left", "right"], str | None]] = [
        ("Op " + view.group, "left", None), ("Count", "right", "count"), ("Total", "right", "total"),
        ("Avg", "right", "avg"), ("p50", "right", None), ("p99", "right", "p99"),
        ("Max", "right", "max"), ("% time", "right", None)]
    for name, justify, sort in columns:
        label = name + (" ▼" if sort == view.sort else "")
        table.add_column(label, justify=justify, no_wrap=True,
                         style="bold" if sort == view.sort else None, overflow="ellipsis",
                         max_width=60 if justify == "left" else None)
    del heading
    for r in rows:
        # the key is a peer's op name or type: escaped, never markup or terminal control
        table.add_row(Text(safe(r.get("key"))), f"{r.get('count', 0):,}", format_ns(r.get("total_ns")),
                      format_ns(r.get("mean_ns")), format_ns(r.get("p50_ns")), format_ns(r.get("p99_ns")),
                      format_ns(r.get("max_ns")), f"{float(r.get('pct_time') or 0):.1f}")
    if total_rows > len(rows):
        table.add_row(Text(f"... {total_rows - len(rows)} more", style="dim"), "", "", "", "", "", "", "")
    if not rows:
        table.add_row(Text("(no records in this window yet)", style="dim"), "", "", "", "", "", "", "")
    if view.editing is not None:
        table.caption = _plain(f"filter regex: {view.editing}_   (Enter applies, Esc cancels)")
    return table


def _plain(text: str) -> Any:
    """``text`` shown as written: a rich Text (never parsed as markup, so the ``[...]`` of a
    message or a typed regex such as ``[a-z]`` or ``[/dim]`` is neither dropped nor a
    MarkupError), with terminal control characters escaped (messages quote the user's regex)."""
    from rich.text import Text

    return Text(safe(text))


def learn_windows(client: Any, view: TopView) -> bool:
    """The windows the daemon offers (STATUS aggregates.windows), for the "w" key; False if
    the daemon did not say (a STATUS without them: the daemon alone then judges a window)."""
    try:
        windows = (client.status().get("aggregates") or {}).get("windows")
    except Exception:
        return False
    if isinstance(windows, list) and windows and all(isinstance(w, str) for w in windows):
        view.windows = tuple(windows)
        return True
    return False


def snapshot(client: Any, view: TopView) -> dict[str, Any]:
    return client.snapshot(view.window, view.group, view.filter())


class _Cbreak:
    """Put the terminal in cbreak mode (keys without Enter, no echo); restore on exit."""

    def __init__(self, stream: Any):
        self.fd = stream.fileno() if stream is not None and stream.isatty() else None
        self.saved: list[Any] | None = None

    def __enter__(self) -> _Cbreak:
        if self.fd is not None:
            import termios
            import tty

            try:
                self.saved = termios.tcgetattr(self.fd)
                tty.setcbreak(self.fd)
            except termios.error:
                self.fd = None
        return self

    def read_key(self, timeout: float) -> str | None:
        if self.fd is None:
            time.sleep(max(0.0, timeout))
            return None
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return None
        data = os.read(self.fd, 1)
        return data.decode("utf-8", "replace") if data else None

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None and self.saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)


def run_live(client: Any, view: TopView, interval: float, limit: int = 0,
             stop_at: float | None = None, title_extra: Any = None) -> None:
    """The interactive loop (also used by ``aclprof demo``); returns on q, Ctrl-C (raised)
    or at ``stop_at`` (time.monotonic())."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    stdin = sys.stdin if sys.stdin is not None and sys.stdin.isatty() else None
    with _Cbreak(stdin) as term, Live(console=console, auto_refresh=False, screen=False,
                                      transient=False) as live:
        next_refresh = 0.0
        while not view.quit:
            now = time.monotonic()
            if stop_at is not None and now >= stop_at:
                return
            if view.reset_requested:
                view.reset_requested = False
                client.reset()
                view.message = "aggregates reset"
                next_refresh = 0.0
            if now >= next_refresh:
                snap = snapshot(client, view)
                rows = limit or max(5, console.size.height - 8)
                extra = title_extra() if callable(title_extra) else ""
                live.update(render_table(snap, view, rows, extra), refresh=True)
                next_refresh = now + interval
            wait = next_refresh - time.monotonic()
            if stop_at is not None:
                wait = min(wait, stop_at - time.monotonic())
            key = term.read_key(min(max(wait, 0.0), 0.25))
            if key is not None:
                view.key(key)
                next_refresh = 0.0  # redraw at once with the new settings


def _pipe_console(**kw: Any) -> Any:
    """A rich Console whose closed stdout raises BrokenPipeError like a plain ``print``: rich's
    own answer is SystemExit(1), but a reader that has seen enough (``aclprof top | head``) is
    not a failure; ``aclprof.cli.main`` turns BrokenPipeError into a quiet exit 0 (as for tail)."""
    import errno

    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more to write: rich drops its buffer, not retried at exit
            raise BrokenPipeError(errno.EPIPE, "stdout closed by its reader")

    return PipeConsole(**kw)


def print_table(snap: dict[str, Any], view: TopView, limit: int = 0, title_extra: str = "") -> None:
    console = _pipe_console(no_color=not use_colour(), highlight=False,
                            width=None if sys.stdout.isatty() else 140)
    console.print(render_table(snap, view, limit, title_extra, keys=False))
    sys.stdout.flush()
