"""``acl.rt``: devices, contexts and streams (pyACL conventions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aclprof.binding.errors import AclError
from aclprof.binding.opfailure import set_info_callback
from aclprof.compat.acl._common import Out, call, call_ret, ptr

__all__ = ["set_device", "reset_device", "get_device", "get_device_count", "create_context",
           "destroy_context", "set_context", "get_context", "create_stream", "destroy_stream",
           "synchronize_stream", "synchronize_device", "set_exception_info_callback",
           "get_device_id_from_exception_info", "get_stream_id_from_exception_info",
           "get_task_id_from_exception_info", "get_thread_id_from_exception_info",
           "get_error_code_from_exception_info"]


def set_device(device_id: int) -> int:
    return call_ret("aclrtSetDevice", device_id)


def reset_device(device_id: int) -> int:
    return call_ret("aclrtResetDevice", device_id)


def get_device() -> tuple[int, int]:
    ret, (value,) = call("aclrtGetDevice", Out("int32_t *"))
    return value, ret


def get_device_count() -> tuple[int, int]:
    ret, (value,) = call("aclrtGetDeviceCount", Out("uint32_t *"))
    return value, ret


def create_context(device_id: int) -> tuple[int, int]:
    ret, (value,) = call("aclrtCreateContext", Out("aclrtContext *"), device_id)
    return value, ret


def destroy_context(context: int) -> int:
    return call_ret("aclrtDestroyContext", ptr(context))


def set_context(context: int) -> int:
    return call_ret("aclrtSetCurrentContext", ptr(context))


def get_context() -> tuple[int, int]:
    ret, (value,) = call("aclrtGetCurrentContext", Out("aclrtContext *"))
    return value, ret


def create_stream() -> tuple[int, int]:
    ret, (value,) = call("aclrtCreateStream", Out("aclrtStream *"))
    return value, ret


def destroy_stream(stream: int) -> int:
    return call_ret("aclrtDestroyStream", ptr(stream))


def synchronize_stream(stream: int) -> int:
    return call_ret("aclrtSynchronizeStream", ptr(stream))


def synchronize_device() -> int:
    return call_ret("aclrtSynchronizeDevice")


# ---- AI Core exceptions (issue 24) --------------------------------------------------------

def set_exception_info_callback(callback: Callable[[int], Any] | None) -> int:
    """``aclrtSetExceptionInfoCallback``: ``callback(info)`` runs on the runtime's thread when
    a task fails, with ``info`` an int valid only during the call (read it with the
    ``get_*_from_exception_info`` functions there). The last call wins; None clears it.

    aclprof keeps one C callback for the process and calls this one from it, so the agent's
    failure reporting and this callback work side by side. An exception the callback raises
    is logged and counted, never passed to the runtime.
    """
    try:
        set_info_callback(callback)
    except AclError as exc:
        return exc.code
    return 0


def _info(info: int) -> Any:
    return ptr(info, "aclrtExceptionInfo *")


def get_device_id_from_exception_info(info: int) -> int:
    return call_ret("aclrtGetDeviceIdFromExceptionInfo", _info(info))


def get_stream_id_from_exception_info(info: int) -> int:
    return call_ret("aclrtGetStreamIdFromExceptionInfo", _info(info))


def get_task_id_from_exception_info(info: int) -> int:
    return call_ret("aclrtGetTaskIdFromExceptionInfo", _info(info))


def get_thread_id_from_exception_info(info: int) -> int:
    return call_ret("aclrtGetThreadIdFromExceptionInfo", _info(info))


def get_error_code_from_exception_info(info: int) -> int:
    return call_ret("aclrtGetErrorCodeFromExceptionInfo", _info(info))
