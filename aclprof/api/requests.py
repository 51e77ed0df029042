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
leaving each append one fixed-size event to a bounded per-process ring in C
(``aclprof.api._reqring``: the object, enter and exit are C calls; the kernel tid is cached
per thread and taken afresh in a forked child) that the agent drains. When the ring is full
the event is dropped and counted (:func:`stats`), never blocking the service. With a
profiling session on and ``DataType.MSPROFTX``, a request is also an msproftx range named
``aclprof request``.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from aclprof.api import _reqring, markers
from aclprof.binding.billtap import note_requests_marked
from aclprof.protocol.traceparent import check as _check_traceparent

__all__ = ["request", "Request", "RequestEvent", "START", "END", "RequestRingStats", "current", "drain", "stats",
           "set_ring_capacity", "DEFAULT_RING_CAPACITY"]

F = TypeVar("F", bound=Callable[..., Any])

#: Events the ring holds before it drops (two per request window).
DEFAULT_RING_CAPACITY: int = _reqring.DEFAULT_CAPACITY
_MAX_ID_BYTES = 256
_MAX_ATTRS = 16
_MAX_ATTR_BYTES = 256

#: Event kinds.
START, END = _reqring.START, _reqring.END


class RequestEvent(NamedTuple):
    """One ring event, as :func:`drain` returns it. ``kind`` is :data:`START` (a window
    opens; ``request`` is set on the request's first window) or :data:`END`; ``key``
    identifies the request in this process; ``tid`` is the kernel thread id and ``t_ns``
    host ``CLOCK_MONOTONIC``."""

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


# One message for every request: a message per request id would fill the stamp cache of
# aclprof.api.markers (4096 messages) with ids used once.
_TX_RANGE = markers.range("aclprof request")
_current: contextvars.ContextVar[Request | None] = contextvars.ContextVar("aclprof_request", default=None)


def _check_text(function: str, what: str, value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{function}: {what} must be a str, got {type(value).__name__} {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(f"{function}: {what} is longer than {limit} bytes ({value[:40]!r}...)")
    return value


def _validate(id: str, traceparent: str | None = None, **attrs: str) -> tuple[str, str | None, Any]:
    """The checks of ``Request(...)`` beyond the C fast path (a short str id alone):
    returns ``(id, traceparent, attrs)`` or raises naming what is wrong."""
    if type(id) is not str or len(id) > _MAX_ID_BYTES // 4:
        _check_text("aclprof.request", "id", id, _MAX_ID_BYTES)
    if traceparent is not None:
        try:
            _check_traceparent(traceparent)
        except ValueError as exc:
            raise ValueError(f"aclprof.request: {exc}") from None
        # a later version's extra fields are for that version's readers: the four known
        # fields are what a bill's span needs (and keep the bill frame small)
        traceparent = traceparent[:55]
    if len(attrs) > _MAX_ATTRS:
        raise ValueError(f"aclprof.request: at most {_MAX_ATTRS} attributes, got {len(attrs)}")
    for name, value in attrs.items():
        if type(value) is not str or len(value) > _MAX_ATTR_BYTES // 4:
            _check_text("aclprof.request", f"attribute {name!r}", value, _MAX_ATTR_BYTES)
    return id, traceparent, attrs


_reqring.configure(_validate, _current, note_requests_marked, markers, _TX_RANGE)


class Request(_reqring.RequestCore):
    """One request: ``with`` it (or decorate with it) to mark the current thread's window.

    ``Request(id, traceparent=None, **attrs)``: ``id`` a str of at most 256 UTF-8 bytes,
    ``traceparent`` a W3C trace context, at most 16 str attributes of at most 256 bytes.
    Entering and leaving are C calls (``aclprof.api._reqring``); ``key`` is the
    process-unique key (0 before the first window). Not reentrant: one ``with`` at a time
    per object (the decorator form makes a new object per call). :meth:`on_this_thread`
    marks further windows of the same request.
    """

    __slots__ = ()

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
        return f"aclprof.request({self.id!r}, key={self.key})"


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
    """Take the queued events, oldest first (the agent's side: in agent mode the agent
    drains them)."""
    return [RequestEvent._make(e) for e in _reqring.take(-1 if limit is None else max(0, limit))]


def stats() -> RequestRingStats:
    """The ring's counters."""
    return RequestRingStats(*_reqring.stats())


def set_ring_capacity(events: int) -> None:
    """Bound the ring to ``events`` events (default :data:`DEFAULT_RING_CAPACITY`); events
    held beyond a smaller bound are dropped, newest first, and counted."""
    if isinstance(events, bool) or not isinstance(events, int) or not 2 <= events <= 1 << 24:
        raise ValueError(f"set_ring_capacity: events must be an int in [2, {1 << 24}], got {events!r}")
    _reqring.set_capacity(events)
