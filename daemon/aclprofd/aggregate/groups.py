"""Groupings of the aggregate keys: SNAPSHOT's ``group_by`` and the Prometheus series.

A grouping gives every key a group number, and every group a label (a SNAPSHOT row's
``key``) and the identity fields that are constant in it (the row's other fields, e.g.
``service``, ``pid``). Keys never change or go away, so a grouping is built with one
Python step per key when the key is first seen and only extended afterwards: a snapshot or
a scrape costs no Python step per key it already grouped, and never one per record.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from .keys import OTHER, KeyRegistry
from .quantiles import I64

__all__ = ["GROUP_BY", "Grouping", "Groupings", "FIELDS", "prom_labels", "prom_fine_labels"]

#: the ``group_by`` values SNAPSHOT accepts, and the identity fields each grouping's rows carry
FIELDS: dict[str, tuple[str, ...]] = {
    "type": ("op_type",),
    "name": ("op_name",),
    "service": ("service",),
    "process": ("host", "pid", "service"),
    "device": ("device",),
    "model": ("service", "model", "model_id", "pid"),
}
GROUP_BY = tuple(FIELDS)

#: (group identity, label, identity fields) of key k
Identify = Callable[[KeyRegistry, int], tuple[Hashable, str, dict[str, Any]]]


def _svc(reg: KeyRegistry, k: int) -> str:
    return reg.service[k] or ""


def _type(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
    return reg.type[k], reg.type[k], {"op_type": reg.type[k]}


def _name(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
    return reg.name[k], reg.name[k], {"op_name": reg.name[k]}


def _service(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
    svc = _svc(reg, k)
    # agents without a service share one "(none)" row; its service field is null
    return svc, svc or "(none)", {"service": svc or None}


def _process(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
    svc, pid, host = _svc(reg, k), int(reg.pid[k]), reg.host[k]
    return (host, pid, svc), f"{svc}/{pid}" if svc else f"pid {pid}", {"host": host, "pid": pid,
                                                                       "service": svc or None}


def _device(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
    dev = int(reg.device[k])
    return dev, f"device {dev}", {"device": dev}


def _model(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
    svc, label, mid, pid = _svc(reg, k), reg.model_label[k], int(reg.model[k]), int(reg.pid[k])
    fields = {"service": svc or None, "model": label or None, "model_id": mid, "pid": pid}
    if label:
        # a labelled model is one row per service, over its processes (ids may differ)
        return ("label", svc, label), f"{svc}/{label}" if svc else label, fields
    # an unlabelled model id means something only within its process
    return (("id", svc, reg.host[k], pid, mid), f"{svc}/{pid}/{mid}" if svc else f"pid {pid}/{mid}", fields)


_IDENTIFY: dict[str, Identify] = {"type": _type, "name": _name, "service": _service, "process": _process,
                                  "device": _device, "model": _model}


def prom_labels(by_name: bool) -> Identify:
    """The Prometheus series of a key: (service, device, model, op_type[, op_name]) where
    model is the model label, else the model id as text (ids are per process)."""
    def identify(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
        lab: tuple[str, ...] = (_svc(reg, k), str(int(reg.device[k])),
                                reg.model_label[k] or str(int(reg.model[k])), reg.type[k])
        return (*lab, reg.name[k]) if by_name else lab, "", {}
    return identify


def prom_fine_labels(by_name: bool) -> Identify:
    """The fine Prometheus histogram's series of a key: (service, model, op_type[, op_name]),
    the devices summed (as the fleet view sums them)."""
    def identify(reg: KeyRegistry, k: int) -> tuple[Hashable, str, dict[str, Any]]:
        lab: tuple[str, ...] = (_svc(reg, k), reg.model_label[k] or str(int(reg.model[k])), reg.type[k])
        return (*lab, reg.name[k]) if by_name else lab, "", {}
    return identify


class Grouping:
    """One grouping of the keys, extended as keys are added (:meth:`update`)."""

    def __init__(self, identify: Identify, other_alone: bool = True) -> None:
        self._identify = identify
        self._other_alone = other_alone
        self._index: dict[Hashable, int] = {}
        self.idents: list[Hashable] = []
        self.labels: list[str] = []
        self.fields: list[dict[str, Any]] = []
        self.of = np.zeros(0, I64)  # the group of each key
        self._done = 0

    def update(self, reg: KeyRegistry) -> np.ndarray:
        """The group of each of ``reg``'s keys (call under the aggregator's lock)."""
        n = len(reg)
        if self._done == n:
            return self.of
        new = np.empty(n - self._done, I64)
        for j, k in enumerate(range(self._done, n)):
            if self._other_alone and k == reg.other:
                # the capped keys' records: one "(other)" row, no identity of its own
                ident: Hashable = ("(other)",)
                label, fields = OTHER, None
            else:
                ident, label, fields = self._identify(reg, k)
            g = self._index.get(ident)
            if g is None:
                g = self._index[ident] = len(self.labels)
                self.idents.append(ident)
                self.labels.append(label)
                self.fields.append(dict(fields) if fields is not None else {})
            elif fields is not None:
                # a field that differs between the group's keys is not the group's: null
                have = self.fields[g]
                for f, v in fields.items():
                    if have.get(f) != v:
                        have[f] = None
            new[j] = g
        self.of = np.concatenate([self.of[:self._done], new])
        self._done = n
        return self.of


class Groupings:
    """The groupings of one registry, built on first use."""

    def __init__(self) -> None:
        self._by: dict[str, Grouping] = {}

    def get(self, reg: KeyRegistry, group_by: str) -> Grouping:
        """The grouping ``group_by`` (one of GROUP_BY, or "prom"/"prom_name" for the
        Prometheus series), up to date with ``reg``."""
        g = self._by.get(group_by)
        if g is None:
            if group_by in _IDENTIFY:
                g = Grouping(_IDENTIFY[group_by])
            elif group_by in ("prom", "prom_name"):
                g = Grouping(prom_labels(group_by == "prom_name"), other_alone=False)
            elif group_by in ("prom_fine", "prom_fine_name"):
                g = Grouping(prom_fine_labels(group_by == "prom_fine_name"), other_alone=False)
            else:
                raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}, not {group_by!r}")
            self._by[group_by] = g
        g.update(reg)
        return g
