"""Process-wide facts the binding learns from successful calls, shared between modules.

The C library keeps its own state; aclprof mirrors the one fact its Python fast paths need
(is an msproftx-enabled session running?) without a C call, and lets modules that cache C
objects (the stamp cache) hear about session boundaries without import cycles.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["on_tx_change", "tx_started", "tx_stopping"]

_tx_listeners: list[Callable[[bool], None]] = []
tx_running = False


def on_tx_change(listener: Callable[[bool], None]) -> None:
    """Call ``listener(True)`` after an msproftx session starts, ``listener(False)`` before
    it stops (so that cached stamps can still be destroyed while the library accepts it)."""
    _tx_listeners.append(listener)


def tx_started() -> None:
    global tx_running
    tx_running = True
    for listener in _tx_listeners:
        listener(True)


def tx_stopping() -> None:
    global tx_running
    if not tx_running:
        return
    tx_running = False
    for listener in _tx_listeners:
        listener(False)
