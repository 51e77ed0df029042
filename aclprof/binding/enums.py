"""Python enums for the constants of acl_prof.h, and validation of data-type bitmasks.

Values mirror ``cdefs/acl_prof.h`` (tests/test_enums.py checks every one against the cffi
declarations). Member names drop the C prefix: ``ACL_PROF_TASK_TIME`` is ``DataType.TASK_TIME``.
"""

from __future__ import annotations

import enum

__all__ = [
    "DataType",
    "AicoreMetrics",
    "ConfigType",
    "OpFlag",
    "StepTag",
    "validate_data_types",
]


class DataType(enum.IntFlag):
    """The ``dataTypeConfig`` bits of ``aclprofCreateConfig`` (``ACL_PROF_*``)."""

    ACL_API = 0x0001
    TASK_TIME = 0x0002
    AICORE_METRICS = 0x0004
    AICPU = 0x0008
    L2CACHE = 0x0010
    HCCL_TRACE = 0x0020
    TRAINING_TRACE = 0x0040
    MSPROFTX = 0x0080
    RUNTIME_API = 0x0100
    GE_API_L0 = 0x0200
    TASK_TIME_L0 = 0x0800
    TASK_MEMORY = 0x1000
    TASK_TIME_L2 = 0x2000
    OP_ATTR = 0x4000
    TASK_TIME_L3 = 0x8000
    GE_API_L1 = 0x01000000
    API_STATS = 0x400000000
    AICORE_SHAPE = 0x800000000


_ALL_DATA_TYPES = 0
for _member in DataType:
    _ALL_DATA_TYPES |= int(_member)
del _member


def validate_data_types(value: int) -> DataType:
    """Return ``value`` as a :class:`DataType`, rejecting bits acl_prof.h does not define.

    Raises:
        TypeError: ``value`` is not an int.
        ValueError: ``value`` is zero, negative, or has unknown bits (they are listed).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"data_types must be a DataType or int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"data_types must name at least one DataType bit, got {value:#x}")
    unknown = value & ~_ALL_DATA_TYPES
    if unknown:
        bits = ", ".join(f"{1 << i:#x}" for i in range(unknown.bit_length()) if unknown >> i & 1)
        raise ValueError(
            f"data_types {value:#x} has bits acl_prof.h does not define: {bits}; "
            f"valid bits are the DataType members"
        )
    return DataType(value)


class AicoreMetrics(enum.IntEnum):
    """``aclprofAicoreMetrics``: which AI Core metrics to collect."""

    ARITHMETIC_UTILIZATION = 0
    PIPE_UTILIZATION = 1
    MEMORY_BANDWIDTH = 2
    L0B_AND_WIDTH = 3
    RESOURCE_CONFLICT_RATIO = 4
    MEMORY_UB = 5
    L2_CACHE = 6
    PIPE_EXECUTE_UTILIZATION = 7
    MEMORY_ACCESS = 8
    NONE = 0xFF


class ConfigType(enum.IntEnum):
    """``aclprofConfigType``: the options of ``aclprofSetConfig``."""

    STORAGE_LIMIT = 1
    SYS_HARDWARE_MEM_FREQ = 3
    LLC_MODE = 4
    SYS_IO_FREQ = 5
    SYS_INTERCONNECTION_FREQ = 6
    DVPP_FREQ = 7
    HOST_SYS = 8
    HOST_SYS_USAGE = 9
    HOST_SYS_USAGE_FREQ = 10
    LOW_POWER_FREQ = 11
    SYS_MEM_SERVICEFLOW = 12
    SYS_CPU_FREQ = 13
    OPTYPE = 14
    NTS_METRICS = 15
    PATH = 16


class OpFlag(enum.IntEnum):
    """``aclprofSubscribeOpFlag``: the kind of a subscribed op record."""

    OP = 0
    SUBGRAPH = 1
    OP_THREAD = 2
    NONE = 0xFF


class StepTag(enum.IntEnum):
    """``aclprofStepTag``: which end of a step ``aclprofGetStepTimestamp`` stamps."""

    START = 0
    END = 1
