"""How many bytes a flight-recorder capture's records take in its three outputs, per record,
computed from the records themselves (issue 17: the former estimate, a flat 1 KiB plus the
names, was 1.9-2.8x the real size, so every capture of a busy service was truncated at
~37 % of ``capture_max_size`` and then made the next capture delete it).

Per op record (the writers: :mod:`aclprof.exportfmt.ascend`, :mod:`aclprof.exportfmt.chrome`):

- ``kernel_details.csv``: one row: 12 bytes of separators and constants, the op name and
  type, device, start, duration and wait (µs with 3 decimals);
- ``trace_view.json``: one ``X`` event: 123 bytes of template (with its ``,\\n``), name,
  type, tid, start, duration, model, device, thread id;
- ``trace.json`` (Chrome): one ``X`` event: 110 bytes of keys (with its ``,\\n``), name,
  type twice, start, duration, pid, tid, flag, thread id, receive time;
- ``trace.pftrace`` (Perfetto protobuf, when PyPI perfetto is installed): a ``SLICE_BEGIN``
  and a ``SLICE_END`` packet, at most 33 + 25 bytes with 10-byte timestamps
  (:data:`PFTRACE_RECORD`); each distinct name once (interned, :func:`pftrace_names`);
- the Overlap Analysis rows of ``trace_view.json``: a record that begins a busy interval of
  its process (no earlier-starting op of the process still runs) opens a ``Computing``
  span and, after the previous interval, a ``Free`` span: charged to that record.

Numbers are charged their exact decimal digits (start and duration in µs, ids); the floats
``repr`` writes (``dur``, Chrome's ``ts``, the receive time) their longest form. Names are
charged their JSON-escaped length plus 2 per occurrence (csv quoting fits in that). So the
result is an upper bound that is tight: within a few percent of the files (measured in
``tests/test_capture_size.py``). Per process, op type and thread the writers add a few
hundred bytes (the summary files, op_statistic rows, metadata events):
:func:`overhead`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aclprof.exportfmt.chrome import TID_STRIDE

__all__ = ["RECORD_FIXED", "PFTRACE_RECORD", "SPAN_FIXED", "record_costs", "span_costs", "overhead", "digits",
           "pftrace_names"]

#: bytes of a record's three output lines that do not depend on its values (see above)
RECORD_FIXED = 12 + 123 + 110
#: a record's two packets in trace.pftrace, at most (aclprof.exportfmt.perfetto)
PFTRACE_RECORD = 64
#: an interned name's entry beside its UTF-8 bytes (tags, lengths, iid)
_PFTRACE_NAME = 16
#: a Computing and a Free span without their numbers (templates, names, separators)
SPAN_FIXED = (50 + len("Computing") + 2) + (50 + len("Free") + 2)
_REPR_FLOAT = 18  # repr() of a receive time (Unix seconds, 6 decimals at most) or a span's duration in µs
_PROCESS = 8 << 10  # per process: profiler_info/metadata json, csv headers, trace metadata events
_TYPE = 256  # per op type and process: an op_statistic row
_THREAD = 512  # per (device, model) of a process: thread name and sort events in both traces
_FIXED = 16 << 10  # capture.json and the Chrome trace's header and end
_POW10 = np.array([10 ** k for k in range(1, 20)], dtype=np.uint64)


def digits(a: np.ndarray) -> np.ndarray:
    """Decimal digits of each non-negative integer in ``a`` (exact, up to 2^64 - 1)."""
    return np.searchsorted(_POW10, a.astype(np.uint64), side="right").astype(np.int64) + 1


def record_costs(records: np.ndarray, pid: int, name_cost: Callable[[np.ndarray], np.ndarray],
                 pftrace: bool = False) -> np.ndarray:
    """Bytes of each record (RECORD_DTYPE) in the outputs, Overlap Analysis apart (and
    trace.pftrace's names: :func:`pftrace_names`). ``name_cost(ids)``: the bytes one
    occurrence of each name id takes; ``pftrace``: whether trace.pftrace is written."""
    start_us = digits(records["start"] // 1000) + 4  # format_us: digits, '.', 3 decimals
    dur_us = digits(records["duration"] // 1000) + 4  # format_us, and repr(ns / 1e3) never longer
    device, model = records["device_id"].astype(np.uint64), records["model_id"].astype(np.uint64)
    tid = digits(device * TID_STRIDE + model)
    numbers = (4 * start_us + 2  # csv start and wait (wait <= start), trace_view ts, Chrome ts (repr: +2)
               + 3 * dur_us  # csv, trace_view, Chrome
               + 2 * digits(device) + digits(model) + 2 * tid + 2 * digits(records["thread_id"])
               + digits(records["flag"]) + len(str(int(pid))) + _REPR_FLOAT)
    return (RECORD_FIXED + (PFTRACE_RECORD if pftrace else 0) + numbers + 3 * name_cost(records["op_name"])
            + 4 * name_cost(records["op_type"]))


def pftrace_names(names: set[str]) -> int:
    """Bytes of the distinct op names and types of a capture in trace.pftrace (each once)."""
    return sum(len(n.encode("utf-8", "backslashreplace")) + _PFTRACE_NAME for n in names)


def span_costs(records: np.ndarray, opens: np.ndarray) -> np.ndarray:
    """Bytes of the Computing and Free spans that the opening records begin (0 for the others)."""
    per = SPAN_FIXED + 2 * (digits(records["start"] // 1000) + 4) + 2 * _REPR_FLOAT
    return np.where(opens, per, 0)


def overhead(processes: int, types: int, threads: int) -> int:
    """Bytes beyond the records: per process, per op type of a process, per thread of a process."""
    return _FIXED + _PROCESS * processes + _TYPE * types + _THREAD * threads
