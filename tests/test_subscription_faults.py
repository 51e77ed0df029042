"""Operator subscription under faults: subscribe errors mapped to exceptions, every close
path (twice, from a callback, from another thread, in a with-block that raises, idle, at
interpreter exit, after the library pulled the subscription away), callback exceptions.

Every test runs under ``no_leaks`` (conftest.py): no fd left open and no ``aclprof-*``
thread left running. The mock's name table must be empty after close in every scenario.
"""

from __future__ import annotations

import os
import textwrap
import threading
import time

import pytest
import structlog
from helpers.procs import aclprof_threads, open_fds
from helpers.records import record_key

import aclprof
from aclprof import mock
from aclprof.binding import lowlevel

pytestmark = pytest.mark.usefixtures("no_leaks")

OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000, "jitter": 150},
    {"name": "relu1", "type": "Relu", "duration_ns": 200},
    {"name": "fc", "type": "MatMulV2", "duration_ns": 3000, "flag": 3, "thread_id": 9},
]


def name_table() -> int:
    return mock.stats()["nameTableEntries"]


def assert_released(sub) -> None:
    assert sub.closed
    assert aclprof_threads() == []
    assert name_table() == 0


# ---- subscribe errors ------------------------------------------------------------------------

def test_unknown_model():
    with pytest.raises(aclprof.InvalidModelIdError) as info:
        aclprof.subscribe(12345)
    assert info.value.code == 100011
    assert info.value.function == "aclprofModelSubscribe"
    assert aclprof_threads() == []
    assert mock.mode() == "OFF"


def test_unloaded_model():
    model = mock.load_model(OPS)
    mock.unload(model)
    with pytest.raises(aclprof.InvalidModelIdError):
        aclprof.subscribe(model)


def test_repeat_subscribe_keeps_the_first_working(emit_log):
    model = mock.load_model(OPS)
    first = aclprof.subscribe(model)
    fds_with_one = open_fds()
    with pytest.raises(aclprof.RepeatSubscribeError) as info:
        aclprof.subscribe(model)
    assert info.value.code == 148046
    assert open_fds() == fds_with_one  # the failed one released its pipe
    assert [t.name for t in aclprof_threads()] == [f"aclprof-reader-{model}"]
    mock.execute(model, 10)
    first.close()
    assert [record_key(r) for r in first] == [e.key() for e in emit_log.read()]
    assert first.stats.delivered == 30
    assert_released(first)


def test_failed_subscribes_release_their_device_claim():
    """After failures the per-device config claim must be gone: a later subscription with
    another time_info is judged by the library, not refused by a stale claim."""
    model = mock.load_model(OPS)
    with pytest.raises(aclprof.InvalidModelIdError):
        aclprof.subscribe(model + 1)
    with aclprof.subscribe(model):
        with pytest.raises(aclprof.RepeatSubscribeError):
            aclprof.subscribe(model)
    # No claim left: this reaches C, which rejects a config that collects nothing.
    with pytest.raises(aclprof.InvalidParamError) as info:
        aclprof.subscribe(model, time_info=False)
    assert info.value.function == "aclprofModelSubscribe"


def test_subscribe_while_profiler_runs_is_an_api_conflict(out_dir, emit_log):
    model = mock.load_model(OPS)
    with aclprof.Profiler(out_dir) as prof:
        with pytest.raises(aclprof.ApiConflictError) as info:
            aclprof.subscribe(model)
        assert info.value.code == 148047
        assert prof.running
        assert mock.mode() == "API_CTRL"
    with aclprof.subscribe(model) as sub:  # fine once the session is over
        mock.execute(model, 2)
    assert len(list(sub)) == 6
    assert_released(sub)


