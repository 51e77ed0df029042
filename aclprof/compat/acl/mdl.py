"""``acl.mdl``: the model and dataset calls the profiling samples use (pyACL conventions).

Datasets are int handles, as in pyACL. ``execute`` needs two of them: CANN rejects a NULL
(0) dataset with ACL_ERROR_INVALID_PARAM (100000), so a model without inputs or outputs gets
empty ones from :func:`create_dataset`.
"""

from __future__ import annotations

from aclprof.compat.acl._common import Out, TextOut, call, call_ptr, call_ret, ptr, text

__all__ = ["load_from_file", "execute", "unload", "create_dataset", "destroy_dataset",
           "add_dataset_buffer", "get_dataset_num_buffers", "create_and_get_op_desc"]


def load_from_file(model_path: str) -> tuple[int, int]:
    ret, (model_id,) = call("aclmdlLoadFromFile", text(model_path), Out("uint32_t *"))
    return model_id, ret


def execute(model_id: int, input: int, output: int) -> int:
    """``aclmdlExecute``; ``input``/``output`` are aclmdlDataset handles (0 is NULL: 100000)."""
    return call_ret("aclmdlExecute", model_id, ptr(input, "aclmdlDataset *"),
                    ptr(output, "aclmdlDataset *"))


def unload(model_id: int) -> int:
    return call_ret("aclmdlUnload", model_id)


def create_dataset() -> int:
    """``aclmdlCreateDataset``: an empty dataset's handle (0 on failure)."""
    return call_ptr("aclmdlCreateDataset")


def destroy_dataset(dataset: int) -> int:
    """``aclmdlDestroyDataset``; the buffers in it are not destroyed."""
    return call_ret("aclmdlDestroyDataset", ptr(dataset, "aclmdlDataset *"))


def add_dataset_buffer(dataset: int, data_buffer: int) -> tuple[int, int]:
    """``aclmdlAddDatasetBuffer``; returns ``(dataset, ret)`` as pyACL does."""
    ret = call_ret("aclmdlAddDatasetBuffer", ptr(dataset, "aclmdlDataset *"),
                   ptr(data_buffer, "aclDataBuffer *"))
    return dataset, ret


def get_dataset_num_buffers(dataset: int) -> int:
    """``aclmdlGetDatasetNumBuffers`` (0 for a NULL dataset)."""
    return call_ret("aclmdlGetDatasetNumBuffers", ptr(dataset, "aclmdlDataset *"))


def create_and_get_op_desc(device_id: int, stream_id: int, task_id: int, op_name_len: int
                           ) -> tuple[str, int, int, int, int, int]:
    """``aclmdlCreateAndGetOpDesc``: the op a failed task ran, inside an exception callback.

    Returns ``(op_name, input_desc, num_inputs, output_desc, num_outputs, ret)`` as pyACL
    does; the two descriptions are arrays the caller frees with ``acl.destroy_tensor_desc``
    and reads with ``acl.get_tensor_desc_by_index`` (indices below the counts: CANN does not
    check them). ``op_name_len`` must exceed the name's length (else 100000).
    """
    if isinstance(op_name_len, bool) or not isinstance(op_name_len, int) or not 1 <= op_name_len <= 1 << 20:
        raise TypeError(f"op_name_len must be an int in 1..{1 << 20}, not {op_name_len!r}")
    ret, (name, inputs, n_in, outputs, n_out) = call(
        "aclmdlCreateAndGetOpDesc", device_id, stream_id, task_id, TextOut(op_name_len), op_name_len,
        Out("aclTensorDesc **"), Out("size_t *"), Out("aclTensorDesc **"), Out("size_t *"))
    return name, inputs, n_in, outputs, n_out, ret
