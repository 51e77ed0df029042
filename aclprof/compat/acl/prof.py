"""``acl.prof``: pyACL's profiling functions, with pyACL's names and return conventions.

Differences from pyACL, all in the caller's favour:
- ``create_subscribe_config(switch, metrics, fd)`` keeps the fd in a C int that lives
  until the config is destroyed *and* the library has released it (pyACL keeps it in a
  ``std::vector`` whose growth can leave the library a dangling pointer). The library
  closes that fd at unsubscribe, as in C: do not ``os.close`` the write end afterwards.
  That holds after a ``model_subscribe`` refused with 100010 too: CANN may have kept the
  model subscribed on its (idle) device with that int (fidelity audit 3, R4); then a retry
  gives 148046, its records reach the fd, and ``model_unsubscribe`` returns 0 and closes
  it. Unsubscribe the model as after a success; the int outlives the config until the
  library writes -1 into it.
- ``get_op_type``/``get_op_name`` accept any positive buffer length (pyACL documents
  [1, 65] and [1, 257], but its own sample passes 275); the buffer is zeroed first.
"""

from __future__ import annotations

import threading

from aclprof.compat.acl._common import (
    Array,
    IntCell,
    Out,
    TextOut,
    call,
    call_ptr,
    call_ret,
    call_text,
    call_void,
    ptr,
    text,
)

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


def create_config(device_list: list[int], aicore_metrics: int, aicore_events: int,
                  data_type_config: int) -> int:
    """Returns the config handle, 0 on failure (``aicore_events`` must be 0)."""
    devices = list(device_list)
    events = ptr(aicore_events or 0, "aclprofAicoreEvents *")
    return call_ptr("aclprofCreateConfig", Array("uint32_t[]", devices), len(devices), aicore_metrics,
                    events, data_type_config)


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
_cells: dict[int, IntCell] = {}  # subscribe config handle -> its C int fd cell
_retired_cells: list[IntCell] = []  # destroyed configs whose fd the library may still use


def create_subscribe_config(time_info_switch: int, aicore_metrics: int, fd: int) -> int:
    """``fd`` is the int write end of ``os.pipe()``; returns the handle, 0 on failure."""
    cell = IntCell(fd)
    cfg = call_ptr("aclprofCreateSubscribeConfig", time_info_switch, aicore_metrics, cell)
    if cfg:
        with _cells_lock:
            _cells[cfg] = cell
    return cfg


def destroy_subscribe_config(subscribe_config: int) -> int:
    ret = call_ret("aclprofDestroySubscribeConfig", ptr(subscribe_config, "aclprofSubscribeConfig *"))
    if ret == 0:
        with _cells_lock:
            cell = _cells.pop(subscribe_config, None)
            if cell is not None and cell.value != -1:
                _retired_cells.append(cell)  # still subscribed: the library writes -1 later
    return ret


def model_subscribe(model_id: int, subscribe_config: int) -> int:
    return call_ret("aclprofModelSubscribe", model_id,
                    ptr(subscribe_config, "aclprofSubscribeConfig *"))


def model_unsubscribe(model_id: int) -> int:
    return call_ret("aclprofModelUnSubscribe", model_id)


model_un_subscribe = model_unsubscribe


def get_op_desc_size() -> tuple[int, int]:
    ret, (size,) = call("aclprofGetOpDescSize", Out("size_t *"))
    return size, ret


def get_op_num(op_info: int, op_info_len: int) -> tuple[int, int]:
    ret, (num,) = call("aclprofGetOpNum", ptr(op_info), op_info_len, Out("uint32_t *"))
    return num, ret


def _get_len(cname: str, op_info: int, op_info_len: int, index: int) -> tuple[int, int]:
    ret, (length,) = call(cname, ptr(op_info), op_info_len, index, Out("size_t *"))
    return length, ret


def _get_text(cname: str, op_info: int, op_info_len: int, index: int, length: int) -> tuple[str, int]:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        return "", _INVALID_PARAM
    ret, (value,) = call(cname, ptr(op_info), op_info_len, index, TextOut(length), length)
    if ret != 0:
        return "", ret
    return value, ret


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
    return call_ret("aclprofGetOpStart", ptr(op_info), op_info_len, index)


def get_op_end(op_info: int, op_info_len: int, index: int) -> int:
    return call_ret("aclprofGetOpEnd", ptr(op_info), op_info_len, index)


def get_op_duration(op_info: int, op_info_len: int, index: int) -> int:
    return call_ret("aclprofGetOpDuration", ptr(op_info), op_info_len, index)


def get_model_id(op_info: int, op_info_len: int, index: int) -> int:
    return call_ret("aclprofGetModelId", ptr(op_info), op_info_len, index)


def get_op_flag(op_info: int, op_info_len: int, index: int) -> int:
    return call_ret("aclprofGetOpFlag", ptr(op_info), op_info_len, index)


def get_op_attri_value(op_info: int, op_info_len: int, index: int, attri: int) -> str | None:
    return call_text("aclprofGetOpAttriValue", ptr(op_info), op_info_len, index, attri)


# --- msproftx --------------------------------------------------------------------------------

def create_stamp() -> int:
    return call_ptr("aclprofCreateStamp")


def destroy_stamp(stamp: int) -> int:
    call_void("aclprofDestroyStamp", ptr(stamp))
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
    ret, (range_id,) = call("aclprofRangeStart", ptr(stamp), Out("uint32_t *"))
    return range_id, ret


def range_stop(range_id: int) -> int:
    return call_ret("aclprofRangeStop", range_id)


# --- step info -------------------------------------------------------------------------------

def create_step_info() -> int:
    return call_ptr("aclprofCreateStepInfo")


def get_step_timestamp(step_info: int, tag: int, stream: int) -> int:
    return call_ret("aclprofGetStepTimestamp", ptr(step_info, "aclprofStepInfo *"), tag,
                    ptr(stream or 0))


def destroy_step_info(step_info: int) -> None:
    call_void("aclprofDestroyStepInfo", ptr(step_info, "aclprofStepInfo *"))
