"""msproftx markers: ``mark``, ``push``/``pop``, ``range`` and ``annotate``, cheap enough for hot paths.

The C API wants 2 to 4 calls per marker (create a stamp, set its message, push or
range-start, destroy) and has a pool of only 100 stamps. aclprof registers each distinct
message once with its compiled helper (``aclprof.binding._fast``), which keeps idle stamps per
message and the per-thread push stacks in C, so an annotation costs one call to enter and
one to exit. A stamp is checked out while it is pushed or while its range is open (the
library stores the start time in the stamp, and a range id *is* the stamp's pool slot, so
two open uses of one stamp would corrupt each other). When the pool runs dry, idle stamps
of other messages are destroyed to make room; an error is raised only when every stamp is
in open use. Beyond 4096 distinct messages (``f"step {i}"`` marks, say) new messages are
not cached: their stamp is created for the one use and destroyed after it.

``push``/``pop`` and ``annotate`` are per thread, and are built on
``aclprofRangeStart``/``aclprofRangeStop``, not on ``aclprofPush``/``aclprofPop``: the
library keeps ONE push/pop stack for the whole process (``ProfStampPool::singleTStack_``),
so with two threads ``aclprofPop`` closes whichever push is on top, and both the pairing
and the durations come out wrong. Ranges pair by id, so each thread's nesting is kept
here and every region ends with its own start time. In the collected data they are
therefore start/stop ranges (event kind ``range`` in the mock's log), not push/pop
events. The raw process-wide calls stay available as :func:`aclprof.binding.lowlevel.push` and
:func:`aclprof.binding.lowlevel.pop`.

Outside a session started through aclprof with ``DataType.MSPROFTX`` every call is a cheap
no-op (``set_strict(True)`` makes them raise instead). With ``ACLPROF_TX_DISABLE=1`` in the
environment at import, they are replaced by near-zero-cost no-ops.

Thread-safe: push/pop (and annotate) nesting is per thread; ranges may end on another thread.
When a session stops, every stamp is destroyed; pushes and ranges still open then end
silently (nothing of them is left in the library).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from aclprof._log import get_logger
from aclprof.binding import lowlevel
from aclprof.binding import state as _state
from aclprof.binding.built import fast_lib
from aclprof.binding.errors import MsproftxError, UnsupportedError, check

__all__ = ["mark", "push", "pop", "range", "annotate", "RangeHandle", "set_strict", "DISABLED"]

_log = get_logger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

#: True when ACLPROF_TX_DISABLE was set at import: every marker is a no-op.
DISABLED = os.environ.get("ACLPROF_TX_DISABLE", "").strip().lower() not in ("", "0", "false", "no")

_fastlib = fast_lib()

# Codes of the compiled helper (aclprof/binding/_fast.h).
_UNBOUND = _fastlib.ACLPROF_FAST_UNBOUND
_ONE_OFF = _fastlib.ACLPROF_TX_ONE_OFF
_POOL_EXHAUSTED = _fastlib.ACLPROF_TX_POOL_EXHAUSTED
_CREATE_FAILED = _fastlib.ACLPROF_TX_CREATE_FAILED
_TOO_DEEP = _fastlib.ACLPROF_TX_TOO_DEEP
_NO_MEMORY = _fastlib.ACLPROF_TX_NO_MEMORY
_EMPTY = _fastlib.ACLPROF_TX_EMPTY
_STALE = _fastlib.ACLPROF_TX_STALE
_RANGE_BIAS = _fastlib.ACLPROF_TX_RANGE_BIAS
_MAX_CACHED_MESSAGES = 4096

_push = _fastlib.aclprof_tx_push
_pop = _fastlib.aclprof_tx_pop
_mark = _fastlib.aclprof_tx_mark
_range_start = _fastlib.aclprof_tx_range_start
_range_end = _fastlib.aclprof_tx_range_end

_active = False  # an aclprof-started session with MSPROFTX is running
_strict = False


def set_strict(enabled: bool = True) -> None:
    """Make markers raise :class:`MsproftxError` outside an msproftx session (default: no-op)."""
    global _strict
    _strict = bool(enabled)


def _not_running(function: str) -> None:
    if _strict:
        raise MsproftxError(-1, function, "no aclprof session with DataType.MSPROFTX is running")


def _fail(rc: int, function: str, message: Any) -> None:
    """Raise the exception for a failure code of the compiled helper or the library."""
    if rc == _POOL_EXHAUSTED:
        raise MsproftxError(-1, "aclprofCreateStamp",
                            f"returned NULL for {message!r}: all 100 stamps of the library's pool "
                            "are in open use (pushed, or open ranges)",
                            hint="End some pushes or ranges before starting more")
    if rc == _CREATE_FAILED:
        raise MsproftxError(-1, "aclprofCreateStamp", "returned NULL: msproftx is not running in the library")
    if rc == _TOO_DEEP:
        raise MsproftxError(-1, function, f"too many nested pushes on this thread ({message!r})",
                            hint="Pop (or leave annotations) before nesting deeper")
    if rc == _NO_MEMORY:
        raise MemoryError(f"{function}: out of memory caching the message {message!r}")
    if rc == _UNBOUND:  # name the symbol the library lacks
        from aclprof.binding.loader import get_library

        needed = ("aclprofCreateStamp", "aclprofDestroyStamp", "aclprofSetStampTraceMessage", function)
        missing = get_library().missing
        raise UnsupportedError(function=next((n for n in needed if n in missing), function))
    check(rc, function, repr(message))


# message -> (id, text, length): id of a cached message (text unused), or _ONE_OFF with the
# encoded text for messages beyond the cache's size.
_keys: dict[Any, tuple[int, bytes, int]] = {}
_keys_lock = threading.Lock()


def _key(message: Any) -> tuple[int, bytes, int]:
    """Validate ``message`` and return its cache key, registering it on first use."""
    try:
        return _keys[message]
    except KeyError:
        pass
    except TypeError:  # unhashable (bytearray): validated below, never cached
        pass
    data = lowlevel.encode_text(message, "msproftx message", lowlevel.MAX_TRACE_MESSAGE_BYTES)
    if not isinstance(message, (str, bytes)):
        return (_ONE_OFF, data, len(data))
    with _keys_lock:
        key = _keys.get(message)
        if key is not None:
            return key
        if len(_keys) >= _MAX_CACHED_MESSAGES:
            return (_ONE_OFF, data, len(data))
        message_id = _fastlib.aclprof_tx_register(data, len(data))
        if message_id < 0:
            raise MemoryError(f"out of memory registering msproftx message {message!r}")
        key = _keys[message] = (message_id, b"", 0)
        return key


def _on_tx_change(running: bool) -> None:
    global _active
    _active = running
    if not running:
        _fastlib.aclprof_tx_reset()  # destroy every stamp while the library still accepts it


_state.on_tx_change(_on_tx_change)
# aclprof imports this module on first use, possibly while a session is already running.
_active = _state.tx_running


def _live_stamps() -> int:
    """Stamps aclprof holds in the library's pool (idle or in use); for tests."""
    return int(_fastlib.aclprof_tx_live_stamps())


