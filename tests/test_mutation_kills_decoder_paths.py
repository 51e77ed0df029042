"""The subscription decoder's less travelled paths, exactly (issue 20: the survivors of its
mutation run, 2026-12-02 night).

- Agent mode, :meth:`Decoder.run_sink`: what it delivers into a real C queue
  (:class:`aclprof.binding.agentpath.AgentQueue`) from a fed pipe, the counts of the
  queue's slot, the partial record it leaves, and its refusal before the layout check.
- :meth:`Decoder.read` / :meth:`Decoder.finish` pairs: a finish with nothing read, a
  second finish, a failing wrap counted every time.
- The getters' fallback (the mock's "shuffled" layout: same size, moved fields): which
  records are marked as keypoints (name AND type), counted over several batches; corrupt
  records counted; a batch of one record, and one of none; repeated names interned once;
  the flag of an older CANN without ``aclprofGetOpFlag``; the newest end for the reader's
  lag clock (a real gap: the fallback never set it, so ``reader_lag_ns`` stayed None).
- The layout check: a corrupt first record does not delay it; its warning's text and fields.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import structlog
from helpers.records import capture_records

import aclprof
from aclprof import mock
from aclprof.api.records import OP_DTYPE, raw_dtype
from aclprof.api.subscription import decoder as decoder_module
from aclprof.api.subscription.decoder import Decoder
from aclprof.binding import lowlevel
from aclprof.binding.agentpath import AgentQueue, QueueSink, SlotNames
from aclprof.binding.errors import UnsupportedError
from aclprof.binding.opdecode import READ_EOF

pytestmark = pytest.mark.usefixtures("no_leaks")

# Name AND type decide a keypoint: only the first op is one ("na" is CANN's keypoint type).
OPS = [
    {"name": "keypoint_op", "type": "na", "duration_ns": 100},
    {"name": "keypoint_op", "type": "Conv2D", "duration_ns": 200},
    {"name": "na", "type": "Relu", "duration_ns": 300},
    {"name": "relu", "type": "na", "duration_ns": 400, "flag": 1},
]
KINDS = [True, False, False, False]
PAIRS = [(op["name"], op["type"]) for op in OPS]


def _pairs(batch) -> list[tuple[str, str]]:
    return [(r.op_name, r.op_type) for r in batch.records()]


def _free_names(raw: bytes, size: int = 80) -> None:
    """Fetch (and so free) the names of records the decoder left in the library's table."""
    lowlevel.get_op_name(raw[:size], 0, lowlevel.get_op_name_len(raw[:size], 0))
    lowlevel.get_op_type(raw[:size], 0, lowlevel.get_op_type_len(raw[:size], 0))


@pytest.fixture
def pipe():
    fds = list(os.pipe())
    yield fds
    for fd in fds:
        if fd >= 0:
            os.close(fd)


def _close_writer(fds: list[int]) -> None:
    os.close(fds[1])
    fds[1] = -1


# ---- agent mode: run_sink ------------------------------------------------------------------

def test_run_sink_delivers_every_record_to_the_queue_and_leaves_the_partial_one(pipe):
    model = mock.load_model(OPS, device=0)
    raw = capture_records(model, 2)
    dec = Decoder(80, default_device=5)
    (first,) = dec.feed(raw[:80])  # the layout check: run_sink needs it done
    assert dec.native_ready and _pairs(first) == PAIRS[:1]
    queue = AgentQueue(100, -1)
    slot = queue.add_slot()
    sink = QueueSink(queue, slot)
    tail = b"\x07" * 33  # a partial record at EOF: left in the decoder, not decoded
    os.write(pipe[1], raw[80:] + tail)
    _close_writer(pipe)

    flags = dec.run_sink(sink, pipe[0], -1, 0, 1)

    assert flags == READ_EOF and type(flags) is int
    assert dec.filled == len(tail) and bytes(dec.buffer[:len(tail)]) == tail
    packed, slots, _ = queue.take(100)
    rows = packed.view(OP_DTYPE)
    assert len(rows) == 7 and slots.tolist() == [slot] * 7
    names = SlotNames(queue, slot).upto(int(max(rows["op_name"].max(), rows["op_type"].max())) + 1)
    assert [(names[n], names[t]) for n, t in zip(rows["op_name"], rows["op_type"])] == (PAIRS * 2)[1:]
    assert rows["keypoint"].tolist() == (KINDS * 2)[1:]
    assert set(rows["device_id"].tolist()) == {5}  # the mock's devId 0: the decoder's default device
    assert rows["model_id"].tolist() == [model] * 7
    counts = sink.counts()
    assert (counts.records_read, counts.delivered, counts.corrupt, counts.keypoints) == (7, 7, 0, 1)
    assert counts.bytes_read == 7 * 80 + len(tail)
    assert mock.stats()["nameTableEntries"] == 0  # every name fetched once


