"""Sessions and configs: ``aclprofInit``/``Finalize``/``Start``/``Stop``, configs and
``aclprofSetConfig``, with the library's path and value rules applied in Python first (see the
era table in :mod:`aclprof.binding.lowlevel` for what differs between CANN releases).
"""

from __future__ import annotations

import os
from typing import Any

from aclprof.binding import state as _state
from aclprof.binding.enums import AicoreMetrics, ConfigType, DataType
from aclprof.binding.errors import InvalidParamError, check
from aclprof.binding.handles import Handle
from aclprof.binding.loader import get_library
from aclprof.binding.lowlevel.runtime import rt_get_device_count
from aclprof.binding.lowlevel.validate import (
    MAX_CONFIG_VALUE_BYTES,
    MAX_DEVICES,
    _fn,
    _int,
    _path_bytes,
    _u32,
    encode_text,
)

__all__ = ["init", "finalize", "start", "stop", "create_config", "destroy_config", "set_config", "ProfConfig"]


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


# ---- session -------------------------------------------------------------------------

class ProfConfig(Handle):
    """An ``aclprofConfig*`` from :func:`create_config`; ``close()`` destroys it."""

    __slots__ = ("devices", "data_types", "aicore_metrics")
    kind = "profiling config"
    # Set by create_config (annotations only: the slots above hold them).
    devices: tuple[int, ...]
    data_types: DataType
    aicore_metrics: AicoreMetrics


def init(path: str | os.PathLike[str]) -> None:
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
    except Exception:  # the count is only a diagnostic here
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
