"""AI Core exceptions: one C exception callback per process, fanned out to Python (issue 24).

CANN runs the exception callbacks on its own task-report thread, synchronously, with an
``aclrtExceptionInfo`` that lives only during the call (runtime ``task_manager.cc``
``TaskFailCallBack``; the docs forbid keeping the pointer). ``aclrtSetExceptionInfoCallback``
has one process-wide slot where the last call wins; newer CANN adds
``aclrtExceptionInfoCallbackRegister``, where callbacks coexist. So this module owns one cffi
trampoline for the whole process and installs it once, through ``Register`` when the library
has it (the application's own ``aclrtSetExceptionInfoCallback`` then keeps working beside it)
and through ``Set`` otherwise. Python parties attach to it here:

- **sinks** (:func:`add_sink`): receive a :class:`RawFailure`, everything read from the info
  and from ``aclmdlCreateAndGetOpDesc`` during the call (the only time it can be read). A sink
  must not block: the typed API's sink is a bounded queue with a dispatcher thread.
- **the pyACL-style callback** (:func:`set_info_callback`): ``fn(info_address)`` called
  synchronously with the live info, as pyACL does; the compat layer's
  ``acl.rt.set_exception_info_callback``. The last one set wins, ``None`` clears it.

Nothing raised in Python reaches the runtime's thread: every exception is caught, counted
in :func:`counters` and logged. The trampoline is never freed (the runtime may still be
calling it when it is unregistered: ``aclrtExceptionInfoCallbackUnregister`` does not wait).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aclprof.binding.errors import check, code_name
from aclprof.binding.loader import get_library

__all__ = ["RawTensor", "RawFailure", "add_sink", "remove_sink", "set_info_callback",
           "counters", "info_fields", "read_op_desc", "library_reset", "describe_code", "enum_name",
           "OP_NAME_BUFFER", "UNKNOWN_RANK"]

_log = logging.getLogger(__name__)

#: Bytes offered to ``aclmdlCreateAndGetOpDesc`` for the op name (it refuses with 100000 when
#: the name and its NUL do not fit); GE op names are far shorter.
OP_NAME_BUFFER = 4096
#: ``aclGetTensorDescNumDims`` for a tensor of unknown rank (ACL_UNKNOWN_RANK, size_t -2).
UNKNOWN_RANK = 2**64 - 2
_INVALID = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class RawTensor:
    """A tensor description as ``aclGetTensorDesc*`` give it (values, no names)."""

    dtype: int
    format: int
    #: None for a tensor of unknown rank; -1 marks an unknown dimension.
    shape: tuple[int, ...] | None
    address: int  # device address of the tensor's data (never read here)


@dataclass(frozen=True, slots=True)
class RawFailure:
    """What one exception callback saw, copied while the info was alive."""

    device_id: int
    stream_id: int
    task_id: int
    thread_id: int
    error_code: int
    host_time_ns: int  # time.time_ns() when the callback ran
    op_name: str | None  # None when aclmdlCreateAndGetOpDesc found no op
    inputs: tuple[RawTensor, ...]
    outputs: tuple[RawTensor, ...]
    #: 0, or the code aclmdlCreateAndGetOpDesc returned (e.g. 500002 when GE knows no op for
    #: the task: dynamic-shape models, device-level failures with task id 0xFFFFFFFF).
    op_desc_code: int


Sink = Callable[[RawFailure], None]


class _Hub:
    """The process's one trampoline and what is attached to it (guarded by ``lock``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sinks: list[Sink] = []
        self.info_callback: Callable[[int], Any] | None = None
        self.c_callback: Any = None  # the cffi callback object: kept for the process's life
        self.installed: str | None = None  # "register" | "set" | None
        self.calls = 0
        self.errors = 0  # exceptions caught in the trampoline (sinks, callback, reading)

    # -- installation ------------------------------------------------------------------

    def _wanted(self) -> bool:
        return bool(self.sinks) or self.info_callback is not None

    def _sync(self) -> None:
        """Install or remove the trampoline to match what is attached (lock held)."""
        lib = get_library()
        if self._wanted() and self.installed is None:
            if self.c_callback is None:
                self.c_callback = lib.ffi.callback("aclrtExceptionInfoCallback", _trampoline)
            if "aclrtExceptionInfoCallbackRegister" in lib.functions:
                check(lib.fn("aclrtExceptionInfoCallbackRegister")(self.c_callback),
                      "aclrtExceptionInfoCallbackRegister")
                self.installed = "register"
            else:
                check(lib.fn("aclrtSetExceptionInfoCallback")(self.c_callback),
                      "aclrtSetExceptionInfoCallback")
                self.installed = "set"
        elif not self._wanted() and self.installed is not None:
            if self.installed == "register":
                check(lib.fn("aclrtExceptionInfoCallbackUnregister")(self.c_callback),
                      "aclrtExceptionInfoCallbackUnregister")
            else:
                check(lib.fn("aclrtSetExceptionInfoCallback")(lib.ffi.NULL),
                      "aclrtSetExceptionInfoCallback")
            self.installed = None

    # -- the call ------------------------------------------------------------------------

    def dispatch(self, info: Any) -> None:
        with self.lock:
            self.calls += 1
            sinks = list(self.sinks)
            info_callback = self.info_callback
        if info_callback is not None:
            address = int(get_library().ffi.cast("uintptr_t", info))
            try:
                info_callback(address)
            except BaseException:  # nothing may reach the runtime's thread
                self._count_error("the exception callback set with set_exception_info_callback")
        if sinks:
            try:
                failure = _read_failure(info)
            except BaseException:
                self._count_error("reading the exception info")
                return
            for sink in sinks:
                try:
                    sink(failure)
                except BaseException:
                    self._count_error(f"the failure sink {sink!r}")

    def _count_error(self, what: str) -> None:
        with self.lock:
            self.errors += 1
        _log.exception("AI Core exception callback: %s raised; the runtime's thread is unaffected", what)