def test_profiler_start_while_subscribed_is_an_api_conflict(out_dir, emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    prof = aclprof.Profiler(out_dir)
    with pytest.raises(aclprof.ApiConflictError):
        prof.start()
    assert not prof.running
    assert mock.mode() == "SUBSCRIBE"
    mock.execute(model, 4)  # the subscription is unaffected
    sub.close()
    assert [record_key(r) for r in sub] == [e.key() for e in emit_log.read()]
    assert sub.stats.delivered == 12
    assert mock.mode() == "OFF"
    with prof:  # and profiling works again after the subscription is closed
        assert prof.running
    assert_released(sub)


def test_two_configs_on_one_device_rejected_by_python_before_c():
    a = mock.load_model(OPS)
    b = mock.load_model(OPS)
    with aclprof.subscribe(a, device=2):
        # If the C function were reached it would fail with this armed code instead.
        mock.fail_next("aclprofModelSubscribe", 1, 500001)
        with pytest.raises(aclprof.InvalidProfilingConfigError) as info:
            aclprof.subscribe(b, device=2, time_info=False)
        assert info.value.code == 100010
        assert "share one config" in str(info.value)
        # The fault is still armed: the C function was never called. This consumes it.
        with pytest.raises(aclprof.AclError) as armed:
            aclprof.subscribe(b, device=2)
        assert armed.value.code == 500001
        with aclprof.subscribe(b, device=2) as sub_b:  # same config: fine
            mock.execute(b, 1)
    assert len(list(sub_b)) == 3


def test_time_info_off_is_rejected_by_the_library():
    """aclprof always passes ACL_AICORE_NONE, and a config with time_info off and no
    metrics collects nothing: the library refuses it."""
    model = mock.load_model(OPS)
    with pytest.raises(aclprof.InvalidParamError):
        aclprof.subscribe(model, time_info=False)
    assert mock.mode() == "OFF"


@pytest.mark.parametrize("function, exc", [
    ("aclprofModelSubscribe", aclprof.ProfilingFailureError),
    ("aclprofCreateSubscribeConfig", aclprof.InvalidParamError),
    ("aclprofGetOpDescSize", aclprof.ProfilingFailureError),
])
def test_fault_while_subscribing_leaks_nothing(function, exc, emit_log):
    model = mock.load_model(OPS)
    mock.fail_next(function)
    with pytest.raises(exc):
        aclprof.subscribe(model)
    assert aclprof_threads() == []
    assert mock.mode() == "OFF"
    # Nothing half-registered: the model subscribes normally afterwards.
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 2)
    assert [record_key(r) for r in sub] == [e.key() for e in emit_log.read()]
    assert_released(sub)


def test_unsubscribe_fault_raises_but_releases_everything(emit_log):
    model = mock.load_model(OPS)
    before = open_fds()
    sub = aclprof.subscribe(model)
    mock.execute(model, 5)
    mock.wait_writer_idle()
    mock.fail_next("aclprofModelUnSubscribe")
    with pytest.raises(aclprof.ProfilingFailureError) as info:
        sub.close()
    assert info.value.function == "aclprofModelUnSubscribe"
    assert sub.closed
    assert aclprof_threads() == []  # the reader was woken once the pipe was empty
    # The library still owns the subscription and may write to the write end: aclprof
    # must not close it (a reused fd number would receive the records). Only it is left.
    assert len(open_fds() - before) == 1
    sub.close()  # idempotent: does not raise again
    assert [record_key(r) for r in sub] == [e.key() for e in emit_log.read()]
    assert name_table() == 0
    assert mock.mode() == "SUBSCRIBE"
    lowlevel.model_unsubscribe(model)  # the library closes its write end now
    assert open_fds() == before
    assert mock.mode() == "OFF"


def test_destroy_config_fault_at_close_is_logged_not_raised(emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    mock.execute(model, 2)
    mock.fail_next("aclprofDestroySubscribeConfig")
    with structlog.testing.capture_logs() as logs:
        sub.close()
    assert any("subscribe config" in entry["event"] for entry in logs)
    assert len(list(sub)) == 6
    assert_released(sub)


# ---- close paths ----------------------------------------------------------------------------

def test_close_twice_is_idempotent(emit_log):
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 3)
        sub.close()
        sub.close()
        assert sub.closed
    sub.close()
    assert "closed" in repr(sub)
    assert len(list(sub)) == 9
    assert_released(sub)


@pytest.mark.parametrize("which", ["callback", "batch_callback"])
def test_close_from_a_callback(emit_log, which):
    model = mock.load_model(OPS)
    got = []
    holder = {}

    def on_record(record):
        got.append(record)
        if len(got) == 5:
            holder["sub"].close()  # returns at once; the reader finishes on its own

    def on_batch(batch):
        first = not got
        got.extend(batch.records())
        if first:
            holder["sub"].close()

    kwargs = {"callback": on_record} if which == "callback" else {"batch_callback": on_batch}
    sub = holder["sub"] = aclprof.subscribe(model, read_records=2, **kwargs)
    mock.execute(model, 50)
    sub.close()  # already closed from the callback: waits for that close to finish
    assert aclprof_threads() == []
    emitted = emit_log.read()
    assert len(emitted) == mock.stats()["recordsEmitted"] > 0
    assert [record_key(r) for r in got] == [e.key() for e in emitted]
    st = sub.stats
    assert st.delivered == len(emitted) and st.dropped == 0
    assert_released(sub)
    assert mock.mode() == "OFF"


