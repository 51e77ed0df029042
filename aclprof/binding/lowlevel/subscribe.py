"""Operator subscription: subscribe configs, the fd cell the library writes through, and the
op getters over the bytes a subscription pipe delivers (``aclprofGetOp*``).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from aclprof.binding.enums import AicoreMetrics
from aclprof.binding.errors import InvalidParamError, check
from aclprof.binding.handles import Handle
from aclprof.binding.loader import get_library
from aclprof.binding.lowlevel.validate import _buffer, _fn, _int, _u32

__all__ = [
    "FdCell", "SubscribeConfig", "create_subscribe_config", "destroy_subscribe_config",
    "model_subscribe", "model_unsubscribe", "get_op_desc_size", "get_op_num", "get_op_type_len",
    "get_op_type", "get_op_name_len", "get_op_name", "get_op_start", "get_op_end",
    "get_op_duration", "get_model_id", "get_op_flag", "get_op_attri_value", "get_op_times",
]


class FdCell:
    """A stable C ``int`` holding a pipe's write fd, for ``aclprofCreateSubscribeConfig``.

    The library keeps the pointer and reads the fd through it for every record. It closes
    the fd and writes -1 into the cell when the subscription's fd is closed: at
    unsubscribe if the model's device still has other subscriptions or if this was the
    process's last subscription, otherwise (the device's last subscription while another
    device still has one) only when the last subscription of the process ends. So the
    cell must stay allocated until it reads -1 after the unsubscribe (or for the life of
    the process); keep a reference to it. :class:`aclprof.Subscription` does this for you.
    """

    __slots__ = ("_cell",)

    def __init__(self, fd: int):
        self._cell = get_library().ffi.new("int *", _int(fd, "fd", 0, 2**31 - 1))

    @property
    def value(self) -> int:
        """The fd now in the cell (-1 once the library closed it)."""
        return int(self._cell[0])

    def _ptr(self) -> Any:
        return self._cell

    def _set(self, fd: int) -> None:
        self._cell[0] = fd


class SubscribeConfig(Handle):
    """An ``aclprofSubscribeConfig*``; it references its :class:`FdCell`."""

    __slots__ = ("fd_cell", "time_info", "aicore_metrics")
    kind = "subscribe config"
    # Set by create_subscribe_config (annotations only: the slots above hold them).
    fd_cell: FdCell
    time_info: bool
    aicore_metrics: AicoreMetrics


def _release_subscribe_config(ptr: Any) -> None:
    check(_fn("aclprofDestroySubscribeConfig")(ptr), "aclprofDestroySubscribeConfig")


def create_subscribe_config(time_info: bool, aicore_metrics: int, fd_cell: FdCell) -> SubscribeConfig:
    """``aclprofCreateSubscribeConfig(timeInfoSwitch, metrics, &fd)``."""
    if not isinstance(fd_cell, FdCell):
        raise TypeError(f"fd_cell must be an FdCell, not {type(fd_cell).__name__}")
    if not isinstance(time_info, (bool, int)) or int(time_info) not in (0, 1):
        raise ValueError(f"time_info must be a bool (0 or 1), got {time_info!r}")
    metrics = AicoreMetrics(_u32(aicore_metrics, "aicore_metrics"))
    lib = get_library()
    ptr = _fn("aclprofCreateSubscribeConfig")(int(time_info), int(metrics), fd_cell._ptr())
    if ptr == lib.ffi.NULL:
        # The arguments were checked above, so NULL means what CANN does not say: a helper
        # host (CANN refuses profiling there; aclprofGetOpDescSize still works, audit 3
        # row 20) or no memory.
        raise InvalidParamError(100000, "aclprofCreateSubscribeConfig",
                                "returned NULL for valid arguments: a helper host, where CANN "
                                "refuses subscriptions, or out of memory")
    config = SubscribeConfig(ptr, _release_subscribe_config)
    config.fd_cell = fd_cell
    config.time_info = bool(time_info)
    config.aicore_metrics = metrics
    return config


def destroy_subscribe_config(config: SubscribeConfig) -> None:
    """``aclprofDestroySubscribeConfig``; same as ``config.close()``."""
    if not isinstance(config, SubscribeConfig):
        raise TypeError(f"config must be a SubscribeConfig, not {type(config).__name__}")
    config.close()


def model_subscribe(model_id: int, config: SubscribeConfig) -> None:
    """``aclprofModelSubscribe``, called with SIGPIPE blocked in this thread (see
    :func:`_sigpipe_blocked`)."""
    if not isinstance(config, SubscribeConfig):
        raise TypeError(f"config must be a SubscribeConfig, not {type(config).__name__}")
    with _sigpipe_blocked():
        rc = _fn("aclprofModelSubscribe")(_u32(model_id, "model_id"), config._get())
    check(rc, "aclprofModelSubscribe", f"model {model_id}")


@contextlib.contextmanager
def _sigpipe_blocked() -> Iterator[None]:
    """SIGPIPE blocked in the calling thread for the duration (restored after, unless it was
    blocked already).

    CANN's pipe uploaders (``MSVP_Upld_<dev>``, ``MSVP_Upld_Pipe``) are created inside
    ``aclprofModelSubscribe`` and inherit this thread's signal mask. They write with a plain
    ``write()`` (``parser_transport.cpp:99-149``): should the read end ever be closed while one
    writes, an unblocked SIGPIPE kills the process when its disposition is the default (an
    embedding application may restore it; Python itself ignores SIGPIPE). Blocked in them, the
    write fails with EPIPE and CANN drops the record (issue 22; mock ``ACLMOCK_PIPE_WRITER=cann``).
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
    try:
        yield
    finally:
        if signal.SIGPIPE not in before:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPIPE})


