"""A 1:1 layer over every C function aclprof binds, for users who need exact C semantics.

Each function calls one C function, takes and returns Python values (ints, str, bytes and
owning handle objects, never cffi objects), and raises through the one error funnel
(:func:`aclprof.binding.errors.check`). Functions whose C form returns a value with no error code
(``aclprofGetOpStart`` ...) return that value unchanged, 0 on error, as C does.

Arguments are checked in Python first (types and integer ranges) so that a wrong argument
gives a ``TypeError``/``ValueError`` naming the parameter instead of a cffi overflow.
The library is loaded on the first call (see :mod:`aclprof.binding.loader`).

What differs between CANN releases (hicann/runtime d8beaaf09 "2025" and 681ef7610 "2026";
the mock follows either, see ``aclprof.mock.set_cann_era``):

=====================================  ==========================  ========================
call                                   2025                        2026
=====================================  ==========================  ========================
finalize / stop without init           100043                      success, no-op
start without init                     100043                      auto-init (ACL_PROF_PATH
                                                                   or "./")
start(None) / stop(None)               100000                      default / running config
start while running, same types        100042 if a device repeats  success, starts nothing
start while running, other types       100042 if a device repeats  100010
stop                                   stops config's devices      stops every device
set_config before init                 100001                      accepted
set_config 15, 16 / HOST_SYS numa     100000 / 100010             accepted
init: result directory                 created at init             created at start
DataType.API_STATS / AICORE_SHAPE      200007 at start             accepted
=====================================  ==========================  ========================
"""

from __future__ import annotations

import os
import threading
from typing import Any

from aclprof.binding import state as _state
from aclprof.binding.handles import Handle
from aclprof.binding.loader import get_library
from aclprof.binding.enums import AicoreMetrics, ConfigType, DataType, StepTag
from aclprof.binding.errors import InvalidParamError, MsproftxError, check, error_for

__all__ = [
    # session
    "init", "finalize", "start", "stop", "create_config", "destroy_config", "set_config",
    "ProfConfig",
    # subscription
    "FdCell", "SubscribeConfig", "create_subscribe_config", "destroy_subscribe_config",
    "model_subscribe", "model_unsubscribe", "get_op_desc_size", "get_op_num",
    "get_op_type_len", "get_op_type", "get_op_name_len", "get_op_name", "get_op_start",
    "get_op_end", "get_op_duration", "get_model_id", "get_op_flag", "get_op_attri_value",
    "get_op_times",
    # step info
    "StepInfoHandle", "create_step_info", "get_step_timestamp", "destroy_step_info",
    # msproftx
    "Stamp", "create_stamp", "destroy_stamp", "set_stamp_trace_message", "mark", "push", "pop",
    "range_start", "range_stop", "mark_ex", "str2id", "range_push_ex", "range_pop",
    # runtime
    "Context", "Stream", "acl_init", "acl_finalize", "rt_set_device", "rt_reset_device",
    "rt_get_device", "rt_get_device_count", "rt_create_context", "rt_destroy_context",
    "rt_set_current_context", "rt_get_current_context", "rt_create_stream", "rt_destroy_stream",
    "rt_synchronize_stream", "rt_synchronize_device", "mdl_load_from_file", "mdl_execute",
    "mdl_unload",
    # model datasets
    "Dataset", "DataBuffer", "mdl_create_dataset", "mdl_destroy_dataset",
    "mdl_add_dataset_buffer", "mdl_get_dataset_num_buffers", "acl_create_data_buffer",
    "acl_destroy_data_buffer",
]

MAX_PATH_BYTES = 4095  # aclprofInit rejects length >= 4096
MAX_CONFIG_VALUE_BYTES = 256  # aclprofSetConfig rejects configLength > 256
# aclprofSetStampTraceMessage rejects msgLen >= 128 and copies into a 127-byte field with
# strncpy_s, which needs room for the NUL: 126 bytes is the longest message that survives.
MAX_TRACE_MESSAGE_BYTES = 126
# aclprofMarkEx accepts 1..MAX_MESSAGE_LEN-1 = 155 bytes in the source (audit #10); the
# docs say 127. The source is what runs, and the issue asks for what the audit found.
MAX_MARK_EX_BYTES = 155
MAX_DEVICES = 64  # PROF_MAX_DEV_NUM
_U32 = 0xFFFFFFFF


# ---- argument helpers ------------------------------------------------------------------

