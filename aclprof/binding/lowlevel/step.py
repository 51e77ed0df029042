"""Step info: ``aclprofCreateStepInfo``, ``aclprofGetStepTimestamp`` and ``aclprofDestroyStepInfo``.
"""

from __future__ import annotations

from aclprof.binding.enums import StepTag
from aclprof.binding.errors import check
from aclprof.binding.handles import Handle
from aclprof.binding.loader import get_library
from aclprof.binding.lowlevel.runtime import Stream, _stream_ptr
from aclprof.binding.lowlevel.validate import _fn, _u32

__all__ = ["StepInfoHandle", "create_step_info", "get_step_timestamp", "destroy_step_info"]


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


def get_step_timestamp(step_info: StepInfoHandle, tag: StepTag | int, stream: Stream | None = None) -> None:
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
