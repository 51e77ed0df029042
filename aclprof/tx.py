"""msproftx markers: ``mark``, ``push``/``pop``, ``range`` and ``annotate``, cheap enough for hot paths.

The C API wants 2 to 4 calls per marker (create a stamp, set its message, push or
range-start, destroy) and has a pool of only 100 stamps. aclprof keeps a cache of stamps
per message, so an annotation costs one push and one pop through a compiled helper
(``aclprof._fast``). A stamp is checked out while it is pushed or while its range is open
(the library stores the start time in the stamp, and a range id *is* the stamp's pool
slot, so two open uses of one stamp would corrupt each other), and returned afterwards.
When the pool runs dry, idle cached stamps of other messages are destroyed to make room;
an error is raised only when all 100 are in open use.

Outside a session started through aclprof with ``DataType.MSPROFTX`` every call is a cheap
no-op (``set_strict(True)`` makes them raise instead). With ``ACLPROF_TX_DISABLE=1`` in the
environment at import, they are replaced by near-zero-cost no-ops.

Thread-safe: push/pop stacks are per thread, as in C; ranges may end on another thread.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable, TypeVar

from . import _state
from . import lowlevel
from ._log import get_logger
from .errors import MsproftxError, UnsupportedError, check

__all__ = ["mark", "push", "pop", "range", "annotate", "RangeHandle", "set_strict", "DISABLED"]

_log = get_logger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

#: True when ACLPROF_TX_DISABLE was set at import: every marker is a no-op.
DISABLED = os.environ.get("ACLPROF_TX_DISABLE", "").strip().lower() not in ("", "0", "false", "no")

_active = False  # an aclprof-started session with MSPROFTX is running
_strict = False
_RANGE_BIAS = 1 << 40  # see _fast.h: ACLPROF_FAST_RANGE_ERROR_BIAS
_POOL_SIZE = 100


def set_strict(enabled: bool = True) -> None:
    """Make markers raise :class:`MsproftxError` outside an msproftx session (default: no-op)."""
    global _strict
    _strict = bool(enabled)


def _not_running(function: str) -> None:
    if _strict:
        raise MsproftxError(-1, function, "no aclprof session with DataType.MSPROFTX is running")


_UNBOUND = -1000  # see _fast.h: ACLPROF_FAST_UNBOUND (the library lacks the symbol)


def _raise(rc: int, function: str, detail: str) -> None:
    if rc == _UNBOUND:
        raise UnsupportedError(function=function)
    check(rc, function, detail)


def _validate(message: Any) -> None:
    lowlevel.encode_text(message, "msproftx message", lowlevel.MAX_TRACE_MESSAGE_BYTES)


_valid_messages: dict[Any, bool] = {}


def _check_message(message: Any) -> None:
    """Validate once per distinct message (bounded memo)."""
    if message not in _valid_messages:
        _validate(message)
        if len(_valid_messages) > 65536:
            _valid_messages.clear()
        _valid_messages[message] = True


def _validate_once(message: Any) -> None:
    """:func:`_validate`, memoized for ``str`` (``annotate("m")``/``range("m")`` are
    usually built on every use; validating each time cost ~1 us)."""
    if type(message) is str:
        _check_message(message)
    else:
        _validate(message)  # bytes-likes (bytearray is unhashable): as before, every time


class _StampCache:
    """Idle stamps per message, checked out for the duration of one push or range."""

    def __init__(self) -> None:
        self.free: dict[Any, list[int]] = {}
        self.generation = 0
        self.created = 0  # stamps alive in the library (idle + checked out)
        self.live: set[int] = set()  # their addresses, so that reset() can destroy them all
        self.lock = threading.Lock()

    def acquire(self, message: Any) -> int:
        idle = self.free.get(message)
        if idle:
            try:
                return idle.pop()
            except IndexError:  # another thread took the last one
                pass
        return self._create(message)

    def release(self, message: Any, address: int, generation: int) -> None:
        if generation == self.generation:
            self.free[message].append(address)
        # else: the session ended meanwhile; the library already forgot that stamp.

    def _create(self, message: Any) -> int:
        _check_message(message)
        data = message.encode("utf-8") if isinstance(message, str) else bytes(message)
        with self.lock:
            address = lowlevel.create_stamp_address()
            while address == 0 and self._evict_one():
                address = lowlevel.create_stamp_address()
            if address == 0:
                idle = sum(len(v) for v in self.free.values())
                if self.created >= _POOL_SIZE and idle == 0:
                    detail = (f"all {_POOL_SIZE} stamps of the library's pool are in open use "
                              "(pushed or open ranges); end some before starting more")
                else:
                    detail = "returned NULL: msproftx is not running in the library"
                raise MsproftxError(-1, "aclprofCreateStamp", detail)
            try:
                lowlevel.set_stamp_message_address(address, data)
            except BaseException:
                lowlevel.destroy_stamp_address(address)
                raise
            self.created += 1
            self.live.add(address)
            self.free.setdefault(message, [])
            return address

    def _evict_one(self) -> bool:
        for idle in self.free.values():
            if idle:
                try:
                    address = idle.pop()
                except IndexError:
                    continue
                lowlevel.destroy_stamp_address(address)
                self.created -= 1
                self.live.discard(address)
                return True
        return False

    def reset(self) -> None:
        """Destroy every stamp, idle or checked out (called before the session stops).

        A stamp still checked out (a range never ended, a push never popped) would otherwise
        stay allocated in the library's pool for good; its holder sees the new generation
        and no longer touches it."""
        with self.lock:
            self.free = {}
            live, self.live = self.live, set()
            self.generation += 1
            self.created = 0
            for address in live:
                lowlevel.destroy_stamp_address(address)


_cache = _StampCache()


def _on_tx_change(running: bool) -> None:
    global _active
    if running:
        _active = True
    else:
        _active = False
        try:
            _cache.reset()
        except Exception as exc:  # must not stop the session from stopping
            _log.warning("could not destroy cached msproftx stamps", error=str(exc))


_state.on_tx_change(_on_tx_change)


class _ThreadStacks(threading.local):
    def __init__(self) -> None:
        self.pushes: list[Any] = []  # (address, message, generation) or None for a no-op
        self.ranges: list[Any] = []  # RangeHandle


_tls = _ThreadStacks()


# --- push / pop ------------------------------------------------------------------------

def _push_entry(message: Any) -> Any:
    """Push a stamp for ``message``; returns the entry to pass to :func:`_pop_entry`."""
    if not _active:
        _check_message(message)
        _not_running("aclprofPush")
        return None
    cache = _cache
    generation = cache.generation
    try:  # _StampCache.acquire's fast path, inlined (hot path)
        address = cache.free[message].pop()
    except (KeyError, IndexError):  # no idle stamp for this message (yet)
        address = cache.acquire(message)
    rc = _fastlib.aclprof_tx_push(address)
    if rc:
        cache.release(message, address, generation)
        _raise(rc, "aclprofPush", repr(message))
    return (address, message, generation)


def _pop_entry(entry: Any, raising: bool = True) -> None:
    if entry is None:
        return
    address, message, generation = entry
    cache = _cache
    if generation != cache.generation:
        return  # the session stopped inside the annotation: nothing left to pop
    rc = _fastlib.aclprof_tx_pop()
    if generation == cache.generation:  # _StampCache.release, inlined (hot path)
        cache.free[message].append(address)
    if rc:
        if raising:
            _raise(rc, "aclprofPop", repr(message))
        _log.warning("aclprofPop failed while an exception was propagating", code=rc)


def push(message: str) -> None:
    """Open a nested range on this thread (``aclprofPush``); close it with :func:`pop`."""
    _tls.pushes.append(_push_entry(message))


def pop() -> None:
    """Close the innermost :func:`push` of this thread (``aclprofPop``).

    Raises:
        MsproftxError: this thread has no open push (in a running session, or in strict mode).
    """
    stack = _tls.pushes
    generation = _cache.generation
    while stack and stack[-1] is not None and stack[-1][2] != generation:
        stack.pop()  # pushed in a session that has ended: nothing of it is left in C
    if not stack:
        if _active or _strict:
            raise MsproftxError(-1, "aclprofPop", "this thread has no open push to pop")
        return
    _pop_entry(stack.pop())


class annotate:
    """Mark a region with push/pop: ``with annotate("step"):`` or ``@annotate()``.

    As a decorator the message defaults to the function's qualified name. The object can be
    reused, nested and shared between threads.
    """

    __slots__ = ("message",)

    def __init__(self, message: str | None = None):
        if message is not None and not (type(message) is str and message in _valid_messages):
            _validate_once(message)
        self.message = message

    # __enter__/__exit__ inline the running-session paths of _push_entry/_pop_entry and of
    # _StampCache.acquire/release (same steps, same order): a Python call costs ~0.1 us
    # here, and this pair is the hot path. Keep them in sync with those functions.
    def __enter__(self) -> "annotate":
        message = self.message
        if message is None:
            raise TypeError("annotate() needs a message when used as a context manager")
        if not _active:  # _push_entry's no-session path
            if not (type(message) is str and message in _valid_messages):
                _check_message(message)
            if _strict:
                _not_running("aclprofPush")
            _tls.pushes.append(None)
            return self
        cache = _cache
        generation = cache.generation
        try:
            address = cache.free[message].pop()
        except (KeyError, IndexError):  # no idle stamp for this message (yet)
            address = cache.acquire(message)
        rc = _fastlib.aclprof_tx_push(address)
        if rc:
            cache.release(message, address, generation)
            _raise(rc, "aclprofPush", repr(message))
        _tls.pushes.append((address, message, generation))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        stack = _tls.pushes
        if not stack:
            return
        entry = stack.pop()
        if entry is None:
            return
        address, message, generation = entry
        cache = _cache
        if generation != cache.generation:
            return  # the session stopped inside the annotation: nothing left to pop
        rc = _fastlib.aclprof_tx_pop()
        if generation == cache.generation:  # _StampCache.release
            cache.free[message].append(address)
        if rc:
            if exc is None:
                _raise(rc, "aclprofPop", repr(message))
            _log.warning("aclprofPop failed while an exception was propagating", code=rc)

    def __call__(self, func: F) -> F:
        message = self.message
        if message is None:
            message = getattr(func, "__qualname__", None) or getattr(func, "__name__", "function")
            message = message[: lowlevel.MAX_TRACE_MESSAGE_BYTES // 4 * 4]
            while len(message.encode("utf-8")) > lowlevel.MAX_TRACE_MESSAGE_BYTES:
                message = message[:-1]
            _validate(message)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _active:
                if _strict:
                    _not_running("aclprofPush")
                return func(*args, **kwargs)
            entry = _push_entry(message)
            try:
                result = func(*args, **kwargs)
            except BaseException:
                _pop_entry(entry, raising=False)
                raise
            _pop_entry(entry)
            return result

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"aclprof.annotate({self.message!r})"


# --- mark ----------------------------------------------------------------------------

def mark(message: str) -> None:
    """Record an instant event (``aclprofMark``)."""
    if not _active:
        _check_message(message)
        _not_running("aclprofMark")
        return
    cache = _cache
    generation = cache.generation
    address = cache.acquire(message)
    rc = _fastlib.aclprof_tx_mark(address)
    cache.release(message, address, generation)
    if rc:
        _raise(rc, "aclprofMark", repr(message))


# --- ranges --------------------------------------------------------------------------

class RangeHandle:
    """An open range from :meth:`range.start`; :meth:`end` may run on any thread, once."""

    __slots__ = ("message", "range_id", "_address", "_generation", "_lock")

    def __init__(self, message: Any, range_id: int | None, address: int, generation: int):
        self.message = message
        self.range_id = range_id  # None for a no-op range (no session running)
        self._address = address
        self._generation = generation
        self._lock: threading.Lock | None = threading.Lock() if range_id is not None else None

    @property
    def open(self) -> bool:
        return self._address != 0

    def end(self) -> None:
        """Close the range (``aclprofRangeStop``). Idempotent."""
        lock = self._lock
        if lock is None:
            return
        with lock:
            address, self._address = self._address, 0
        if not address or self._generation != _cache.generation:
            return
        rc = _fastlib.aclprof_tx_range_stop(self.range_id)
        _cache.release(self.message, address, self._generation)
        if rc:
            _raise(rc, "aclprofRangeStop", f"range {self.range_id} ({self.message!r})")

    def __enter__(self) -> "RangeHandle":
        return self

    def __exit__(self, *exc_info) -> None:
        self.end()

    def __repr__(self) -> str:
        return f"<aclprof range {self.message!r} id={self.range_id} {'open' if self.open else 'ended'}>"


class range:  # noqa: A001 - mirrors nvtx.start_range/end_range under a Pythonic name
    """A start/stop range (``aclprofRangeStart``/``aclprofRangeStop``), valid across threads.

    ``with aclprof.range("load"):`` brackets a block; ``h = aclprof.range("req").start()``
    returns a :class:`RangeHandle` whose ``end()`` can be called later, from any thread.
    """

    __slots__ = ("message",)

    def __init__(self, message: str):
        if not (type(message) is str and message in _valid_messages):
            _validate_once(message)
        self.message = message

    def start(self) -> RangeHandle:
        message = self.message
        if not _active:
            _not_running("aclprofRangeStart")
            return RangeHandle(message, None, 0, -1)
        cache = _cache
        generation = cache.generation
        address = cache.acquire(message)
        result = _fastlib.aclprof_tx_range_start(address)
        if result < 0:
            cache.release(message, address, generation)
            _raise(result + _RANGE_BIAS, "aclprofRangeStart", repr(message))
        return RangeHandle(message, result, address, generation)

    def __enter__(self) -> RangeHandle:
        handle = self.start()
        _tls.ranges.append(handle)
        return handle

    def __exit__(self, exc_type, exc, tb) -> None:
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


# --- the compiled fast path, or the disabled no-ops ------------------------------------

try:
    from ._fast import lib as _fastlib
except ImportError as _exc:  # pragma: no cover - only when the package was not built
    raise ImportError(
        "aclprof._fast is missing: install aclprof with pip (it compiles a small helper)"
    ) from _exc


if DISABLED:
    def mark(message: str) -> None:  # type: ignore[no-redef]  # noqa: F811
        """No-op: ACLPROF_TX_DISABLE is set."""

    def push(message: str) -> None:  # type: ignore[no-redef]  # noqa: F811
        """No-op: ACLPROF_TX_DISABLE is set."""

    def pop() -> None:  # type: ignore[no-redef]  # noqa: F811
        """No-op: ACLPROF_TX_DISABLE is set."""

    class annotate:  # type: ignore[no-redef]  # noqa: F811
        """No-op: ACLPROF_TX_DISABLE is set (decorating returns the function unchanged)."""

        __slots__ = ("message",)

        def __init__(self, message: str | None = None):
            self.message = message

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            return None

        def __call__(self, func):
            return func

    _NOOP_HANDLE = RangeHandle("", None, 0, -1)

    class range:  # type: ignore[no-redef]  # noqa: F811, A001
        """No-op: ACLPROF_TX_DISABLE is set."""

        __slots__ = ("message",)

        def __init__(self, message: str):
            self.message = message

        def start(self) -> RangeHandle:
            return _NOOP_HANDLE

        def __enter__(self) -> RangeHandle:
            return _NOOP_HANDLE

        def __exit__(self, *exc_info):
            return None
