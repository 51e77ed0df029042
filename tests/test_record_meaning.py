"""What the op records mean (fidelity audit rows 11, 12, 13), end to end against the mock.

- Row 11: record times are the device's clock. With the mock's device clock moved an hour
  away from the host's, the reader lag must stay small (calibrated), where the old formula
  ``monotonic_ns() - end`` is off by the hour.
- Row 12: CANN leaves ``devId`` 0 on its main path; the binding reports the subscription's
  device instead.
- Row 13: CANN's step keypoint records (``keypoint_op``/``na``) are marked, not mistaken
  for ops; by default CANN routes them nowhere (model id 0xFFFFFFFF).

The reference for "what was emitted" is the mock's emit log and its counters.
"""

from __future__ import annotations

import time

import pytest
from helpers.records import record_key

import aclprof
from aclprof import mock

pytestmark = pytest.mark.usefixtures("no_leaks")

OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000},
    {"name": "relu1", "type": "Relu", "duration_ns": 500},
]
HOUR = 3600 * 10**9


def _offsets() -> list[int]:
    # A device clock behind the host's cannot go below 0: on a machine up for less than an
    # hour, -1 h is rejected by the mock, so take most of the uptime instead.
    return [HOUR, -min(HOUR, time.monotonic_ns() * 9 // 10)]


def _wait_queued(sub, n: int) -> None:
    """Until the reader has queued n records (records_read counts them before decoding)."""
    deadline = time.monotonic() + 10
    while sub.stats.queued < n and time.monotonic() < deadline:
        time.sleep(0.01)


# ---- row 11: clock ----------------------------------------------------------------------

@pytest.mark.parametrize("offset", _offsets(), ids=["ahead", "behind"])
def test_lag_is_sane_when_the_device_clock_is_not_the_hosts(emit_log, offset):
    mock.set_device_clock_offset(offset)
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        t0 = time.monotonic_ns()
        mock.execute(model, 5)
        _wait_queued(sub, 10)
        st = sub.stats
        elapsed = time.monotonic_ns() - t0
        records = list(sub.batches(timeout=1))
    assert st.records_read == 10
    assert st.lag_clock == "calibrated"
    assert 0 <= st.reader_lag_ns <= elapsed + 10**9
    # The records really are on the offset clock: the old formula is off by the offset.
    newest_end = max(int(b.data["end"].max()) for b in records)
    raw = time.monotonic_ns() - newest_end
    assert abs(raw + offset) < 10 * 10**9 and abs(raw) > abs(offset) // 2
    assert [record_key(r) for b in records for r in b] == [e.key() for e in emit_log.read()]


def test_host_lag_clock_is_the_plain_difference():
    """lag_clock="host" trusts the caller: with an offset device clock it is as absurd
    as the offset (here an hour ahead: negative)."""
    mock.set_device_clock_offset(HOUR)
    model = mock.load_model(OPS)
    with aclprof.subscribe(model, lag_clock="host") as sub:
        mock.execute(model, 1)
        _wait_queued(sub, 2)
        st = sub.stats
    assert st.lag_clock == "host"
    assert -HOUR - 10**9 < st.reader_lag_ns < -HOUR + 10**9


def test_bad_lag_clock_is_rejected():
    model = mock.load_model(OPS)
    with pytest.raises(ValueError, match="lag_clock"):
        aclprof.subscribe(model, lag_clock="device")


def test_device_clock_offset_is_checked_and_reset():
    with pytest.raises(ValueError, match="aclmockSetDeviceClockOffset"):
        mock.set_device_clock_offset(-time.monotonic_ns() - HOUR)
    with pytest.raises(ValueError, match="int64"):
        mock.set_device_clock_offset(2**63)
    mock.set_device_clock_offset(HOUR)
    mock.reset()
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        before = time.monotonic_ns()
        mock.execute(model, 1)
    ends = [r.end for r in sub]
    assert len(ends) == 2 and all(before <= e < before + HOUR // 2 for e in ends)


# ---- row 12: devId ----------------------------------------------------------------------

@pytest.mark.parametrize("device", [3, 0])
def test_devid_zero_falls_back_to_the_subscription_device(emit_log, device):
    mock.set_devid_zero(True)
    model = mock.load_model(OPS, device=device)
    with aclprof.subscribe(model, device=device) as sub:
        mock.execute(model, 3)
    records = list(sub)
    assert len(records) == 6
    assert {r.device_id for r in records} == {device}
    assert [record_key(r) for r in records] == [e.key() for e in emit_log.read()]


def test_devid_zero_really_reaches_the_reader():
    """The fallback is what makes the device right: a subscription told another device
    reports that one when the record says 0, and the record's own device when it does not."""
    model = mock.load_model(OPS, device=3)
    with aclprof.subscribe(model, device=5) as sub:
        mock.execute(model, 1)
        mock.wait_writer_idle()
        mock.set_devid_zero(True)
        mock.execute(model, 1)
    assert [r.device_id for r in sub] == [3, 3, 5, 5]


# ---- row 13: keypoint records --------------------------------------------------------------

def _one_step_around(model: int, iterations: int) -> None:
    step = aclprof.StepInfo()
    step.start()
    mock.execute(model, iterations)
    time.sleep(0.002)
    step.end()


def test_keypoint_records_are_marked(emit_log):
    model = mock.load_model(OPS, device=2)
    mock.set_step_keypoints(True, model)  # as if CANN had stamped this model's id
    with aclprof.subscribe(model, device=2) as sub:
        t0 = time.monotonic_ns()
        _one_step_around(model, 2)
        t1 = time.monotonic_ns()
    batches = list(sub.batches(timeout=1))
    records = [r for b in batches for r in b]
    emitted = emit_log.read()
    assert [record_key(r) for r in records] == [e.key() for e in emitted]
    assert [r.kind for r in records] == ["op"] * 4 + ["keypoint"]
    kp = records[-1]
    assert (kp.op_name, kp.op_type, kp.model_id, kp.flag, kp.thread_id) == ("keypoint_op", "na", model, 0, 0)
    assert kp.device_id == 2  # the record's devId is 0: the subscription's device
    assert t0 <= kp.start < kp.end <= t1 and kp.duration == kp.end - kp.start
    assert kp.execution_time == 0
    column = [bool(k) for b in batches for k in b.data["keypoint"]]
    assert column == [False] * 4 + [True]
    assert sub.stats.keypoints == 1
    assert mock.stats()["keypointsEmitted"] == 1


def test_keypoints_are_dropped_by_default_as_in_cann(emit_log):
    """CANN stamps model id 0xFFFFFFFF on step keypoints; no subscription has it."""
    model = mock.load_model(OPS)
    with aclprof.subscribe(model) as sub:
        _one_step_around(model, 1)
    records = list(sub)
    assert [r.kind for r in records] == ["op", "op"]
    assert sub.stats.keypoints == 0
    st = mock.stats()
    assert st["keypointsUnrouted"] == 1 and st["keypointsEmitted"] == 0
    assert st["nameTableEntries"] == 1  # registered before routing, never fetched (as CANN)
    assert len(emit_log.read()) == 2


def test_keypoints_can_be_switched_off():
    model = mock.load_model(OPS)
    mock.set_step_keypoints(False, model)
    with aclprof.subscribe(model) as sub:
        _one_step_around(model, 1)
    assert [r.kind for r in sub] == ["op", "op"]
    assert mock.stats()["keypointsUnrouted"] == 0


def test_a_real_op_named_like_a_keypoint_is_misread():
    """Documented limitation: name AND type decide, nothing else in the record can."""
    model = mock.load_model([{"name": "keypoint_op", "type": "na", "duration_ns": 100},
                             {"name": "keypoint_op", "type": "Conv2D", "duration_ns": 100},
                             {"name": "na", "type": "keypoint_op", "duration_ns": 100}])
    with aclprof.subscribe(model) as sub:
        mock.execute(model, 1)
    assert [r.kind for r in sub] == ["keypoint", "op", "op"]
