"""aclprof.StepInfo and the raw step-info calls (reference 3.5): each tag once per object,
recorded in the running session's event log."""

from __future__ import annotations

import pytest

import aclprof
from aclprof import DataType, StepTag, mock
from aclprof.binding import lowlevel as ll


def _steps(events):
    return [(e["index"], e["tag"]) for e in events if e["kind"] == "step"]


def test_step_start_end_recorded(out_dir, tx_events):
    with aclprof.Profiler(out_dir, data_types=DataType.ACL_API | DataType.MSPROFTX) as prof:
        with aclprof.StepInfo() as step:
            step.start()
            aclprof.mark("inside the step")
            step.end()
        with aclprof.StepInfo() as second:
            second.start()
            second.end()
    events = tx_events(prof.result_dirs[0])
    assert _steps(events) == [(1, "start"), (1, "end"), (2, "start"), (2, "end")]
    start, mark, end = events[:3]
    assert start["start_ns"] <= mark["start_ns"] <= end["start_ns"]
    assert step.closed and second.closed


def test_steps_need_no_msproftx_bit(out_dir, tx_events):
    # Step events go to the session's log whatever its data types.
    with aclprof.Profiler(out_dir, data_types=DataType.ACL_API) as prof:
        step = aclprof.StepInfo()
        step.start()
        step.end()
        step.close()
    assert _steps(tx_events(prof.result_dirs[0])) == [(1, "start"), (1, "end")]


def test_step_outside_a_session_is_accepted():
    step = aclprof.StepInfo()
    step.start()
    step.end()
    step.close()
    assert mock.stats()["txEvents"] == 0


def test_each_tag_once(out_dir, tx_events):
    with aclprof.Profiler(out_dir, data_types=DataType.ACL_API) as prof:
        step = aclprof.StepInfo()
        with pytest.raises(ValueError, match="END before START"):
            step.end()
        step.start()
        with pytest.raises(ValueError, match="already stamped"):
            step.start()
        step.end()
        with pytest.raises(ValueError, match="already stamped"):
            step.end()
        step.close()
    # Only the valid stamps reached the library.
    assert _steps(tx_events(prof.result_dirs[0])) == [(1, "start"), (1, "end")]


def test_closed_step_info():
    step = aclprof.StepInfo()
    step.close()
    step.close()  # idempotent
    assert step.closed
    with pytest.raises(aclprof.HandleClosedError):
        step.start()


def test_step_info_with_a_stream():
    ll.rt_set_device(0)
    stream = ll.rt_create_stream()
    with aclprof.StepInfo() as step:
        step.start(stream)
        step.end(stream)
    stream.close()
    with pytest.raises(TypeError):
        aclprof.StepInfo().start(stream=object())


# ---- lowlevel -----------------------------------------------------------------------------------

def test_lowlevel_step_info_codes():
    handle = ll.create_step_info()
    ll.get_step_timestamp(handle, StepTag.END)  # C has no order rule; only "once per tag"
    with pytest.raises(aclprof.InvalidParamError) as info:
        ll.get_step_timestamp(handle, StepTag.END)
    assert info.value.code == 100000 and info.value.function == "aclprofGetStepTimestamp"
    assert "END" in str(info.value)
    ll.get_step_timestamp(handle, 0)
    with pytest.raises(aclprof.InvalidParamError):
        ll.get_step_timestamp(handle, StepTag.START)
    ll.destroy_step_info(handle)
    assert handle.closed
    with pytest.raises(aclprof.HandleClosedError):
        ll.get_step_timestamp(handle, StepTag.START)
    ll.destroy_step_info(handle)  # idempotent


def test_lowlevel_step_info_arguments():
    handle = ll.create_step_info()
    with pytest.raises(ValueError):
        ll.get_step_timestamp(handle, 2)
    with pytest.raises(ValueError):
        ll.get_step_timestamp(handle, -1)
    with pytest.raises(TypeError):
        ll.get_step_timestamp(object(), StepTag.START)
    with pytest.raises(TypeError):
        ll.get_step_timestamp(handle, StepTag.START, stream=object())
    handle.close()


def test_other_tags_count_as_end_in_c_but_python_refuses_them(out_dir, tx_events):
    # prof_acl_core.cpp:57-69 (audit row 17): a tag other than START sets the END flag and is
    # never refused twice; an END after it is refused. The binding refuses it up front.
    from aclprof.binding.loader import get_library
    lib = get_library()
    with aclprof.Profiler(out_dir, data_types=DataType.ACL_API | DataType.MSPROFTX) as prof:
        handle = ll.create_step_info()
        mock.fail_next("aclprofGetStepTimestamp", 1, 500002)
        with pytest.raises(ValueError, match="aclprofGetStepTimestamp: tag 2 is not a StepTag"):
            ll.get_step_timestamp(handle, 2)
        with pytest.raises(aclprof.OtherAclError):  # still armed: C was not called
            ll.get_step_timestamp(handle, StepTag.START)
        fn = lib.fn("aclprofGetStepTimestamp")
        assert fn(handle._get(), 2, lib.ffi.NULL) == 0
        assert fn(handle._get(), 2, lib.ffi.NULL) == 0
        assert fn(handle._get(), int(StepTag.END), lib.ffi.NULL) == 100000
        ll.get_step_timestamp(handle, StepTag.START)
        handle.close()
    assert [tag for _, tag in _steps(tx_events(prof.result_dirs[0]))] == ["end", "end", "start"]


def test_lowlevel_step_info_faults():
    mock.fail_next("aclprofCreateStepInfo", 2, 0)
    with pytest.raises(MemoryError):
        ll.create_step_info()
    with pytest.raises(MemoryError):
        aclprof.StepInfo()
    handle = ll.create_step_info()
    mock.fail_next("aclprofGetStepTimestamp", 1, 500002)
    with pytest.raises(aclprof.OtherAclError) as info:
        ll.get_step_timestamp(handle, StepTag.START)
    assert info.value.name == "ACL_ERROR_GE_FAILURE"
    ll.get_step_timestamp(handle, StepTag.START)  # the failed call stamped nothing
    handle.close()


def test_step_info_python_state_survives_a_c_failure():
    step = aclprof.StepInfo()
    mock.fail_next("aclprofGetStepTimestamp", 1, 500002)
    with pytest.raises(aclprof.OtherAclError):
        step.start()
    step.start()  # the failed start did not count
    step.end()
    step.close()


def test_step_index_ids_count_up(out_dir, tx_events):
    with aclprof.Profiler(out_dir, data_types=DataType.ACL_API) as prof:
        for _ in range(5):
            with aclprof.StepInfo() as step:
                step.start()
                step.end()
    assert [i for i, tag in _steps(tx_events(prof.result_dirs[0])) if tag == "start"] == [1, 2, 3, 4, 5]
