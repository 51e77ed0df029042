"""The keys of ``aclprof top``: one table that the key handler dispatches on and that the
screen's caption, ``aclprof top --help`` and the README list, so none can miss a key."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KeyBinding", "KEYS", "GROUPS", "BASIC_GROUPS", "GROUP_LABELS", "accepted_keys", "caption",
           "help_text", "key_name"]

#: every grouping, in the order ``g`` cycles through them (``--group`` accepts the same)
GROUPS = ("type", "name", "service", "process", "device", "model")
#: the groupings of a daemon without per-service keys (before aclprofd's SNAPSHOT ``summary``)
BASIC_GROUPS = ("type", "name")
#: how the title names a grouping
GROUP_LABELS = {"type": "op type", "name": "op name", "service": "service", "process": "process",
                "device": "device", "model": "model"}


@dataclass(frozen=True)
class KeyBinding:
    keys: tuple[str, ...]  # what the terminal sends
    label: str  # the caption's word
    help: str  # the --help line
    action: str  # the TopView method that handles it (given the key)


KEYS: tuple[KeyBinding, ...] = (
    KeyBinding(("t", "c", "a", "9", "m"), "sort", "sort by total, count, avg, p99 or max time", "_sort"),
    KeyBinding(("g",), "group", "next grouping: " + " > ".join(GROUPS)
               + " (a daemon without per-service keys offers type and name only)", "_next_group"),
    KeyBinding(("w",), "window", "next window: the daemon's windows (10s, 1m, all by default), "
               "then 'since r' once r was pressed", "_next_window"),
    KeyBinding(("/",), "filter", "type a regex (RE2) on the op name when grouped by name, else on the op type; "
               "Enter applies it, an empty one clears it, Esc cancels", "_start_filter"),
    KeyBinding(("r",), "reset", "view-local reset: count, total, avg and % time since the key press "
               "(min, max, p50, p99 not derivable: shown as —); the daemon's aggregates are untouched "
               "(an admin resets them with 'aclprof reset')", "_reset"),
    KeyBinding(("h", "?", "\x1b"), "help", "show or hide this list of keys, the columns hidden to fit the terminal "
               "and how exact each number is (Esc hides it too)", "_help"),
    KeyBinding(("q", "Q", "\x03"), "quit", "quit (Ctrl-C too)", "_quit"),
)


def key_name(ch: str) -> str:
    """How the help spells a key (control characters by name)."""
    return {"\x03": "Ctrl-C", "\x1b": "Esc"}.get(ch, ch)


def accepted_keys() -> set[str]:
    """Every key the live view reacts to (outside the filter's text entry)."""
    return {k for b in KEYS for k in b.keys}


def caption() -> str:
    """The screen's one-line key summary: ``keys: t c a 9 m sort, g group, ...``."""
    return "keys: " + ", ".join(f"{' '.join(b.keys[:5] if b.label == 'sort' else b.keys[:1])} {b.label}"
                                for b in KEYS)


def help_text(indent: str = "  ", width: int = 96) -> str:
    """The key list of ``aclprof top --help``, the README and the help key (``width``: the
    terminal's)."""
    import textwrap

    lines = []
    for b in KEYS:
        names = " ".join(key_name(k) for k in b.keys if k.isprintable())
        lines += textwrap.wrap(b.help, width=max(40, width), initial_indent=f"{indent}{names:<11}",
                               subsequent_indent=indent + " " * 11, break_on_hyphens=False)
    return "\n".join(lines)
