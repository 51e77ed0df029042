"""AI Core exceptions through the binding and the typed API (issue 24), on the mock.

The mock fails an op on request (``aclprof.mock.inject_op_failure``), runs the exception
callbacks on its report thread as CANN's runtime does, and answers
``aclmdlCreateAndGetOpDesc`` with the op's tensor descriptions from the model file.
"""

from __future__ import annotations

import threading
import time

import pytest

import aclprof
from aclprof import mock
from aclprof.binding import opfailure
from aclprof.binding.errors import AclError
from aclprof.binding.loader import get_library
from aclprof.compat import acl

OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000,
     "inputs": [{"dtype": 1, "format": 0, "shape": [8, 3, 224, 224]},
                {"dtype": 0, "format": 4, "shape": [64, 3, 7, 7]}],
     "outputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}]},
    {"name": "relu1", "type": "Relu", "duration_ns": 300,
     "inputs": [{"dtype": 27, "format": 2, "shape": [-1, 1024]}],
     "outputs": [{"dtype": 27, "format": 2, "shape": []}]},
    {"name": "noio", "type": "NoOp", "duration_ns": 10},
]


def execute(model_id: int, times: int = 1) -> list[int]:
    """Run the model; the codes of the executions that failed."""
    codes = []
    for _ in range(times):
        try:
            mock.execute(model_id)
        except AclError as exc:
            assert exc.function == "aclmdlExecute"
            codes.append(exc.code)
    return codes


@pytest.fixture
def received():
    got: list[aclprof.OpFailure] = []
    threads: list[int] = []

    def handler(failure: aclprof.OpFailure) -> None:
        threads.append(threading.get_native_id())
        got.append(failure)

    with aclprof.watch_failures(handler) as watch:
        yield watch, got, threads


def test_a_failure_is_delivered_with_its_op_and_tensors(received):
    watch, got, threads = received
    model = mock.load_model(OPS, device=2)
    mock.inject_op_failure(model, "conv1")
    assert execute(model) == [500002]  # ACL_ERROR_GE_FAILURE from the synchronous execute
    assert watch.wait_delivered(1, 10)
    (f,) = got
    assert (f.device_id, f.stream_id, f.task_id) == (2, model, 0)
    assert f.thread_id == threading.get_native_id(), "the thread that submitted the task"
    assert (f.error_code, f.error_name) == (507015, "ACL_ERROR_RT_AICORE_EXCEPTION")
    assert f.op_name == "conv1" and f.op_desc_code == 0
    assert [(t.dtype_name, t.format_name, t.shape) for t in f.inputs] == [
        ("ACL_FLOAT16", "ACL_FORMAT_NCHW", (8, 3, 224, 224)),
        ("ACL_FLOAT", "ACL_FORMAT_FRACTAL_Z", (64, 3, 7, 7))]
    assert [(t.dtype, t.format, t.shape) for t in f.outputs] == [(1, 3, (8, 4, 112, 112, 16))]
    assert len({t.address for t in f.inputs + f.outputs}) == 3 and all(t.address for t in f.inputs)
    assert abs(f.host_time_ns - time.time_ns()) < 60e9
    assert threads[0] != threading.get_native_id(), "the handler runs on the dispatcher thread"
    assert "conv1" in f.describe() and "ACL_FLOAT16[8x3x224x224]" in f.describe()
    stats = mock.stats()
    assert stats["opFailures"] == 1 and stats["exceptionCallbacks"] == 1
    assert stats["tensorDescsInUse"] == 0, "both arrays freed in the callback"
    # Once: the next execution runs every op.
    assert execute(model) == []


