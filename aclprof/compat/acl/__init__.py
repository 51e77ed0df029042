"""pyACL-compatible ``acl`` module (the subset the profiling samples use).

Conventions (those of pyACL): handles and pointers are ints (0 is NULL); functions
with C out-parameters return ``(value, ret)``; functions returning ``aclError`` return
``ret``; functions returning a value return it. Nothing here raises for a C error code:
like pyACL, the code is returned for the caller to check. Python-level misuse (wrong
argument types) raises ``TypeError``.
"""

from __future__ import annotations

from aclprof.compat.acl import mdl, prof, rt, util
from aclprof.compat.acl._common import NULL, call_ptr, call_ret, ptr, text

__all__ = ["init", "finalize", "prof", "rt", "mdl", "util", "create_data_buffer",
           "destroy_data_buffer"]


def init(config_path: str | None = None) -> int:
    """``aclInit``; ``config_path`` is the acl.json path or None/"" for none."""
    return call_ret("aclInit", text(config_path) if config_path else NULL)


def finalize() -> int:
    """``aclFinalize``."""
    return call_ret("aclFinalize")


def create_data_buffer(data: int, size: int) -> int:
    """``aclCreateDataBuffer``: a handle for ``size`` bytes of device memory at ``data``."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise TypeError(f"size must be a non-negative int, not {size!r}")
    return call_ptr("aclCreateDataBuffer", ptr(data), size)


def destroy_data_buffer(data_buffer: int) -> int:
    """``aclDestroyDataBuffer``."""
    return call_ret("aclDestroyDataBuffer", ptr(data_buffer, "aclDataBuffer *"))
