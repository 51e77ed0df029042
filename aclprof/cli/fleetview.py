"""The view behind ``aclprof fleet``: :class:`Fleet` (one refresh: the queries at one
evaluation time, parsed into rows, and the ``--json`` document), the rendering of the
rows as a rich table (every label escaped: labels are whatever a service or host sent),
and the live loop (keys in cbreak mode, as ``aclprof top``; ``q`` quits).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Literal

from aclprof.cli.common import format_ns, use_colour
from aclprof.cli.fleetdata import (
    FleetDataError,
    FleetRow,
    Thresholds,
    build_rows,
    parse_vector,
    queries,
    sort_rows,
    to_json,
)
from aclprof.cli.fleetprom import PromClient, PrometheusError
from aclprof.protocol.safetext import safe

__all__ = ["KEY_SORT", "Fleet", "render", "print_table", "run_live"]

#: live-view keys -> sort
KEY_SORT = {"d": "share", "c": "calls", "5": "p50", "9": "p99", "o": "outlier"}


class Fleet:
    """What ``aclprof fleet`` asks Prometheus on each refresh, and the answer as rows and as
    the ``--json`` document."""

    def __init__(self, client: PromClient, window: str, host_label: str = "host", sel: str = "",
                 thresholds: Thresholds | None = None, rules: bool = False):
        self.client = client
        self.window = window
        self.host_label = host_label
        self.rules = rules
        self.queries = queries(window, host_label, sel, rules)
        self.thresholds = thresholds or Thresholds()
        self.time = 0.0
        self.warnings: list[str] = []

    def fetch(self) -> list[FleetRow]:
        """Every query at one evaluation time (so the columns agree), parsed into rows, all
        within one ``--timeout`` (so a refresh, and a ``q`` pressed during it, waits at most
        that long). Prometheus' own warnings and a missing host label end up in
        :attr:`warnings`."""
        self.time = time.time()
        deadline = time.monotonic() + self.client.timeout
        samples = {}
        warnings: list[str] = []
        for name, expr in self.queries.items():
            reply = self.client.query(expr, at=self.time, deadline=deadline)
            try:
                samples[name] = parse_vector(reply)
            except FleetDataError as exc:
                raise PrometheusError(f"Prometheus at {self.client.url}: unexpected reply to the {name} query: "
                                      f"{safe(exc)}") from None
            extra = reply.get("warnings")
            for w in extra if isinstance(extra, list) else []:
                text = f"Prometheus warns: {safe(str(w))[:300]}"
                if text not in warnings:
                    warnings.append(text)
        per_host = [m for name in ("calls", "p99") for m, _ in samples[name]]
        if per_host and not any(self.host_label in m for m in per_host):
            warnings.append(f"no series has the label {self.host_label!r}: all hosts show as one; "
                            "try --host-label instance (daemons without a host label)")
        self.warnings = warnings[:10]
        return build_rows(samples, self.host_label, self.thresholds)

    def document(self, rows: list[FleetRow], sort: str, host: str | None) -> dict[str, Any]:
        """The ``--once --json`` document of ``rows`` (only host ``host``'s with ``--host``)."""
        rows = sort_rows(rows, sort)
        if host is not None:
            rows = [r for r in rows if any(h.host == host for h in r.hosts)]
        return to_json(rows, prometheus=self.client.url, window=self.window, host_label=self.host_label,
                       source="recording rules" if self.rules else "histograms", time=round(self.time, 3),
                       drill_down_host=host, thresholds=self.thresholds.as_dict(), warnings=self.warnings)


def _dur(seconds: float | None) -> str:
    return format_ns(seconds * 1e9) if seconds is not None and math.isfinite(seconds) else "-"


def _outlier_cell(r: FleetRow, th: Thresholds) -> str:
    flagged = sorted(r.outliers, key=lambda h: -abs(h.z or 0))
    if flagged:
        med = r.median_host_p99_s
        parts = []
        for h in flagged[:2]:
            ratio = f" x{h.p99_s / med:.1f}" if med and math.isfinite(med) and med > 0 else ""
            parts.append(f"{h.host}{ratio} z={h.z:+.1f}")
        more = f" +{len(flagged) - 2}" if len(flagged) > 2 else ""
        return ", ".join(parts) + more
    if r.scored_hosts < th.min_hosts:
        return f"({r.scored_hosts}/{th.min_hosts} hosts)"
    return "-"


def render(fleet: Fleet, rows: list[FleetRow], sort: str, host: str | None, limit: int = 0,
           caption: str | None = None) -> Any:
    """A rich Table of the rows; every peer-supplied string is escaped (labels are any bytes
    a service or a host sent). ``caption``: lines under the table (keys, the last error)."""
    from rich.table import Table
    from rich.text import Text

    rows = sort_rows(rows, sort)
    if host is not None:
        rows = [r for r in rows if any(h.host == host for h in r.hosts)]
    hosts = {h.host for r in rows for h in r.hosts if h.calls_per_s > 0}
    total = len(rows)
    if limit and total > limit:
        rows = rows[:limit]
    where = f", host {host}" if host is not None else ""
    title = (f"aclprof fleet: {len(hosts)} hosts, window {fleet.window}{where}, sorted by {sort}  "
             f"({fleet.client.url})")
    table = Table(title=Text(safe(title)), title_justify="left", expand=False,
                  caption=Text("\n".join(safe(line) for line in caption.split("\n"))) if caption else None,
                  caption_justify="left")
    columns: list[tuple[str, Literal["left", "right"]]] = [("Service", "left"), ("Op type", "left")]
    if host is None:
        columns += [("Calls/s", "right"), ("p50", "right"), ("p99", "right"), ("% device", "right"),
                    ("Hosts", "right"), ("Outliers (p99)", "left")]
    else:
        columns += [("Calls/s", "right"), ("p50", "right"), ("p99", "right"), ("Fleet p99", "right"),
                    ("z", "right"), ("", "left")]
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis",
                         max_width=40 if justify == "left" else None)
    for r in rows:
        head = [Text(safe(r.service or "-")), Text(safe(r.op_type))]
        if host is None:
            table.add_row(*head, f"{r.calls_per_s:,.1f}", _dur(r.p50_s), _dur(r.p99_s), f"{100 * r.share:.1f}",
                          str(r.hosts_reporting), Text(safe(_outlier_cell(r, fleet.thresholds)),
                                                       style="bold red" if r.outliers else ""))
        else:
            h = next(h for h in r.hosts if h.host == host)
            z = f"{h.z:+.1f}" if h.z is not None else "-"
            table.add_row(*head, f"{h.calls_per_s:,.1f}", _dur(h.p50_s), _dur(h.p99_s), _dur(r.p99_s), z,
                          Text("OUTLIER", style="bold red") if h.outlier else "")
    if total > len(rows):
        table.add_row(Text(f"... {total - len(rows)} more", style="dim"), *[""] * (len(columns) - 1))
    if not rows:
        none = f"(no op series for host {host})" if host is not None else "(no aclprofd op series in this window)"
        table.add_row(Text(safe(none), style="dim"), *[""] * (len(columns) - 1))
    return table