def test_close_from_a_callback_with_the_pipe_full(emit_log):
    """The callback closes while the library still has far more than a pipe's worth to
    flush: the reader must keep draining while the unsubscribe runs."""
    model = mock.load_model(OPS)
    got = []
    started = threading.Event()
    holder = {}

    def on_record(record):
        if not got:
            started.wait(30)  # let the library queue everything first
            holder["sub"].close()
        got.append(record)

    sub = holder["sub"] = aclprof.subscribe(model, callback=on_record)
    mock.execute(model, 20000)  # 60000 records, 4.8 MB: more than the pipe holds
    started.set()
    sub.close(timeout=30)  # waits for the close the callback started
    emitted = emit_log.read()
    assert len(emitted) == 60000
    assert len(got) == 60000
    assert [record_key(r) for r in got[:100]] == [e.key() for e in emitted[:100]]
    assert [record_key(r) for r in got[-100:]] == [e.key() for e in emitted[-100:]]
    assert sub.stats.delivered == 60000
    assert mock.stats()["recordsDropped"] == 0
    assert_released(sub)


def test_close_from_another_thread_while_the_owner_iterates(emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, read_records=3)
    mock.execute(model, 30)
    first_seen = threading.Event()
    closer = threading.Thread(target=lambda: (first_seen.wait(10), sub.close()))
    closer.start()
    got = []
    for record in sub:  # ends once the subscription is closed and drained
        got.append(record)
        first_seen.set()
    closer.join(10)
    assert not closer.is_alive()
    emitted = emit_log.read()
    assert [record_key(r) for r in got] == [e.key() for e in emitted]
    assert sub.stats.delivered == len(emitted) == 90
    assert_released(sub)


def test_close_from_another_thread_while_the_owner_waits_on_an_idle_pipe():
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    waiting = threading.Event()
    result = []

    def consume():
        waiting.set()
        result.extend(sub)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert waiting.wait(10)
    sub.close()
    consumer.join(10)
    assert not consumer.is_alive() and result == []
    assert_released(sub)


def test_owner_closes_inside_its_own_loop(emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    mock.execute(model, 20)
    got = []
    for record in sub:
        got.append(record)
        if len(got) == 5:
            sub.close()  # iteration goes on with what is left, then ends
    emitted = emit_log.read()
    assert [record_key(r) for r in got] == [e.key() for e in emitted]
    assert_released(sub)


def test_with_block_raising_closes_and_keeps_the_exception(emit_log):
    model = mock.load_model(OPS)
    with pytest.raises(ZeroDivisionError):
        with aclprof.subscribe(model) as sub:
            mock.execute(model, 4)
            raise ZeroDivisionError
    assert sub.closed
    assert [record_key(r) for r in sub] == [e.key() for e in emit_log.read()]
    assert_released(sub)


def test_with_block_raising_and_close_failing_keeps_the_body_exception(emit_log):
    model = mock.load_model(OPS)
    with pytest.raises(KeyError):
        with aclprof.subscribe(model) as sub:
            mock.execute(model, 2)
            mock.wait_writer_idle()
            mock.fail_next("aclprofModelUnSubscribe")
            raise KeyError("body")
    assert sub.closed and len(list(sub)) == 6
    assert_released(sub)
    lowlevel.model_unsubscribe(model)  # the library still had it


def test_close_with_an_idle_pipe_is_prompt():
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    t0 = time.perf_counter()
    sub.close()
    elapsed = time.perf_counter() - t0
    # Typically ~1 ms (the benchmark measures it); the bound only has to catch a close
    # that waits for a timeout (5 s by default) instead of the EOF, even on a loaded box.
    assert elapsed < 2, f"close() took {elapsed * 1000:.0f} ms with nothing to drain"
    st = sub.stats
    assert (st.bytes_read, st.records_read, st.delivered, st.dropped) == (0, 0, 0, 0)
    assert list(sub) == []
    assert_released(sub)


def test_close_while_the_reader_blocks_on_a_full_queue(emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, queue_size=3, on_full="block", read_records=1)
    mock.execute(model, 100)
    mock.wait_writer_idle()
    t0 = time.perf_counter()
    sub.close()
    assert time.perf_counter() - t0 < 5
    assert [record_key(r) for r in sub] == [e.key() for e in emit_log.read()]
    assert_released(sub)


def test_close_while_the_reader_blocks_and_the_pipe_is_full(emit_log):
    """More than the pipe holds, a tiny queue, nobody consuming: the library's flush at
    unsubscribe needs the reader to drain, so close() must unblock it (the mock would give
    up after 5 s and drop the rest)."""
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, queue_size=10, on_full="block", read_records=64)
    mock.execute(model, 20000)  # 60000 records, 4.8 MB
    sub.close()
    assert mock.stats()["recordsDropped"] == 0  # the flush never stalled
    assert sub.stats.queued == 60000 and sub.stats.dropped == 0
    assert len(list(sub)) == 60000
    assert len(emit_log.read()) == 60000
    assert_released(sub)