def test_run_sink_counts_corrupt_records_and_skips_them(pipe):
    model = mock.load_model(OPS)
    original = capture_records(model, 1)
    raw = bytearray(original)
    dec = Decoder(80)
    dec.feed(original[:80])
    raw[80 + 40] ^= 1  # the second record's bytes no longer match its signature
    queue = AgentQueue(100, -1)
    sink = QueueSink(queue, queue.add_slot())
    os.write(pipe[1], bytes(raw[80:]))
    _close_writer(pipe)
    assert dec.run_sink(sink, pipe[0], -1, 0, 1) == READ_EOF
    c = sink.counts()
    assert (c.records_read, c.delivered, c.corrupt, dec.filled) == (3, 2, 1, 0)
    _free_names(original[80:160])  # the corrupt record's names were never fetched


def test_run_sink_refuses_before_the_layout_check(pipe):
    dec = Decoder(80)
    queue = AgentQueue(10, -1)
    _close_writer(pipe)  # at EOF: a run that went ahead would return at once
    with pytest.raises(RuntimeError, match=r"^Decoder\.run_sink: the record layout is not checked yet$"):
        dec.run_sink(QueueSink(queue, queue.add_slot()), pipe[0], -1, 0, 1)
    assert queue.totals()[0] == 0


# ---- read / finish ---------------------------------------------------------------------------

def test_finish_with_nothing_read_returns_none_and_changes_nothing():
    dec = Decoder(80)
    assert dec.finish() is None
    assert (dec.filled, dec.records_read, dec.records_decoded, dec.failed) == (0, 0, 0, 0)


def test_a_second_finish_after_one_read_returns_none(pipe):
    model = mock.load_model(OPS)
    raw = capture_records(model, 1)
    dec = Decoder(80)
    dec.feed(raw[:80])
    os.write(pipe[1], raw[80:])
    n, _ = dec.read(pipe[0], -1, 0)
    assert n == 3 * 80
    batch = dec.finish()
    assert batch is not None and _pairs(batch) == PAIRS[1:]
    assert dec.finish() is None
    assert (dec.records_read, dec.records_decoded, dec.filled) == (4, 4, 0)


def test_one_record_read_is_one_batch(pipe):
    model = mock.load_model(OPS[1:2])
    raw = capture_records(model, 2)
    dec = Decoder(80)
    dec.feed(raw[:80])
    os.write(pipe[1], raw[80:])
    assert dec.read(pipe[0], -1, 0)[0] == 80
    batch = dec.finish()
    assert batch is not None and _pairs(batch) == PAIRS[1:2] and dec.records_read == 2


def test_a_failing_wrap_after_read_counts_its_records_every_time(pipe, monkeypatch):
    dec = Decoder(80)
    model = mock.load_model(OPS[1:2])
    raw = capture_records(model, 5)
    dec.feed(raw[:80])

    def boom(rows):
        raise RuntimeError("bug")

    monkeypatch.setattr(dec, "_batch", boom)
    for i, expected in ((1, 2), (3, 4)):
        os.write(pipe[1], raw[i * 80:(i + 2) * 80])
        dec.read(pipe[0], -1, 0)
        with pytest.raises(RuntimeError, match="bug"):
            dec.finish()
        assert dec.failed == expected


def test_keypoints_add_up_over_batches_of_the_c_path():
    model = mock.load_model(OPS)
    raw = capture_records(model, 3)
    dec = Decoder(80)
    for i in range(3):
        (batch,) = dec.feed(raw[i * 320:(i + 1) * 320])
        assert batch.data["keypoint"].tolist() == KINDS
    assert dec.keypoints == 3


# ---- the getters' fallback -------------------------------------------------------------------

