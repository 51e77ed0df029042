"""Request marking (issue 25): ``aclprof.request(id, **attrs)`` records which thread worked
for which request, and when, so that op records can be billed to requests.

    with aclprof.request("req-42", route="/v1/chat", version="B"):
        model.run()

    @aclprof.request("handler")            # a decorator: every call is one request
    def handle(...): ...

Each request records a *window*: (request, kernel thread id, host ``CLOCK_MONOTONIC`` start
and end). Op records are attributed to the window whose thread matches the record's
``threadId`` and whose time span holds the op's start on the host clock
(:mod:`aclprof.agent.bills`). A request whose work runs on another thread (a worker pool,
``asyncio.to_thread``) marks it with :meth:`Request.on_this_thread` there, which adds a window
of the same request for that thread; :func:`current` finds the request of the running
context (a :mod:`contextvars` variable, so asyncio tasks each see their own).

Cost: no global table of open requests is kept (an open request is only the caller's
object), so 100k open or never-closed requests cost the process nothing here; entering and
leaving each append one event to a bounded per-process ring that the agent drains. When
the ring is full the event is dropped and counted (:func:`stats`), never blocking the
service. With a profiling session on and ``DataType.MSPROFTX``, a request is also an
msproftx range named ``aclprof request``.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from aclprof.api import markers
from aclprof.protocol.traceparent import check as _check_traceparent

__all__ = ["request", "Request", "RequestEvent", "START", "END", "RequestRingStats", "current", "drain", "stats",
           "set_ring_capacity", "DEFAULT_RING_CAPACITY"]

F = TypeVar("F", bound=Callable[..., Any])

#: Events the ring holds before it drops (two per request window).
DEFAULT_RING_CAPACITY = 1 << 16
_MAX_ID_BYTES = 256
_MAX_ATTRS = 16
_MAX_ATTR_BYTES = 256

_now = time.monotonic_ns


class _ThreadId(threading.local):
    # threading.get_native_id() is a gettid() system call each time (~0.5 us on a busy
    # host): cache it per thread; a forked child gets a fresh cache (its tid differs).
    tid = 0


_tls = _ThreadId()


def _tid() -> int:
    tid = _tls.tid
    if not tid:
        tid = _tls.tid = threading.get_native_id()
    return tid


def _forget_tids() -> None:
    global _tls
    _tls = _ThreadId()


os.register_at_fork(after_in_child=_forget_tids)


#: Event kinds.
START, END = 0, 1


class RequestEvent(NamedTuple):
    """One ring event, as :func:`drain` returns it. ``kind`` is :data:`START` (a window
    opens; ``request`` is set on the request's first window) or :data:`END`; ``key``
    identifies the request in this process. The ring itself holds plain tuples (cheaper)."""

    kind: int
    key: int
    tid: int
    t_ns: int
    request: Request | None


@dataclass(frozen=True)
class RequestRingStats:
    """Counters of the request ring: ``started``/``ended`` windows, events ``dropped`` on
    a full ring, events ``queued`` now, and the ``capacity``."""

    started: int
    ended: int
    dropped: int
    queued: int
    capacity: int


_ring: deque[tuple[int, int, int, int, Request | None]] = deque()
_capacity = DEFAULT_RING_CAPACITY
_keys = itertools.count(1)
_started = itertools.count()   # next() is atomic under the GIL: exact without a lock
_ended = itertools.count()
_counter_lock = threading.Lock()
_dropped = 0
# One message for every request: a message per request id would fill the stamp cache of
# aclprof.api.markers (4096 messages) with ids used once.
_TX_RANGE = markers.range("aclprof request")
_current: contextvars.ContextVar[Request | None] = contextvars.ContextVar("aclprof_request", default=None)


def _count_value(counter: itertools.count) -> int:  # type: ignore[type-arg]
    # An itertools.count's repr is "count(N)": reading it does not advance it.
    return int(repr(counter)[6:-1])


def _count_drop() -> None:
    global _dropped
    with _counter_lock:
        _dropped += 1


def _push(event: tuple[int, int, int, int, Request | None]) -> None:
    # len() and append() are each atomic; between them another thread may append too, so
    # the ring can exceed the capacity by at most the number of threads: still bounded.
    if len(_ring) < _capacity:
        _ring.append(event)
    else:
        _count_drop()


def _check_text(function: str, what: str, value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{function}: {what} must be a str, got {type(value).__name__} {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(f"{function}: {what} is longer than {limit} bytes ({value[:40]!r}...)")
    return value


class Request:
    """One request: ``with`` it (or decorate with it) to mark the current thread's window.

    Not reentrant: one ``with`` at a time per object (the decorator form makes a new
    object per call). :meth:`on_this_thread` marks further windows of the same request.
    """

    __slots__ = ("id", "attrs", "traceparent", "_key", "_tid", "_token", "_range", "_announced")

    def __init__(self, id: str, traceparent: str | None = None, **attrs: str):
        # Built once per request: the common case (a short str id, no attributes) checks
        # with one type test and one len, the rest only when given.
        if type(id) is not str or len(id) > _MAX_ID_BYTES // 4:
            _check_text("aclprof.request", "id", id, _MAX_ID_BYTES)
        self.id = id
        if traceparent is not None:
            try:
                _check_traceparent(traceparent)
            except ValueError as exc:
                raise ValueError(f"aclprof.request: {exc}") from None
            # a later version's extra fields are for that version's readers: the four known
            # fields are what a bill's span needs (and keep the bill frame small)
            traceparent = traceparent[:55]
        self.traceparent = traceparent
        if attrs:
            if len(attrs) > _MAX_ATTRS:
                raise ValueError(f"aclprof.request: at most {_MAX_ATTRS} attributes, got {len(attrs)}")
            for name, value in attrs.items():
                if type(value) is not str or len(value) > _MAX_ATTR_BYTES // 4:
                    _check_text("aclprof.request", f"attribute {name!r}", value, _MAX_ATTR_BYTES)
        self.attrs: Mapping[str, str] = attrs
        self._key = 0
        self._tid = 0
        self._token: contextvars.Token[Request | None] | None = None
        self._range: markers.RangeHandle | None = None
        self._announced = False

    @property
    def key(self) -> int:
        """The process-unique key of this request (0 before it first starts)."""
        return self._key

    def _start_window(self) -> int:
        if not self._key:
            self._key = next(_keys)
        tid = _tid()
        next(_started)
        first = not self._announced
        self._announced = True
        _push((START, self._key, tid, _now(), self if first else None))
        return tid

    def _end_window(self, tid: int) -> None:
        next(_ended)
        _push((END, self._key, tid, _now(), None))

    def __enter__(self) -> Request:
        # The hot path (every request, twice): plain tuples and local names, no helpers.
        if self._token is not None:
            raise RuntimeError(f"aclprof.request({self.id!r}) is already entered; "
                               "use on_this_thread() for another thread's window")
        key = self._key
        if not key:
            key = self._key = next(_keys)
        tid = _tls.tid
        if not tid:
            tid = _tid()
        self._tid = tid
        next(_started)
        first = not self._announced
        self._announced = True
        if len(_ring) < _capacity:
            _ring.append((START, key, tid, _now(), self if first else None))
        else:
            _count_drop()
        self._token = _current.set(self)
        if markers._active:
            self._range = _TX_RANGE.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        token = self._token
        if token is None:
            return
        next(_ended)
        if len(_ring) < _capacity:
            _ring.append((END, self._key, self._tid, _now(), None))
        else:
            _count_drop()
        self._token = None
        try:
            _current.reset(token)
        except ValueError:  # exited in another context (a generator moved across tasks)
            _current.set(None)
        if self._range is not None:
            handle, self._range = self._range, None
            handle.end()

    def on_this_thread(self) -> _Segment:
        """A window of this request on the calling thread: ``with req.on_this_thread():``."""
        return _Segment(self)

    def __call__(self, func: F) -> F:
        template = self

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Request(template.id, template.traceparent, **template.attrs):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"aclprof.request({self.id!r}, key={self._key})"


class _Segment:
    __slots__ = ("_request", "_tid")

    def __init__(self, request: Request):
        self._request = request
        self._tid = 0

    def __enter__(self) -> Request:
        self._tid = self._request._start_window()
        return self._request

    def __exit__(self, *exc_info: object) -> None:
        self._request._end_window(self._tid)


#: ``aclprof.request(id, traceparent=None, **attrs)``.
request = Request


def current() -> Request | None:
    """The request the running context is in (copied into ``asyncio.to_thread``)."""
    return _current.get()


def drain(limit: int | None = None) -> list[RequestEvent]:
    """Take the queued events, oldest first (the agent's side)."""
    out: list[RequestEvent] = []
    pop = _ring.popleft
    n = len(_ring) if limit is None else min(limit, len(_ring))
    for _ in range(n):
        out.append(RequestEvent._make(pop()))
    return out


def stats() -> RequestRingStats:
    """The ring's counters."""
    return RequestRingStats(started=_count_value(_started), ended=_count_value(_ended),
                            dropped=_dropped, queued=len(_ring), capacity=_capacity)


def set_ring_capacity(events: int) -> None:
    """Bound the ring to ``events`` events (default :data:`DEFAULT_RING_CAPACITY`)."""
    global _capacity
    if isinstance(events, bool) or not isinstance(events, int) or not 2 <= events <= 1 << 24:
        raise ValueError(f"set_ring_capacity: events must be an int in [2, {1 << 24}], got {events!r}")
    _capacity = events
