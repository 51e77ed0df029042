"""Op failures (AI Core exceptions) as typed records, delivered off the runtime's thread.

:func:`watch_failures` attaches to the binding's one exception trampoline
(:mod:`aclprof.binding.opfailure`). CANN calls it on its task-report thread while the failed
execution waits; everything it can say about the failure (device, stream, task, thread, error
code, and from ``aclmdlCreateAndGetOpDesc`` the op's name and tensor descriptions) is read
there, because the info object and the op description exist only during that call. The
record then goes into a bounded queue and a dispatcher thread calls the handler: a slow or
raising handler never holds up the runtime. A full queue drops the newest failure and counts
it; nothing is lost uncounted.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from aclprof.binding import opfailure
from aclprof.binding.errors import code_name

__all__ = ["TensorDesc", "OpFailure", "FailureWatch", "FailureWatchStats", "watch_failures"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TensorDesc:
    """An input or output of the failed op, as GE describes it."""

    dtype: int  #: aclDataType value
    dtype_name: str  #: ``"ACL_FLOAT16"`` (the number as text for a value CANN adds later)
    format: int  #: aclFormat value
    format_name: str
    #: dimensions, -1 for an unknown one; None for a tensor of unknown rank
    shape: tuple[int, ...] | None
    address: int  #: device address of the tensor's data


@dataclass(frozen=True, slots=True)
class OpFailure:
    """One AI Core exception, as the runtime reported it."""

    device_id: int
    stream_id: int
    task_id: int  #: 0xFFFFFFFF for a device-level failure (no task)
    thread_id: int  #: kernel thread id of the host thread that submitted the task
    error_code: int  #: e.g. 507015 ACL_ERROR_RT_AICORE_EXCEPTION
    error_name: str
    host_time_ns: int  #: time.time_ns() in the callback
    op_name: str | None  #: None when GE has no op for the task (see ``op_desc_code``)
    inputs: tuple[TensorDesc, ...]
    outputs: tuple[TensorDesc, ...]
    op_desc_code: int  #: 0, or what aclmdlCreateAndGetOpDesc returned

    def describe(self) -> str:
        """One line: ``op 'relu1' failed on device 0 (507015 ACL_ERROR_RT_AICORE_EXCEPTION) ...``."""
        op = repr(self.op_name) if self.op_name is not None else f"of task {self.task_id}"
        ins = ", ".join(_short(t) for t in self.inputs)
        outs = ", ".join(_short(t) for t in self.outputs)
        return (f"op {op} failed on device {self.device_id} stream {self.stream_id} "
                f"({self.error_code} {self.error_name}); inputs [{ins}] outputs [{outs}]")


def _short(t: TensorDesc) -> str:
    shape = "?" if t.shape is None else "x".join(str(d) for d in t.shape) or "scalar"
    return f"{t.dtype_name}[{shape}]"


def _tensor(raw: opfailure.RawTensor) -> TensorDesc:
    return TensorDesc(dtype=raw.dtype, dtype_name=opfailure.enum_name("aclDataType", raw.dtype),
                      format=raw.format, format_name=opfailure.enum_name("aclFormat", raw.format),
                      shape=raw.shape, address=raw.address)


def _typed(raw: opfailure.RawFailure) -> OpFailure:
    return OpFailure(device_id=raw.device_id, stream_id=raw.stream_id, task_id=raw.task_id,
                     thread_id=raw.thread_id, error_code=raw.error_code,
                     error_name=code_name(raw.error_code), host_time_ns=raw.host_time_ns,
                     op_name=raw.op_name, inputs=tuple(_tensor(t) for t in raw.inputs),
                     outputs=tuple(_tensor(t) for t in raw.outputs), op_desc_code=raw.op_desc_code)


@dataclass(frozen=True, slots=True)
class FailureWatchStats:
    """Counts of one watch: ``received == delivered + dropped + queued`` at any moment."""

    received: int
    delivered: int  #: handler calls (including those that raised)
    dropped: int  #: the queue was full
    handler_errors: int
    queued: int


class FailureWatch:
    """A handler attached to the op failures of this process; close() detaches it.

    Use :func:`watch_failures` to make one. ``close()`` is idempotent; it delivers what is
    queued (up to ``timeout`` seconds) and stops the dispatcher thread.
    """

    def __init__(self, handler: Callable[[OpFailure], object], queue_size: int):
        self._handler = handler
        self._size = queue_size
        self._queue: deque[opfailure.RawFailure] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._received = self._delivered = self._dropped = self._errors = 0
        self._thread = threading.Thread(target=self._run, name="aclprof-op-failures", daemon=True)
        self._thread.start()
        try:
            opfailure.add_sink(self._sink)
        except BaseException:
            self._stop(0)
            raise

    # Runs on the runtime's thread: bounded, never blocks on the handler.
    def _sink(self, raw: opfailure.RawFailure) -> None:
        with self._cond:
            self._received += 1
            if self._closed or len(self._queue) >= self._size:
                self._dropped += 1
                return
            self._queue.append(raw)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                raw = self._queue.popleft()
            try:
                self._handler(_typed(raw))
            except Exception:
                with self._cond:
                    self._errors += 1
                _log.exception("op failure handler %r raised", self._handler)
            with self._cond:
                self._delivered += 1
                self._cond.notify_all()

    @property
    def stats(self) -> FailureWatchStats:
        with self._cond:
            return FailureWatchStats(received=self._received, delivered=self._delivered,
                                     dropped=self._dropped, handler_errors=self._errors,
                                     queued=len(self._queue))

    def wait_delivered(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` failures were handed to the handler; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._delivered >= count, timeout)

    def _stop(self, timeout: float) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Detach, deliver what is queued (up to ``timeout`` s), stop the thread. Idempotent.

        Failures still queued when the timeout passes are counted as dropped.
        """
        if self._closed and not self._thread.is_alive():
            return
        opfailure.remove_sink(self._sink)
        self._stop(timeout)
        with self._cond:
            if self._thread.is_alive():  # a handler that does not return: abandon what is left
                self._dropped += len(self._queue)
                self._queue.clear()

    def __enter__(self) -> FailureWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watch_failures(handler: Callable[[OpFailure], object], *, queue_size: int = 1024) -> FailureWatch:
    """Call ``handler(failure)`` for each AI Core exception of this process.

    The handler runs on a dispatcher thread of its own (never the runtime's), in order; up to
    ``queue_size`` failures wait for it, more are dropped and counted
    (:attr:`FailureWatch.stats`). Several watches may coexist, beside an application's own
    ``aclrtSetExceptionInfoCallback`` when the library has ``aclrtExceptionInfoCallbackRegister``.

    Raises:
        TypeError / ValueError: bad arguments.
        AclError: the library refused the callback registration.
    """
    if not callable(handler):
        raise TypeError(f"watch_failures: handler must be callable, not {type(handler).__name__}")
    if isinstance(queue_size, bool) or not isinstance(queue_size, int) or not 1 <= queue_size <= 1 << 20:
        raise ValueError(f"watch_failures: queue_size must be an int in 1..{1 << 20}, got {queue_size!r}")
    return FailureWatch(handler, queue_size)