def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _u32(value: Any, name: str) -> int:
    return _int(value, name, 0, _U32)


def encode_text(value: Any, name: str, max_bytes: int, *, allow_empty: bool = False) -> bytes:
    """str/bytes -> bytes without NUL, at most ``max_bytes`` long."""
    if isinstance(value, str):
        data = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    else:
        raise TypeError(f"{name} must be str or bytes, not {type(value).__name__}")
    if b"\0" in data:
        raise ValueError(f"{name} must not contain NUL characters")
    if not data and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    if len(data) > max_bytes:
        raise ValueError(f"{name} is {len(data)} bytes encoded; the limit is {max_bytes}")
    return data


def _path_bytes(value: Any, name: str) -> bytes:
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, not {type(value).__name__}")
    return encode_text(os.fsencode(value), name, MAX_PATH_BYTES)


# ---- aclprofInit / aclprofSetConfig value rules (fidelity audit rows 7, 8) ---------------

# Utils::CheckPathWithInvalidChar (CANN common/utils/utils.cpp): a result path containing any
# of these is refused with 100003 (aclprofInit) or 100010 (ACL_PROF_PATH after init). Other
# control bytes are allowed.
INVALID_PATH_CHARS = "\n\f\r\b\t\v\x7f\"'\\%><|&$;`"

# ParamValidation::CheckArgRange: digits only, no longer than str(hi), value in [lo, hi].
SET_CONFIG_RANGES: dict[ConfigType, tuple[int, int]] = {
    # 1..100 on most chips, 1..10000 on chips with PLATFORM_SYS_DEVICE_US: the binding lets
    # the widest through and the library decides (the mock is a 1..100 chip).
    ConfigType.SYS_HARDWARE_MEM_FREQ: (1, 10000),
    ConfigType.SYS_IO_FREQ: (1, 100),
    ConfigType.SYS_INTERCONNECTION_FREQ: (1, 50),
    ConfigType.DVPP_FREQ: (1, 100),
    ConfigType.HOST_SYS_USAGE_FREQ: (1, 50),
    ConfigType.LOW_POWER_FREQ: (1, 100),
    ConfigType.SYS_CPU_FREQ: (1, 50),
}
STORAGE_LIMIT_MB = (200, 0xFFFFFFFF)  # "<n>MB", at most 10 digits; "" means no limit
SET_CONFIG_WORDS: dict[ConfigType, tuple[str, ...]] = {
    ConfigType.LLC_MODE: ("read", "write"),
    ConfigType.NTS_METRICS: ("PipeUtilization",),
}
# Comma lists (Utils::Split keeps empty items, so "a,,b" and "a," fail; "" is no item at all
# and passes; duplicates pass). "numa" exists since 2026; older libraries refuse it (100010).
SET_CONFIG_WORD_LISTS: dict[ConfigType, tuple[str, ...]] = {
    ConfigType.HOST_SYS: ("cpu", "mem", "disk", "network", "osrt", "numa"),
    ConfigType.HOST_SYS_USAGE: ("cpu", "mem"),
}


def invalid_path_char(path: bytes) -> str | None:
    """The first character CANN refuses in a result path, or None."""
    for ch in INVALID_PATH_CHARS:
        if ch.encode() in path:
            return ch
    return None


def _check_path_chars(path: bytes, where: str) -> None:
    bad = invalid_path_char(os.fsencode(os.path.abspath(path)))
    if bad is not None:
        raise ValueError(
            f"{where}: path {os.fsdecode(path)!r} contains {bad!r}, which CANN refuses in a "
            f"result path (100003); use a directory whose absolute path has none of "
            f"{INVALID_PATH_CHARS!r}")