def _clear_thread_state() -> None:
    """Forget this thread's open pushes and ranges (tests)."""
    _fastlib.aclprof_tx_clear_thread()
    _tls.ranges.clear()


# --- push / pop ------------------------------------------------------------------------

def push(message: str) -> None:
    """Open a nested region on this thread; close it with :func:`pop` on the same thread.

    It is an ``aclprofRangeStart`` kept on this thread's stack (see the module docstring:
    the library's own push/pop stack is shared by all threads).
    """
    key = _key(message)
    if not _active:
        _not_running("aclprofRangeStart")
        return
    rc = _push(*key)
    if rc:
        _fail(rc, "aclprofRangeStart", message)


def pop() -> None:
    """Close the innermost :func:`push` of this thread (its ``aclprofRangeStop``).

    Raises:
        MsproftxError: this thread has no open push (in a running session, or in strict mode).
    """
    if not _active:
        _not_running("aclprofRangeStop")
        return
    rc = _pop()
    while rc == _STALE:  # pushed in a session that has ended: nothing of it is left in C
        rc = _pop()
    if rc == _EMPTY:
        raise MsproftxError(-1, "aclprofRangeStop", "this thread has no open push to pop")
    if rc:
        _fail(rc, "aclprofRangeStop", None)


def _pop_after(message: Any, raising: bool) -> None:
    rc = _pop()
    if rc and rc != _STALE and rc != _EMPTY:
        if raising:
            _fail(rc, "aclprofRangeStop", message)
        _log.warning("aclprofRangeStop failed while an exception was propagating", code=rc)


