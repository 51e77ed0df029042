"""The live loop of ``aclprof top`` on a terminal: keys read in cbreak mode, one SNAPSHOT per
refresh (or per key), one STATUS per refresh at most (:data:`aclprof.cli.top.header.STATUS_EVERY_S`)
for the header, and the ``r`` baseline taken here (the loop holds the client). The terminal
is restored on every way out (q, Ctrl-C, an error)."""

from __future__ import annotations

import os
import select
import sys
import time
from typing import Any

from aclprof.cli.top.header import Header, window_seconds
from aclprof.cli.top.view import TopView, render_table, snapshot

__all__ = ["Cbreak", "run_live", "refresh_header", "header_for"]


class Cbreak:
    """Put the terminal in cbreak mode (keys without Enter, no echo); restore on exit."""

    def __init__(self, stream: Any):
        self.fd = stream.fileno() if stream is not None and stream.isatty() else None
        self.saved: list[Any] | None = None

    def __enter__(self) -> Cbreak:
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


def refresh_header(client: Any, header: Header, now: float | None = None) -> None:
    """One STATUS into ``header`` if one is due; a failed STATUS is shown, not fatal (the
    SNAPSHOT that follows on the same connection reports a lost daemon)."""
    from aclprof.cli.client import DaemonError

    now = time.monotonic() if now is None else now
    if not header.due(now):
        return
    try:
        header.add(client.status(), now)
    except DaemonError as exc:
        header.failed(str(exc), now)


def header_for(header: Header, snap: dict[str, Any], view: TopView) -> Any:
    """The header's lines for ``snap`` in ``view``'s window (since r: since the baseline)."""
    if view.baseline is not None and str(snap.get("window", "")).startswith("since r"):
        seconds: float | None = max(0.0, time.monotonic() - view.baseline.taken_mono)
    else:
        seconds = window_seconds(view.window)
    return header.render(snap, seconds, str(snap.get("window", view.window)))


def run_live(client: Any, view: TopView, interval: float, limit: int = 0,
             stop_at: float | None = None, title_extra: Any = None) -> None:
    """The interactive loop (also used by ``aclprof demo``); returns on q, Ctrl-C (raised)
    or at ``stop_at`` (time.monotonic())."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    header = Header()
    stdin = sys.stdin if sys.stdin is not None and sys.stdin.isatty() else None
    with Cbreak(stdin) as term, Live(console=console, auto_refresh=False, screen=False,
                                      transient=False) as live:
        next_refresh = 0.0
        while not view.quit:
            now = time.monotonic()
            if stop_at is not None and now >= stop_at:
                return
            if view.reset_requested:
                view.take_baseline(client)  # never a RESET: the daemon's aggregates are shared
                next_refresh = 0.0
            if now >= next_refresh:
                refresh_header(client, header, now)
                snap = snapshot(client, view)
                rows = limit or max(5, console.size.height - 10)
                extra = title_extra() if callable(title_extra) else ""
                live.update(render_table(snap, view, rows, extra, header=header_for(header, snap, view),
                                         width=console.size.width), refresh=True)
                next_refresh = now + interval
            wait = next_refresh - time.monotonic()
            if stop_at is not None:
                wait = min(wait, stop_at - time.monotonic())
            key = term.read_key(min(max(wait, 0.0), 0.25))
            if key is not None:
                view.key(key)
                next_refresh = 0.0  # redraw at once with the new settings