def test_two_consumers_share_the_queue_without_duplicates(emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, read_records=5)
    parts: list[list] = [[], []]
    consumers = [threading.Thread(target=lambda p=p: p.extend(sub)) for p in parts]
    for c in consumers:
        c.start()
    mock.execute(model, 500)
    sub.close()
    for c in consumers:
        c.join(10)
        assert not c.is_alive()
    emitted = emit_log.read()
    got = sorted(record_key(r) for r in parts[0] + parts[1])
    assert got == sorted(e.key() for e in emitted)
    assert sub.stats.delivered == len(emitted) == 1500
    assert_released(sub)


def test_close_while_the_model_executes_in_another_thread(emit_log):
    """Records emitted before the unsubscribe are all delivered; after it none are
    emitted; the executing thread is unaffected."""
    mock.set_realtime(True)
    model = mock.load_model([{"name": "a", "type": "A", "duration_ns": 50_000},
                             {"name": "b", "type": "B", "duration_ns": 50_000}])
    got = []
    some = threading.Event()

    def on_record(record):
        got.append(record)
        some.set()

    sub = aclprof.subscribe(model, callback=on_record)
    errors = []

    def run():
        try:
            mock.execute(model, 200)  # ~20 ms of simulated device time
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert some.wait(10)
    sub.close()
    runner.join(30)
    assert errors == []
    emitted = emit_log.read()
    assert 0 < len(emitted) <= 400
    assert [record_key(r) for r in got] == [e.key() for e in emitted]
    assert_released(sub)


def test_close_waits_for_records_the_library_is_still_writing(emit_log):
    """A slow library writer: close() returns only once every record emitted before the
    unsubscribe has been written, read and delivered."""
    mock.set_writer_delay_us(300)
    model = mock.load_model(OPS)
    got = []
    sub = aclprof.subscribe(model, callback=got.append)
    mock.execute(model, 20)  # 60 records, ~18 ms of writing
    sub.close()
    emitted = emit_log.read()
    assert [record_key(r) for r in got] == [e.key() for e in emitted]
    assert len(got) == 60 and mock.stats()["recordsDropped"] == 0
    assert_released(sub)


def test_close_when_a_forked_child_keeps_the_write_end_open(emit_log):
    """The library closes its write end, but a forked child still holds a copy, so EOF
    never comes: close() must not hang; it wakes the reader after the timeout, once the
    pipe is drained."""
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    mock.execute(model, 10)
    mock.wait_writer_idle()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: keep every inherited fd open until told to go
        try:
            os.read(hold_r, 1)
        finally:
            os._exit(0)
    os.close(hold_r)
    try:
        with structlog.testing.capture_logs() as logs:
            t0 = time.monotonic()
            sub.close(timeout=0.2)
            elapsed = time.monotonic() - t0
        assert 0.15 <= elapsed < 3
        assert any("before EOF" in entry["event"] for entry in logs)
    finally:
        os.write(hold_w, b"x")
        os.close(hold_w)
        os.waitpid(pid, 0)
    assert [record_key(r) for r in sub] == [e.key() for e in emit_log.read()]
    assert_released(sub)