def check_set_config_value(config_type: ConfigType, value: bytes) -> None:
    """Apply the library's ``aclprofSetConfig`` value rule for ``config_type`` in Python.

    Raises:
        ValueError: naming aclprofSetConfig, the option, the value, the rule and the fix.
    """
    text = value.decode("utf-8", "replace")
    name = config_type.name

    def fail(rule: str) -> None:
        raise ValueError(f"aclprofSetConfig: {name}={text!r} is refused by CANN (code "
                         f"{100000 if config_type is ConfigType.NTS_METRICS else 100010}): "
                         f"{rule}")

    if config_type in SET_CONFIG_RANGES:
        lo, hi = SET_CONFIG_RANGES[config_type]
        if not (value.isdigit() and len(value) <= len(str(hi)) and lo <= int(value) <= hi):
            fail(f"give a decimal integer in [{lo}, {hi}] with at most {len(str(hi))} digits")
    elif config_type is ConfigType.STORAGE_LIMIT:
        lo, hi = STORAGE_LIMIT_MB
        digits = value[:-2]
        if value and not (value.endswith(b"MB") and digits.isdigit() and len(digits) <= 10
                          and lo <= int(digits) <= hi):
            fail(f"give '<n>MB' with n in [{lo}, {hi}] (at most 10 digits), e.g. '500MB', "
                 "or '' for no limit")
    elif config_type in SET_CONFIG_WORDS:
        if text not in SET_CONFIG_WORDS[config_type]:
            fail(f"give one of {SET_CONFIG_WORDS[config_type]}")
    elif config_type in SET_CONFIG_WORD_LISTS:
        words = SET_CONFIG_WORD_LISTS[config_type]
        if text and any(w not in words for w in text.split(",")):
            fail(f"give a comma list (no spaces, no empty items) of {words}")
    elif config_type is ConfigType.OPTYPE:
        if not text or "" in text.split(","):
            fail("give a comma list of op types with no empty item, e.g. 'Conv2D,MatMul'")
    elif config_type is ConfigType.SYS_MEM_SERVICEFLOW:
        if not text:
            fail("give a non-empty value")
    elif config_type is ConfigType.PATH:
        bad = invalid_path_char(value)
        if bad is not None:
            fail(f"the path contains {bad!r}; use one without any of {INVALID_PATH_CHARS!r}")


def _buffer(data: Any) -> tuple[Any, int]:
    """A read-only C view of a bytes-like object and its length in bytes."""
    lib = get_library()
    try:
        view = lib.ffi.from_buffer(data)
    except TypeError:
        raise TypeError(f"op data must be a bytes-like object, not {type(data).__name__}") from None
    return view, len(view)


def _fn(name: str) -> Any:
    return get_library().fn(name)


# ---- session -------------------------------------------------------------------------

class ProfConfig(Handle):
    """An ``aclprofConfig*`` from :func:`create_config`; ``close()`` destroys it."""

    __slots__ = ("devices", "data_types", "aicore_metrics")
    kind = "profiling config"


def init(path: str | os.PathLike) -> None:
    """``aclprofInit``: initialise profiling with ``path`` as the output directory.

    Every CANN era: a second init gives 100002, init while subscribed 148047. A path whose
    absolute form contains one of :data:`INVALID_PATH_CHARS` is refused here with a
    ``ValueError``: CANN 2026 returns 100003 for it (2025 accepted it; the binding follows
    the newer rule). CANN 2026 creates the directory at start, 2025 here (100003 if it
    cannot).
    """
    data = _path_bytes(path, "path")
    _check_path_chars(data, "aclprofInit")
    check(_fn("aclprofInit")(data, len(data)), "aclprofInit")


def finalize() -> None:
    """``aclprofFinalize``: stops every running device and leaves API mode.

    Without a prior :func:`init`: CANN 2026 returns success and does nothing; CANN 2025
    raises ``ProfNotRunError`` (100043). On 2026 a finalize without :func:`stop` leaves the
    library's "already started" flag set, so the next :func:`start` succeeds but starts
    nothing until a :func:`stop`: stop before you finalize.
    """
    was_running = _state.tx_running
    _state.tx_stopping()
    rc = _fn("aclprofFinalize")()
    if rc != 0 and was_running:
        _state.tx_started()  # the library did not finalize: msproftx keeps running
    check(rc, "aclprofFinalize")


def start(config: ProfConfig | None) -> None:
    """``aclprofStart``; ``None`` means the library's default configuration (2026 only).

    Differs by CANN era (see the module docstring):

    - without :func:`init`: 2026 initialises with ``ACL_PROF_PATH`` (or the last result
      path of the process, or ``"./"``); 2025 raises ``ProfNotRunError`` (100043);
    - ``None``: 2026 starts every active device with the platform defaults; 2025 raises
      ``InvalidParamError`` (100000);
    - while a session runs: 2026 compares the data types of the devices that run (the host
      included) and returns without starting anything new (100010 if they differ); 2025
      raises ``ProfAlreadyRunError`` (100042) if any device of ``config`` runs and starts
      the others otherwise.
    """
    ptr = _config_ptr(config)
    check(_fn("aclprofStart")(ptr), "aclprofStart")
    if config is not None and config.data_types & DataType.MSPROFTX:
        _state.tx_started()