def model_unsubscribe(model_id: int) -> None:
    """``aclprofModelUnSubscribe``: flushes; closes the pipe's write end and sets the cell
    to -1 at once, or, when the model's device loses its last subscription while other
    devices keep theirs, only at the process's last unsubscribe (see :class:`FdCell`)."""
    check(_fn("aclprofModelUnSubscribe")(_u32(model_id, "model_id")),
          "aclprofModelUnSubscribe", f"model {model_id}")


def get_op_desc_size() -> int:
    """``aclprofGetOpDescSize``: the size of one op record in bytes."""
    out = get_library().ffi.new("size_t *")
    check(_fn("aclprofGetOpDescSize")(out), "aclprofGetOpDescSize")
    return int(out[0])


def get_op_num(data: Any) -> int:
    """``aclprofGetOpNum`` over the bytes-like ``data``."""
    view, length = _buffer(data)
    out = get_library().ffi.new("uint32_t *")
    check(_fn("aclprofGetOpNum")(view, length, out), "aclprofGetOpNum")
    return int(out[0])


def _get_len(cname: str, data: Any, index: int) -> int:
    view, length = _buffer(data)
    out = get_library().ffi.new("size_t *")
    check(_fn(cname)(view, length, _u32(index, "index"), out), cname, f"index {index}")
    return int(out[0])


def _get_text(cname: str, data: Any, index: int, size: int) -> bytes:
    view, length = _buffer(data)
    size = _int(size, "length", 1, 1 << 20)
    buf = get_library().ffi.new("char[]", size)  # zeroed: C only NUL-terminates at [size-1]
    check(_fn(cname)(view, length, _u32(index, "index"), buf, size), cname, f"index {index}")
    text: bytes = get_library().ffi.string(buf)
    return text


def get_op_type_len(data: Any, index: int) -> int:
    """``aclprofGetOpTypeLen``: strlen(type) + 1."""
    return _get_len("aclprofGetOpTypeLen", data, index)


def get_op_type(data: Any, index: int, length: int) -> bytes:
    """``aclprofGetOpType`` into a zeroed buffer of ``length`` bytes (one-shot per record)."""
    return _get_text("aclprofGetOpType", data, index, length)


def get_op_name_len(data: Any, index: int) -> int:
    """``aclprofGetOpNameLen``: strlen(name) + 1."""
    return _get_len("aclprofGetOpNameLen", data, index)


def get_op_name(data: Any, index: int, length: int) -> bytes:
    """``aclprofGetOpName`` into a zeroed buffer of ``length`` bytes (one-shot per record)."""
    return _get_text("aclprofGetOpName", data, index, length)


def _get_u64(cname: str, data: Any, index: int) -> int:
    view, length = _buffer(data)
    return int(_fn(cname)(view, length, _u32(index, "index")))


def get_op_start(data: Any, index: int) -> int:
    """``aclprofGetOpStart`` (0 on error, as in C)."""
    return _get_u64("aclprofGetOpStart", data, index)


def get_op_end(data: Any, index: int) -> int:
    """``aclprofGetOpEnd`` (0 on error, as in C)."""
    return _get_u64("aclprofGetOpEnd", data, index)


def get_op_duration(data: Any, index: int) -> int:
    """``aclprofGetOpDuration`` (0 on error, as in C)."""
    return _get_u64("aclprofGetOpDuration", data, index)


_HELPER_HOST_VALUE = 200006  # ACL_ERROR_FEATURE_UNSUPPORTED


def get_op_times(data: Any, index: int) -> tuple[int, int, int]:
    """``(start, end, duration)`` through the three time getters, checked.

    On a CANN helper host every profiling call fails with 200006, and the time getters
    return that code as their VALUE (audit section 4 item 4). No real record has
    start == end == duration == 200006 (duration is end - start), so that triple is an
    error, not a timestamp.

    Raises:
        FeatureUnsupportedError: the getters answered as on a helper host.
    """
    times = (get_op_start(data, index), get_op_end(data, index), get_op_duration(data, index))
    if times == (_HELPER_HOST_VALUE,) * 3:
        check(_HELPER_HOST_VALUE, "aclprofGetOpStart",
              "the op time getters returned the code as their value (a CANN helper host?)")
    return times


def get_model_id(data: Any, index: int) -> int:
    """``aclprofGetModelId`` (100000 on error, as in C)."""
    return _get_u64("aclprofGetModelId", data, index)


def get_op_flag(data: Any, index: int) -> int:
    """``aclprofGetOpFlag`` (OPTIONAL symbol)."""
    return _get_u64("aclprofGetOpFlag", data, index)


def get_op_attri_value(data: Any, index: int, attri: int = 0) -> str | None:
    """``aclprofGetOpAttriValue`` (OPTIONAL symbol); None where C returns NULL."""
    view, length = _buffer(data)
    fn = _fn("aclprofGetOpAttriValue")
    ptr = fn(view, length, _u32(index, "index"), _u32(attri, "attri"))
    lib = get_library()
    return None if ptr == lib.ffi.NULL else lib.ffi.string(ptr).decode("utf-8", "replace")
