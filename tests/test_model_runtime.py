"""The model runtime against the real library's rules (fidelity audit row 15, section 4 item 6):
aclmdlExecute needs two datasets, the dataset API, the pyACL compat layer's datasets, and
argument checks that stop before C. Every test checks what the mock observed (emit log,
counters, return codes), not only what the binding says."""

from __future__ import annotations

import pytest
from helpers.records import capture_records

import aclprof
from aclprof import mock
from aclprof.binding import lowlevel as ll
from aclprof.binding.errors import InvalidModelIdError, InvalidParamError, OtherAclError
from aclprof.compat import acl

OPS = [{"name": "conv", "type": "Conv2D", "duration_ns": 1000},
       {"name": "relu", "type": "Relu", "duration_ns": 200}]


def in_use() -> tuple[int, int]:
    stats = mock.stats()
    return stats["datasetsInUse"], stats["dataBuffersInUse"]


def test_mock_execute_uses_real_empty_datasets(emit_log):
    """aclprof.mock.execute works as on an NPU: two empty datasets, destroyed afterwards."""
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    mock.execute(model, 3)
    sub.close()
    assert len(emit_log.read(model)) == 6
    assert in_use() == (0, 0)


def test_execute_without_datasets_fails_in_python_before_c(emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    # An armed fault proves that no call reached C: it is still there afterwards.
    mock.fail_next("aclmdlExecute", 1, 500001)
    for args in ((None, None), (None, "x")):
        with pytest.raises(TypeError, match=r"aclmdlExecute: inputs must be a Dataset.*100000"):
            ll.mdl_execute(model, *args)
    with ll.mdl_create_dataset() as inputs, ll.mdl_create_dataset() as outputs:
        with pytest.raises(TypeError, match="outputs must be a Dataset"):
            ll.mdl_execute(model, inputs, None)
        with pytest.raises(OtherAclError) as info:
            ll.mdl_execute(model, inputs, outputs)
        assert info.value.code == 500001  # the armed fault, untouched until now
        ll.mdl_execute(model, inputs, outputs)
    sub.close()
    assert len(emit_log.read(model)) == 2  # only the last call ran the model
    assert in_use() == (0, 0)


def test_library_rejects_null_datasets_before_the_model_id(emit_log):
    """The C rule itself, through the compat layer (which passes 0 as NULL, like pyACL)."""
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    assert acl.mdl.execute(model, 0, 0) == 100000
    assert acl.mdl.execute(model + 1000, 0, 0) == 100000  # NULL is checked first
    inputs, outputs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
    assert acl.mdl.execute(model, inputs, 0) == 100000
    assert acl.mdl.execute(model, 0, outputs) == 100000
    assert acl.mdl.execute(model + 1000, inputs, outputs) == 145003
    assert emit_log.read() == []
    assert acl.mdl.execute(model, inputs, outputs) == 0
    sub.close()
    assert len(emit_log.read(model)) == 2
    assert acl.mdl.destroy_dataset(inputs) == 0 and acl.mdl.destroy_dataset(outputs) == 0
    assert acl.mdl.destroy_dataset(inputs) == 100000  # destroyed: rejected, not a double free


def test_unknown_model_is_an_invalid_model_id_error():
    with ll.mdl_create_dataset() as inputs, ll.mdl_create_dataset() as outputs:
        with pytest.raises(InvalidModelIdError) as info:
            ll.mdl_execute(12345, inputs, outputs)
    err = info.value
    assert err.code == 145003 and err.name == "ACL_ERROR_GE_EXEC_MODEL_ID_INVALID"
    assert err.function == "aclmdlExecute" and "model 12345" in str(err)


def test_dataset_buffers_and_their_lifetime(emit_log):
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model)
    inputs, outputs = ll.mdl_create_dataset(), ll.mdl_create_dataset()
    buffer = ll.acl_create_data_buffer(0x1000, 64)
    assert in_use() == (2, 1)
    ll.mdl_add_dataset_buffer(inputs, buffer)
    assert ll.mdl_get_dataset_num_buffers(inputs) == 1 and inputs.buffers == (buffer,)
    # The mock's models have no inputs: a buffer is GE's count mismatch, and nothing runs.
    with pytest.raises(OtherAclError) as info:
        ll.mdl_execute(model, inputs, outputs)
    assert info.value.code == 145000 and info.value.name == "ACL_ERROR_GE_PARAM_INVALID"
    assert emit_log.read() == []
    # The dataset keeps the buffer's pointer: closing the buffer first is refused, and
    # nothing changes in the library.
    with pytest.raises(RuntimeError, match=r"aclDestroyDataBuffer: .*still in 1 open dataset"):
        buffer.close()
    assert not buffer.closed and in_use() == (2, 1)
    inputs.close()
    inputs.close()  # idempotent
    assert in_use() == (1, 1)  # destroying a dataset leaves its buffers alive, as in CANN
    buffer.close()
    assert in_use() == (1, 0)
    with pytest.raises(aclprof.HandleClosedError):
        ll.mdl_add_dataset_buffer(outputs, buffer)
    with pytest.raises(TypeError, match="buffer must be a DataBuffer"):
        ll.mdl_add_dataset_buffer(outputs, 0x1000)
    with pytest.raises(TypeError, match="dataset must be a Dataset"):
        ll.mdl_get_dataset_num_buffers(None)
    with pytest.raises(ValueError, match="size must be in"):
        ll.acl_create_data_buffer(0, -1)
    outputs.close()
    sub.close()
    assert in_use() == (0, 0)


