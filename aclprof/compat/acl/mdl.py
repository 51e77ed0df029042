"""``acl.mdl``: the model calls the profiling samples use (pyACL conventions)."""

from __future__ import annotations

from ._common import call_ret, ffi, ptr, text

__all__ = ["load_from_file", "execute", "unload"]


def load_from_file(model_path: str) -> tuple[int, int]:
    out = ffi().new("uint32_t *")
    ret = call_ret("aclmdlLoadFromFile", text(model_path), out)
    return int(out[0]), ret


def execute(model_id: int, input: int, output: int) -> int:  # noqa: A002 - pyACL's names
    """``aclmdlExecute``; ``input``/``output`` are aclmdlDataset handles (0 for none)."""
    return call_ret("aclmdlExecute", model_id, ptr(input or 0, "aclmdlDataset *"),
                    ptr(output or 0, "aclmdlDataset *"))


def unload(model_id: int) -> int:
    return call_ret("aclmdlUnload", model_id)