_hub = _Hub()


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's dispatcher threads: the parent's watches are
    dropped here (a failure in the child would wait in a queue nobody drains), the lock made
    new (another thread may have held it at the fork). The trampoline stays installed while
    the pyACL-style callback is set (the child's copy of the library still calls it)."""
    _hub.lock = threading.Lock()
    _hub.sinks.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _trampoline(info: Any) -> None:
    try:
        _hub.dispatch(info)
    except BaseException:  # the last guard before C
        _hub.errors += 1


def add_sink(sink: Sink) -> None:
    """Attach ``sink``; it gets a :class:`RawFailure` per exception, on the runtime's thread.

    It must return at once (queue the failure; do not block, do not call the runtime). The
    trampoline is installed with the first attachment.

    Raises:
        AclError: the library refused the callback registration.
    """
    with _hub.lock:
        _hub.sinks.append(sink)
        try:
            _hub._sync()
        except BaseException:
            _hub.sinks.remove(sink)
            raise


def remove_sink(sink: Sink) -> None:
    """Detach ``sink`` (no-op if it is not attached); the trampoline goes with the last party."""
    with _hub.lock:
        if sink in _hub.sinks:
            _hub.sinks.remove(sink)
            _hub._sync()


def set_info_callback(callback: Callable[[int], Any] | None) -> None:
    """pyACL's ``set_exception_info_callback``: ``callback(info_address)`` during each call.

    The info address is valid only while ``callback`` runs. The last call wins; None clears.
    The callback runs on the runtime's thread and may block it (as in pyACL): keep it short.
    """
    if callback is not None and not callable(callback):
        raise TypeError(f"set_exception_info_callback: callback must be callable or None, "
                        f"not {type(callback).__name__}")
    with _hub.lock:
        previous = _hub.info_callback
        _hub.info_callback = callback
        try:
            _hub._sync()
        except BaseException:
            _hub.info_callback = previous
            raise


def library_reset() -> None:
    """The mock was reset (``aclmockReset`` forgets every callback): install again if any
    party is still attached."""
    with _hub.lock:
        _hub.installed = None
        _hub._sync()


def counters() -> dict[str, int | str | None]:
    """Calls received, exceptions caught in them, and how the trampoline is installed."""
    with _hub.lock:
        return {"calls": _hub.calls, "errors": _hub.errors, "installed": _hub.installed,
                "sinks": len(_hub.sinks)}


# ---- reading the info and the op description ------------------------------------------

def info_fields(info: Any) -> tuple[int, int, int, int, int]:
    """(device, stream, task, thread, error code) of a live ``aclrtExceptionInfo *``."""
    lib = get_library()
    return (int(lib.fn("aclrtGetDeviceIdFromExceptionInfo")(info)),
            int(lib.fn("aclrtGetStreamIdFromExceptionInfo")(info)),
            int(lib.fn("aclrtGetTaskIdFromExceptionInfo")(info)),
            int(lib.fn("aclrtGetThreadIdFromExceptionInfo")(info)),
            int(lib.fn("aclrtGetErrorCodeFromExceptionInfo")(info)))


def _tensors(lib: Any, array: Any, count: int) -> tuple[RawTensor, ...]:
    out = []
    dim = lib.ffi.new("int64_t *")
    for i in range(count):  # the count GE returned: aclGetTensorDescByIndex has no bound
        desc = lib.fn("aclGetTensorDescByIndex")(array, i)
        ndims = int(lib.fn("aclGetTensorDescNumDims")(desc))
        shape: tuple[int, ...] | None
        if ndims == UNKNOWN_RANK:
            shape = None
        else:
            dims = []
            for k in range(ndims):
                check(lib.fn("aclGetTensorDescDimV2")(desc, k, dim), "aclGetTensorDescDimV2")
                dims.append(int(dim[0]))
            shape = tuple(dims)
        out.append(RawTensor(dtype=int(lib.fn("aclGetTensorDescType")(desc)),
                             format=int(lib.fn("aclGetTensorDescFormat")(desc)),
                             shape=shape,
                             address=int(lib.ffi.cast("uintptr_t",
                                                      lib.fn("aclGetTensorDescAddress")(desc)))))
    return tuple(out)


def read_op_desc(device_id: int, stream_id: int, task_id: int
                 ) -> tuple[int, str | None, tuple[RawTensor, ...], tuple[RawTensor, ...]]:
    """``aclmdlCreateAndGetOpDesc`` and its tensors, freed before returning.

    Returns (code, op name, inputs, outputs); on a non-zero code the rest is empty. The name
    is decoded as UTF-8 with backslash escapes for other bytes.
    """
    lib = get_library()
    ffi = lib.ffi
    name = ffi.new("char[]", OP_NAME_BUFFER)
    inputs, outputs = ffi.new("aclTensorDesc **"), ffi.new("aclTensorDesc **")
    n_in, n_out = ffi.new("size_t *"), ffi.new("size_t *")
    code = int(lib.fn("aclmdlCreateAndGetOpDesc")(device_id, stream_id, task_id, name,
                                                  OP_NAME_BUFFER, inputs, n_in, outputs, n_out))
    if code != 0:
        return code, None, (), ()
    try:
        return (0, ffi.string(name).decode("utf-8", "backslashreplace"),
                _tensors(lib, inputs[0], int(n_in[0])), _tensors(lib, outputs[0], int(n_out[0])))
    finally:
        lib.fn("aclDestroyTensorDesc")(inputs[0])
        lib.fn("aclDestroyTensorDesc")(outputs[0])


def _read_failure(info: Any) -> RawFailure:
    device, stream, task, thread, code = info_fields(info)
    now = time.time_ns()
    desc_code: int
    name: str | None
    inputs: tuple[RawTensor, ...]
    outputs: tuple[RawTensor, ...]
    if task == _INVALID:  # a device-level failure (heartbeat, OOM): no task, no op
        desc_code, name, inputs, outputs = 0, None, (), ()
    else:
        desc_code, name, inputs, outputs = read_op_desc(device, stream, task)
    return RawFailure(device_id=device, stream_id=stream, task_id=task, thread_id=thread,
                      error_code=code, host_time_ns=now, op_name=name, inputs=inputs,
                      outputs=outputs, op_desc_code=desc_code)


def enum_name(ctype: str, value: int) -> str:
    """The C enumerator's name of ``value`` in ``aclDataType``/``aclFormat`` (``"ACL_FLOAT16"``),
    or the number as text when the enum has no such value."""
    return str(get_library().ffi.string(get_library().ffi.cast(ctype, value)))


def describe_code(code: int) -> str:
    """``"507015 ACL_ERROR_RT_AICORE_EXCEPTION"``: a failure's code with its name."""
    return f"{code} {code_name(code)}"