def stop(config: ProfConfig | None) -> None:
    """``aclprofStop``; pass the config given to :func:`start` (``None``: the running one).

    Both eras compare ``config``'s stored data types with those of its devices that run
    (the host included) and raise 100010 on a difference; devices that do not run are
    skipped. Then 2026 stops every running device, 2025 only those of ``config``.
    Without :func:`init`: 2026 returns success, 2025 raises 100043; ``None`` on 2025
    raises ``InvalidParamError`` (100000).
    """
    ptr = _config_ptr(config)
    was_running = _state.tx_running
    _state.tx_stopping()
    rc = _fn("aclprofStop")(ptr)
    if rc != 0 and was_running:
        _state.tx_started()  # the library did not stop: msproftx keeps running
    check(rc, "aclprofStop")


def _config_ptr(config: ProfConfig | None) -> Any:
    if config is None:
        return get_library().ffi.NULL
    if not isinstance(config, ProfConfig):
        raise TypeError(f"config must be a ProfConfig or None, not {type(config).__name__}")
    return config._get()


def _release_config(ptr: Any) -> None:
    check(_fn("aclprofDestroyConfig")(ptr), "aclprofDestroyConfig")


def create_config(devices: Any, aicore_metrics: int, data_types: int) -> ProfConfig:
    """``aclprofCreateConfig`` (``aicoreEvents`` is always NULL, as the library requires).

    Raises:
        InvalidParamError: the library returned NULL; the message says which rule failed.
    """
    from aclprof.binding.enums import validate_data_types

    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise TypeError(f"devices must be an iterable of ints, not {type(devices).__name__}")
    ids = [_int(d, "device id", 0, MAX_DEVICES - 1) for d in devices]
    if len(set(ids)) != len(ids):
        raise ValueError(f"devices contains duplicates: {ids}")
    metrics = AicoreMetrics(_u32(aicore_metrics, "aicore_metrics"))
    types = validate_data_types(data_types)
    if not ids and not types & DataType.MSPROFTX:
        raise ValueError("devices may be empty only when data_types includes DataType.MSPROFTX")
    lib = get_library()
    array = lib.ffi.new("uint32_t[]", ids) if ids else lib.ffi.NULL
    ptr = _fn("aclprofCreateConfig")(array, len(ids), int(metrics), lib.ffi.NULL, int(types))
    if ptr == lib.ffi.NULL:
        raise InvalidParamError(100000, "aclprofCreateConfig", _why_config_rejected(ids))
    config = ProfConfig(ptr, _release_config)
    config.devices = tuple(ids)
    config.data_types = types
    config.aicore_metrics = metrics
    return config


def _why_config_rejected(ids: list[int]) -> str:
    """Explain a NULL from aclprofCreateConfig: almost always a device the host lacks."""
    try:
        count = rt_get_device_count()
    except Exception:  # the count is only a diagnostic here  # noqa: BLE001
        return f"returned NULL for devices {ids} (device count unavailable)"
    bad = [d for d in ids if d >= count]
    if bad:
        return f"devices {bad} do not exist: this host has {count} device(s), ids 0..{count - 1}"
    return f"returned NULL for devices {ids} with {count} device(s) present"


def destroy_config(config: ProfConfig) -> None:
    """``aclprofDestroyConfig``; same as ``config.close()``."""
    if not isinstance(config, ProfConfig):
        raise TypeError(f"config must be a ProfConfig, not {type(config).__name__}")
    config.close()


def set_config(config_type: ConfigType | int, value: str) -> None:
    """``aclprofSetConfig(type, value, len(value))``; values are strings, as in C.

    The value is checked first against the library's rules (:func:`check_set_config_value`).
    ``ACL_PROF_PATH`` set after :func:`init` moves the output of later starts (2026); ``""``
    is accepted and changes nothing. CANN 2025 needs :func:`init` first (100001) and has no
    types 15 and 16 (100000); its type 14 is ``ACL_PROF_SCALE``, not ``OPTYPE``.
    """
    ctype = ConfigType(_int(config_type, "config_type", 1, 16))
    # "" is a valid value for some types (no limit, no item, no path): the rule decides.
    data = encode_text(value, "value", MAX_CONFIG_VALUE_BYTES, allow_empty=True)
    check_set_config_value(ctype, data)
    check(_fn("aclprofSetConfig")(int(ctype), data, len(data)), "aclprofSetConfig",
          f"{ctype.name}={data.decode('utf-8', 'replace')!r}")


