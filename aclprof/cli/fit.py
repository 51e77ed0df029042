"""Fitting a screen into the terminal's width, the way ``htop``, ``nvtop`` and ``py-spy top``
do: a number is shown whole or its column is hidden, never cut; names (op names, services,
hosts) are shortened with an ellipsis; when even that is not enough, the least important
columns go first, and the screen says which ones (:func:`hidden_note`).

One mechanism for every screen: ``top``'s and ``fleet``'s tables and the demo's summary
(:func:`fit_table`, a rich Table), ``tail``'s lines (:func:`fit` on fixed widths, then
:func:`cut`) and ``status``'s report (:func:`wrap_lines`). A screen says per column what
it is (:class:`Col`: whole or shortenable, its priority, the narrowest a name may get);
the rule of what goes first lives here only:

1. every column at its natural width (the widest cell or heading) if that fits;
2. else names shrink, down to their ``min_width``, the least important first;
3. else the least important droppable column (highest ``priority``; 0 is never dropped)
   is hidden, and the names share the room left, in equal parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Col", "Fitted", "ELLIPSIS", "cells", "cut", "fit", "fit_table", "hidden_note", "wrap_lines",
           "TABLE_GAP"]

ELLIPSIS = "…"
#: the columns of a fitted table are separated by this many blanks (no vertical rules: the
#: borders of a boxed table cost 3 columns per column, a third of an 80-column screen)
TABLE_GAP = 2


@dataclass(frozen=True)
class Col:
    """One column of a screen."""

    title: str
    #: 0: always shown; otherwise hidden before any column of a lower number
    priority: int = 0
    #: a number (or a cell holding numbers, like "p50 +42.7% REGRESSION"): shown whole or not at all
    whole: bool = True
    #: a name's narrowest width (cells); below it the column is hidden instead
    min_width: int = 8
    #: where a name loses its characters: the middle (op names, paths: both ends say
    #: something) or the end
    cut: Literal["middle", "end"] = "end"
    justify: Literal["left", "right"] = "right"
    #: how the hidden-columns note names it (default: the title)
    short: str = ""
    style: str | None = None
    #: a fixed natural width (tail: aligned lines whatever the record); 0: from the cells
    width: int = 0

    @property
    def label(self) -> str:
        return self.short or self.title


@dataclass
class Fitted:
    """The outcome of :func:`fit`: the columns shown (indices, in order), their widths, and
    the titles of the hidden ones."""

    shown: list[int]
    widths: dict[int, int]
    hidden: list[str] = field(default_factory=list)
    total: int = 0  # the width used, separators included


def cells(text: str) -> int:
    """The terminal cells ``text`` takes (wide characters count 2)."""
    from rich.cells import cell_len

    return cell_len(text)


def cut(text: str, width: int, how: Literal["middle", "end"] = "end") -> str:
    """``text`` in at most ``width`` cells, an ellipsis where characters went (in the middle
    or at the end). Only for names: a number is never passed here."""
    if cells(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    from rich.cells import get_character_cell_size as size

    room = width - 1
    if how == "end":
        head_room, tail_room = room, 0
    else:
        tail_room = room // 2
        head_room = room - tail_room
    head, used = [], 0
    for ch in text:
        if used + size(ch) > head_room:
            break
        head.append(ch)
        used += size(ch)
    tail: list[str] = []
    used = 0
    for ch in reversed(text):
        if used + size(ch) > tail_room:
            break
        tail.append(ch)
        used += size(ch)
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


def fit(cols: Sequence[Col], natural: Sequence[int], width: int, gap: int = TABLE_GAP) -> Fitted:
    """Which columns to show and how wide, in ``width`` cells with ``gap`` cells between
    columns (the rule in the module docstring). ``natural``: each column's widest cell."""
    n = len(cols)

    def narrowest(i: int) -> int:
        return natural[i] if cols[i].whole else min(natural[i], cols[i].min_width)

    def need(shown: list[int]) -> int:
        return sum(narrowest(i) for i in shown) + gap * max(0, len(shown) - 1)

    shown = list(range(n))
    hidden: list[int] = []
    while need(shown) > width:
        droppable = [i for i in shown if cols[i].priority > 0]
        if not droppable:
            break  # what is left is all essential: the caller's screen is narrower than that
        worst = max(droppable, key=lambda i: (cols[i].priority, i))
        shown.remove(worst)
        hidden.append(worst)
    widths = {i: narrowest(i) for i in shown}
    spare = width - need(shown)
    # names get the room back in equal shares (one long name must not starve the others),
    # the most important first when the shares run out
    growing = sorted((i for i in shown if widths[i] < natural[i]), key=lambda i: (cols[i].priority, i))
    while spare > 0 and growing:
        share = max(1, spare // len(growing))
        for i in growing:
            grow = min(share, spare, natural[i] - widths[i])
            widths[i] += grow
            spare -= grow
        growing = [i for i in growing if widths[i] < natural[i]]
    total = sum(widths.values()) + gap * max(0, len(shown) - 1)
    return Fitted(shown, widths, [cols[i].label for i in sorted(hidden)], total)


def hidden_note(hidden: Sequence[str], hint: str) -> str:
    """``3 columns hidden: p50, Max, % time (widen the terminal or press h)``; "" if none."""
    if not hidden:
        return ""
    n = len(hidden)
    return f"{n} column{'s' if n != 1 else ''} hidden: {', '.join(hidden)} ({hint})"


def _plain(cell: Any) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


def fit_table(cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int | None,
              heading: Any = None) -> tuple[Any, list[str]]:
    """A rich Table of ``rows`` (cells: str or rich Text, one per column of ``cols``) fitted
    into ``width`` cells (None: every column at its natural width), and the hidden columns'
    labels. ``heading(i, col)``: the heading shown for column ``i`` (default its title)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    titles = [heading(i, c) if heading is not None else c.title for i, c in enumerate(cols)]
    natural = [c.width or max([cells(_plain(titles[i]))] + [cells(_plain(r[i])) for r in rows])
               for i, c in enumerate(cols)]
    fitted = fit(cols, natural, width if width is not None else sum(natural) + TABLE_GAP * len(cols))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True,
                  padding=(0, 1), expand=False)
    for i in fitted.shown:
        c = cols[i]
        title = titles[i]
        if not c.whole and cells(_plain(title)) > fitted.widths[i]:
            title = cut(_plain(title), fitted.widths[i])
        table.add_column(title, justify=c.justify, no_wrap=True, width=fitted.widths[i],
                         overflow="ellipsis", style=c.style)
    for r in rows:
        out = []
        for i in fitted.shown:
            cell, c = r[i], cols[i]
            if not c.whole and cells(_plain(cell)) > fitted.widths[i]:
                short = cut(_plain(cell), fitted.widths[i], c.cut)
                cell = Text(short, style=cell.style) if isinstance(cell, Text) else short
            out.append(cell)
        table.add_row(*out)
    return table, fitted.hidden


def wrap_lines(lines: Sequence[str], width: int, indent: int = 4) -> list[str]:
    """Prose lines (``aclprof status``) in ``width`` cells: broken at blanks only, so a number
    is never split; continuation lines indented by ``indent`` more than the line they
    continue; a word that cannot fit a line by itself (a long path or name, never a number)
    is shortened in its middle."""
    out: list[str] = []
    for line in lines:
        if cells(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        first, cont = " " * lead, " " * min(lead + indent, max(0, width // 2))
        current, prefix = "", first
        for word in line[lead:].split(" "):
            room = width - cells(prefix)
            if cells(word) > room and not current:
                word = cut(word, room, "middle")
            candidate = f"{current} {word}" if current else word
            if cells(candidate) <= width - cells(prefix):
                current = candidate
                continue
            out.append(prefix + current)
            prefix = cont
            room = width - cells(prefix)
            current = word if cells(word) <= room else cut(word, room, "middle")
        out.append(prefix + current)
    return out
