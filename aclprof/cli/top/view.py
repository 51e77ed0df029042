"""The table behind ``aclprof top`` (also shown by ``aclprof demo``): the view state
(:class:`TopView`: window, grouping, sort, filter and the view-local reset baseline, changed
by the keys of :mod:`aclprof.cli.top.keys`), fetching a view's snapshot from the daemon, and
the rendering of a SNAPSHOT reply as a rich table under a title and a header. The live
loop is :mod:`aclprof.cli.top.live`, which imports this module (never the other way).
"""

from __future__ import annotations

import sys
from typing import Any

from aclprof.cli.common import format_ns, regex_problem, use_colour
from aclprof.cli.top.baseline import SINCE_RESET, Baseline
from aclprof.cli.top.cells import RESOLUTION, quantile_cell, shift_cell, stat_cell
from aclprof.cli.top.header import as_list, num
from aclprof.cli.top.keys import BASIC_GROUPS, GROUP_LABELS, GROUPS, KEYS, caption, help_text
from aclprof.protocol.safetext import safe

__all__ = ["SORT_KEYS", "WINDOWS", "GROUPS", "TopView", "sort_rows", "render_table", "learn_windows",
           "learn_groups", "note_snapshot", "snapshot", "print_table"]

SORT_KEYS = {"total": "total_ns", "count": "count", "avg": "mean_ns", "p99": "p99_ns", "max": "max_ns"}
_KEY_SORT = {"t": "total", "c": "count", "a": "avg", "9": "p99", "m": "max"}
WINDOWS = ("10s", "1m", "all")


