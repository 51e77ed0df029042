"""A process that forks with op failures reported (issue 24; not a test module).

    python tests/helpers/failure_fork.py SOCKET

The parent starts ``aclprof.agent`` with ``failures=True`` (service "forker"), watches one mock
model and makes its op ``relu1`` fail on every execution; one failure, then a fork. The child
fails once with nothing of its own attached (the parent's watches were dropped at the fork:
aclprof.binding.opfailure), then starts its own agent (service "forker-child", failures only:
the child's copy of the library still holds the parent's subscription) and fails once more.
The parent fails once more after the child exits. Each process prints one JSON line:
``{"who", "pid", "failed", "seen", "queued"}`` (the child's before it exits, with ``os._exit``).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("ACLPROF_BACKEND", "mock")

_T = [{"dtype": 1, "format": 0, "shape": [8, 3]}]
OPS = [{"name": "conv1", "type": "Conv2D", "duration_ns": 2000, "inputs": _T, "outputs": _T},
       {"name": "relu1", "type": "Relu", "duration_ns": 300, "inputs": _T, "outputs": _T}]


def main(sock: str) -> int:
    import aclprof
    from aclprof import agent, mock
    from aclprof.binding.errors import AclError

    aclprof.use_mock()

    def execute(m: int) -> int:
        try:
            mock.execute(m)
            return 0
        except AclError:
            return 1

    def report(who: str, failed: int, want: int) -> None:
        deadline = time.monotonic() + 10
        # queued, and a daemon connection to send them on: a stop before the agent connected
        # would drop them (counted in failures_dropped), which is not what this test is about
        while (agent.stats().failures_queued < want or not agent.stats().connected) and time.monotonic() < deadline:
            time.sleep(0.01)
        st = agent.stop(5)
        print(json.dumps({"who": who, "pid": os.getpid(), "failed": failed, "seen": st.failures_seen,
                          "queued": st.failures_queued}), flush=True)

    m = mock.load_model(OPS)
    agent.start(sock, service="forker", failures=True)
    agent.watch(m)
    execute(m)
    mock.wait_writer_idle()
    mock.inject_op_failure(m, "relu1", every=1)
    failed = execute(m)
    pid = os.fork()
    if pid == 0:
        try:
            child_failed = execute(m)  # nothing attached in this process: reported nowhere
            agent.start(sock, service="forker-child", failures=True)
            child_failed += execute(m)
            report("child", child_failed, 1)
        except BaseException as exc:
            print(json.dumps({"who": "child", "error": repr(exc)}), flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    failed += execute(m)
    report("parent", failed, 2)
    return 0 if os.waitstatus_to_exitcode(status) == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
