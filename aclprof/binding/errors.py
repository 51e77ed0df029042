"""The exception hierarchy of aclprof and the one funnel every C return code goes through.

Every call into the C library that returns an ``aclError`` is checked by :func:`check`, which
raises the subclass of :class:`AclError` registered for the code. The exception keeps the C
code, its name and the C function that returned it, and its message says what to do next.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AclprofError",
    "AclError",
    "InvalidParamError",
    "UninitializeError",
    "RepeatInitializeError",
    "InvalidFileError",
    "InvalidProfilingConfigError",
    "InvalidModelIdError",
    "ProfAlreadyRunError",
    "ProfNotRunError",
    "RepeatSubscribeError",
    "ApiConflictError",
    "FeatureUnsupportedError",
    "ModulesUnsupportedError",
    "ProfilingFailureError",
    "OtherAclError",
    "MsproftxError",
    "UnsupportedError",
    "LibraryNotFoundError",
    "HandleClosedError",
    "check",
    "error_for",
    "code_name",
]

# Every aclError value the profiling API (and the few runtime calls aclprof wraps) can return.
# Kept in step with cdefs/acl_base.h by tests/test_enums.py.
_CODE_NAMES: dict[int, str] = {
    0: "ACL_SUCCESS",
    100000: "ACL_ERROR_INVALID_PARAM",
    100001: "ACL_ERROR_UNINITIALIZE",
    100002: "ACL_ERROR_REPEAT_INITIALIZE",
    100003: "ACL_ERROR_INVALID_FILE",
    100010: "ACL_ERROR_INVALID_PROFILING_CONFIG",
    100011: "ACL_ERROR_INVALID_MODEL_ID",
    100037: "ACL_ERROR_REPEAT_FINALIZE",
    100042: "ACL_ERROR_PROF_ALREADY_RUN",
    100043: "ACL_ERROR_PROF_NOT_RUN",
    148046: "ACL_ERROR_PROF_REPEAT_SUBSCRIBE",
    148047: "ACL_ERROR_PROF_API_CONFLICT",
    200000: "ACL_ERROR_BAD_ALLOC",
    200001: "ACL_ERROR_API_NOT_SUPPORT",
    200006: "ACL_ERROR_FEATURE_UNSUPPORTED",
    200007: "ACL_ERROR_PROF_MODULES_UNSUPPORTED",
    500000: "ACL_ERROR_INTERNAL_ERROR",
    500001: "ACL_ERROR_FAILURE",
    500002: "ACL_ERROR_GE_FAILURE",
    500005: "ACL_ERROR_PROFILING_FAILURE",
    # GE codes aclmdlExecute passes through (cdefs/acl_runtime.h).
    145000: "ACL_ERROR_GE_PARAM_INVALID",
    145003: "ACL_ERROR_GE_EXEC_MODEL_ID_INVALID",
    # Runtime codes of AI Core exceptions (cdefs/acl_runtime.h, issue 24).
    107000: "ACL_ERROR_RT_PARAM_INVALID",
    507011: "ACL_ERROR_RT_MODEL_EXECUTE",
    507014: "ACL_ERROR_RT_AICORE_TIMEOUT",
    507015: "ACL_ERROR_RT_AICORE_EXCEPTION",
    507016: "ACL_ERROR_RT_AICORE_TRAP_EXCEPTION",
    -1: "PROFILING_FAILED",
}


def code_name(code: int) -> str:
    """The symbolic name of an aclError value, or ``"UNKNOWN"``."""
    return _CODE_NAMES.get(code, "UNKNOWN")


class AclprofError(Exception):
    """Base of every exception aclprof raises on its own account."""


class HandleClosedError(AclprofError, ValueError):
    """A handle (config, stamp, subscription, ...) was used after it was closed."""


class AclError(AclprofError):
    """A C function of the ACL library returned an error code.

    Attributes:
        code: the integer the C function returned.
        name: the symbolic name of the code (``ACL_ERROR_...``).
        function: the C function that returned it (``aclprofStart``, ...).
        detail: optional extra context supplied by aclprof.
    """

    code: int = -2
    hint: str = ""

    def __init__(self, code: int, function: str, detail: str | None = None, *,
                 hint: str | None = None):
        self.code = code
        self.name = code_name(code)
        self.function = function
        self.detail = detail
        if hint is not None:  # a more precise hint than the class's generic one
            self.hint = hint
        super().__init__(self._message())

    def _message(self) -> str:
        msg = f"{self.function} failed with {self.name} ({self.code})"
        if self.detail:
            msg += f": {self.detail}"
        if self.hint:
            msg += f". {self.hint}"
        return msg

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:  # picklable, e.g. across multiprocessing
        return (_rebuild, (type(self), self.code, self.function, self.detail, self.hint))


def _rebuild(cls: type[AclError], code: int, function: str, detail: str | None, hint: str) -> AclError:
    error = cls.__new__(cls)
    AclError.__init__(error, code, function, detail, hint=hint)
    return error


class InvalidParamError(AclError, ValueError):
    code = 100000
    hint = "An argument was rejected by the library; check ids, lengths and handles"


class UninitializeError(AclError):
    code = 100001
    hint = "Profiling was not initialised; call aclprofInit (aclprof.Profiler does) first"


class RepeatInitializeError(AclError):
    code = 100002
    hint = (
        "Profiling is already initialised in this process; finish the running session "
        "(Profiler.close() / aclprofFinalize) before starting another"
    )


class InvalidFileError(AclError):
    code = 100003
    hint = "The path is invalid or cannot be created; pass a writable directory"


class InvalidProfilingConfigError(AclError):
    code = 100010
    hint = (
        "The profiling configuration is invalid: a bad option value, or a config that does "
        "not match the one running (Stop must get Start's config; all models on a device "
        "share one subscription config)"
    )


class InvalidModelIdError(AclError):
    code = 100011
    hint = "The model is not loaded, or not subscribed; use the id aclmdlLoadFromFile returned"


class ProfAlreadyRunError(AclError):
    code = 100042
    hint = (
        "A profiling task is already running for this device or in another mode (msprof, "
        "acl.json, GE option); stop it first or use other devices"
    )


class ProfNotRunError(AclError):
    code = 100043
    hint = "Profiling is not initialised; call aclprofInit before start, stop or finalize"


class RepeatSubscribeError(AclError):
    code = 148046
    hint = "The model is already subscribed; unsubscribe (close the Subscription) first"


class ApiConflictError(AclError):
    code = 148047
    hint = (
        "Operator subscription and init/start/stop/finalize profiling exclude each other: no "
        "subscribe/get/unsubscribe between aclprofInit and aclprofFinalize, and no "
        "init/start/stop/finalize while any model is subscribed. Close the one before using "
        "the other"
    )


class FeatureUnsupportedError(AclError):
    code = 200006
    hint = "This platform or environment does not support the feature (PROFILING_MODE=dynamic?)"


class ModulesUnsupportedError(AclError):
    code = 200007
    hint = "The data types contain a bit this CANN version does not support; remove it"


class ProfilingFailureError(AclError):
    code = 500005
    hint = "Internal profiling failure; see the CANN logs ($ASCEND_PROCESS_LOG_PATH or ~/ascend/log)"


class OtherAclError(AclError):
    """Any code without a dedicated class (the name is still looked up)."""


class MsproftxError(AclError):
    """An msproftx call returned -1 (the internal PROFILING_FAILED, not an aclError).

    The library returns it when msproftx is not running (no session started with
    ``DataType.MSPROFTX``), on a pop with an empty stack, or an unknown range id.
    """

    code = -1
    hint = (
        "msproftx calls are valid only between a start with DataType.MSPROFTX and its stop; "
        "pops must match pushes on the same thread"
    )


class UnsupportedError(AclError, NotImplementedError):
    """The loaded library lacks the C symbol (an older CANN version)."""

    code = 200001

    def __init__(self, code: int = 200001, function: str = "?", detail: str | None = None):
        super().__init__(code, function, detail)

    def _message(self) -> str:
        return (
            f"{self.function} is not exported by the loaded ACL library (older CANN version); "
            f"{self.detail or 'upgrade CANN to use it'}"
        )


class LibraryNotFoundError(AclprofError, OSError):
    """No ACL library could be loaded; the message lists every path tried."""


_BY_CODE: dict[int, type[AclError]] = {
    cls.code: cls
    for cls in (
        InvalidParamError,
        UninitializeError,
        RepeatInitializeError,
        InvalidFileError,
        InvalidProfilingConfigError,
        InvalidModelIdError,
        ProfAlreadyRunError,
        ProfNotRunError,
        RepeatSubscribeError,
        ApiConflictError,
        FeatureUnsupportedError,
        ModulesUnsupportedError,
        ProfilingFailureError,
        MsproftxError,
    )
}


# aclmdlExecute reports an unknown model with GE's code (ModelManager::ExecuteModel): the
# same error to a caller as the profiling API's 100011.
_BY_CODE[145003] = InvalidModelIdError


def error_for(code: int, function: str, detail: str | None = None) -> AclError:
    """The exception object for ``code`` returned by the C function ``function``."""
    return _BY_CODE.get(code, OtherAclError)(code, function, detail)


def check(code: int, function: str, detail: str | None = None) -> None:
    """Raise the matching :class:`AclError` unless ``code`` is ``ACL_SUCCESS``."""
    if code != 0:
        raise error_for(code, function, detail)
