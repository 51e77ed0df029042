"""SIGTERM and SIGHUP end a command the way Ctrl-C does: the running code unwinds, so every
``finally`` runs (an export removes its staging file or directory, connections close, the
terminal is restored), and the exit status says which signal ended it (128 + its number:
143 for SIGTERM, 129 for SIGHUP, 130 for Ctrl-C).

Without this, SIGTERM (``kill``, systemd, a container stop, ``timeout``) and SIGHUP (the
terminal closed) kill the process where it stands and an export leaves a hidden staging file
of up to gigabytes behind. A signal that is ignored when the command starts (``nohup``, a
background job's SIGINT) stays ignored.

:func:`deferred` holds a signal back over statements that must not be split (create a file,
then remember to remove it) and over clean-up that a second signal (Ctrl-C twice, systemd's
SIGTERM after SIGHUP) must not cut short: it is raised when the block ends. It also keeps a
signal from being lost: Python drops an exception raised where nothing can catch it (in the
after-fork hooks that ``subprocess`` runs in the parent, in ``__del__``), so code that
spawns processes runs deferred, and the signal is raised after it, where it unwinds.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["Terminated", "exit_status", "ending_signals", "deferred"]

#: the signals that end a command with its clean-up (SIGINT as KeyboardInterrupt, as Python does)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived. A BaseException, like KeyboardInterrupt, so that an
    ``except Exception`` on the way out does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


def exit_status(signum: int) -> int:
    """The shell's convention for a command ended by ``signum``: 128 + its number."""
    return 128 + int(signum)


class _State:
    def __init__(self) -> None:
        self.installed = False
        self.depth = 0             # nesting of deferred()
        self.pending: int | None = None


_state = _State()


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.depth:
        if _state.pending is None:
            _state.pending = signum
        return
    _raise(signum)


@contextmanager
def ending_signals() -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP unwind it (KeyboardInterrupt,
    :class:`Terminated`) unless they were ignored when it started; the previous handlers
    come back afterwards. Only the main thread can set handlers: elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread() or _state.installed:
        yield
        return
    previous: dict[int, Any] = {}
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if current == signal.SIG_IGN or (signum == signal.SIGINT and current != signal.default_int_handler):
            continue  # nohup, `cmd &`, or an embedding program's own SIGINT handler
        previous[signum] = signal.signal(signum, _handler)
    _state.installed, _state.depth, _state.pending = True, 0, None
    try:
        yield
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
        _state.installed = False


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP back until the block ends (then act on the first one): a
    resource created in the block is always recorded for clean-up, a clean-up in it runs to
    its end, and a signal arriving in a fork's hooks is not lost."""
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
        if _state.depth == 0 and _state.pending is not None:
            signum, _state.pending = _state.pending, None
            _raise(signum)