def test_unknown_rank_scalars_and_ops_without_a_description(received):
    watch, got, _ = received
    model = mock.load_model(OPS)
    mock.inject_op_failure(model, 1, every=1, code=507014)
    mock.inject_op_failure(model, "relu1", every=1, code=507014)
    assert execute(model, 2) == [500002, 500002]
    mock.inject_op_failure(model, "noio")
    execute(model)
    assert watch.wait_delivered(3, 10)
    relu = got[0]
    assert relu.error_name == "ACL_ERROR_RT_AICORE_TIMEOUT"
    assert relu.inputs[0].shape == (-1, 1024) and relu.inputs[0].dtype_name == "ACL_BF16"
    assert relu.outputs[0].shape == () and "scalar" in relu.describe()
    noio = got[2]
    # GE refuses an op without inputs or outputs (ACL_REQUIRES_POSITIVE): no name, the code kept.
    assert (noio.op_name, noio.op_desc_code, noio.inputs) == (None, 100000, ())
    assert "of task 2" in noio.describe()


def test_every_nth_and_clear(received):
    watch, got, _ = received
    model = mock.load_model(OPS)
    mock.inject_op_failure(model, "relu1", every=3)
    assert len(execute(model, 9)) == 3
    mock.clear_op_failure(model)
    assert execute(model, 3) == []
    assert watch.wait_delivered(3, 10)
    assert [f.op_name for f in got] == ["relu1"] * 3
    st = watch.stats
    assert (st.received, st.delivered, st.dropped, st.queued) == (3, 3, 0, 0)


def test_a_blocked_handler_never_holds_up_the_runtime_and_drops_are_counted():
    release = threading.Event()
    entered = threading.Event()

    def stuck(_failure):
        entered.set()
        release.wait(30)

    model = mock.load_model(OPS)
    watch = aclprof.watch_failures(stuck, queue_size=2)
    try:
        mock.inject_op_failure(model, "conv1", every=1)
        t0 = time.monotonic()
        assert len(execute(model, 1)) == 1
        assert entered.wait(10)  # the handler holds the first (else under load 1 and 2 were queued, 4 dropped)
        assert len(execute(model, 5)) == 5
        assert time.monotonic() - t0 < 10, "the executions did not wait for the handler"
        st = watch.stats
        # one in the handler, two queued, three dropped: all accounted for
        assert (st.received, st.delivered + st.queued, st.dropped) == (6, 2, 3)
    finally:
        release.set()
        watch.close()
    st = watch.stats
    assert st.received == st.delivered + st.dropped + st.queued and st.delivered == 3


def test_a_raising_handler_is_counted_and_the_next_failure_still_arrives(caplog):
    calls = []

    def bad(failure):
        calls.append(failure)
        raise RuntimeError("handler bug")

    model = mock.load_model(OPS)
    with aclprof.watch_failures(bad) as watch:
        mock.inject_op_failure(model, "conv1", every=1)
        execute(model, 2)
        assert watch.wait_delivered(2, 10)
        assert watch.stats.handler_errors == 2
    assert len(calls) == 2
    assert "handler bug" in caplog.text


def test_the_pyacl_callback_and_a_watch_work_side_by_side(received):
    watch, got, _ = received
    seen = []

    def callback(info):
        seen.append((acl.rt.get_task_id_from_exception_info(info),
                     acl.rt.get_error_code_from_exception_info(info)))
        raise ValueError("the application's bug")  # never reaches the runtime

    before = opfailure.counters()["errors"]
    assert acl.rt.set_exception_info_callback(callback) == 0
    try:
        model = mock.load_model(OPS)
        mock.inject_op_failure(model, "relu1")
        assert execute(model) == [500002]
        assert watch.wait_delivered(1, 10)
        assert seen == [(1, 507015)] and got[0].op_name == "relu1"
        assert opfailure.counters()["errors"] == before + 1
        # Cleared: the watch alone goes on.
        assert acl.rt.set_exception_info_callback(None) == 0
        mock.inject_op_failure(model, "relu1")
        execute(model)
        assert watch.wait_delivered(2, 10) and len(seen) == 1
    finally:
        acl.rt.set_exception_info_callback(None)


