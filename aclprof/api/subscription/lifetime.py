"""What the library may still hold after a subscription ends, and the per-device config rule.

CANN keeps a pointer to each subscription's fd cell (a C ``int``) and may write -1 into it,
and close the fd it holds, long after the unsubscribe returned (audit row 1): this module
keeps those cells alive exactly as long as needed, refuses the one re-subscription CANN
would accept but never feed (:class:`DeferredResubscribeError`), and enforces that all
models on one device share one subscribe config (the library checks it across devices too).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

from aclprof.binding import lowlevel
from aclprof.binding.errors import AclprofError, InvalidProfilingConfigError

# The underscore names are the package's own (and its tests'), not a public API.
__all__ = ["DeferredResubscribeError"]


class DeferredResubscribeError(AclprofError, RuntimeError):
    """A model cannot be subscribed again yet: its previous subscription's close is
    deferred by the library and it would receive nothing (see :func:`subscribe`)."""


class _DeviceConfigs:
    """All models on one device must share one subscribe config (the library checks it across devices too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_device: dict[int, tuple[bool, int, int]] = {}  # device -> (time_info, metrics, users)

    def claim(self, device: int, time_info: bool, metrics: int) -> None:
        with self._lock:
            current = self._by_device.get(device)
            if current is None:
                self._by_device[device] = (time_info, metrics, 1)
                return
            if current[:2] != (time_info, metrics):
                raise InvalidProfilingConfigError(
                    100010, "aclprofModelSubscribe",
                    f"device {device} already has subscriptions with time_info={current[0]}; "
                    f"all models on one device must share one config, got time_info={time_info}")
            self._by_device[device] = (time_info, metrics, current[2] + 1)

    def release(self, device: int) -> None:
        with self._lock:
            time_info, metrics, users = self._by_device[device]
            if users == 1:
                del self._by_device[device]
            else:
                self._by_device[device] = (time_info, metrics, users - 1)


_device_configs = _DeviceConfigs()
_live: weakref.WeakSet[Any] = weakref.WeakSet()  # open Subscriptions
_orphaned_cells: list[lowlevel.FdCell] = []  # cells the library may still write -1 into

# Cells whose close the library deferred (audit row 1, note D1). When a model's device loses
# its last subscription while another device still has one, CANN's ProfStopAclSubscribe
# only queues the device (CloseSubscribeFdIfHostId) and keeps the int*; the fd is closed
# and -1 written through that pointer when the process's last subscription ends
# (CloseSubscribeFd(devId)). Until then the cell must stay allocated, or the library reads
# freed memory and may close() whatever number it finds there. Each cell leaves this list
# once it reads -1: the library erased its entry before writing that, so it can no longer
# touch the cell. Growth is bounded: one cell (4 bytes) per subscription unsubscribed since
# the process last had no subscription at all, since the last unsubscribe clears them all.
_deferred_lock = threading.Lock()
_deferred_cells: list[lowlevel.FdCell] = []
_deferred_by_model: dict[int, lowlevel.FdCell] = {}  # model id -> its newest deferred cell
# Markers written into deferred cells: distinct values <= -2, so that (a) the library's
# per-record lookup (GetSubscribeFdForModel, fd < 0) drops anything still addressed to the
# closed pipe, (b) its deferred close can tell our cells apart (CloseSubscribeFd skips a
# pointer whose value another entry holds, so equal values would leave a cell unreleased)
# and (c) the -1 it writes at the end is distinguishable from our mark.
_deferred_marks = itertools.count(2)
_unsubscribe_threads: list[threading.Thread] = []  # started by closes from callbacks
_closing_in_background: set[Any] = set()  # closed from a callback, not yet released


def _sweep_deferred_cells_locked() -> None:
    _deferred_cells[:] = [cell for cell in _deferred_cells if cell.value != -1]
    for model_id in [m for m, cell in _deferred_by_model.items() if cell.value == -1]:
        del _deferred_by_model[model_id]


def _check_not_deferred(model_id: int, device: int) -> None:
    """Refuse a subscription that CANN would accept but never feed (audit row 1).

    While the model's previous subscription waits for its deferred close, CANN still has
    its entry (key: the model id, ``subscribed=false``, our old cell). If the device has no
    subscription, ``StartDeviceSubscribeTask`` restarts it and its ``subscribeInfos_.insert``
    keeps that old entry (prof_acl_mgr.cpp L1738-1742): aclprofModelSubscribe succeeds, but
    the records go to the old cell (dropped: it holds our mark) and the unsubscribe fails
    with 100011, which also keeps every other device's fd open. If the device does have a
    subscription, ``UpdateSubscribeInfo`` takes the new fd and all is well. Only this
    binding's own subscriptions are visible here, so the check is conservative.
    """
    with _deferred_lock:
        _sweep_deferred_cells_locked()
        pending = model_id in _deferred_by_model
    if pending and not any(sub.device == device for sub in list(_live)):
        raise DeferredResubscribeError(
            f"aclprofModelSubscribe (not called): model {model_id} was unsubscribed while "
            f"device {device} had no other subscription and other devices still had some; "
            f"CANN keeps that old subscription until the last subscription of the process "
            f"ends, and would send this new one's records to the old, closed pipe and fail "
            f"to unsubscribe it (100011). Close the subscriptions on the other devices first, "
            f"or subscribe another model on device {device} before this one.")


def _forget_replaced_cell(model_id: int) -> None:
    """The model was subscribed again (past :func:`_check_not_deferred`, so its device was
    busy): CANN's UpdateSubscribeInfo replaced the old entry's int* with the new one, so it
    will never touch, nor close, the old cell again."""
    with _deferred_lock:
        old = _deferred_by_model.pop(model_id, None)
        if old is not None:
            _deferred_cells[:] = [cell for cell in _deferred_cells if cell is not old]


def _defer_cell(cell: lowlevel.FdCell, model_id: int) -> None:
    """The library deferred the close of ``cell``'s fd: mark the cell (see _deferred_marks)
    and keep it until the library writes -1 into it."""
    with _deferred_lock:
        cell._set(-next(_deferred_marks))
        _deferred_cells.append(cell)
        _deferred_by_model[model_id] = cell
        _sweep_deferred_cells_locked()


def _sweep_deferred_cells() -> None:
    """Forget the deferred cells into which the library has written -1 (it is done)."""
    with _deferred_lock:
        _sweep_deferred_cells_locked()

