"""Work another thread hands to the event loop, run there in bounded slices (issue 19).

The /metrics rendering took 0.3-1 s of CPU on the HTTP thread under the soak: with the GIL,
the loop thread waited behind it (every system call it made gave the GIL away, and getting
it back took up to the switch interval), so STATUS round trips of 300-400 ms lined up with
the renders. Here the rendering is a generator of small steps that the **loop** runs,
``SLICE_S`` of them per turn, between its other work: no second thread competes for the
GIL, and a turn is longer by one slice at most.

:class:`LoopJobs` holds one job at a time: the asking thread (:meth:`LoopJobs.run`) wakes
the loop and waits for the result; the loop calls :meth:`LoopJobs.pump` each turn and does
not sleep while :attr:`LoopJobs.pending`. A job that does not end within its timeout, or
that the daemon's stop cancels (:meth:`LoopJobs.close`), raises in the asking thread
(:class:`JobNotDone`); an exception of the job itself is raised there too (the loop goes on).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["LoopJobs", "JobNotDone", "SLICE_S", "run_slice"]

SLICE_S = 0.005   # steps of a job run in one loop turn until this much wall time is spent

T = TypeVar("T")


def run_slice(steps: Iterator[None], slice_s: float | None = None) -> bool:
    """Run ``steps`` for one slice (``SLICE_S`` of wall time, one step at least); True when
    they have ended (the loop's own stepped work: the flush, aclprofd.server)."""
    end = time.perf_counter() + (SLICE_S if slice_s is None else slice_s)
    for _ in steps:
        if time.perf_counter() >= end:
            return False
    return True


class JobNotDone(Exception):
    """The job did not end: timed out, or cancelled by the daemon's stop (the message says)."""


class _Job(Generic[T]):
    def __init__(self, make: Callable[[], Generator[None, None, T]]):
        self.make = make
        self.steps: Generator[None, None, T] | None = None
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None
        self.running = False  # a loop slice runs its steps now


class LoopJobs:
    """One job at a time, from any thread to the loop (see the module docstring)."""

    def __init__(self, wake: Callable[[], None]):
        self._wake = wake
        self._lock = threading.Lock()
        self._job: _Job[Any] | None = None
        self._closed = False
        #: jobs run to their end, and the loop turns (pumps) they took, in all
        self.finished = 0
        self.pumps = 0

    @property
    def pending(self) -> bool:
        """A job waits for the loop (which must not sleep in its select)."""
        return self._job is not None

    def run(self, make: Callable[[], Generator[None, None, T]], timeout: float) -> T:
        """Have the loop run ``make()``'s steps; return its value (its exception is raised
        here). JobNotDone if it does not end within ``timeout`` s or the daemon stops."""
        job: _Job[T] = _Job(make)
        with self._lock:
            if self._closed:
                raise JobNotDone("the daemon is stopping")
            if self._job is not None:
                raise RuntimeError("LoopJobs.run: one job at a time (a second caller thread?)")
            self._job = job
        self._wake()
        if not job.done.wait(timeout):
            self._drop(job, JobNotDone(f"not done within {timeout:g} s"))
            job.done.wait()  # a slice running it now ends first (one slice)
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def pump(self) -> None:
        """Loop thread: run the job's steps for one slice (one step at least)."""
        with self._lock:
            job = self._job
            if job is None:
                return
            job.running = True
        self.pumps += 1
        result: Any = None
        error: BaseException | None = None
        ended = False
        try:
            if job.steps is None:
                job.steps = job.make()  # made here: every step runs on the loop thread
            end = time.perf_counter() + SLICE_S
            while self._job is job:
                next(job.steps)
                if time.perf_counter() >= end:
                    break
        except StopIteration as stop:
            result, ended = stop.value, True
        except Exception as exc:  # the asking thread raises it; the loop goes on
            error, ended = exc, True
        with self._lock:
            job.running = False
            mine = self._job is job
            if mine and ended:
                self._job = None
                job.result, job.error = result, error
                self.finished += 1
        if not mine:  # timed out or cancelled during the slice: dropped here
            if job.steps is not None:
                job.steps.close()
            job.done.set()
        elif ended:
            job.done.set()

    def _drop(self, job: _Job[Any], why: JobNotDone) -> None:
        """Take ``job`` away from the loop; it ends with ``why`` (now, or after its slice)."""
        with self._lock:
            if self._job is not job:
                return  # it ended meanwhile
            self._job = None
            job.error = why
            running = job.running
        if not running:
            if job.steps is not None:
                job.steps.close()
            job.done.set()

    def close(self) -> None:
        """The daemon stops: the waiting job (if any) and every later one raise JobNotDone."""
        with self._lock:
            self._closed = True
            job = self._job
        if job is not None:
            self._drop(job, JobNotDone("the daemon is stopping"))
