"""The agent's op-failure reporter: each AI Core exception of this process as one OP_FAILURE
frame to the daemon (issue 24; daemon/PROTOCOL.md "OP_FAILURE").

It attaches :func:`aclprof.watch_failures` (the runtime's thread only copies the failure into a
bounded queue; the handler runs on the watch's dispatcher thread) and appends each failure to
the agent's buffer as a control item, in order with the records buffered before it, so a
``tail`` shows the failure after the ops that ran before it. At most ``MAX_PENDING`` failure
frames wait in the buffer (a storm of failures with no daemon must not grow it); more are
dropped and counted, and the newest waiting frame says how many (``dropped_before``), so the
daemon counts them too (:meth:`RecordBuffer.add_frames`).
"""

from __future__ import annotations

import time
from typing import Any

from aclprof.agent.buffer import RecordBuffer
from aclprof.api.failures import FailureWatch, OpFailure, TensorDesc, watch_failures
from aclprof.protocol import wire

__all__ = ["FailureReporter", "MAX_PENDING", "failure_payload"]

#: failure frames that may wait in the agent's buffer at once
MAX_PENDING = 256
#: tensors per side and characters of the op name put in a frame (the daemon's limits)
MAX_TENSORS = wire.OP_FAILURE_MAX_TENSORS
MAX_NAME_CHARS = wire.OP_FAILURE_MAX_NAME


def _tensor(t: TensorDesc) -> list[Any]:
    shape = None if t.shape is None else list(t.shape[:wire.OP_FAILURE_MAX_DIMS])
    return [t.dtype, t.format, shape]


def failure_payload(f: OpFailure, dropped_before: int = 0) -> dict[str, Any]:
    """The OP_FAILURE frame's JSON for ``f`` (cut to the daemon's limits)."""
    return {"device": f.device_id, "stream": f.stream_id, "task": f.task_id, "thread": f.thread_id,
            "code": f.error_code, "op_name": None if f.op_name is None else f.op_name[:MAX_NAME_CHARS],
            "op_desc_code": f.op_desc_code, "ts": f.host_time_ns / 1e9,
            "inputs": [_tensor(t) for t in f.inputs[:MAX_TENSORS]],
            "outputs": [_tensor(t) for t in f.outputs[:MAX_TENSORS]],
            "dropped_before": dropped_before}


class FailureReporter:
    """Turns this process's op failures into OP_FAILURE items of the agent's buffer."""

    def __init__(self, buffer: RecordBuffer, queue_size: int = 1024):
        self.buffer = buffer
        self.seen = 0  # failures handed to the reporter
        self.queued = 0  # frames put in the buffer
        self.dropped = 0  # not queued: MAX_PENDING frames waited already
        self._watch: FailureWatch | None = watch_failures(self._on_failure, queue_size=queue_size)

    def _on_failure(self, failure: OpFailure) -> None:
        dropped = self.buffer.add_frames(wire.Kind.OP_FAILURE, [failure_payload(failure)], MAX_PENDING)
        with self.buffer.lock:  # the agent's counters' lock
            self.seen += 1
            self.dropped += dropped
            self.queued += 1 - dropped

    def counts(self) -> tuple[int, int, int]:
        """``(seen, queued, dropped)``, one consistent set."""
        with self.buffer.lock:
            return self.seen, self.queued, self.dropped

    @property
    def watch_dropped(self) -> int:
        """Failures the watch's own queue dropped (a reporter that fell behind)."""
        return 0 if self._watch is None else self._watch.stats.dropped

    def close(self, timeout: float = 5.0) -> None:
        """Detach from the failures (idempotent); what is queued is still handed over."""
        watch, self._watch = self._watch, None
        if watch is not None:
            deadline = time.monotonic() + timeout
            watch.close(max(0.0, deadline - time.monotonic()))
