"""``acl.prof``: pyACL's profiling functions, with pyACL's names and return conventions.

Differences from pyACL, all in the caller's favour:
- ``create_subscribe_config(switch, metrics, fd)`` keeps the fd in a C int that lives
  until the config is destroyed *and* the library has released it (pyACL keeps it in a
  ``std::vector`` whose growth can leave the library a dangling pointer). The library
  closes that fd at unsubscribe, as in C: do not ``os.close`` the write end afterwards.
- ``get_op_type``/``get_op_name`` accept any positive buffer length (pyACL documents
  [1, 65] and [1, 257], but its own sample passes 275); the buffer is zeroed first.
"""

from __future__ import annotations

import threading

from aclprof.compat.acl._common import address, call_ret, ffi, fn, ptr, text

__all__ = [
    "init", "finalize", "create_config", "destroy_config", "start", "stop", "set_config",
    "create_subscribe_config", "destroy_subscribe_config", "model_subscribe",
    "model_unsubscribe", "model_un_subscribe", "get_op_desc_size", "get_op_num",
    "get_op_type_len", "get_op_type", "get_op_type_v2", "get_op_name_len", "get_op_name",
    "get_op_name_v2", "get_op_start", "get_op_end", "get_op_duration", "get_model_id",
    "get_op_flag", "get_op_attri_value", "create_stamp", "destroy_stamp",
    "set_stamp_trace_message", "mark", "mark_ex", "push", "pop", "range_start", "range_stop",
    "create_step_info", "get_step_timestamp", "destroy_step_info",
]

_INVALID_PARAM = 100000

# --- session -------------------------------------------------------------------------------


def init(profiler_result_path: str) -> int:
    path = text(profiler_result_path)
    return call_ret("aclprofInit", path, len(path))


def finalize() -> int:
    from aclprof.binding import state as _state

    _state.tx_stopping()
    return call_ret("aclprofFinalize")


def create_config(device_list: list, aicore_metrics: int, aicore_events: int,
                  data_type_config: int) -> int:
    """Returns the config handle, 0 on failure (``aicore_events`` must be 0)."""
    devices = list(device_list)
    array = ffi().new("uint32_t[]", devices) if devices else ffi().NULL
    events = ptr(aicore_events or 0, "aclprofAicoreEvents *")
    cfg = fn("aclprofCreateConfig")(array, len(devices), aicore_metrics, events, data_type_config)
    return address(cfg)


def destroy_config(profiler_config: int) -> int:
    return call_ret("aclprofDestroyConfig", ptr(profiler_config, "aclprofConfig *"))


def start(profiler_config: int) -> int:
    return call_ret("aclprofStart", ptr(profiler_config, "aclprofConfig *"))


def stop(profiler_config: int) -> int:
    return call_ret("aclprofStop", ptr(profiler_config, "aclprofConfig *"))


def set_config(config_type: int, config: str) -> int:
    value = text(config)
    return call_ret("aclprofSetConfig", config_type, value, len(value))


# --- subscription ----------------------------------------------------------------------------

_cells_lock = threading.Lock()
_cells: dict[int, object] = {}  # subscribe config handle -> its C int fd cell
_retired_cells: list[object] = []  # destroyed configs whose fd the library may still use


def create_subscribe_config(time_info_switch: int, aicore_metrics: int, fd: int) -> int:
    """``fd`` is the int write end of ``os.pipe()``; returns the handle, 0 on failure."""
    cell = ffi().new("int *", fd)
    cfg = address(fn("aclprofCreateSubscribeConfig")(time_info_switch, aicore_metrics, cell))
    if cfg:
        with _cells_lock:
            _cells[cfg] = cell
    return cfg


def destroy_subscribe_config(subscribe_config: int) -> int:
    ret = call_ret("aclprofDestroySubscribeConfig", ptr(subscribe_config, "aclprofSubscribeConfig *"))
    if ret == 0:
        with _cells_lock:
            cell = _cells.pop(subscribe_config, None)
            if cell is not None and cell[0] != -1:
                _retired_cells.append(cell)  # still subscribed: the library writes -1 later
    return ret


def model_subscribe(model_id: int, subscribe_config: int) -> int:
    return call_ret("aclprofModelSubscribe", model_id,
                    ptr(subscribe_config, "aclprofSubscribeConfig *"))


def model_unsubscribe(model_id: int) -> int:
    return call_ret("aclprofModelUnSubscribe", model_id)


model_un_subscribe = model_unsubscribe


def get_op_desc_size() -> tuple[int, int]:
    out = ffi().new("size_t *")
    ret = call_ret("aclprofGetOpDescSize", out)
    return int(out[0]), ret


def get_op_num(op_info: int, op_info_len: int) -> tuple[int, int]:
    out = ffi().new("uint32_t *")
    ret = call_ret("aclprofGetOpNum", ptr(op_info), op_info_len, out)
    return int(out[0]), ret