def test_close_after_mock_reset_pulled_the_subscription_away(emit_log):
    model = mock.load_model(OPS)
    got = []
    all_in = threading.Event()

    def on_record(record):
        got.append(record)
        if len(got) == 21:
            all_in.set()

    sub = aclprof.subscribe(model, callback=on_record)
    mock.execute(model, 7)
    assert all_in.wait(10)
    emitted = emit_log.read()
    mock.reset()  # the library closes the write end and forgets the model and config
    sub.close()  # the library had unsubscribed already and closed the pipe: not an error
    assert sub.closed
    assert [record_key(r) for r in got] == [e.key() for e in emitted]
    assert sub.stats.delivered == 21
    sub.close()
    assert_released(sub)


def test_mock_reset_with_records_still_in_the_pipe(emit_log):
    """The reset flushes the queued records into the pipe but also empties the name
    table, so records the reader had not reached yet lose their names: they are still
    delivered, with the right numbers, and counted as names_missing."""
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    mock.execute(model, 50)
    mock.reset()
    emitted = emit_log.read()  # complete: the reset closed the log
    sub.close()  # already unsubscribed by the reset: nothing lost, no error
    records = list(sub)
    assert len(records) == len(emitted) == 150
    nameless = 0
    for r, e in zip(records, emitted):
        assert record_key(r)[3:] == e.key()[3:]
        # The reset may land between the type and the name fetch of one record.
        assert r.op_name in (e.name, "?") and r.op_type in (e.type, "?")
        nameless += "?" in (r.op_name, r.op_type)
    assert sub.stats.names_missing == nameless
    assert_released(sub)


def test_close_after_the_model_was_unloaded(emit_log):
    """As in CANN, aclmdlUnload does not unsubscribe (GE's unload path never tells the
    profiler), and the unsubscribe then fails with 100011: the library keeps the pipe's
    write end. close() delivers what was written, raises that error and leaves the fd to
    the library (never closing an fd the library may still write to)."""
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    mock.execute(model, 5)
    mock.wait_writer_idle()
    mock.unload(model)
    assert mock.mode() == "SUBSCRIBE"  # still subscribed, to a model that is gone
    with pytest.raises(aclprof.InvalidModelIdError) as info:
        sub.close()
    assert info.value.function == "aclprofModelUnSubscribe"
    assert [record_key(r) for r in sub] == [e.key() for e in emit_log.read()]
    assert sub.stats.delivered == 15
    assert sub.closed and aclprof_threads() == []
    mock.reset()  # the process's end, for CANN: only now is the write end closed


# ---- callback exceptions --------------------------------------------------------------------

def test_callback_exceptions_are_counted_and_the_reader_goes_on(emit_log):
    model = mock.load_model(OPS)
    got = []
    calls = [0]

    def flaky(record):
        calls[0] += 1
        if calls[0] % 3 == 0:
            raise RuntimeError("boom")
        got.append(record)

    with structlog.testing.capture_logs() as logs:
        sub = aclprof.subscribe(model, callback=flaky)
        mock.execute(model, 20)
        sub.close()
    emitted = emit_log.read()
    assert calls[0] == len(emitted) == 60
    expected = [e.key() for i, e in enumerate(emitted) if (i + 1) % 3 != 0]
    assert [record_key(r) for r in got] == expected  # later records still delivered
    st = sub.stats
    assert st.callback_errors == 20 and st.dropped_callback_error == 20
    assert st.delivered == 40
    assert st.delivered + st.dropped == len(emitted)
    errors = [e for e in logs if e["log_level"] == "error"]
    # The traceback once, then one summary with the exact count (issue 10: not one each).
    assert len(errors) == 2 and errors[0].get("exc_info") and not errors[1].get("exc_info")
    assert errors[1]["errors_total"] == 20 and errors[1]["errors_since_last"] == 19
    assert_released(sub)


def test_batch_callback_exception_drops_that_batch_only(emit_log):
    model = mock.load_model(OPS)
    got = []
    sizes = []

    def flaky(batch):
        sizes.append(len(batch))
        if len(sizes) == 1:
            raise ValueError("first batch")
        got.extend(batch.records())

    sub = aclprof.subscribe(model, batch_callback=flaky, read_records=4)
    mock.execute(model, 10)
    sub.close()
    emitted = emit_log.read()
    assert [record_key(r) for r in got] == [e.key() for e in emitted[sizes[0]:]]
    st = sub.stats
    assert st.callback_errors == 1 and st.dropped_callback_error == sizes[0]
    assert st.delivered + st.dropped == len(emitted) == 30
    assert_released(sub)


