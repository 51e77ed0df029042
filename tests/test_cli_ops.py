"""The ops engineer's view (issue 10): what ``aclprof top`` shows on screen (its status
messages survive rich's markup), its option checking before any request reaches the daemon,
``top``/``status`` in a closed pipe, and ``status --loop``."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(90)


def _screen(view, snap=None) -> str:
    """What the live view's table shows, rendered as plain text (no colours), with its runs of
    white space as one space (the caption wraps at the table's width)."""
    from rich.console import Console

    from aclprof.cli.topview import render_table

    console = Console(record=True, width=200, color_system=None, force_terminal=False)
    console.print(render_table(snap or {"rows": []}, view, 10))
    return " ".join(console.export_text().split())


def _typed(view, text: str) -> None:
    for ch in text:
        view.key(ch)


# -- 1. top's status messages reach the screen ------------------------------------------------

def test_top_shows_filter_applied_message():
    from aclprof.cli.topview import TopView

    v = TopView()
    _typed(v, "/conv\r")
    assert "[filter: conv]" in _screen(v)
    _typed(v, "/\r")
    assert "[filter cleared]" in _screen(v)


def test_top_shows_bad_regex_message():
    from aclprof.cli.topview import TopView

    v = TopView()
    _typed(v, "/(?<=x)y\r")  # lookbehind: RE2 refuses it
    screen = _screen(v)
    assert "bad regex: RE2 rejects '(?<=x)y'" in screen
    assert v.regex is None


def test_top_shows_reset_message_and_markup_in_messages_is_text():
    from aclprof.cli.topview import TopView

    v = TopView()
    v.message = "aggregates reset"
    assert "[aggregates reset]" in _screen(v)
    # a message holding rich markup (a user's regex) is shown as typed, not interpreted
    v.message = "filter: [bold]x[/bold] [red]"
    assert "[filter: [bold]x[/bold] [red]]" in _screen(v)


def test_top_shows_the_regex_being_typed_verbatim():
    from aclprof.cli.topview import TopView

    v = TopView()
    _typed(v, "/[a-z]+ [/dim]")
    assert "filter regex: [a-z]+ [/dim]_" in _screen(v)
