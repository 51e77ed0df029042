"""The close path of a :class:`~aclprof.api.subscription.Subscription`.

:class:`Closing` is the base class that holds the close state and everything that ends a
subscription: :meth:`~Closing.close` with its unsubscribe helper thread and timeouts, the
unsubscribe itself and the hand-over of a deferred fd (the fd cell rules of
:mod:`.lifetime`), waking the reader, and the release of the pipe and the config, done
once, by whichever of the reader and the unsubscribe helper ends last. Kept apart from
:mod:`aclprof.api.subscription` so that the subscription class reads as subscribe +
consume, and this module as the one place the release ordering lives.
"""

from __future__ import annotations

import os
import threading
import time

from aclprof._log import get_logger
from aclprof.api.subscription.lifetime import (
    _closing_in_background,
    _defer_cell,
    _device_configs,
    _live,
    _orphaned_cells,
    _sweep_deferred_cells,
    _unsubscribe_threads,
)
from aclprof.api.subscription.queue import BatchQueue
from aclprof.api.subscription.reader import Reader
from aclprof.binding import lowlevel
from aclprof.binding.errors import InvalidModelIdError

# The underscore names are the package's own (and its tests'), not a public API.
__all__: list[str] = []

_log = get_logger("aclprof.api.subscription")  # the subscription's own logger name, as before the split

#: How long close() waits beyond its timeout for a reader it has just woken (it only has
#: to find the pipe empty and return).
_WAKE_GRACE = 0.05