def test_a_callback_raising_systemexit_does_not_kill_the_reader(emit_log):
    model = mock.load_model(OPS)
    got = []

    def exits(record):
        if not got:
            got.append(None)
            raise SystemExit(3)
        got.append(record)

    sub = aclprof.subscribe(model, callback=exits)
    mock.execute(model, 10)
    sub.close()
    emitted = emit_log.read()
    st = sub.stats
    assert st.delivered + st.dropped == len(emitted) == 30
    assert [record_key(r) for r in got[1:]] == [e.key() for e in emitted[1:]]
    assert_released(sub)


# ---- interpreter exit ----------------------------------------------------------------------

EXIT_PRELUDE = """
import atexit, os, sys
import aclprof, aclprof.mock as mock
aclprof.use_mock()
fds_at_start = len(os.listdir("/proc/self/fd"))
got = []

def report():  # registered before aclprof.api.subscription is imported: runs after its close
    s = mock.stats()
    threads = [t.name for t in __import__("threading").enumerate() if t.name != "MainThread"]
    print("REPORT", len(got), s["recordsEmitted"], s["nameTableEntries"],
          len(os.listdir("/proc/self/fd")) - fds_at_start, threads, flush=True)

atexit.register(report)
ops = [{"name": "a", "type": "A", "duration_ns": 100},
       {"name": "b", "type": "B", "duration_ns": 50}]
m1 = mock.load_model(ops)
m2 = mock.load_model(ops)
"""


def run_exit_script(run_python, body: str):
    t0 = time.monotonic()
    proc = run_python(EXIT_PRELUDE + textwrap.dedent(body), timeout=60)
    return proc, time.monotonic() - t0


def test_interpreter_exit_without_close(run_python):
    proc, elapsed = run_exit_script(run_python, """
        sub1 = aclprof.subscribe(m1, callback=got.append)
        sub2 = aclprof.subscribe(m2)  # records queued, never consumed
        mock.execute(m1, 100)
        mock.execute(m2, 100)
        # no close(): the atexit handler must close both
    """)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "Exception ignored" not in proc.stderr
    report = proc.stdout.strip().splitlines()[-1]
    # every record of the callback subscription delivered, table empty, no fd, no thread
    assert report == "REPORT 200 400 0 0 []", report
    assert elapsed < 15


def test_interpreter_exit_with_a_reader_blocked_on_a_full_queue(run_python):
    proc, elapsed = run_exit_script(run_python, """
        sub = aclprof.subscribe(m1, queue_size=2, on_full="block", read_records=1)
        mock.execute(m1, 500)
        mock.wait_writer_idle()
    """)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "REPORT 0 1000 0 0 []"
    assert elapsed < 15


def test_interpreter_exit_right_after_a_close_from_a_callback(run_python):
    """The close a callback started runs in the background; exit must wait for it, so
    every record emitted before the unsubscribe is still delivered."""
    proc, elapsed = run_exit_script(run_python, """
        holder = {}
        def cb(record):
            got.append(record)
            if len(got) == 1:
                holder["sub"].close()
        holder["sub"] = aclprof.subscribe(m1, callback=cb)
        mock.execute(m1, 5000)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    words = proc.stdout.strip().splitlines()[-1].split(" ", 5)
    assert words[0] == "REPORT"
    delivered, emitted = int(words[1]), int(words[2])
    assert delivered == emitted >= 1
    assert words[3:] == ["0", "0", "[]"]
    assert elapsed < 15


def test_a_second_close_from_another_thread_waits_for_the_callbacks_close(emit_log):
    model = mock.load_model(OPS)
    got = []
    holder = {}
    executed = threading.Event()
    closed_in_callback = threading.Event()
    go = threading.Event()

    def on_record(record):
        got.append(record)
        if len(got) == 1:
            executed.wait(10)  # everything is emitted before the unsubscribe
            holder["sub"].close()
            closed_in_callback.set()
            go.wait(10)  # thousands of records are still to come when main closes

    sub = holder["sub"] = aclprof.subscribe(model, callback=on_record)
    mock.execute(model, 3000)
    executed.set()
    assert closed_in_callback.wait(10)
    go.set()
    sub.close()
    assert aclprof_threads() == []
    emitted = emit_log.read()
    assert len(got) == len(emitted) == sub.stats.delivered == 9000
    assert_released(sub)
