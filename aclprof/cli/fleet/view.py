"""The view behind ``aclprof fleet``: :class:`Fleet` (one refresh: the queries at one
evaluation time, parsed into rows, and the ``--json`` document), the rendering of the
rows as a rich table (every label escaped: labels are whatever a service or host sent),
and the live loop (keys in cbreak mode, as ``aclprof top``; ``q`` quits).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from aclprof.cli.common import format_ns, use_colour
from aclprof.cli.fleet.data import (
    FleetDataError,
    FleetRow,
    Thresholds,
    build_rows,
    parse_vector,
    queries,
    sort_rows,
    to_json,
)
from aclprof.cli.fleet.prom import PromClient, PrometheusError
from aclprof.protocol.safetext import safe

__all__ = ["KEY_SORT", "RESOLUTION", "Fleet", "render", "pipe_width", "print_table", "run_live"]

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
                       drill_down_host=host, thresholds=self.thresholds.as_dict(), warnings=self.warnings,
                       quantile_resolution="8 buckets per power of two (histogram_quantile; at most 9 % off)")


def _dur(seconds: float | None) -> str:
    return format_ns(seconds * 1e9) if seconds is not None and math.isfinite(seconds) else "-"


#: what every fleet table says of its quantiles (README "Fleet")
RESOLUTION = ("p50/p99: Prometheus' histogram_quantile over 8 buckets per power of two (each 9 % wide: "
              "at most 9 % off, no max known; exact max: aclprof top on the host)")
_HOST_CUT = 24  # a host name in the outlier cell (the cell holds numbers: the names are what shrinks)


def _outlier_cell(r: FleetRow, th: Thresholds) -> str:
    from aclprof.cli.fit import cut

    flagged = sorted(r.outliers, key=lambda h: -abs(h.z or 0))
    if flagged:
        med = r.median_host_p99_s
        parts = []
        for h in flagged[:2]:
            ratio = f" x{h.p99_s / med:.1f}" if med and math.isfinite(med) and med > 0 else ""
            parts.append(f"{cut(safe(h.host), _HOST_CUT)}{ratio} z={h.z:+.1f}")
        more = f" +{len(flagged) - 2}" if len(flagged) > 2 else ""
        return ", ".join(parts) + more
    if r.scored_hosts < th.min_hosts:
        return f"({r.scored_hosts}/{th.min_hosts} hosts)"
    return "-"


#: the column each sort is shown in (never hidden while it is the sort)
_SORT_COLUMN = {"share": "% device", "calls": "Calls/s", "p50": "p50", "p99": "p99", "outlier": "Outliers (p99)"}


def render(fleet: Fleet, rows: list[FleetRow], sort: str, host: str | None, limit: int = 0,
           caption: str | None = None, width: int | None = None) -> Any:
    """The title, the table of the rows fitted into ``width`` cells (:mod:`aclprof.cli.fit`:
    numbers whole, names shortened, the least important columns hidden with a note; None:
    unbounded) and ``caption`` (lines under the table: keys, the last error). Every
    peer-supplied string is escaped (labels are any bytes a service or a host sent)."""
    from rich.console import Group
    from rich.text import Text

    from aclprof.cli.fit import Col, fit_table, hidden_note

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
    cols = [Col("Service", 0, whole=False, min_width=6, justify="left"),
            Col("Op type", 0, whole=False, min_width=8, justify="left")]
    if host is None:
        cols += [Col("Calls/s", 2), Col("p50", 4), Col("p99", 1), Col("% device", 3), Col("Hosts", 5),
                 Col("Outliers (p99)", 1, justify="left", short="Outliers")]
    else:
        cols += [Col("Calls/s", 2), Col("p50", 4), Col("p99", 0), Col("Fleet p99", 1), Col("z", 3),
                 Col("", 1, justify="left", short="OUTLIER")]
    cols = [Col(c.title, 0, c.whole, c.min_width, c.cut, c.justify, c.short) if c.title == _SORT_COLUMN.get(sort)
            else c for c in cols]
    body: list[list[Any]] = []
    for r in rows:
        head: list[Any] = [Text(safe(r.service or "-")), Text(safe(r.op_type))]
        if host is None:
            body.append([*head, f"{r.calls_per_s:,.1f}", _dur(r.p50_s), _dur(r.p99_s), f"{100 * r.share:.1f}",
                         str(r.hosts_reporting), Text(_outlier_cell(r, fleet.thresholds),
                                                      style="bold red" if r.outliers else "")])
        else:
            h = next(h for h in r.hosts if h.host == host)
            z = f"{h.z:+.1f}" if h.z is not None else "-"
            body.append([*head, f"{h.calls_per_s:,.1f}", _dur(h.p50_s), _dur(h.p99_s), _dur(r.p99_s), z,
                         Text("OUTLIER", style="bold red") if h.outlier else ""])
    table, hidden = fit_table(cols, body, width)
    parts: list[Any] = [Text(safe(title))]
    note = hidden_note(hidden, "widen the terminal, or --once --json")
    if note:
        parts.append(Text(note, style="dim"))
    parts.append(table)
    if total > len(rows):
        parts.append(Text(f"... {total - len(rows):,} more rows", style="dim"))
    if not rows:
        none = f"(no op series for host {host})" if host is not None else "(no aclprofd op series in this window)"
        parts.append(Text(safe(none), style="dim"))
    parts.append(Text(RESOLUTION, style="dim"))
    if caption:
        parts += [Text(safe(line)) for line in caption.split("\n")]
    return Group(*parts)


def pipe_width() -> int:
    """The width a table is fitted to on stdout: the terminal's, or 160 into a pipe."""
    import shutil

    return shutil.get_terminal_size((160, 24)).columns if sys.stdout.isatty() else 160


def print_table(table: Any) -> None:
    """One table on stdout (a closed pipe raises BrokenPipeError: a quiet exit 0)."""
    from aclprof.cli.top.view import _pipe_console

    console = _pipe_console(no_color=not use_colour(), highlight=False, width=pipe_width())
    console.print(table)
    sys.stdout.flush()


def run_live(fleet: Fleet, sort: str, host: str | None, interval: float, limit: int = 0) -> None:
    """The terminal view: refresh every interval, keys change the sort, q quits. A failed
    refresh keeps the last table and shows the error in the caption (retried next time)."""
    from rich.console import Console
    from rich.live import Live

    from aclprof.cli.top.live import Cbreak

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
                live.update(render(fleet, rows, sort, host, fit, caption, width=console.size.width), refresh=True)
                redraw = False
            key = term.read_key(min(max(next_refresh - time.monotonic(), 0.0), 0.25))
            if key in ("q", "Q", "\x03"):
                return
            if key in KEY_SORT:
                sort = KEY_SORT[key]
                redraw = True
