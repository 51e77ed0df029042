"""The daemon's CPU slice: how long the kernel lets one of its threads run before a task that
waits for that core gets it (Linux's EEVDF scheduler, a custom slice through
``sched_setattr``; Linux >= 6.12 honours it, older kernels ignore it).

Why (issue 21): the daemon's work comes in bursts. A new agent connection is ~4 ms of CPU in
one go (HELLO, the model's NAMES, the first BATCH registering ~1000 keys), and on a host whose
other core is busy the service's step thread then waits behind it for up to a whole default
slice (1.4 ms on the 2-core VM of 2026-12-04, kernel 6.18) at each of its wake-ups. With a
100 us slice for the daemon's threads the service's p99 step time under a CPU hog was +2.7 to
+6.9 % of the off rounds' in four runs, against +8.4 to +15.5 % in five without
(``tests/bench/bench_agent_overhead.py --hog on``); nice 10 and SCHED_BATCH for the daemon did
not help. A slice changes when the daemon yields a contended core, not its share of CPU: its
weight (nice) and its policy are kept as they are.

Set once, at the daemon's entry point (``aclprofd.main``), before the daemon starts its threads:
a thread inherits its creator's slice. An embedded daemon (``aclprofd.server.serve``) leaves its
host process alone.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from dataclasses import dataclass

__all__ = ["SliceResult", "request_slice", "check_slice_us", "MIN_SLICE_US", "MAX_SLICE_US"]

#: the bounds the kernel clamps a custom slice to (kernel/sched/syscalls.c), in whole
#: microseconds: a slice is compared rounded to these (``100us`` parses to 99.99...e-6 s)
MIN_SLICE_US = 100
MAX_SLICE_US = 100_000

#: (sched_setattr, sched_getattr) system call numbers
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275), "arm64": (274, 275)}
_ATTR = struct.Struct("IIQiIQQQ")  # struct sched_attr, SCHED_ATTR_SIZE_VER0 (48 bytes)
_KEEP_POLICY = 0x08  # SCHED_FLAG_KEEP_POLICY: the policy stays; the nice value is passed back as read


@dataclass(frozen=True)
class SliceResult:
    """What :func:`request_slice` did: the slice asked for (0: none, the kernel's default),
    the one the kernel now reports for this thread (None: not applied), how many threads
    were set, and why it was not applied (None when it was)."""

    requested_us: int
    applied_us: int | None
    threads: int
    error: str | None

    def as_dict(self) -> dict[str, int | str | None]:
        return {"requested_us": self.requested_us, "applied_us": self.applied_us, "threads": self.threads,
                "error": self.error}


def _calls() -> tuple[ctypes.CDLL, int, int] | None:
    nrs = _SYSCALLS.get(os.uname().machine) if sys.platform.startswith("linux") else None
    if nrs is None:
        return None
    return ctypes.CDLL(None, use_errno=True), nrs[0], nrs[1]


def _get(libc: ctypes.CDLL, nr: int, tid: int) -> tuple[int, int, int, int] | None:
    """(policy, flags, nice, runtime ns) of thread ``tid``; None if it cannot be read."""
    buf = ctypes.create_string_buffer(_ATTR.size)
    if libc.syscall(nr, tid, buf, _ATTR.size, 0) != 0:
        return None
    _size, policy, flags, nice, _prio, runtime, _dl, _period = _ATTR.unpack(buf.raw)
    return policy, flags, nice, runtime


def check_slice_us(us: int, given: str) -> None:
    """ValueError unless ``us`` (a custom slice in whole microseconds, written ``given`` by
    whoever asked) is within the kernel's bounds: the one check of the setting and the request."""
    if not MIN_SLICE_US <= us <= MAX_SLICE_US:
        raise ValueError(f"cpu_slice must be 0 (the kernel's default) or within {MIN_SLICE_US}us.."
                         f"{MAX_SLICE_US // 1000}ms, not {given}")


def request_slice(slice_s: float) -> SliceResult:
    """Ask for a custom slice of ``slice_s`` seconds (0: leave the kernel's default) for every
    thread of this process now, so for the threads it starts later too. Each thread keeps
    its policy and nice value. A kernel or platform without custom slices is not an error:
    the result says so (the daemon logs it and runs on). ValueError for a slice outside the
    kernel's bounds (the configuration refuses those first)."""
    us = round(slice_s * 1e6)
    if us == 0:
        return SliceResult(0, None, 0, None)
    check_slice_us(us, f"{slice_s}s")
    calls = _calls()
    if calls is None:
        return SliceResult(us, None, 0, f"custom CPU slices need Linux on x86_64 or aarch64, not "
                                        f"{sys.platform} {os.uname().machine}")
    libc, set_nr, get_nr = calls
    try:
        tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
    except OSError as exc:
        return SliceResult(us, None, 0, f"cannot list this process's threads: {exc}")
    done = 0
    for tid in tids:
        now = _get(libc, get_nr, tid)
        if now is None:
            continue  # a thread that ended meanwhile
        _policy, _flags, nice, _runtime = now
        attr = ctypes.create_string_buffer(_ATTR.pack(_ATTR.size, 0, _KEEP_POLICY, nice, 0, us * 1000, 0, 0))
        if libc.syscall(set_nr, tid, attr, 0) != 0:
            err = ctypes.get_errno()
            return SliceResult(us, None, done, f"sched_setattr failed for thread {tid}: "
                                               f"{os.strerror(err)} (errno {err})")
        done += 1
    mine = _get(libc, get_nr, 0)
    if mine is None or mine[3] != us * 1000:
        # older kernels take the call and ignore sched_runtime for a fair-class task
        return SliceResult(us, None, done, "the kernel does not apply custom slices (EEVDF's sched_runtime, "
                                           "Linux >= 6.12)")
    return SliceResult(us, us, done, None)
