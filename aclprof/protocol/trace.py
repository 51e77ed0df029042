"""On-demand traces (``aclprof trace``): the limits and the request check that the CLI, the
daemon and the agent share (daemon/PROTOCOL.md "TRACE").

A TRACE asks the agents of one service (or one process) to run an ``aclprof.Profiler``
session for ``duration_s`` seconds with the given data types. The data type names are
those of ``aclprof.DataType`` (``acl_prof.h``'s ``ACL_PROF_*`` without the prefix); they are
listed here because the daemon and the CLI may not import the binding (tests/test_layers.py),
and a test checks that the two lists agree.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MIN_DURATION_S", "MAX_DURATION_S", "REPLY_GRACE_S", "DATA_TYPE_NAMES", "DEFAULT_DATA_TYPES",
           "MAX_TRACE_SERVICE_BYTES", "check_request", "TraceRequestError"]

#: a session shorter than this collects nothing useful; longer than MAX pauses the
#: subscriptions (the live view of that process) for too long
MIN_DURATION_S = 0.1
MAX_DURATION_S = 300.0
#: how long beyond ``duration_s`` the daemon waits for an agent's TRACE_DONE (pausing and
#: resuming subscriptions and stopping the session take well under a second on the mock;
#: a real session flushes its data at stop) before it reports "no reply"
REPLY_GRACE_S = 10.0
#: the ``aclprof.DataType`` member names, in bit order
DATA_TYPE_NAMES = (
    "ACL_API", "TASK_TIME", "AICORE_METRICS", "AICPU", "L2CACHE", "HCCL_TRACE", "TRAINING_TRACE",
    "MSPROFTX", "RUNTIME_API", "GE_API_L0", "TASK_TIME_L0", "TASK_MEMORY", "TASK_TIME_L2", "OP_ATTR",
    "TASK_TIME_L3", "GE_API_L1", "API_STATS", "AICORE_SHAPE",
)
DEFAULT_DATA_TYPES = ("ACL_API", "TASK_TIME")
MAX_TRACE_SERVICE_BYTES = 256


class TraceRequestError(ValueError):
    """A TRACE request the daemon refuses (the message says why and what is accepted)."""


def check_request(req: dict[str, Any]) -> tuple[str | None, int | None, float, tuple[str, ...]]:
    """``(service, pid, duration_s, data_types)`` of a TRACE request; TraceRequestError
    naming the field otherwise. At least one of ``service`` and ``pid`` selects the agents."""
    service, pid = req.get("service"), req.get("pid")
    duration, types = req.get("duration_s"), req.get("data_types", list(DEFAULT_DATA_TYPES))
    if service is not None and (not isinstance(service, str) or not service
                                or len(service.encode("utf-8", "surrogatepass")) > MAX_TRACE_SERVICE_BYTES):
        raise TraceRequestError(f"service must be a non-empty string of at most {MAX_TRACE_SERVICE_BYTES} bytes")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
        raise TraceRequestError("pid must be a positive integer")
    if service is None and pid is None:
        raise TraceRequestError("a TRACE needs a service or a pid (which processes to trace)")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) \
            or not MIN_DURATION_S <= duration <= MAX_DURATION_S:  # a range check, not math.isfinite: a
        # 400-digit integer would raise OverflowError there (NaN compares false: refused too)
        shown = repr(duration)[:40]
        raise TraceRequestError(f"duration {shown} s is out of range: a trace lasts "
                                f"{MIN_DURATION_S:g} to {MAX_DURATION_S:g} s")
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise TraceRequestError("data_types must be a non-empty list of names")
    unknown = [t for t in types if t not in DATA_TYPE_NAMES]
    if unknown:
        raise TraceRequestError(f"unknown data types {unknown[:5]!r}; known: {', '.join(DATA_TYPE_NAMES)}")
    if len(types) > len(DATA_TYPE_NAMES):
        raise TraceRequestError("data_types lists a name more than once")
    return service, pid, float(duration), tuple(dict.fromkeys(types))
