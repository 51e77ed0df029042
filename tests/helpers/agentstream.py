"""One step the agent tests share: start the agent, watch a mock model of fixed ops and run it."""

from __future__ import annotations

from typing import Any

from helpers.agent_worker import FIXED_OPS


def watch_and_run(agent: Any, socket_path: str, iterations: int) -> tuple[Any, int, int]:
    """Start ``agent`` (the ``aclprof.agent`` module) on ``socket_path``, watch a mock model
    of :data:`FIXED_OPS`, run it ``iterations`` times and wait for the mock's pipe writer:
    ``(the running agent, the model id, records emitted)``."""
    from aclprof import mock

    a = agent.start(socket_path)
    model = mock.load_model(FIXED_OPS)
    agent.watch(model)
    mock.execute(model, iterations)
    mock.wait_writer_idle()
    return a, model, iterations * len(FIXED_OPS)
