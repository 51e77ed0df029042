"""``acl.util``: threads and pointers (pyACL conventions)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from aclprof.binding.pointers import buffer_address, read_bytes

__all__ = ["start_thread", "stop_thread", "bytes_to_ptr", "numpy_to_ptr", "ptr_to_bytes"]

_threads: dict[int, threading.Thread] = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def start_thread(func: Callable[[Any], Any], args: Any) -> tuple[int, int]:
    """Run ``func(args)`` on a new thread; returns ``(thread_id, ret)``."""
    if not callable(func):
        raise TypeError("func must be callable")
    thread = threading.Thread(target=func, args=(args,), name="acl.util-thread", daemon=True)
    with _lock:
        thread_id = next(_ids)
        _threads[thread_id] = thread
    thread.start()
    return thread_id, 0


def stop_thread(thread_id: int) -> int:
    """Join the thread started by :func:`start_thread` (pyACL's stop_thread joins)."""
    with _lock:
        thread = _threads.pop(thread_id, None)
    if thread is None:
        return 100000  # ACL_ERROR_INVALID_PARAM
    thread.join()
    return 0


def bytes_to_ptr(data: bytes) -> int:
    """The address of a bytes object's buffer (valid while the object lives)."""
    if not isinstance(data, bytes):
        raise TypeError(f"bytes_to_ptr takes bytes, not {type(data).__name__}")
    return buffer_address(data)


def numpy_to_ptr(array: Any) -> int:
    """The address of a numpy array's data (valid while the array lives)."""
    return int(array.ctypes.data)


def ptr_to_bytes(pointer: int, size: int) -> bytes:
    """Copy ``size`` bytes from ``pointer``."""
    return read_bytes(pointer, size)