# ---- subscription --------------------------------------------------------------------

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
        raise InvalidParamError(100000, "aclprofCreateSubscribeConfig", "returned NULL")
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
    """``aclprofModelSubscribe``."""
    if not isinstance(config, SubscribeConfig):
        raise TypeError(f"config must be a SubscribeConfig, not {type(config).__name__}")
    check(_fn("aclprofModelSubscribe")(_u32(model_id, "model_id"), config._get()),
          "aclprofModelSubscribe", f"model {model_id}")


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
    return get_library().ffi.string(buf)


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


# ---- step info ---------------------------------------------------------------------------

class StepInfoHandle(Handle):
    """An ``aclprofStepInfo*``; ``close()`` destroys it."""

    __slots__ = ()
    kind = "step info"


def create_step_info() -> StepInfoHandle:
    """``aclprofCreateStepInfo``."""
    ptr = _fn("aclprofCreateStepInfo")()
    if ptr == get_library().ffi.NULL:
        raise MemoryError("aclprofCreateStepInfo returned NULL (allocation failed)")
    return StepInfoHandle(ptr, _fn("aclprofDestroyStepInfo"))


def get_step_timestamp(step_info: StepInfoHandle, tag: StepTag | int, stream: "Stream | None" = None) -> None:
    """``aclprofGetStepTimestamp``; each tag may be stamped once per step info."""
    if not isinstance(step_info, StepInfoHandle):
        raise TypeError(f"step_info must be a StepInfoHandle, not {type(step_info).__name__}")
    try:
        tag = StepTag(_u32(tag, "tag"))
    except ValueError:
        # CANN takes any other value as an END (and never refuses it twice) and hands the raw
        # tag to its step report; refusing it here keeps unknown tags out of the data.
        raise ValueError(f"aclprofGetStepTimestamp: tag {tag!r} is not a StepTag; use "
                         "StepTag.START (0) or StepTag.END (1)") from None
    check(_fn("aclprofGetStepTimestamp")(step_info._get(), int(tag), _stream_ptr(stream)),
          "aclprofGetStepTimestamp", f"tag {tag.name}")


def destroy_step_info(step_info: StepInfoHandle) -> None:
    """``aclprofDestroyStepInfo``; same as ``step_info.close()``."""
    step_info.close()


# ---- msproftx ----------------------------------------------------------------------------

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


def mark_ex(message: str | bytes, stream: "Stream") -> None:
    """``aclprofMarkEx(msg, len, stream)`` (OPTIONAL symbol); 1..155 bytes, stream required.

    The CANN docs say at most 127 bytes; the library's source accepts 155
    (``MAX_MESSAGE_LEN - 1``), which is what is allowed here.
    """
    data = encode_text(message, "message", MAX_MARK_EX_BYTES)
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


def range_push_ex(op_name_id: int, op_type_id: int, tensors: list[dict] | None = None,
                  stream: "Stream | None" = None) -> None:
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


# ---- runtime and model -----------------------------------------------------------------

class Context(Handle):
    """An ``aclrtContext``; ``close()`` destroys it when this handle owns it."""

    __slots__ = ()
    kind = "context"


class Stream(Handle):
    """An ``aclrtStream``; ``close()`` destroys it."""

    __slots__ = ()
    kind = "stream"


def _stream_ptr(stream: Stream | None) -> Any:
    if stream is None:
        return get_library().ffi.NULL
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a Stream or None, not {type(stream).__name__}")
    return stream._get()


def acl_init(config_path: str | os.PathLike | None = None) -> None:
    """``aclInit``; ``None`` passes NULL (no acl.json)."""
    lib = get_library()
    arg = lib.ffi.NULL if config_path is None else _path_bytes(config_path, "config_path")
    check(_fn("aclInit")(arg), "aclInit")


def acl_finalize() -> None:
    """``aclFinalize``."""
    check(_fn("aclFinalize")(), "aclFinalize")


def rt_set_device(device_id: int) -> None:
    """``aclrtSetDevice``."""
    check(_fn("aclrtSetDevice")(_int(device_id, "device_id", 0, 2**31 - 1)), "aclrtSetDevice")


