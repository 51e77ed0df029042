"""aclprof: fast, safe Python bindings for Huawei Ascend's profiling API (``acl_prof.h``).

- :class:`Profiler`: a profiling session (init, config, start ... stop, finalize).
- msproftx markers: :func:`mark`, :func:`push`/:func:`pop`, :class:`range`, :class:`annotate`.
- :class:`StepInfo`: step timestamps.
- :mod:`aclprof.lowlevel`: a 1:1 layer over every C function.
- :mod:`aclprof.mock`: controls of the bundled mock library (``ACLPROF_BACKEND=mock``).

The C library is opened on first use (see :func:`library_info`); importing aclprof loads
nothing and imports neither numpy nor structlog.
"""

from __future__ import annotations

from ._loader import LibraryInfo, library_info, use_mock
from .enums import AicoreMetrics, ConfigType, DataType, OpFlag, StepTag
from .errors import (
    AclError,
    AclprofError,
    ApiConflictError,
    FeatureUnsupportedError,
    HandleClosedError,
    InvalidFileError,
    InvalidModelIdError,
    InvalidParamError,
    InvalidProfilingConfigError,
    LibraryNotFoundError,
    ModulesUnsupportedError,
    MsproftxError,
    OtherAclError,
    ProfAlreadyRunError,
    ProfilingFailureError,
    ProfNotRunError,
    RepeatInitializeError,
    RepeatSubscribeError,
    UninitializeError,
    UnsupportedError,
)
from .session import Profiler
from .step import StepInfo
from .tx import RangeHandle, annotate, mark, pop, push, range, set_strict

from ._version import __version__

# Subscription needs numpy; it is imported on first use so that `import aclprof` stays cheap.
_LAZY = {
    "subscribe": "subscription", "Subscription": "subscription",
    "SubscriptionStats": "subscription", "OpRecord": "records", "OpBatch": "records",
}


_LAZY_MODULES = ("mock", "compat", "lowlevel", "subscription", "records", "agent")


def __getattr__(name: str):
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f"aclprof.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aclprof' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"aclprof.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "__version__",
    # library
    "LibraryInfo", "library_info", "use_mock",
    # enums
    "AicoreMetrics", "ConfigType", "DataType", "OpFlag", "StepTag",
    # errors
    "AclError", "AclprofError", "ApiConflictError", "FeatureUnsupportedError",
    "HandleClosedError", "InvalidFileError", "InvalidModelIdError", "InvalidParamError",
    "InvalidProfilingConfigError", "LibraryNotFoundError", "ModulesUnsupportedError",
    "MsproftxError", "OtherAclError", "ProfAlreadyRunError", "ProfilingFailureError",
    "ProfNotRunError", "RepeatInitializeError", "RepeatSubscribeError", "UninitializeError",
    "UnsupportedError",
    # sessions and markers
    "Profiler", "StepInfo", "RangeHandle", "annotate", "mark", "pop", "push", "range",
    "set_strict",
    # operator subscription (lazy)
    "subscribe", "Subscription", "SubscriptionStats", "OpRecord", "OpBatch",
]
