"""``acl.rt``: devices, contexts and streams (pyACL conventions)."""

from __future__ import annotations

from aclprof.compat.acl._common import address, call_ret, ffi, fn, ptr

__all__ = ["set_device", "reset_device", "get_device", "get_device_count", "create_context",
           "destroy_context", "set_context", "get_context", "create_stream", "destroy_stream",
           "synchronize_stream", "synchronize_device"]


def set_device(device_id: int) -> int:
    return call_ret("aclrtSetDevice", device_id)


def reset_device(device_id: int) -> int:
    return call_ret("aclrtResetDevice", device_id)


def get_device() -> tuple[int, int]:
    out = ffi().new("int32_t *")
    ret = call_ret("aclrtGetDevice", out)
    return int(out[0]), ret


def get_device_count() -> tuple[int, int]:
    out = ffi().new("uint32_t *")
    ret = call_ret("aclrtGetDeviceCount", out)
    return int(out[0]), ret


def create_context(device_id: int) -> tuple[int, int]:
    out = ffi().new("aclrtContext *")
    ret = call_ret("aclrtCreateContext", out, device_id)
    return address(out[0]), ret


def destroy_context(context: int) -> int:
    return call_ret("aclrtDestroyContext", ptr(context))


def set_context(context: int) -> int:
    return call_ret("aclrtSetCurrentContext", ptr(context))


def get_context() -> tuple[int, int]:
    out = ffi().new("aclrtContext *")
    ret = call_ret("aclrtGetCurrentContext", out)
    return address(out[0]), ret


def create_stream() -> tuple[int, int]:
    out = ffi().new("aclrtStream *")
    ret = call_ret("aclrtCreateStream", out)
    return address(out[0]), ret


def destroy_stream(stream: int) -> int:
    return call_ret("aclrtDestroyStream", ptr(stream))


def synchronize_stream(stream: int) -> int:
    return call_ret("aclrtSynchronizeStream", ptr(stream))


def synchronize_device() -> int:
    return int(fn("aclrtSynchronizeDevice")())
