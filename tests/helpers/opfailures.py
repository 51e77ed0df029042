"""A two-op model with tensor descriptions for the op-failure tests (issue 24), and an
execute that counts the failed executions instead of raising."""

from __future__ import annotations

from aclprof import mock
from aclprof.binding.errors import AclError

__all__ = ["OPS", "execute"]

OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000,
     "inputs": [{"dtype": 1, "format": 0, "shape": [8, 3, 224, 224]}],
     "outputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}]},
    {"name": "relu1", "type": "Relu", "duration_ns": 300,
     "inputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}],
     "outputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}]},
]


def execute(model: int, times: int = 1) -> int:
    """Run ``model`` ``times`` times; how many executions failed (an AclError each)."""
    failed = 0
    for _ in range(times):
        try:
            mock.execute(model)
        except AclError:
            failed += 1
    return failed