def sort_rows(rows: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    field = SORT_KEYS[sort]
    rows = [r for r in as_list(rows) if isinstance(r, dict)]  # a reply's rows, whatever came
    return sorted(rows, key=lambda r: (-num(r.get(field)), str(r.get("key"))))


class TopView:
    """What ``top`` shows: the settings the keys change (:data:`aclprof.cli.top.keys.KEYS`)."""

    def __init__(self, window: str = "10s", group: str = "type", sort: str = "total",
                 base_filter: dict[str, Any] | None = None, regex: str | None = None):
        self.window, self.group, self.sort = window, group, sort
        self.windows: tuple[str, ...] = WINDOWS  # what "w" cycles through (the daemon's list)
        self.groups: tuple[str, ...] = BASIC_GROUPS  # what "g" cycles through (the daemon's)
        self.base_filter = dict(base_filter or {})
        self.regex = regex
        self.editing: str | None = None  # the filter being typed after "/"
        self.message = ""
        self.quit = False
        self.reset_requested = False
        self.baseline: Baseline | None = None  # the view-local reset ("r")
        self.empty_note = ""  # why the table is empty (set by snapshot())
        self.show_help = False  # "h"/"?": the key list in place of the table
        self.hidden: list[str] = []  # the columns the last render hid to fit the terminal

    @property
    def regex_field(self) -> str:
        """The filter key "/" sets: the op name when grouped by name, else the op type."""
        return "name" if self.group == "name" else "type"

    def filter(self) -> dict[str, Any]:
        f = dict(self.base_filter)
        if self.regex:
            f[self.regex_field] = self.regex
        return f

    def key(self, ch: str) -> None:
        if self.editing is not None:
            self._edit(ch)
            return
        for binding in KEYS:
            if ch in binding.keys:
                getattr(self, binding.action)(ch)
                return

    # -- the actions of KEYS ----------------------------------------------------------------
    def _sort(self, ch: str) -> None:
        self.sort = _KEY_SORT[ch]

    def _next_group(self, ch: str) -> None:
        gs = self.groups
        before = self.filter()
        self.group = gs[(gs.index(self.group) + 1) % len(gs)] if self.group in gs else gs[0]
        if self.regex and self.filter() != before:  # the regex moved between op name and op type
            self.message = f"filter now {_describe(self.filter())}"
        self._filter_changed(before)

    def _next_window(self, ch: str) -> None:
        ws = self.windows + ((SINCE_RESET,) if self.baseline is not None else ())
        self.window = ws[(ws.index(self.window) + 1) % len(ws)] if self.window in ws else ws[0]

    def _start_filter(self, ch: str) -> None:
        self.editing = ""

    def _reset(self, ch: str) -> None:
        self.reset_requested = True  # the loop takes the baseline (it holds the client)

    def _help(self, ch: str) -> None:
        self.show_help = not self.show_help and ch != "\x1b"

    def _quit(self, ch: str) -> None:
        self.quit = True

    def _edit(self, ch: str) -> None:
        assert self.editing is not None
        if ch in ("\r", "\n"):
            text, self.editing = self.editing, None
            problem = regex_problem(text) if text else None
            if problem is not None:  # the daemon's engine (RE2): it would refuse the SNAPSHOT
                self.message = f"bad regex: {problem}"
                return
            before = self.filter()
            self.regex = text or None
            self.message = f"filter: {self.regex_field}={text}" if text else "filter cleared"
            self._filter_changed(before)
        elif ch == "\x1b":
            self.editing = None
        elif ch in ("\x7f", "\b"):
            self.editing = self.editing[:-1]
        elif ch.isprintable():
            self.editing += ch

    def _filter_changed(self, before: dict[str, Any]) -> None:
        """A baseline holds one filter's rows: another filter ends the since-r view."""
        if self.baseline is not None and self.filter() != before:
            self.baseline = None
            if self.window == SINCE_RESET:
                self.window = self.windows[0]
            self.message = f"filter now {_describe(self.filter()) or 'none'}: 'since r' ended (r starts it again)"

    def take_baseline(self, client: Any) -> None:
        """``r``: the view shows what comes from now on; the daemon is not asked to reset."""
        self.reset_requested = False
        self.baseline = Baseline.take(client, self.groups, self.filter())
        self.window = SINCE_RESET
        self.message = f"reset (this view only) at {self.baseline.at()}; the daemon's aggregates are untouched"


# -- the daemon's offer and a view's snapshot -------------------------------------------------

def learn_windows(client: Any, view: TopView, status: dict[str, Any] | None = None) -> bool:
    """The windows the daemon offers (STATUS aggregates.windows), for the "w" key; False if
    the daemon did not say (a STATUS without them: the daemon alone then judges a window)."""
    try:
        st = client.status() if status is None else status
    except Exception:
        return False
    windows = (st.get("aggregates") or {}).get("windows")
    if isinstance(windows, list) and windows and all(isinstance(w, str) for w in windows):
        view.windows = tuple(windows)
        return True
    return False


def note_snapshot(view: TopView, snap: dict[str, Any]) -> None:
    """A SNAPSHOT reply with ``summary`` comes from a daemon with per-service keys, which
    groups by every grouping of :data:`GROUPS` (PROTOCOL.md); one without offers type and name."""
    if isinstance(snap.get("summary"), dict):
        view.groups = GROUPS


def learn_groups(client: Any, view: TopView, status: dict[str, Any] | None = None) -> None:
    """The groupings the daemon offers: STATUS ``aggregates.group_by`` if it lists them, else
    one probing SNAPSHOT (grouped by type, which every daemon accepts)."""
    listed = ((status or {}).get("aggregates") or {}).get("group_by")
    if isinstance(listed, list) and listed and all(g in GROUPS for g in listed):
        view.groups = tuple(g for g in GROUPS if g in listed)
        return
    if client.has_per_service_keys():
        view.groups = GROUPS


def snapshot(client: Any, view: TopView) -> dict[str, Any]:
    """The view's rows: the daemon's window, or since the view's baseline (window ``all``
    minus it); sets ``view.empty_note`` when there is no row, naming the filter that emptied
    the table (one more SNAPSHOT without it, only then) or saying nothing came yet."""
    if view.window == SINCE_RESET and view.baseline is not None:
        base = view.baseline
        covered = base.covers(view.group, view.filter())
        snap = base.subtract(client.snapshot("all", view.group, view.filter()), view.group) if covered else None
        if snap is None:
            view.message = ("the daemon's aggregates were reset (aclprof reset)" if covered
                            else f"no baseline by {view.group}") + ": 'since r' ended (r starts it again)"
            view.baseline, view.window = None, view.windows[0]
            return snapshot(client, view)
    else:
        if view.window == SINCE_RESET:
            view.window = view.windows[0]
        snap = client.snapshot(view.window, view.group, view.filter())
    note_snapshot(view, snap)
    view.empty_note = ""
    if not snap.get("rows"):
        window = snap.get("window", view.window)
        filt = view.filter()
        if view.window == SINCE_RESET:  # the baseline holds only this filter's rows: no comparison
            view.empty_note = f"no records {window}" + (f" matching filter {_describe(filt)}" if filt else "")
            return snap
        view.empty_note = f"no records yet in window {window}"
        if filt:
            rows = client.snapshot(view.window, view.group, {}).get("rows") or []
            if rows:
                view.empty_note = (f"no rows match filter {_describe(filt)} "
                                   f"({len(rows)} {GROUP_LABELS[view.group]} rows in {window} without it)")
    return snap


def _describe(filt: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in filt.items())


# -- rendering ---------------------------------------------------------------------------------

#: per grouping, the columns naming a row: (heading, the row's field; "key" is always there).
#: A column whose field no row has is left out, except the first, which then shows the key.
_GROUP_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "type": (("Op type", "key"),), "name": (("Op name", "key"), ("Op type", "op_type")),
    "service": (("Service", "key"),), "process": (("PID", "pid"), ("Service", "service")),
    "device": (("Device", "device"),),
    "model": (("Model", "key"), ("Service", "service"), ("Id", "model_id"), ("PID", "pid")),
}