_annotations: dict[Any, annotate] = {}


class annotate:
    """Mark a region: ``with annotate("step"):`` or ``@annotate()``.

    Entering is :func:`push` and leaving is :func:`pop`: a range start/stop paired on this
    thread, so concurrent annotations on several threads each get their own start and end
    (the library's aclprofPush/aclprofPop stack is process-wide and would mis-pair them).
    As a decorator the message defaults to the function's qualified name. The object can be
    reused, nested and shared between threads.
    """

    __slots__ = ("message", "_key")
    message: str | None
    _key: tuple[int, bytes, int]

    def __new__(cls, message: str | None = None) -> annotate:
        # `with annotate("m"):` builds an object per use; the objects are immutable and
        # shareable, so one per cached message is reused (a dict hit instead of ~150 ns).
        try:
            return _annotations[message]
        except (KeyError, TypeError):
            pass
        self = object.__new__(cls)
        self.message = message
        if message is not None:
            self._key = _key(message)
            if self._key[0] != _ONE_OFF and type(message) in (str, bytes):
                _annotations[message] = self
        return self

    def __enter__(self) -> annotate:
        if _active:
            try:
                rc = _push(*self._key)
            except AttributeError:  # built without a message (for use as a decorator)
                raise TypeError("annotate() needs a message when used as a context manager") from None
            if rc:
                _fail(rc, "aclprofRangeStart", self.message)
        elif self.message is None:
            raise TypeError("annotate() needs a message when used as a context manager")
        elif _strict:
            _not_running("aclprofRangeStart")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # If the enter was a no-op (no session then), this pops nothing: the C stack is
        # empty or holds only entries of ended sessions, which pop as _STALE.
        if _active:
            rc = _pop()
            if rc and rc != _STALE and rc != _EMPTY:
                if exc is None:
                    _fail(rc, "aclprofRangeStop", self.message)
                _log.warning("aclprofRangeStop failed while an exception was propagating", code=rc)

    def __call__(self, func: F) -> F:
        message: str
        if self.message is not None:
            message = self.message
        else:
            message = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", "function"))
            while len(message.encode("utf-8")) > lowlevel.MAX_TRACE_MESSAGE_BYTES:
                message = message[:-1]
        key = _key(message)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _active:
                if _strict:
                    _not_running("aclprofRangeStart")
                return func(*args, **kwargs)
            rc = _push(*key)
            if rc:
                _fail(rc, "aclprofRangeStart", message)
            try:
                result = func(*args, **kwargs)
            except BaseException:
                _pop_after(message, raising=False)
                raise
            _pop_after(message, raising=True)
            return result

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"aclprof.annotate({self.message!r})"


# --- mark ----------------------------------------------------------------------------

def mark(message: str) -> None:
    """Record an instant event (``aclprofMark``)."""
    key = _key(message)
    if not _active:
        _not_running("aclprofMark")
        return
    rc = _mark(*key)
    if rc:
        _fail(rc, "aclprofMark", message)


# --- ranges --------------------------------------------------------------------------

