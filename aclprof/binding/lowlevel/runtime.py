"""The runtime and model calls profiling needs: ``aclInit``, devices, contexts, streams,
models (``aclmdlLoadFromFile``/``Execute``/``Unload``) and their datasets and data buffers.
"""

from __future__ import annotations

import os
from typing import Any

from aclprof.binding.errors import check, error_for
from aclprof.binding.handles import Handle
from aclprof.binding.loader import get_library
from aclprof.binding.lowlevel.validate import _fn, _int, _path_bytes, _u32

__all__ = [
    "Context", "Stream", "acl_init", "acl_finalize", "rt_set_device", "rt_reset_device",
    "rt_get_device", "rt_get_device_count", "rt_create_context", "rt_destroy_context",
    "rt_set_current_context", "rt_get_current_context", "rt_create_stream", "rt_destroy_stream",
    "rt_synchronize_stream", "rt_synchronize_device", "mdl_load_from_file", "mdl_execute",
    "mdl_unload", "Dataset", "DataBuffer", "mdl_create_dataset", "mdl_destroy_dataset",
    "mdl_add_dataset_buffer", "mdl_get_dataset_num_buffers", "acl_create_data_buffer",
    "acl_destroy_data_buffer",
]


# ---- runtime and model -----------------------------------------------------------------

class Context(Handle):
    """An ``aclrtContext``; ``close()`` destroys it when this handle owns it."""

    __slots__ = ()
    kind = "context"


class Stream(Handle):
    """An ``aclrtStream``; ``close()`` destroys it."""

    __slots__ = ()
    kind = "stream"


def _stream_ptr(stream: Stream | None) -> Any:
    if stream is None:
        return get_library().ffi.NULL
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a Stream or None, not {type(stream).__name__}")
    return stream._get()


def acl_init(config_path: str | os.PathLike[str] | None = None) -> None:
    """``aclInit``; ``None`` passes NULL (no acl.json)."""
    lib = get_library()
    arg = lib.ffi.NULL if config_path is None else _path_bytes(config_path, "config_path")
    check(_fn("aclInit")(arg), "aclInit")


def acl_finalize() -> None:
    """``aclFinalize``."""
    check(_fn("aclFinalize")(), "aclFinalize")


def rt_set_device(device_id: int) -> None:
    """``aclrtSetDevice``."""
    check(_fn("aclrtSetDevice")(_int(device_id, "device_id", 0, 2**31 - 1)), "aclrtSetDevice")


def rt_reset_device(device_id: int) -> None:
    """``aclrtResetDevice``."""
    check(_fn("aclrtResetDevice")(_int(device_id, "device_id", 0, 2**31 - 1)), "aclrtResetDevice")


def rt_get_device() -> int:
    """``aclrtGetDevice``: the current thread's device."""
    out = get_library().ffi.new("int32_t *")
    check(_fn("aclrtGetDevice")(out), "aclrtGetDevice")
    return int(out[0])


def rt_get_device_count() -> int:
    """``aclrtGetDeviceCount``."""
    out = get_library().ffi.new("uint32_t *")
    check(_fn("aclrtGetDeviceCount")(out), "aclrtGetDeviceCount")
    return int(out[0])


def _release_context(ptr: Any) -> None:
    check(_fn("aclrtDestroyContext")(ptr), "aclrtDestroyContext")


def rt_create_context(device_id: int) -> Context:
    """``aclrtCreateContext``; the new context becomes current on this thread."""
    out = get_library().ffi.new("aclrtContext *")
    check(_fn("aclrtCreateContext")(out, _int(device_id, "device_id", 0, 2**31 - 1)),
          "aclrtCreateContext")
    return Context(out[0], _release_context)


def rt_destroy_context(context: Context) -> None:
    """``aclrtDestroyContext``; same as ``context.close()``."""
    context.close()


def rt_set_current_context(context: Context) -> None:
    """``aclrtSetCurrentContext``."""
    if not isinstance(context, Context):
        raise TypeError(f"context must be a Context, not {type(context).__name__}")
    check(_fn("aclrtSetCurrentContext")(context._get()), "aclrtSetCurrentContext")


def rt_get_current_context() -> Context:
    """``aclrtGetCurrentContext``; the returned handle does not own the context."""
    out = get_library().ffi.new("aclrtContext *")
    check(_fn("aclrtGetCurrentContext")(out), "aclrtGetCurrentContext")
    return Context(out[0], None)


def _release_stream(ptr: Any) -> None:
    check(_fn("aclrtDestroyStream")(ptr), "aclrtDestroyStream")


def rt_create_stream() -> Stream:
    """``aclrtCreateStream``."""
    out = get_library().ffi.new("aclrtStream *")
    check(_fn("aclrtCreateStream")(out), "aclrtCreateStream")
    return Stream(out[0], _release_stream)


def rt_destroy_stream(stream: Stream) -> None:
    """``aclrtDestroyStream``; same as ``stream.close()``."""
    stream.close()


def rt_synchronize_stream(stream: Stream) -> None:
    """``aclrtSynchronizeStream``."""
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a Stream, not {type(stream).__name__}")
    check(_fn("aclrtSynchronizeStream")(stream._get()), "aclrtSynchronizeStream")


def rt_synchronize_device() -> None:
    """``aclrtSynchronizeDevice``."""
    check(_fn("aclrtSynchronizeDevice")(), "aclrtSynchronizeDevice")


def mdl_load_from_file(path: str | os.PathLike[str]) -> int:
    """``aclmdlLoadFromFile``: returns the model id."""
    data = _path_bytes(path, "path")
    out = get_library().ffi.new("uint32_t *")
    check(_fn("aclmdlLoadFromFile")(data, out), "aclmdlLoadFromFile", os.fsdecode(data))
    return int(out[0])