class Closing:
    """Close state and close path of a subscription (its base class).

    The subscription sets the resources (pipe fds, fd cell, config, device claim, reader
    and its thread) in its ``__init__``; :meth:`_init_close_state` runs first.
    """

    model_id: int
    device: int
    _queue: BatchQueue
    _read_fd: int
    _wake_r: int
    _wake_w: int
    _cell: lowlevel.FdCell
    _config: lowlevel.SubscribeConfig | None
    _claimed: bool
    _reader: Reader
    _thread: threading.Thread

    def _init_close_state(self) -> None:
        """The close state (before anything that close() or the release reads)."""
        self._closed = False
        self._close_lock = threading.Lock()
        # Threads that must end before the release (the reader, then the unsubscribe
        # helper once close() starts it); the last one to end releases (see _exited).
        self._exits_pending = 0
        self._unsub_thread: threading.Thread | None = None
        self._unsub_done = threading.Event()
        self._unsub_error: BaseException | None = None
        self._released_event = threading.Event()  # set once released
        self._gave_up = False  # close() returned with the reader still running
        self._released = False

    def _on_reader_exit(self) -> None:
        """On the reader thread, at its end (it never touches its fds after this)."""
        self._exited()

    def _exited(self) -> None:
        """The reader or the unsubscribe helper ended: the last one after close() releases.

        The pipe's fds are closed only here, once the reader has exited: a reader that
        outlives close() (a callback that does not return) must never find its fd numbers
        reused by someone else's file (issue 9: it read 120 bytes of an unrelated pipe).
        """
        with self._close_lock:
            self._exits_pending -= 1
            last = self._exits_pending == 0 and self._closed
        if not last:
            return
        self._release()
        _closing_in_background.discard(self)
        self._released_event.set()
        if self._gave_up:
            _log.warning("the stuck subscription reader ended; subscription released",
                         model_id=self.model_id, callback=self._reader.callback_name)

    def _reader_stuck(self) -> bool:
        return self._gave_up and self._thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        """Unsubscribe, drain the pipe to EOF, join the reader and release everything.

        Idempotent and callable from any thread, a callback of this subscription included
        (then it returns at once and the release happens when the reader reaches EOF; a
        later close() from another thread, and interpreter exit, wait for that). Every
        record the library emitted before the unsubscribe is delivered (or counted as
        dropped).

        Returns within ``timeout`` seconds (plus at most :data:`_WAKE_GRACE`): the
        unsubscribe runs on a helper thread. If the reader has not finished by then (a
        callback that does not return, or a flush the library has not finished) a warning
        names the callback, ``stats.reader_stuck`` says so, and the reader keeps the pipe's
        fds, releasing them and the subscription when it ends.

        Raises:
            AclError: the unsubscribe failed (within ``timeout``); the subscription is
                released all the same.
        """
        deadline = time.monotonic() + timeout
        in_reader = threading.current_thread() is self._thread
        with self._close_lock:
            already = self._closed
            self._closed = True
            if not already:
                self._exits_pending += 1  # the unsubscribe helper, started below
        if already:
            # A close started elsewhere (a callback, or one that timed out): wait for its
            # release (unless this is the reader itself, which must go on draining).
            self._await_release(timeout)
            return
        self._queue.closing()
        _live.discard(self)
        # The unsubscribe runs on a helper thread so that close() keeps its timeout even
        # when the library's flush blocks on a pipe that a stuck callback stopped draining,
        # and so that the reader keeps draining when close() is called from a callback.
        self._unsub_thread = threading.Thread(target=self._run_unsubscribe,
                                              name="aclprof-unsubscribe", daemon=True)
        # Kept until exit joins them: the library's flush should finish before exit.
        _unsubscribe_threads[:] = [t for t in _unsubscribe_threads if t.is_alive()]
        _unsubscribe_threads.append(self._unsub_thread)
        if in_reader:
            _closing_in_background.add(self)
            self._unsub_thread.start()
            return
        self._unsub_thread.start()
        released = self._released_event.wait(max(0.0, deadline - time.monotonic()))
        if not released and self._unsub_done.is_set():
            # Unsubscribed, yet no EOF (a forked child holding the write end?): wake the
            # reader, which stops once the pipe is drained.
            self._wake_reader()
            released = self._released_event.wait(_WAKE_GRACE)
        if released:
            self._join_threads(deadline + _WAKE_GRACE)
        else:
            self._gave_up = True
            if self._thread.is_alive():
                _log.warning("subscription reader is stuck (in its callback?); close() returns "
                             "without it; it keeps the pipe's fds and releases the subscription "
                             "when it returns", model_id=self.model_id,
                             callback=self._reader.callback_name, timeout=timeout)
            else:
                _log.warning("the unsubscribe did not return in time; the subscription is "
                             "released when it does", model_id=self.model_id, timeout=timeout)
        if self._unsub_done.is_set() and self._unsub_error is not None:
            raise self._unsub_error

    def _run_unsubscribe(self) -> None:
        """The unsubscribe helper thread."""
        try:
            self._unsub_error = self._unsubscribe()
        finally:
            self._unsub_done.set()
            self._exited()

    def _join_threads(self, deadline: float) -> None:
        """After the release: the threads have only their last steps left."""
        for thread in (self._thread, self._unsub_thread):
            if thread is not None and thread.ident is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def _await_release(self, timeout: float) -> None:
        if threading.current_thread() in (self._thread, self._unsub_thread):
            return
        deadline = time.monotonic() + timeout
        if self._released_event.wait(timeout):
            self._join_threads(deadline)

    def _unsubscribe(self) -> BaseException | None:
        """Unsubscribe; returns the failure, if any.

        On success the library either closed the write end and wrote -1 into the cell, or
        deferred that (the model's device lost its last subscription while other devices
        still have some): see :meth:`_take_over_deferred_fd`. On failure the library may
        still own the subscription and write to that fd, so it is *not* closed (a reused fd
        number would receive the library's records): the reader is woken instead, and the
        cell and the config are kept alive for as long as the process lives.
        """
        try:
            lowlevel.model_unsubscribe(self.model_id)
        except InvalidModelIdError as exc:
            if self._cell.value == -1:
                # The library had already unsubscribed the model (unloaded, or reset) and
                # closed the pipe: nothing was lost, the reader sees EOF.
                return None
            return self._unsubscribe_failed(exc)
        except BaseException as exc:
            return self._unsubscribe_failed(exc)
        self._take_over_deferred_fd()
        return None

    def _take_over_deferred_fd(self) -> None:
        """After a successful unsubscribe: end the stream now even if the library deferred
        the close, and keep the cell alive for as long as the library holds its pointer.

        Why closing here is safe. CANN's ProfStopAclSubscribe (prof_acl_mgr.cpp L3415-3462)
        returns only after stopping the device whose count reached 0 (CommandHandleProfStop,
        StopReporters, the task stop) and, in its own one-device path, closes the fd right
        after that same stop (CloseSubscribeFd(devId), L2759-2786): the library itself
        treats "unsubscribe returned" as "every record of the model is in the pipe". So
        the records are already in the pipe and the reader still gets them before EOF.
        Should the library write anything later for this model, PipeTransport::SendBuffer
        reads the fd through our cell for every buffer (GetSubscribeFdForModel) and drops
        it on a negative value, so it cannot land in a reused fd number. The mark goes in
        before close() so that window stays shut. The library's deferred close then calls
        close(mark), which fails harmlessly with EBADF (it logs an error), and writes -1,
        after which the cell is released (see _deferred_cells). The alternative, leaving
        the fd to the library, would make every reader wait until the process's last
        unsubscribe and hold one open fd per deferred subscription.
        """
        fd = self._cell.value
        if fd < 0:
            # Closed by the library, -1 written: it no longer holds this pointer. If this
            # was the process's last subscription, earlier deferred cells got -1 too.
            _sweep_deferred_cells()
            return
        _defer_cell(self._cell, self.model_id)
        try:
            os.close(fd)
        except OSError:
            pass

    def _unsubscribe_failed(self, exc: BaseException) -> BaseException:
        _orphaned_cells.append(self._cell)
        _log.warning("unsubscribe failed; the pipe stays with the library", model_id=self.model_id,
                     error=str(exc))
        self._wake_reader()
        return exc

    def _wake_reader(self) -> None:
        """Make the reader stop once the pipe holds nothing more (no EOF will come)."""
        with self._close_lock:  # never write to the number of a released (reused) fd
            if self._released:
                return
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass  # already woken (the pipe is non-blocking)

    def _close_write_end(self) -> None:
        """Subscribe failed (the library kept no pointer): close the write end ourselves."""
        fd = self._cell.value
        if fd >= 0:
            self._cell._set(-1)
            try:
                os.close(fd)
            except OSError:
                pass

    def _release(self) -> None:
        with self._close_lock:
            if self._released:
                return
            self._released = True
        self._close_fds()
        if self._config is not None and not any(c is self._cell for c in _orphaned_cells):
            try:
                self._config.close()
            except Exception as exc:
                _log.warning("destroying the subscribe config failed", error=str(exc))
        if self._claimed:
            _device_configs.release(self.device)
            self._claimed = False

    def _forget_in_child(self) -> None:
        """See :func:`_forget_after_fork` (the only thread of the child runs this)."""
        # Locks copied from the parent may be held by a thread the child does not have.
        self._close_lock = threading.Lock()
        self._queue.cond = self._reader.stats_lock = threading.Condition()
        self._closed = True
        self._queue.reader_finished()  # no reader here: iteration ends once drained
        if not self._released:
            self._released = True
            self._close_fds()
        self._released_event.set()

    def _close_fds(self) -> None:
        """The pipe's read end and the reader's wake pipe (each closed once: ``_released``)."""
        for fd in (self._read_fd, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
