"""What made the event loop's long turns long: the loop's own stall attribution (issue 19).

A client's round trip waits for the turn it arrives in to end, so the longest turn bounds
the worst STATUS round trip. Each turn (from its select's return to the next select) is
timed, and so is each step in it (a frame handled, a connection's sends, a pump, a flush, a
/metrics slice...), wall and CPU of the loop thread. A turn of ``STALL_S`` or more is a
**stall**, counted under the name of its longest step; STATUS ``loop.stalls`` reports the
counts, the longest turn (its step, that step's wall and CPU), the time no step explains,
and the CPU the daemon's other threads used meanwhile: a turn whose wall is far above its
CPU waited for the GIL (then the other threads' CPU is high: the /metrics listener, the
aggregates writer, the flight recorder) or for a CPU (another process ran), and the time the
garbage collector took in it (its passes are timed by generation, whatever thread ran them:
they hold the GIL). A stall of
``LOG_STALL_S`` or more is logged, at most one line per ``LOG_EVERY_S`` (the worst since the
last line), so an operator sees it without a flood.

Which of the two (and whether the thread blocked on I/O instead) the kernel tells: the loop
thread's ``/proc/thread-self/schedstat`` gives its time on a CPU and its time waiting in a
run queue (runnable, not running: another process or thread had the CPU); what is left of
the wall is time asleep (a disk write, the GIL, a lock). A stall reports both
(``runqueue_ms``, ``blocked_ms``); without that file (not Linux, no schedstats) they are
left out.

Cost (issue 21: a CPU clock read is a system call of 1-4 us on a VM, where the wall clock
is not; with one agent at 100 k ops/s and a tail, the loop made 2307 of them in 8 s, ~6 a
turn, and makes 348 now, one a turn): a step is
timed with the wall clock only, two reads; a turn reads the wall clock, and once at its
start the loop thread's ``schedstat`` (its CPU time and its run-queue time in one ``pread``)
and ``process_time``; the CPU clocks are read again only at the end of a turn the wall clock
made a stall. So a stall reports its longest step's wall (``step_ms``) but not that step's
CPU: the turn's ``cpu_ms`` is the CPU of all its steps. The start's CPU time is the
kernel's figure as of the thread's last switch or tick (it wakes from ``select`` just
before, so usually exact; in a busy loop at most one scheduler tick, 1-4 ms, old).
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import structlog

__all__ = ["LoopStalls", "STALL_S", "LOG_STALL_S", "LOG_EVERY_S", "KEEP"]

STALL_S = 0.1           # a turn at least this long is a stall (counted by its longest step)
LOG_STALL_S = 0.25      # a stall at least this long is logged (rate-limited)
LOG_EVERY_S = 10.0      # at most one stall line this often
KEEP = 5                # the longest turns kept (STATUS loop.stalls.worst)

_log = structlog.get_logger("aclprofd")


class LoopStalls:
    """Turn and step times of the loop thread (loop thread only; :meth:`summary` copies)."""

    def __init__(self) -> None:
        self.turns = 0
        self.stalls: dict[str, int] = {}
        #: the KEEP longest turns, longest first: wall and CPU, the longest step, its wall and CPU
        self.worst: list[dict[str, Any]] = []
        self._t0 = self._c0 = self._p0 = 0.0
        self._in_turn = False
        self._step = ("", 0.0)  # the longest step of this turn: what, wall
        self._explained = 0.0
        self._unlogged: dict[str, Any] | None = None
        self._next_log = 0.0
        #: the garbage collector's passes (any thread: they hold the GIL), by generation
        self.gc_passes = [0, 0, 0]
        self.gc_s = [0.0, 0.0, 0.0]
        self._gc_t0 = 0.0
        self._gc_in_turn = 0.0
        #: objects frozen out of the collector's sight when the loop started (:meth:`watch_gc`)
        self.frozen = 0
        #: the loop thread's schedstat (opened by its first turn: thread-self is the opener's)
        self._sched_fd: int | None = None
        self._sched_ok = True
        self._q0: int | None = 0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
            return
        dt = time.perf_counter() - self._gc_t0
        g = info.get("generation", 2)
        self.gc_passes[g] += 1
        self.gc_s[g] += dt
        self._gc_in_turn += dt

    def watch_gc(self) -> None:
        """Time the collector's passes (STATUS ``loop.stalls.gc``, a stall's ``gc_ms``), and
        count the objects frozen by now (aclprofd.main freezes before the loop starts, and
        nothing later does): ``gc.get_freeze_count`` walks every frozen object (~36k, ~3 ms),
        and :meth:`summary` runs at every counters snapshot, ten a second (issue 21: it was
        ~40 % of the loop's CPU at 10 k ops/s)."""
        self.frozen = gc.get_freeze_count()
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def unwatch_gc(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _schedstat(self) -> tuple[float, int] | None:
        """The loop thread's CPU time (s) and time waiting in a run queue (ns) so far, from one
        read of its schedstat; None without it (not Linux, no schedstats)."""
        if self._sched_fd is None:
            if not self._sched_ok:
                return None
            try:
                self._sched_fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._sched_ok = False
                return None
        try:
            on_cpu, queued = os.pread(self._sched_fd, 128, 0).split()[:2]
            return int(on_cpu) / 1e9, int(queued)
        except (OSError, ValueError):
            self.close()
            self._sched_ok = False
            return None

    def close(self) -> None:
        """Close the schedstat file (the loop ends); idempotent."""
        if self._sched_fd is not None:
            os.close(self._sched_fd)
            self._sched_fd = None

    def begin(self) -> None:
        """A turn begins (its select returned): the wall clock, and the CPU figures a stall
        would report from (one ``pread`` and one ``process_time``; ``thread_time`` instead of
        the ``pread`` without schedstat)."""
        sched = self._schedstat()
        if sched is None:
            self._c0, self._q0 = time.thread_time(), None
        else:
            self._c0, self._q0 = sched
        self._t0, self._p0 = time.perf_counter(), time.process_time()
        self._step, self._explained, self._in_turn, self._gc_in_turn = ("", 0.0), 0.0, True, 0.0

    def ended(self, what: str, t0: float) -> None:
        """A step begun at ``t0`` (``perf_counter``) ended now: its wall counts as explained,
        and it becomes the turn's longest step if it is. No CPU clock is read (issue 21)."""
        wall = time.perf_counter() - t0
        self._explained += wall
        if wall > self._step[1]:
            self._step = (what, wall)

    def timed(self, what: str) -> _Timer:
        """``with stalls.timed("flush"): ...`` times one step."""
        return _Timer(self, what)

    def end(self) -> None:
        """The turn ends (before the next select)."""
        if not self._in_turn:
            return
        self._in_turn = False
        wall = time.perf_counter() - self._t0
        self.turns += 1
        if wall < STALL_S:
            return
        # a stall: the CPU clocks again (exact now: thread_time updates the kernel's figure)
        cpu = max(time.thread_time() - self._c0, 0.0)
        others = max(time.process_time() - self._p0 - cpu, 0.0)  # the daemon's other threads
        sched = self._schedstat() if self._q0 is not None else None
        what, s_wall = self._step
        what = what or "unattributed"
        self.stalls[what] = self.stalls.get(what, 0) + 1
        turn = {"ms": round(wall * 1e3, 1), "cpu_ms": round(cpu * 1e3, 1), "step": what,
                "step_ms": round(s_wall * 1e3, 1),
                "unexplained_ms": round(max(wall - self._explained, 0.0) * 1e3, 1),
                "other_threads_cpu_ms": round(others * 1e3, 1), "gc_ms": round(self._gc_in_turn * 1e3, 1),
                "ts": round(time.time(), 3)}
        if sched is not None and self._q0 is not None:
            queued = max(sched[1] - self._q0, 0) / 1e9
            turn["runqueue_ms"] = round(queued * 1e3, 1)  # runnable, no CPU given: the OS
            turn["blocked_ms"] = round(max(wall - cpu - queued, 0.0) * 1e3, 1)  # asleep: I/O, GIL, a lock
        if len(self.worst) < KEEP or turn["ms"] > self.worst[-1]["ms"]:
            self.worst = sorted([*self.worst, turn], key=lambda x: -x["ms"])[:KEEP]
        if wall >= LOG_STALL_S and (self._unlogged is None or turn["ms"] > self._unlogged["ms"]):
            self._unlogged = turn
        if self._unlogged is not None and time.monotonic() >= self._next_log:
            self._next_log = time.monotonic() + LOG_EVERY_S
            _log.warning("event loop stalled", **self._unlogged, stalls=sum(self.stalls.values()))
            self._unlogged = None

    def summary(self) -> dict[str, Any]:
        """STATUS ``loop.stalls``: turns, stalls by longest step, the longest turns."""
        return {"turns": self.turns, "stall_ms": STALL_S * 1e3, "by_step": dict(self.stalls),
                "longest": dict(self.worst[0]) if self.worst else {}, "worst": [dict(t) for t in self.worst],
                "gc": {**{f"gen{g}": {"passes": self.gc_passes[g], "ms": round(self.gc_s[g] * 1e3, 1)}
                          for g in range(3)}, "frozen": self.frozen}}


class _Timer:
    __slots__ = ("owner", "what", "t0")

    def __init__(self, owner: LoopStalls, what: str):
        self.owner, self.what = owner, what
        self.t0 = 0.0

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.owner.ended(self.what, self.t0)