def mdl_execute(model_id: int, inputs: Dataset, outputs: Dataset) -> None:
    """``aclmdlExecute(modelId, input, output)``: runs the model synchronously.

    CANN rejects NULL datasets (100000), so both are required; for a model without inputs
    or outputs pass empty ones from :func:`mdl_create_dataset`.
    """
    for name, value in (("inputs", inputs), ("outputs", outputs)):
        if not isinstance(value, Dataset):
            raise TypeError(
                f"aclmdlExecute: {name} must be a Dataset, not {type(value).__name__}; CANN "
                "rejects a NULL dataset with ACL_ERROR_INVALID_PARAM (100000), so pass "
                "mdl_create_dataset() (empty for a model without inputs or outputs)")
    check(_fn("aclmdlExecute")(_u32(model_id, "model_id"), inputs._get(), outputs._get()),
          "aclmdlExecute", f"model {model_id}")


def mdl_unload(model_id: int) -> None:
    """``aclmdlUnload``."""
    check(_fn("aclmdlUnload")(_u32(model_id, "model_id")), "aclmdlUnload", f"model {model_id}")


# ---- model datasets ----------------------------------------------------------------------

class DataBuffer(Handle):
    """An ``aclDataBuffer*``: a (device address, size) pair; ``close()`` destroys it.

    A :class:`Dataset` keeps the C pointer of every buffer added to it and reads it at each
    ``aclmdlExecute``, so a buffer cannot be closed while an open dataset holds it.
    """

    __slots__ = ("address", "size", "_holders")
    kind = "data buffer"
    # Set by acl_create_data_buffer (annotations only: the slots above hold them).
    address: int
    size: int
    _holders: int  # open datasets that hold this buffer's pointer

    def close(self) -> None:
        if self._ptr is not None and self._holders:
            raise RuntimeError(
                f"aclDestroyDataBuffer: this data buffer is still in {self._holders} open "
                "dataset(s), which keep its pointer and read it at every aclmdlExecute; close "
                "the dataset(s) first")
        super().close()


class Dataset(Handle):
    """An ``aclmdlDataset*`` (model inputs or outputs); ``close()`` destroys it.

    Destroying a dataset does not destroy its buffers (as in CANN): close them afterwards.
    """

    __slots__ = ("_buffers",)
    kind = "model dataset"
    _buffers: list[DataBuffer]  # set by mdl_create_dataset

    @property
    def buffers(self) -> tuple[DataBuffer, ...]:
        """The buffers added so far, in order."""
        return tuple(self._buffers)

    def close(self) -> None:
        was_open = self._ptr is not None
        try:
            super().close()
        finally:
            if was_open:  # the C dataset is gone (or unusable): it no longer holds them
                for buffer in self._buffers:
                    buffer._holders -= 1
                self._buffers = []


def _dataset(value: Any, name: str = "dataset") -> Dataset:
    if not isinstance(value, Dataset):
        raise TypeError(f"{name} must be a Dataset, not {type(value).__name__}")
    return value


def _release_dataset(ptr: Any) -> None:
    check(_fn("aclmdlDestroyDataset")(ptr), "aclmdlDestroyDataset")


def mdl_create_dataset() -> Dataset:
    """``aclmdlCreateDataset``: an empty dataset."""
    ptr = _fn("aclmdlCreateDataset")()
    if ptr == get_library().ffi.NULL:
        raise error_for(200000, "aclmdlCreateDataset", "returned NULL")
    dataset = Dataset(ptr, _release_dataset)
    dataset._buffers = []
    return dataset


def mdl_destroy_dataset(dataset: Dataset) -> None:
    """``aclmdlDestroyDataset``; same as ``dataset.close()``."""
    _dataset(dataset).close()


def mdl_add_dataset_buffer(dataset: Dataset, buffer: DataBuffer) -> None:
    """``aclmdlAddDatasetBuffer``: appends ``buffer``; the dataset keeps its pointer."""
    ptr = _dataset(dataset)._get()
    if not isinstance(buffer, DataBuffer):
        raise TypeError(f"buffer must be a DataBuffer, not {type(buffer).__name__}")
    check(_fn("aclmdlAddDatasetBuffer")(ptr, buffer._get()), "aclmdlAddDatasetBuffer")
    dataset._buffers.append(buffer)
    buffer._holders += 1


def mdl_get_dataset_num_buffers(dataset: Dataset) -> int:
    """``aclmdlGetDatasetNumBuffers``."""
    return int(_fn("aclmdlGetDatasetNumBuffers")(_dataset(dataset)._get()))


def _release_data_buffer(ptr: Any) -> None:
    check(_fn("aclDestroyDataBuffer")(ptr), "aclDestroyDataBuffer")


def acl_create_data_buffer(address: int, size: int) -> DataBuffer:
    """``aclCreateDataBuffer(data, size)``: ``address`` is device memory (0 for none)."""
    addr = _int(address, "address", 0, 2**64 - 1)
    nbytes = _int(size, "size", 0, 2**64 - 1)
    lib = get_library()
    ptr = _fn("aclCreateDataBuffer")(lib.ffi.cast("void *", addr), nbytes)
    if ptr == lib.ffi.NULL:
        raise error_for(200000, "aclCreateDataBuffer", "returned NULL")
    buffer = DataBuffer(ptr, _release_data_buffer)
    buffer.address, buffer.size, buffer._holders = addr, nbytes, 0
    return buffer


def acl_destroy_data_buffer(buffer: DataBuffer) -> None:
    """``aclDestroyDataBuffer``; same as ``buffer.close()``."""
    if not isinstance(buffer, DataBuffer):
        raise TypeError(f"buffer must be a DataBuffer, not {type(buffer).__name__}")
    buffer.close()
