"""``aclprof.StepInfo``: step start/end timestamps (``aclprofGetStepTimestamp``).

Each step info object may stamp START once and END once; aclprof checks
that in Python so that the mistake is reported before the C call, with the step's state.
"""

from __future__ import annotations

from aclprof.binding import lowlevel
from aclprof.binding.enums import StepTag

__all__ = ["StepInfo"]


class StepInfo:
    """One training/inference step: ``start()`` then ``end()``, each at most once.

    ``with aclprof.StepInfo() as step: step.start(); ...; step.end()``; ``close()``
    destroys the C object (idempotent).
    """

    __slots__ = ("_handle", "_stamped")

    def __init__(self) -> None:
        self._handle = lowlevel.create_step_info()
        self._stamped: set[StepTag] = set()

    def _stamp(self, tag: StepTag, stream: lowlevel.Stream | None) -> None:
        if tag in self._stamped:
            raise ValueError(f"step {tag.name} was already stamped on this StepInfo; "
                             "create a new StepInfo for the next step")
        if tag is StepTag.END and StepTag.START not in self._stamped:
            raise ValueError("step END before START: call start() first")
        lowlevel.get_step_timestamp(self._handle, tag, stream)
        self._stamped.add(tag)

    def start(self, stream: lowlevel.Stream | None = None) -> None:
        """Stamp the start of the step (``ACL_STEP_START``)."""
        self._stamp(StepTag.START, stream)

    def end(self, stream: lowlevel.Stream | None = None) -> None:
        """Stamp the end of the step (``ACL_STEP_END``)."""
        self._stamp(StepTag.END, stream)

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def close(self) -> None:
        """Destroy the C step info. Idempotent."""
        self._handle.close()

    def __enter__(self) -> StepInfo:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