def rt_reset_device(device_id: int) -> None:
    """``aclrtResetDevice``."""
    check(_fn("aclrtResetDevice")(_int(device_id, "device_id", 0, 2**31 - 1)), "aclrtResetDevice")


def rt_get_device() -> int:
    """``aclrtGetDevice``: the current thread's device."""
    out = get_library().ffi.new("int32_t *")
    check(_fn("aclrtGetDevice")(out), "aclrtGetDevice")
    return int(out[0])


def rt_get_device_count() -> int:
    """``aclrtGetDeviceCount``."""
    out = get_library().ffi.new("uint32_t *")
    check(_fn("aclrtGetDeviceCount")(out), "aclrtGetDeviceCount")
    return int(out[0])


def _release_context(ptr: Any) -> None:
    check(_fn("aclrtDestroyContext")(ptr), "aclrtDestroyContext")


def rt_create_context(device_id: int) -> Context:
    """``aclrtCreateContext``; the new context becomes current on this thread."""
    out = get_library().ffi.new("aclrtContext *")
    check(_fn("aclrtCreateContext")(out, _int(device_id, "device_id", 0, 2**31 - 1)),
          "aclrtCreateContext")
    return Context(out[0], _release_context)


def rt_destroy_context(context: Context) -> None:
    """``aclrtDestroyContext``; same as ``context.close()``."""
    context.close()


def rt_set_current_context(context: Context) -> None:
    """``aclrtSetCurrentContext``."""
    if not isinstance(context, Context):
        raise TypeError(f"context must be a Context, not {type(context).__name__}")
    check(_fn("aclrtSetCurrentContext")(context._get()), "aclrtSetCurrentContext")


def rt_get_current_context() -> Context:
    """``aclrtGetCurrentContext``; the returned handle does not own the context."""
    out = get_library().ffi.new("aclrtContext *")
    check(_fn("aclrtGetCurrentContext")(out), "aclrtGetCurrentContext")
    return Context(out[0], None)


def _release_stream(ptr: Any) -> None:
    check(_fn("aclrtDestroyStream")(ptr), "aclrtDestroyStream")


def rt_create_stream() -> Stream:
    """``aclrtCreateStream``."""
    out = get_library().ffi.new("aclrtStream *")
    check(_fn("aclrtCreateStream")(out), "aclrtCreateStream")
    return Stream(out[0], _release_stream)


def rt_destroy_stream(stream: Stream) -> None:
    """``aclrtDestroyStream``; same as ``stream.close()``."""
    stream.close()


def rt_synchronize_stream(stream: Stream) -> None:
    """``aclrtSynchronizeStream``."""
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a Stream, not {type(stream).__name__}")
    check(_fn("aclrtSynchronizeStream")(stream._get()), "aclrtSynchronizeStream")


def rt_synchronize_device() -> None:
    """``aclrtSynchronizeDevice``."""
    check(_fn("aclrtSynchronizeDevice")(), "aclrtSynchronizeDevice")


def mdl_load_from_file(path: str | os.PathLike) -> int:
    """``aclmdlLoadFromFile``: returns the model id."""
    data = _path_bytes(path, "path")
    out = get_library().ffi.new("uint32_t *")
    check(_fn("aclmdlLoadFromFile")(data, out), "aclmdlLoadFromFile", os.fsdecode(data))
    return int(out[0])


def mdl_execute(model_id: int, inputs: "Dataset", outputs: "Dataset") -> None:
    """``aclmdlExecute(modelId, input, output)``: runs the model synchronously.

    CANN rejects NULL datasets (100000), so both are required; for a model without inputs
    or outputs pass empty ones from :func:`mdl_create_dataset`.
    """
    for name, value in (("inputs", inputs), ("outputs", outputs)):
        if not isinstance(value, Dataset):
            raise TypeError(
                f"aclmdlExecute: {name} must be a Dataset, not {type(value).__name__}; CANN "
                "rejects a NULL dataset with ACL_ERROR_INVALID_PARAM (100000), so pass "
                "mdl_create_dataset() (empty for a model without inputs or outputs)")
    check(_fn("aclmdlExecute")(_u32(model_id, "model_id"), inputs._get(), outputs._get()),
          "aclmdlExecute", f"model {model_id}")


def mdl_unload(model_id: int) -> None:
    """``aclmdlUnload``."""
    check(_fn("aclmdlUnload")(_u32(model_id, "model_id")), "aclmdlUnload", f"model {model_id}")


