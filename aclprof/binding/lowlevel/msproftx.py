"""msproftx: stamps, marks, push/pop, ranges and the tensor-info extension, one C call each.

The marker API users call (:mod:`aclprof.api.markers`) goes through the compiled helper's
stamp cache instead; these are the exact C semantics, for tests and for users who need them.
"""

from __future__ import annotations

import threading
from typing import Any

from aclprof.binding.errors import MsproftxError, check
from aclprof.binding.handles import Handle
from aclprof.binding.loader import get_library
from aclprof.binding.lowlevel.runtime import Stream, _stream_ptr
from aclprof.binding.lowlevel.validate import MAX_MARK_EX_BYTES, MAX_TRACE_MESSAGE_BYTES, _fn, _int, _u32, encode_text

__all__ = [
    "Stamp", "create_stamp", "destroy_stamp", "set_stamp_trace_message", "mark", "push", "pop",
    "range_start", "range_stop", "mark_ex", "str2id", "range_push_ex", "range_pop",
]


class Stamp(Handle):
    """A ``void*`` msproftx stamp; ``close()`` destroys it (returns it to the 100-slot pool)."""

    __slots__ = ()
    kind = "stamp"


def _stamp_ptr(stamp: Stamp) -> Any:
    if not isinstance(stamp, Stamp):
        raise TypeError(f"stamp must be a Stamp, not {type(stamp).__name__}")
    return stamp._get()


def create_stamp() -> Stamp:
    """``aclprofCreateStamp``.

    Raises:
        MsproftxError: NULL was returned: msproftx is not running, or all 100 stamps are in use.
    """
    ptr = _fn("aclprofCreateStamp")()
    if ptr == get_library().ffi.NULL:
        raise MsproftxError(-1, "aclprofCreateStamp",
                            "returned NULL: msproftx is not running or all 100 stamps are in use")
    return Stamp(ptr, _fn("aclprofDestroyStamp"))


def destroy_stamp(stamp: Stamp) -> None:
    """``aclprofDestroyStamp``; same as ``stamp.close()`` (idempotent)."""
    if not isinstance(stamp, Stamp):
        raise TypeError(f"stamp must be a Stamp, not {type(stamp).__name__}")
    stamp.close()


def set_stamp_trace_message(stamp: Stamp, message: str | bytes) -> None:
    """``aclprofSetStampTraceMessage(stamp, msg, len)``; at most 126 bytes of UTF-8."""
    data = encode_text(message, "message", MAX_TRACE_MESSAGE_BYTES, allow_empty=True)
    check(_fn("aclprofSetStampTraceMessage")(_stamp_ptr(stamp), data, len(data)),
          "aclprofSetStampTraceMessage")


def mark(stamp: Stamp) -> None:
    """``aclprofMark``."""
    check(_fn("aclprofMark")(_stamp_ptr(stamp)), "aclprofMark")


def push(stamp: Stamp) -> None:
    """``aclprofPush``.

    The library has ONE push/pop stack for the whole process: :func:`pop` closes the last
    push of any thread. With several threads, use :func:`aclprof.push` (per thread, built
    on ranges) or serialise the pairs yourself.
    """
    check(_fn("aclprofPush")(_stamp_ptr(stamp)), "aclprofPush")


def pop() -> None:
    """``aclprofPop``: closes the process's most recent :func:`push`, whichever thread made it."""
    check(_fn("aclprofPop")(), "aclprofPop")


def range_start(stamp: Stamp) -> int:
    """``aclprofRangeStart``: returns the range id (the stamp's pool slot)."""
    out = get_library().ffi.new("uint32_t *")
    check(_fn("aclprofRangeStart")(_stamp_ptr(stamp), out), "aclprofRangeStart")
    return int(out[0])


def range_stop(range_id: int) -> None:
    """``aclprofRangeStop``; may be called from another thread than the start.

    The library does not close the range: stopping the same id again succeeds and reports
    the range a second time (with a new end), so call it once per start.
    """
    check(_fn("aclprofRangeStop")(_u32(range_id, "range_id")), "aclprofRangeStop",
          f"range id {range_id}")


def mark_ex(message: str | bytes, stream: Stream) -> None:
    """``aclprofMarkEx(msg, len, stream)`` (OPTIONAL symbol); 1..127 bytes, stream required.

    127 bytes is what every CANN release accepts (the 2025 library and the docs); releases
    since 2026-04 accept 155, but the binding cannot tell which one it runs on, so a longer
    message is refused here rather than on some installs only (``MAX_MARK_EX_BYTES``).
    """
    data = encode_text(message, "message", 1 << 16)
    if len(data) > MAX_MARK_EX_BYTES:
        raise ValueError(f"aclprofMarkEx: the message is {len(data)} bytes encoded; the limit is "
                         f"{MAX_MARK_EX_BYTES} bytes (CANN before 2026-04 refuses longer ones): "
                         f"shorten it")
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a Stream, not {type(stream).__name__}")
    check(_fn("aclprofMarkEx")(data, len(data), stream._get()), "aclprofMarkEx")


