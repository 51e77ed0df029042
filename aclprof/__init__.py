"""aclprof: fast, safe Python bindings for Huawei Ascend's profiling API (``acl_prof.h``).

- :class:`Profiler`: a profiling session (init, config, start ... stop, finalize).
- msproftx markers: :func:`mark`, :func:`push`/:func:`pop`, :class:`range`, :class:`annotate`.
- :class:`StepInfo`: step timestamps.
- :func:`subscribe`: operator records of a model, decoded by a background reader.
- :mod:`aclprof.lowlevel`: a 1:1 layer over every C function.
- :mod:`aclprof.mock`: controls of the bundled mock library (``ACLPROF_BACKEND=mock``).
- :mod:`aclprof.agent`: streams a process's op records to the host daemon ``aclprofd``.

Every public name is imported on first use: ``import aclprof`` loads no C library, no cffi
and no numpy, so the daemon and the CLI, which import parts of this package, never carry
the binding (a test checks ``sys.modules``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aclprof.protocol.version import __version__

# public name -> the module that defines it (relative to this package)
_EXPORTS: dict[str, str] = {}
for _module, _names in {
    "binding.loader": ("LibraryInfo", "library_info", "use_mock"),
    "binding.enums": ("AicoreMetrics", "ConfigType", "DataType", "OpFlag", "StepTag"),
    "binding.errors": ("AclError", "AclprofError", "ApiConflictError", "FeatureUnsupportedError",
               "HandleClosedError", "InvalidFileError", "InvalidModelIdError", "InvalidParamError",
               "InvalidProfilingConfigError", "LibraryNotFoundError", "ModulesUnsupportedError",
               "MsproftxError", "OtherAclError", "ProfAlreadyRunError", "ProfilingFailureError",
               "ProfNotRunError", "RepeatInitializeError", "RepeatSubscribeError",
               "UninitializeError", "UnsupportedError"),
    "api.session": ("Profiler",),
    "api.step": ("StepInfo",),
    "api.markers": ("RangeHandle", "annotate", "mark", "pop", "push", "range", "set_strict"),
    "api.subscription": ("subscribe", "Subscription", "SubscriptionStats"),
    "api.records": ("OpRecord", "OpBatch"),
}.items():
    _EXPORTS.update(dict.fromkeys(_names, _module))
del _module, _names

# Public submodules reachable as attributes (``aclprof.mock.reset()`` after ``import aclprof``).
_SUBMODULES = frozenset({"agent", "api", "binding", "cli", "compat", "demo", "lowlevel", "mock", "protocol"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)


if TYPE_CHECKING:  # what type checkers and IDEs see; at run time the table above applies
    from aclprof.api.markers import RangeHandle, annotate, mark, pop, push, range, set_strict
    from aclprof.api.records import OpBatch, OpRecord
    from aclprof.api.session import Profiler
    from aclprof.api.step import StepInfo
    from aclprof.api.subscription import Subscription, SubscriptionStats, subscribe
    from aclprof.binding.enums import AicoreMetrics, ConfigType, DataType, OpFlag, StepTag
    from aclprof.binding.errors import (
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
    from aclprof.binding.loader import LibraryInfo, library_info, use_mock

# Written out (not derived from _EXPORTS) so that linters and IDEs read it; a test checks
# that it lists exactly the table's names.
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
    "Profiler", "StepInfo", "RangeHandle", "annotate", "mark", "pop", "push", "range", "set_strict",
    # operator subscription
    "subscribe", "Subscription", "SubscriptionStats", "OpRecord", "OpBatch",
]