def test_without_register_the_set_slot_is_used_and_released(monkeypatch):
    """Older CANN has only aclrtSetExceptionInfoCallback: the trampoline takes that slot and
    gives it back (NULL) when the last party detaches."""
    lib = get_library()
    monkeypatch.delitem(lib.functions, "aclrtExceptionInfoCallbackRegister")
    got = []
    model = mock.load_model(OPS)
    with aclprof.watch_failures(got.append) as watch:
        assert opfailure.counters()["installed"] == "set"
        mock.inject_op_failure(model, "conv1")
        execute(model)
        assert watch.wait_delivered(1, 10)
    assert opfailure.counters()["installed"] is None
    mock.inject_op_failure(model, "conv1")
    execute(model)
    assert mock.stats()["exceptionCallbacks"] == 1, "nothing is registered any more"


def test_the_subscription_keeps_the_ops_before_the_failure(received):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    try:
        mock.inject_op_failure(model, "relu1")
        execute(model)       # conv1 recorded; relu1 failed (no record), noio never ran
        execute(model)       # all three
        mock.set_failed_op_record(True)
        mock.inject_op_failure(model, "relu1")
        execute(model)       # conv1 and the failed relu1
    finally:
        sub.close()
    names = [r.op_name for r in sub]
    assert names == ["conv1", "conv1", "relu1", "noio", "conv1", "relu1"]
    st = sub.stats
    assert st.records_read == st.delivered + st.dropped + st.queued == 6


def test_bad_input_is_refused_with_clear_errors():
    with pytest.raises(TypeError, match="handler must be callable"):
        aclprof.watch_failures(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queue_size"):
        aclprof.watch_failures(print, queue_size=0)
    with pytest.raises(TypeError, match="callable or None"):
        acl.rt.set_exception_info_callback(42)  # type: ignore[arg-type]
    model = mock.load_model(OPS)
    with pytest.raises(ValueError, match="no op 'nope'"):
        mock.inject_op_failure(model, "nope")
    with pytest.raises(ValueError, match="no op 7"):
        mock.inject_op_failure(model, 7)
    with pytest.raises(ValueError, match="not loaded"):
        mock.clear_op_failure(model + 100)
    with pytest.raises(TypeError, match="op_name_len"):
        acl.mdl.create_and_get_op_desc(0, model, 0, 0)
    assert opfailure.counters()["installed"] is None, "nothing left attached"


def test_close_is_idempotent_and_detaches():
    got = []
    watch = aclprof.watch_failures(got.append)
    watch.close()
    watch.close()
    model = mock.load_model(OPS)
    mock.inject_op_failure(model, "conv1")
    execute(model)
    assert got == [] and watch.stats.received == 0
    assert opfailure.counters()["installed"] is None


def test_compat_op_desc_rules():
    model = mock.load_model(OPS)
    name, inputs, n_in, outputs, n_out, ret = acl.mdl.create_and_get_op_desc(0, model, 0, 256)
    assert (name, n_in, n_out, ret) == ("conv1", 2, 1, 0)
    second = acl.get_tensor_desc_by_index(inputs, 1)
    assert acl.get_tensor_desc_type(second) == 0 and acl.get_tensor_desc_format(second) == 4
    assert acl.get_tensor_desc_num_dims(second) == 4
    assert acl.get_tensor_desc_dim_v2(second, 3) == (7, 0)
    assert acl.get_tensor_desc_dim_v2(second, 4)[1] == 100000
    assert acl.get_tensor_desc_address(second) != 0
    acl.destroy_tensor_desc(inputs)
    acl.destroy_tensor_desc(outputs)
    assert mock.stats()["tensorDescsInUse"] == 0
    # The name must fit with its NUL: "conv1" needs 6 bytes.
    assert acl.mdl.create_and_get_op_desc(0, model, 0, 5)[5] == 100000
    assert acl.mdl.create_and_get_op_desc(0, model, 9, 256)[5] == 500002  # no such task
    assert acl.rt.get_task_id_from_exception_info(0) == 0xFFFFFFFF
    assert acl.get_tensor_desc_type(0) == -1 and acl.get_tensor_desc_num_dims(0) == 0