def str2id(message: str | bytes) -> int:
    """``aclprofStr2Id`` (OPTIONAL symbol).

    Raises:
        OtherAclError: the library returned UINT64_MAX (failure).
    """
    data = encode_text(message, "message", 1 << 16)
    value = int(_fn("aclprofStr2Id")(data))
    if value == 2**64 - 1:
        check(500001, "aclprofStr2Id", "returned UINT64_MAX")
    return value


# The buffers behind the pointer aclprofRangePushEx stored last. The library keeps that
# POINTER (not a copy) in one process-wide slot, reads through it at every RangePop and
# never clears it, so the buffers must outlive every later range_pop: they are replaced
# only when the next range_push_ex has been accepted (its pointer replaced ours in the
# slot). The lock makes "call + swap" and "Pop reads" atomic with respect to each other,
# so a push_ex on one thread cannot free what a range_pop on another is reading.
_push_ex_lock = threading.Lock()
_push_ex_buffers: tuple[Any, ...] | None = None


def range_push_ex(op_name_id: int, op_type_id: int, tensors: list[dict[str, Any]] | None = None,
                  stream: Stream | None = None) -> None:
    """``aclprofRangePushEx`` with one tensor-info message (OPTIONAL symbol).

    ``tensors`` is a list of dicts with keys ``type`` (0 input, 1 output), ``format``,
    ``data_type`` and ``shape`` (at most 8 dims).

    This is not a stack and not per thread: the library keeps one pointer for the whole
    process. A second ``range_push_ex`` before :func:`range_pop` replaces the first (and
    its start time); ``range_pop`` reports the last one pushed, and reports it again if
    called again. The buffers passed to the library are kept alive here until the next
    accepted ``range_push_ex`` (the library reads them at every ``range_pop``).

    ``stream`` is read at :func:`range_pop`, not here: keep it open until then. ``None``
    means the default stream of the current context of the thread that calls
    ``range_pop`` (the library resolves a NULL stream that way; with no current context
    ``range_pop`` fails).
    """
    global _push_ex_buffers
    lib = get_library()
    ffi = lib.ffi
    tensors = list(tensors or [])
    arr = ffi.new("aclprofTensor[]", max(len(tensors), 1))
    for i, t in enumerate(tensors):
        shape = list(t.get("shape", ()))
        if len(shape) > 8:
            raise ValueError(f"tensor {i} has {len(shape)} dims; at most 8 are allowed")
        arr[i].type = _u32(t.get("type", 0), "tensor type")
        arr[i].format = _u32(t.get("format", 0), "tensor format")
        arr[i].dataType = _u32(t.get("data_type", 0), "tensor data_type")
        arr[i].shapeDim = len(shape)
        for j, dim in enumerate(shape):
            arr[i].shape[j] = _u32(dim, "tensor dim")
    info = ffi.new("aclprofTensorInfo *")
    info.opNameId = _int(op_name_id, "op_name_id", 0, 2**64 - 1)
    info.opTypeId = _int(op_type_id, "op_type_id", 0, 2**64 - 1)
    info.tensorNum = len(tensors)
    info.stream = _stream_ptr(stream)
    info.tensors = arr
    attr = ffi.new("aclprofEventAttributes *")
    attr.version = 1
    attr.size = ffi.sizeof("aclprofEventAttributes")
    attr.messageType = 0
    attr.message.tensorInfo = info
    push_ex = _fn("aclprofRangePushEx")
    with _push_ex_lock:
        check(push_ex(attr), "aclprofRangePushEx")
        # Accepted: the library now points at `attr`, no longer at the previous buffers.
        _push_ex_buffers = (attr, info, arr, stream)


def range_pop() -> None:
    """``aclprofRangePop`` (OPTIONAL symbol): reports the last :func:`range_push_ex`.

    Raises:
        InvalidParamError: no ``range_push_ex`` was accepted since the library was loaded
            (code 100000).
        MsproftxError: the report failed (-1), e.g. the stream given to ``range_push_ex``
            is not usable, or no session with msproftx is running.
    """
    pop = _fn("aclprofRangePop")
    with _push_ex_lock:
        rc = pop()
    if rc == 100000:
        check(rc, "aclprofRangePop", "no aclprofRangePushEx before it in this process; "
              "call range_push_ex first")
    check(rc, "aclprofRangePop")
