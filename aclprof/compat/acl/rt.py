"""``acl.rt``: devices, contexts and streams (pyACL conventions)."""

from __future__ import annotations

from aclprof.compat.acl._common import Out, call, call_ret, ptr

__all__ = ["set_device", "reset_device", "get_device", "get_device_count", "create_context",
           "destroy_context", "set_context", "get_context", "create_stream", "destroy_stream",
           "synchronize_stream", "synchronize_device"]


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