def _get_len(cname: str, op_info: int, op_info_len: int, index: int) -> tuple[int, int]:
    out = ffi().new("size_t *")
    ret = call_ret(cname, ptr(op_info), op_info_len, index, out)
    return int(out[0]), ret


def _get_text(cname: str, op_info: int, op_info_len: int, index: int, length: int) -> tuple[str, int]:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        return "", _INVALID_PARAM
    buf = ffi().new("char[]", length)
    ret = call_ret(cname, ptr(op_info), op_info_len, index, buf, length)
    if ret != 0:
        return "", ret
    return ffi().string(buf).decode("utf-8", "backslashreplace"), ret


def get_op_type_len(op_info: int, op_info_len: int, index: int) -> tuple[int, int]:
    return _get_len("aclprofGetOpTypeLen", op_info, op_info_len, index)


def get_op_name_len(op_info: int, op_info_len: int, index: int) -> tuple[int, int]:
    return _get_len("aclprofGetOpNameLen", op_info, op_info_len, index)


def get_op_type(op_info: int, op_info_len: int, index: int, op_type_len: int) -> tuple[str, int]:
    return _get_text("aclprofGetOpType", op_info, op_info_len, index, op_type_len)


def get_op_name(op_info: int, op_info_len: int, index: int, op_name_len: int) -> tuple[str, int]:
    return _get_text("aclprofGetOpName", op_info, op_info_len, index, op_name_len)


def get_op_type_v2(op_info: int, op_info_len: int, index: int) -> tuple[str, int]:
    length, ret = get_op_type_len(op_info, op_info_len, index)
    return ("", ret) if ret else get_op_type(op_info, op_info_len, index, length)


def get_op_name_v2(op_info: int, op_info_len: int, index: int) -> tuple[str, int]:
    length, ret = get_op_name_len(op_info, op_info_len, index)
    return ("", ret) if ret else get_op_name(op_info, op_info_len, index, length)


def get_op_start(op_info: int, op_info_len: int, index: int) -> int:
    return int(fn("aclprofGetOpStart")(ptr(op_info), op_info_len, index))


def get_op_end(op_info: int, op_info_len: int, index: int) -> int:
    return int(fn("aclprofGetOpEnd")(ptr(op_info), op_info_len, index))


def get_op_duration(op_info: int, op_info_len: int, index: int) -> int:
    return int(fn("aclprofGetOpDuration")(ptr(op_info), op_info_len, index))


def get_model_id(op_info: int, op_info_len: int, index: int) -> int:
    return int(fn("aclprofGetModelId")(ptr(op_info), op_info_len, index))


def get_op_flag(op_info: int, op_info_len: int, index: int) -> int:
    return int(fn("aclprofGetOpFlag")(ptr(op_info), op_info_len, index))


def get_op_attri_value(op_info: int, op_info_len: int, index: int, attri: int) -> str | None:
    value = fn("aclprofGetOpAttriValue")(ptr(op_info), op_info_len, index, attri)
    return None if value == ffi().NULL else ffi().string(value).decode("utf-8", "replace")


# --- msproftx --------------------------------------------------------------------------------

def create_stamp() -> int:
    return address(fn("aclprofCreateStamp")())


def destroy_stamp(stamp: int) -> int:
    fn("aclprofDestroyStamp")(ptr(stamp))
    return 0


def set_stamp_trace_message(stamp: int, msg: str, msg_len: int) -> int:
    data = text(msg)
    if msg_len != len(msg) and msg_len != len(data):
        return _INVALID_PARAM
    return call_ret("aclprofSetStampTraceMessage", ptr(stamp), data, len(data))


def mark(stamp: int) -> int:
    return call_ret("aclprofMark", ptr(stamp))


def mark_ex(msg: str, stream: int) -> int:
    data = text(msg)
    return call_ret("aclprofMarkEx", data, len(data), ptr(stream))


def push(stamp: int) -> int:
    return call_ret("aclprofPush", ptr(stamp))


def pop() -> int:
    return call_ret("aclprofPop")


def range_start(stamp: int) -> tuple[int, int]:
    out = ffi().new("uint32_t *")
    ret = call_ret("aclprofRangeStart", ptr(stamp), out)
    return int(out[0]), ret


def range_stop(range_id: int) -> int:
    return call_ret("aclprofRangeStop", range_id)


# --- step info -------------------------------------------------------------------------------

def create_step_info() -> int:
    return address(fn("aclprofCreateStepInfo")())


def get_step_timestamp(step_info: int, tag: int, stream: int) -> int:
    return call_ret("aclprofGetStepTimestamp", ptr(step_info, "aclprofStepInfo *"), tag,
                    ptr(stream or 0))


def destroy_step_info(step_info: int) -> None:
    fn("aclprofDestroyStepInfo")(ptr(step_info, "aclprofStepInfo *"))