def test_output_buffer_without_memory_is_rejected():
    """A synchronous execute asks the model for the size of an output buffer with data NULL;
    these models have no outputs, so GE's check fails with 100000 (before the model id)."""
    model = mock.load_model(OPS)
    with ll.mdl_create_dataset() as inputs, ll.mdl_create_dataset() as outputs, \
            ll.acl_create_data_buffer(0, 0) as nodata:
        ll.mdl_add_dataset_buffer(outputs, nodata)
        for model_id in (model, model + 1000):
            with pytest.raises(InvalidParamError):
                ll.mdl_execute(model_id, inputs, outputs)
        outputs.close()
    assert in_use() == (0, 0)


def test_compat_dataset_calls_follow_pyacl():
    dataset = acl.mdl.create_dataset()
    buffer = acl.create_data_buffer(0x2000, 16)
    assert dataset and buffer
    assert acl.mdl.add_dataset_buffer(dataset, buffer) == (dataset, 0)
    assert acl.mdl.get_dataset_num_buffers(dataset) == 1
    assert acl.mdl.get_dataset_num_buffers(0) == 0
    assert acl.mdl.add_dataset_buffer(dataset, 0) == (dataset, 100000)
    assert acl.mdl.destroy_dataset(dataset) == 0
    assert acl.destroy_data_buffer(buffer) == 0
    assert acl.destroy_data_buffer(buffer) == 100000
    assert acl.destroy_data_buffer(0) == 100000
    with pytest.raises(TypeError):
        acl.mdl.execute(1, None, 0)
    assert in_use() == (0, 0)


@pytest.mark.parametrize("bad", [None, 42, object()])
def test_str2id_never_passes_null(bad):
    """aclprofStr2Id(NULL) crashes CANN (strlen(NULL), audit section 4 item 6): the binding
    raises TypeError for anything that is not text, before any C call."""
    mock.fail_next("aclprofStr2Id", 1, 500001)
    with pytest.raises(TypeError, match="message must be str or bytes"):
        ll.str2id(bad)
    with pytest.raises(OtherAclError):  # the armed fault was not consumed by the bad call
        ll.str2id("real")
    assert ll.str2id("real") == ll.str2id(b"real")


# ---- helper host (audit section 4 item 4) -----------------------------------------------------



def test_helper_host_time_values_are_errors_not_timestamps(no_leaks):
    """On a helper host aclprofGetOpStart/End/Duration return 200006 as their value. The
    getter-based decode path must fail with that code instead of delivering 200006 as a
    time; the raw path is unaffected."""
    from aclprof.api.subscription.decoder import Decoder

    model = mock.load_model(OPS)
    raw = capture_records(model, 1)
    assert len(raw) == 160
    record = raw[:80]
    real = ll.get_op_times(record, 0)
    assert real[2] == real[1] - real[0] > 0
    mock.set_helper_host(True)
    assert (ll.get_op_start(record, 0), ll.get_op_end(record, 0),
            ll.get_op_duration(record, 0)) == (200006,) * 3  # C's values, unchanged
    with pytest.raises(aclprof.FeatureUnsupportedError) as info:
        ll.get_op_times(record, 0)
    assert info.value.code == 200006 and "helper host" in str(info.value)
    # GetOpDescSize works on a helper host (audit 3 row 20); CreateSubscribeConfig's NULL
    # is the first refusal, and the message names the helper host.
    with pytest.raises(aclprof.InvalidParamError, match="helper host"):
        aclprof.subscribe(model)
    mock.set_helper_host(False)
    # The getters answer like a helper host only for the times: the fallback decoder
    # reads names and types, then refuses the times (this failed before: 200006 came out
    # as start, end and duration).
    decoder = Decoder(80)
    decoder._raw = None  # force the getter fallback
    for name in ("aclprofGetOpStart", "aclprofGetOpEnd", "aclprofGetOpDuration"):
        mock.fail_next(name, 1, 200006)
    with pytest.raises(aclprof.FeatureUnsupportedError):
        decoder.feed(raw)
    assert decoder.failed == 2 and decoder.records_decoded == 0
    mock.reset()  # frees the names the failed decode did not fetch
    assert mock.stats()["nameTableEntries"] == 0


def test_helper_host_switch_is_reset(tmp_path):
    mock.set_helper_host(True)
    assert ll.get_op_desc_size() == 80  # not checked by CANN (audit 3 row 20)
    with pytest.raises(aclprof.FeatureUnsupportedError):
        ll.init(tmp_path)
    mock.reset()
    ll.init(tmp_path)
    ll.finalize()
