"""Owning wrappers for the C library's handles (configs, stamps, contexts, ...).

A handle keeps its C pointer private, releases it exactly once through an explicit,
idempotent ``close()`` (also run by ``with``), and raises :class:`HandleClosedError` when
used after that. No ``__del__``: these are process-global resources whose release order
matters (a config must outlive the session that uses it), so the owner decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aclprof.binding.errors import HandleClosedError

__all__ = ["Handle"]


_H = TypeVar("_H", bound="Handle")


class Handle:
    """Base class: one C pointer and the function that releases it."""

    __slots__ = ("_ptr", "_release", "__weakref__")
    kind = "handle"

    def __init__(self, ptr: Any, release: Callable[[Any], None] | None):
        self._ptr = ptr
        self._release = release

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def _get(self) -> Any:
        """The C pointer; raises if the handle was closed."""
        ptr = self._ptr
        if ptr is None:
            raise HandleClosedError(f"this {self.kind} is closed and can no longer be used")
        return ptr

    def close(self) -> None:
        """Release the C object. Safe to call more than once."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None and self._release is not None:
            self._release(ptr)

    def __enter__(self: _H) -> _H:
        self._get()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else "open"
        return f"<aclprof {self.kind} ({state})>"