class RangeHandle:
    """An open range from :meth:`range.start`; :meth:`end` may run on any thread, once."""

    __slots__ = ("message", "_handle", "_ended")

    def __init__(self, message: Any, handle: int):
        self.message = message
        self._handle = handle  # generation << 32 | range id; -1 for a no-op range
        self._ended = handle < 0

    @property
    def range_id(self) -> int | None:
        """The library's range id (the stamp's pool slot); None for a no-op range."""
        return None if self._handle < 0 else self._handle & 0xFFFFFFFF

    @property
    def open(self) -> bool:
        return not self._ended

    def end(self) -> None:
        """Close the range (``aclprofRangeStop``). Idempotent, from any thread."""
        if self._ended:
            return
        self._ended = True
        rc = _range_end(self._handle)  # a concurrent second end gets _EMPTY from C
        if rc and rc != _EMPTY and rc != _STALE:
            _fail(rc, "aclprofRangeStop", self.message)

    def __enter__(self) -> RangeHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()

    def __repr__(self) -> str:
        state = "open" if self.open else "ended"
        return f"<aclprof range {self.message!r} id={self.range_id} {state}>"


class _ThreadRanges(threading.local):
    def __init__(self) -> None:
        self.ranges: list[RangeHandle] = []


_tls = _ThreadRanges()


class range:
    """A start/stop range (``aclprofRangeStart``/``aclprofRangeStop``), valid across threads.

    ``with aclprof.range("load"):`` brackets a block; ``h = aclprof.range("req").start()``
    returns a :class:`RangeHandle` whose ``end()`` can be called later, from any thread.
    """

    __slots__ = ("message", "_key")

    def __init__(self, message: str):
        self.message = message
        try:
            self._key = _keys[message]
        except (KeyError, TypeError):
            self._key = _key(message)

    def start(self) -> RangeHandle:
        if not _active:
            _not_running("aclprofRangeStart")
            return RangeHandle(self.message, -1)
        handle = _range_start(*self._key)
        if handle < 0:
            _fail(handle + _RANGE_BIAS, "aclprofRangeStart", self.message)
        return RangeHandle(self.message, handle)

    def __enter__(self) -> RangeHandle:
        handle = self.start()
        _tls.ranges.append(handle)
        return handle

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        stack = _tls.ranges
        if not stack:
            return
        handle = stack.pop()
        try:
            handle.end()
        except MsproftxError:
            if exc is None:
                raise
            _log.warning("aclprofRangeStop failed while an exception was propagating")

    def __repr__(self) -> str:
        return f"aclprof.range({self.message!r})"


# --- ACLPROF_TX_DISABLE: near-zero-cost no-ops ------------------------------------------

if DISABLED:
    def mark(message: str) -> None:
        """No-op: ACLPROF_TX_DISABLE is set."""

    def push(message: str) -> None:
        """No-op: ACLPROF_TX_DISABLE is set."""

    def pop() -> None:
        """No-op: ACLPROF_TX_DISABLE is set."""

    class annotate:  # type: ignore[no-redef]
        """No-op: ACLPROF_TX_DISABLE is set (decorating returns the function unchanged)."""

        __slots__ = ("message",)

        def __init__(self, message: str | None = None) -> None:
            self.message = message

        def __enter__(self) -> annotate:
            return self

        def __exit__(self, *exc_info: object) -> None:
            return None

        def __call__(self, func: F) -> F:
            return func

    _NOOP_HANDLE = RangeHandle("", -1)

    class range:  # type: ignore[no-redef]
        """No-op: ACLPROF_TX_DISABLE is set."""

        __slots__ = ("message",)

        def __init__(self, message: str) -> None:
            self.message = message

        def start(self) -> RangeHandle:
            return _NOOP_HANDLE

        def __enter__(self) -> RangeHandle:
            return _NOOP_HANDLE

        def __exit__(self, *exc_info: object) -> None:
            return None