# ---- model datasets ----------------------------------------------------------------------

class DataBuffer(Handle):
    """An ``aclDataBuffer*``: a (device address, size) pair; ``close()`` destroys it.

    A :class:`Dataset` keeps the C pointer of every buffer added to it and reads it at each
    ``aclmdlExecute``, so a buffer cannot be closed while an open dataset holds it.
    """

    __slots__ = ("address", "size", "_holders")
    kind = "data buffer"

    def close(self) -> None:
        if self._ptr is not None and self._holders:
            raise RuntimeError(
                f"aclDestroyDataBuffer: this data buffer is still in {self._holders} open "
                "dataset(s), which keep its pointer and read it at every aclmdlExecute; close "
                "the dataset(s) first")
        super().close()


class Dataset(Handle):
    """An ``aclmdlDataset*`` (model inputs or outputs); ``close()`` destroys it.

    Destroying a dataset does not destroy its buffers (as in CANN): close them afterwards.
    """

    __slots__ = ("_buffers",)
    kind = "model dataset"

    @property
    def buffers(self) -> tuple[DataBuffer, ...]:
        """The buffers added so far, in order."""
        return tuple(self._buffers)

    def close(self) -> None:
        was_open = self._ptr is not None
        try:
            super().close()
        finally:
            if was_open:  # the C dataset is gone (or unusable): it no longer holds them
                for buffer in self._buffers:
                    buffer._holders -= 1
                self._buffers = []


def _dataset(value: Any, name: str = "dataset") -> Dataset:
    if not isinstance(value, Dataset):
        raise TypeError(f"{name} must be a Dataset, not {type(value).__name__}")
    return value


def _release_dataset(ptr: Any) -> None:
    check(_fn("aclmdlDestroyDataset")(ptr), "aclmdlDestroyDataset")


def mdl_create_dataset() -> Dataset:
    """``aclmdlCreateDataset``: an empty dataset."""
    ptr = _fn("aclmdlCreateDataset")()
    if ptr == get_library().ffi.NULL:
        raise error_for(200000, "aclmdlCreateDataset", "returned NULL")
    dataset = Dataset(ptr, _release_dataset)
    dataset._buffers = []
    return dataset


def mdl_destroy_dataset(dataset: Dataset) -> None:
    """``aclmdlDestroyDataset``; same as ``dataset.close()``."""
    _dataset(dataset).close()


def mdl_add_dataset_buffer(dataset: Dataset, buffer: DataBuffer) -> None:
    """``aclmdlAddDatasetBuffer``: appends ``buffer``; the dataset keeps its pointer."""
    ptr = _dataset(dataset)._get()
    if not isinstance(buffer, DataBuffer):
        raise TypeError(f"buffer must be a DataBuffer, not {type(buffer).__name__}")
    check(_fn("aclmdlAddDatasetBuffer")(ptr, buffer._get()), "aclmdlAddDatasetBuffer")
    dataset._buffers.append(buffer)
    buffer._holders += 1


def mdl_get_dataset_num_buffers(dataset: Dataset) -> int:
    """``aclmdlGetDatasetNumBuffers``."""
    return int(_fn("aclmdlGetDatasetNumBuffers")(_dataset(dataset)._get()))


def _release_data_buffer(ptr: Any) -> None:
    check(_fn("aclDestroyDataBuffer")(ptr), "aclDestroyDataBuffer")


def acl_create_data_buffer(address: int, size: int) -> DataBuffer:
    """``aclCreateDataBuffer(data, size)``: ``address`` is device memory (0 for none)."""
    addr = _int(address, "address", 0, 2**64 - 1)
    nbytes = _int(size, "size", 0, 2**64 - 1)
    lib = get_library()
    ptr = _fn("aclCreateDataBuffer")(lib.ffi.cast("void *", addr), nbytes)
    if ptr == lib.ffi.NULL:
        raise error_for(200000, "aclCreateDataBuffer", "returned NULL")
    buffer = DataBuffer(ptr, _release_data_buffer)
    buffer.address, buffer.size, buffer._holders = addr, nbytes, 0
    return buffer


def acl_destroy_data_buffer(buffer: DataBuffer) -> None:
    """``aclDestroyDataBuffer``; same as ``buffer.close()``."""
    if not isinstance(buffer, DataBuffer):
        raise TypeError(f"buffer must be a DataBuffer, not {type(buffer).__name__}")
    buffer.close()