@pytest.fixture
def shuffled():
    """Records the decoder's offsets misread (the mock's getters follow the move)."""
    mock.set_op_desc_layout("shuffled")


def test_the_fallback_marks_keypoints_by_name_and_type_and_counts_them(shuffled):
    model = mock.load_model(OPS)
    raw = capture_records(model, 3)
    dec = Decoder(80)
    batches = [dec.feed(raw[i * 320:(i + 1) * 320])[0] for i in range(3)]
    assert dec.layout_mismatch and dec.by_getters == 12
    for batch in batches:
        assert _pairs(batch) == PAIRS
        assert batch.data["keypoint"].tolist() == KINDS
        assert [r.kind for r in batch.records()] == ["keypoint", "op", "op", "op"]
    assert dec.keypoints == 3


def test_the_fallback_marks_nothing_before_both_keypoint_strings_are_seen(shuffled):
    model = mock.load_model([{"name": "keypoint_op", "type": "Conv2D", "duration_ns": 10}])
    raw = capture_records(model, 2)
    dec = Decoder(80)
    (batch,) = dec.feed(raw)
    assert batch.data["keypoint"].tolist() == [False, False] and dec.keypoints == 0


def test_the_fallback_marks_no_op_named_like_its_type_before_any_keypoint(shuffled):
    """Before "keypoint_op" and "na" are seen nothing is a keypoint, whatever ids a
    record's name and type share (here one string, id 1, for both)."""
    model = mock.load_model([{"name": "Relu", "type": "Relu", "duration_ns": 10}])
    raw = capture_records(model, 1)
    dec = Decoder(80)
    (batch,) = dec.feed(raw)
    assert batch.data["op_name"].tolist() == batch.data["op_type"].tolist() == [1]
    assert batch.data["keypoint"].tolist() == [False] and dec.keypoints == 0


def test_the_fallback_counts_every_corrupt_record_and_decodes_single_and_empty_batches(shuffled):
    model = mock.load_model(OPS[1:2])
    raw = capture_records(model, 4)
    bad = bytearray(raw)
    for i in (1, 2):
        bad[i * 80 + 40] ^= 1
    dec = Decoder(80)
    (one,) = dec.feed(bytes(bad[:80]))  # a batch of one record
    assert _pairs(one) == PAIRS[1:2] and dec.layout_mismatch
    assert dec.feed(bytes(bad[80:240])) == []  # every record corrupt: an empty batch
    assert dec.corrupt == 2
    (last,) = dec.feed(bytes(bad[240:]))
    assert _pairs(last) == PAIRS[1:2]
    assert (dec.records_read, dec.records_decoded, dec.corrupt, dec.by_getters) == (4, 2, 2, 2)
    for i in (1, 2):
        _free_names(raw[i * 80:(i + 1) * 80])


def test_the_fallback_interns_a_repeated_name_once_in_both_tables(shuffled):
    model = mock.load_model(OPS[1:3])
    raw = capture_records(model, 3)
    dec = Decoder(80)
    (batch,) = dec.feed(raw)
    assert dec.names == ["?", "keypoint_op", "Conv2D", "na", "Relu"]
    assert len(dec.table) == len(dec.names)  # the C table stays aligned (agent mode reads it)
    assert batch.data["op_name"].tolist() == [1, 3] * 3


def test_the_fallback_past_the_interners_capacity_reads_placeholders_and_counts_them(shuffled, monkeypatch):
    """As the C path does (test_decoder.py::test_interner_overflow_names_read_as_placeholder):
    past the cap names read "?" and are counted, and the names list stays the C table's
    (an agent's sink copies names from the table). Failed before: the fallback kept adding
    to its list past the cap, out of step with the table."""
    monkeypatch.setattr(decoder_module, "_MAX_NAMES", 4)  # "?" + 3 strings
    model = mock.load_model([{"name": f"op{i}", "type": "T", "duration_ns": 10} for i in range(4)])
    raw = capture_records(model, 1)
    dec = Decoder(80)
    (batch,) = dec.feed(raw)
    assert dec.by_getters == 4
    assert _pairs(batch) == [("op0", "T"), ("op1", "T"), ("?", "T"), ("?", "T")]
    assert dec.names_overflowed == 2
    assert dec.names == ["?", "op0", "T", "op1"] and len(dec.table) == 4
    assert mock.stats()["nameTableEntries"] == 0  # the library's entries were still fetched