def print_table(table: Any) -> None:
    """One table on stdout (a closed pipe raises BrokenPipeError: a quiet exit 0)."""
    from aclprof.cli.topview import _pipe_console

    console = _pipe_console(no_color=not use_colour(), highlight=False,
                            width=None if sys.stdout.isatty() else 160)
    console.print(table)
    sys.stdout.flush()


def run_live(fleet: Fleet, sort: str, host: str | None, interval: float, limit: int = 0) -> None:
    """The terminal view: refresh every interval, keys change the sort, q quits. A failed
    refresh keeps the last table and shows the error in the caption (retried next time)."""
    from rich.console import Console
    from rich.live import Live

    from aclprof.cli.toplive import Cbreak

    console = Console()
    stdin = sys.stdin if sys.stdin is not None and sys.stdin.isatty() else None
    rows: list[FleetRow] = []
    error = ""
    keys = "keys: d c 5 9 o sort (device share, calls, p50, p99, outlier), q quit"
    with Cbreak(stdin) as term, Live(console=console, auto_refresh=False) as live:
        next_refresh = 0.0
        redraw = True
        while True:
            now = time.monotonic()
            if now >= next_refresh:
                try:
                    rows = fleet.fetch()
                    error = ""
                except PrometheusError as exc:
                    error = f"refresh failed: {exc}"
                next_refresh = now + interval
                redraw = True
            if redraw:
                fit = limit or max(5, console.size.height - 8)  # the terminal may have been resized
                caption = "\n".join([keys, *fleet.warnings] + ([error] if error else []))
                live.update(render(fleet, rows, sort, host, fit, caption), refresh=True)
                redraw = False
            key = term.read_key(min(max(next_refresh - time.monotonic(), 0.0), 0.25))
            if key in ("q", "Q", "\x03"):
                return
            if key in KEY_SORT:
                sort = KEY_SORT[key]
                redraw = True
