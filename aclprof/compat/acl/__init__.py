"""pyACL-compatible ``acl`` module (the subset the profiling samples use).

Conventions (those of pyACL): handles and pointers are ints (0 is NULL); functions
with C out-parameters return ``(value, ret)``; functions returning ``aclError`` return
``ret``; functions returning a value return it. Nothing here raises for a C error code:
like pyACL, the code is returned for the caller to check. Python-level misuse (wrong
argument types) raises ``TypeError``.
"""

from __future__ import annotations

from aclprof.compat.acl import mdl, prof, rt, util
from aclprof.compat.acl._common import NULL, Out, call, call_ptr, call_ret, call_void, ptr, text

__all__ = ["init", "finalize", "prof", "rt", "mdl", "util", "create_data_buffer",
           "destroy_data_buffer", "get_tensor_desc_by_index", "get_tensor_desc_address",
           "get_tensor_desc_type", "get_tensor_desc_format", "get_tensor_desc_num_dims",
           "get_tensor_desc_dim_v2", "destroy_tensor_desc"]


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


# ---- tensor descriptions (from acl.mdl.create_and_get_op_desc; issue 24) ------------------

def _desc(desc: int) -> object:
    return ptr(desc, "aclTensorDesc *")


def get_tensor_desc_by_index(desc: int, index: int) -> int:
    """``aclGetTensorDescByIndex``: element ``index`` of a description array (unchecked in
    CANN: stay below the count ``create_and_get_op_desc`` returned)."""
    return call_ptr("aclGetTensorDescByIndex", _desc(desc), index)


def get_tensor_desc_address(desc: int) -> int:
    """``aclGetTensorDescAddress``: the tensor's device address."""
    return call_ptr("aclGetTensorDescAddress", _desc(desc))


def get_tensor_desc_type(desc: int) -> int:
    """``aclGetTensorDescType``: an aclDataType value (-1 ACL_DT_UNDEFINED for 0)."""
    return call_ret("aclGetTensorDescType", _desc(desc))


def get_tensor_desc_format(desc: int) -> int:
    """``aclGetTensorDescFormat``: an aclFormat value (-1 ACL_FORMAT_UNDEFINED for 0)."""
    return call_ret("aclGetTensorDescFormat", _desc(desc))


def get_tensor_desc_num_dims(desc: int) -> int:
    """``aclGetTensorDescNumDims``; ACL_UNKNOWN_RANK (2**64 - 2) for an unknown rank."""
    return call_ret("aclGetTensorDescNumDims", _desc(desc))


def get_tensor_desc_dim_v2(desc: int, index: int) -> tuple[int, int]:
    """``aclGetTensorDescDimV2``: ``(dim_size, ret)``; 100000 for an index past the rank."""
    ret, (value,) = call("aclGetTensorDescDimV2", _desc(desc), index, Out("int64_t *"))
    return value, ret


def destroy_tensor_desc(desc: int) -> None:
    """``aclDestroyTensorDesc``: frees a whole array from ``create_and_get_op_desc``."""
    call_void("aclDestroyTensorDesc", _desc(desc))