def _identity_columns(group: str, rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    spec = _GROUP_COLUMNS.get(group, (("Key", "key"),))
    first = spec[0] if spec[0][1] == "key" or any(spec[0][1] in r for r in rows) else (spec[0][0], "key")
    return [first] + [c for c in spec[1:] if any(r.get(c[1]) not in (None, "") for r in rows)]


#: naming columns that hold numbers (a pid, a device, a model id): whole, like the statistics
_NUMBER_FIELDS = ("pid", "device", "model_id")
#: the statistics columns: (heading, the sort it is the column of, priority when the screen is
#: narrow: 0 never hidden, higher hidden sooner; the sorted column is never hidden)
_STATS: tuple[tuple[str, str | None, int], ...] = (
    ("Count", "count", 2), ("Total", "total", 1), ("Avg", "avg", 3), ("p50", None, 6), ("p99", "p99", 2),
    ("Max", "max", 5), ("% time", None, 4))
_SHIFT_PRIORITY = 3
#: the op failures column (a daemon that counts them per row: issue 24): hidden after Total
_FAIL_PRIORITY = 2
#: what the hidden-columns note suggests (the live view has the help key)
HIDDEN_HINT_LIVE = "widen the terminal or press h"
HIDDEN_HINT_ONCE = "widen the terminal, --sort one of them, or --json"


def table_parts(snap: dict[str, Any], view: TopView, limit: int = 0,
                width: int | None = None) -> tuple[Any, list[str], int]:
    """The rows of ``snap`` as a table fitted into ``width`` cells (:mod:`aclprof.cli.fit`:
    numbers whole, names shortened, the least important columns hidden), the hidden
    columns' labels and how many rows the limit left out."""
    from rich.text import Text

    from aclprof.cli.fit import Col, fit_table

    rows = sort_rows(snap.get("rows") or [], view.sort)
    more = max(0, len(rows) - limit) if limit else 0
    if more:
        rows = rows[:limit]
    ident = _identity_columns(view.group, rows)
    # the first naming column is never hidden; an op name loses its middle (both ends say
    # something: the layer and the op), other names their end
    cols = [Col(h, 0 if i == 0 else 5, whole=f in _NUMBER_FIELDS, min_width=12 if i == 0 else 6,
                cut="middle" if f == "key" and view.group == "name" else "end", justify="left")
            for i, (h, f) in enumerate(ident)]
    cols += [Col(h + (" ▼" if s == view.sort else ""), 0 if s == view.sort else pri, short=h,
                 style="bold" if s == view.sort else None) for h, s, pri in _STATS]
    shift = any("shift_p99" in r or "flagged" in r for r in rows)  # a daemon with the regression detector
    if shift:
        cols.append(Col("Shift", _SHIFT_PRIORITY))
    # failures since the daemon started, whatever the window: shown once a row has one (a
    # healthy fleet's screen keeps its columns; aclprof status says there were none)
    failures = any(num(r.get("failures")) > 0 for r in rows)
    if failures:
        cols.append(Col("Fail", _FAIL_PRIORITY))
    body = []
    for r in rows:
        # keys, services and names are peers' strings: escaped, never markup or terminal control
        # the first column falls back to the key where the row lacks the field ("(other)")
        cells: list[Any] = [Text(safe(r.get(f) if r.get(f) is not None else (r.get("key") if i == 0 else "-")))
                            for i, (_, f) in enumerate(ident)]
        top = r.get("max_ns")
        cells += [f"{int(num(r.get('count'))):,}", format_ns(num(r.get("total_ns"))),
                  format_ns(num(r.get("mean_ns"))), quantile_cell(r.get("p50_ns"), top),
                  quantile_cell(r.get("p99_ns"), top), stat_cell(top), f"{num(r.get('pct_time')):.1f}"]
        if shift:
            cells.append(shift_cell(r))
        if failures:
            n = int(num(r.get("failures")))
            cells.append(Text(f"{n:,}", style="bold red") if n else "0")
        body.append(cells)
    table, hidden = fit_table(cols, body, width)
    return table, hidden, more


def render_table(snap: dict[str, Any], view: TopView, limit: int = 0, title_extra: str = "",
                 keys: bool = True, header: Any = None, width: int | None = None) -> Any:
    """The title, the ``header`` (a rich renderable, if given) and the table of ``snap``,
    fitted into ``width`` terminal cells (None: unbounded); with ``view.show_help``, the
    key list in place of the table."""
    from rich.console import Group
    from rich.text import Text

    filt = view.filter()
    desc = f"window {snap.get('window', view.window)}, by {GROUP_LABELS.get(view.group, view.group)}, " \
           f"sorted by {view.sort}"
    if filt:
        desc += ", filter " + _describe(filt)
    title = Text(safe(f"aclprof top: {desc}{title_extra}"), style="bold")
    table, hidden, more = table_parts(snap, view, limit, width)
    view.hidden = hidden
    parts: list[Any] = [title]
    if header is not None:
        parts.append(header)
    if view.show_help and keys:
        parts += [_plain(line) for line in help_screen(view, width or 96).split("\n")]
        parts.append(_plain("h, ? or Esc: back to the table"))
        return Group(*parts)
    from aclprof.cli.fit import hidden_note

    note = hidden_note(hidden, HIDDEN_HINT_LIVE if keys else HIDDEN_HINT_ONCE)
    if note:
        parts.append(Text(note, style="dim"))
    parts.append(table)
    if more:
        parts.append(Text(f"... {more:,} more rows", style="dim"))
    cut = (snap.get("truncated") or {}).get("rows")
    if cut:  # the daemon left the lightest rows out to fit its reply frame (long names)
        parts.append(Text(f"({cut:,} lighter rows not sent: the daemon's reply was cut to fit its 16 MiB frame)",
                          style="yellow"))
    if not snap.get("rows"):  # below the table, whole (a cell would cut the filter's text)
        parts.append(Text(safe(f"({view.empty_note or 'no records in this window yet'})"), style="yellow"))
    if view.editing is not None:
        parts.append(_plain(f"filter regex on op {view.regex_field}: {view.editing}_   (Enter applies, Esc cancels)"))
    elif keys:  # the message on a line of its own: the key line fits 80 columns
        parts.append(_plain(caption()))
        if view.message:
            parts.append(_plain(f"[{view.message}]"))
    return Group(*parts)


def help_screen(view: TopView, width: int = 96) -> str:
    """What ``h`` shows: every key, the columns hidden to fit the terminal, and what each
    number's resolution is."""
    lines = ["keys:", help_text(width=width - 1), ""]
    if view.hidden:
        lines.append(f"hidden to fit this terminal: {', '.join(view.hidden)} (widen it, or sort by one: "
                     "the sorted column is always shown)")
    lines.append(RESOLUTION)
    return "\n".join(lines)


def _plain(text: str) -> Any:
    """``text`` shown as written: a rich Text (never parsed as markup, so the ``[...]`` of a
    message or a typed regex such as ``[a-z]`` or ``[/dim]`` is neither dropped nor a
    MarkupError), with terminal control characters escaped (messages quote the user's regex)."""
    from rich.text import Text

    return Text(safe(text))


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


def print_table(snap: dict[str, Any], view: TopView, limit: int = 0, title_extra: str = "",
                header: Any = None) -> None:
    """One table on stdout: fitted to the terminal, or 140 columns wide into a pipe."""
    console = _pipe_console(no_color=not use_colour(), highlight=False,
                            width=None if sys.stdout.isatty() else 140)
    console.print(render_table(snap, view, limit, title_extra, keys=False, header=header, width=console.width))
    sys.stdout.flush()