def test_the_fallback_reads_flag_0_from_an_older_cann_without_the_getter(shuffled, monkeypatch):
    model = mock.load_model(OPS[3:4])  # flag 1 in the model
    raw = capture_records(model, 1)
    (batch,) = Decoder(80).feed(raw)
    assert batch.data["flag"].tolist() == [1]

    def missing(data, index):
        raise UnsupportedError(function="aclprofGetOpFlag")

    monkeypatch.setattr(lowlevel, "get_op_flag", missing)
    raw = capture_records(model, 1)
    (batch,) = Decoder(80).feed(raw)
    assert batch.data["flag"].tolist() == [0] and _pairs(batch) == PAIRS[3:4]


def test_the_fallback_keeps_the_newest_end_for_the_lag_clock(shuffled, emit_log):
    """Real defect (fixed): the getters' path never set ``max_end``, so a subscription
    decoding through it never measured its reader lag (``reader_lag_ns`` stayed None)."""
    model = mock.load_model(OPS[1:3])
    raw = capture_records(model, 2)
    ends = [e.end for e in emit_log.read()]
    dec = Decoder(80)
    dec.feed(raw[:160])
    assert dec.by_getters == 2 and dec.max_end == max(ends[:2])
    dec.feed(raw[160:])
    assert dec.max_end == max(ends)


def test_the_fallback_leaves_max_end_0_for_records_without_times(shuffled):
    """0 is the lag clock's "no times" (time_info off): nothing decoded keeps it, and
    records whose times are all 0 too."""
    model = mock.load_model(OPS[1:2])
    raw = capture_records(model, 2, time_info=False)
    dec = Decoder(80)
    assert dec.max_end == 0
    (batch,) = dec.feed(raw)
    assert dec.by_getters == 2 and batch.data["end"].tolist() == [0, 0]
    assert dec.max_end == 0


def test_a_subscription_through_the_fallback_measures_its_lag(shuffled):
    model = mock.load_model(OPS[1:2])
    with aclprof.subscribe(model, read_records=1) as sub:
        mock.execute(model, 2)
        deadline = time.monotonic() + 10
        while sub.stats.records_decoded < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        st = sub.stats
    assert st.layout_mismatch and st.records_decoded_by_getters == 2
    assert st.lag_clock == "calibrated" and st.reader_lag_ns is not None and st.reader_lag_ns >= 0


# ---- the layout check ------------------------------------------------------------------------

def test_a_corrupt_first_record_does_not_delay_the_layout_check(shuffled):
    model = mock.load_model(OPS[1:3])
    raw = capture_records(model, 1)
    bad = bytearray(raw)
    bad[40] ^= 1
    dec = Decoder(80)
    (batch,) = dec.feed(bytes(bad))
    # the check took the second record: this very batch went through the getters, right
    assert dec.layout_mismatch and dec.by_getters == 1 and dec.corrupt == 1
    assert _pairs(batch) == PAIRS[2:3]
    _free_names(raw[:80])


def test_the_layout_warning_names_the_fields_and_both_readings(shuffled, monkeypatch):
    # a logger proxy of this test's own (one cached by an earlier test would bypass the capture)
    monkeypatch.setattr(decoder_module, "_log", structlog.get_logger("aclprof.api.subscription"))
    model = mock.load_model(OPS[1:2])
    raw = capture_records(model, 1)
    offsets = np.frombuffer(raw, dtype=raw_dtype(80))  # what the decoder's offsets read
    with structlog.testing.capture_logs() as logs:
        (batch,) = Decoder(80).feed(raw)
    rec = batch.records()[0]
    (event,) = [e for e in logs if e["log_level"] == "warning"]
    assert event["event"] == ("op record layout differs from the library's getters; decoding "
                              "through the getters (slower) for the rest of this subscription")
    assert event["record_size"] == 80
    assert event["fields"] == ["duration", "end", "model_id", "start"]
    assert event["by_getter"] == {"duration": rec.duration, "end": rec.end, "model_id": model,
                                  "start": rec.start}
    assert event["by_offset"] == {"duration": int(offsets["duration"][0]), "end": int(offsets["end"][0]),
                                  "model_id": int(offsets["modelId"][0]), "start": int(offsets["start"][0])}
    assert event["by_offset"] != event["by_getter"]
