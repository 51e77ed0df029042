"""CANN's pyACL profiling samples run on aclprof.compat with one line changed, the import.

The samples live in tests/pyacl_samples/ (see its README for the one change, the import
line). Their `# ......` placeholders are the globals given here. Each test checks what the
mock observed, since the samples print nothing.
"""

from __future__ import annotations

import json
import os
import runpy
import threading
from pathlib import Path

import pytest

import aclprof
from aclprof import mock
from aclprof.compat import acl

SAMPLES = Path(__file__).parent / "pyacl_samples"

OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000, "jitter": 100},
    {"name": "bn1", "type": "BatchNorm", "duration_ns": 500},
    {"name": "relu1", "type": "Relu", "duration_ns": 200},
    {"name": "fc", "type": "MatMulV2", "duration_ns": 3000},
]


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


@pytest.fixture
def datasets():
    """The samples' step 3: the model's input and output datasets (empty: the mock's models
    have no tensors). CANN rejects NULL datasets, so 0 would not do."""
    before = mock.stats()["datasetsInUse"]
    input_, output = acl.mdl.create_dataset(), acl.mdl.create_dataset()
    assert input_ != 0 and output != 0
    yield input_, output
    assert acl.mdl.destroy_dataset(input_) == 0
    assert acl.mdl.destroy_dataset(output) == 0
    assert mock.stats()["datasetsInUse"] == before


@pytest.fixture
def runtime():
    """The sample's step 1: device, context, stream."""
    assert acl.rt.set_device(0) == 0
    context, ret = acl.rt.create_context(0)
    assert ret == 0 and context != 0
    yield context
    assert acl.rt.destroy_context(context) == 0
    assert acl.rt.reset_device(0) == 0


def test_subscribe_sample_reads_every_record_once(runtime, datasets, monkeypatch):
    model_id = mock.load_model(OPS)
    seen: list[tuple[str, str]] = []
    real_get_op_name = acl.prof.get_op_name
    real_get_op_type = acl.prof.get_op_type

    def spy_name(data, data_len, i, length):
        name, ret = real_get_op_name(data, data_len, i, length)
        assert ret == 0
        seen.append(("name", name))
        return name, ret

    def spy_type(data, data_len, i, length):
        op_type, ret = real_get_op_type(data, data_len, i, length)
        assert ret == 0
        seen.append(("type", op_type))
        return op_type, ret

    monkeypatch.setattr(acl.prof, "get_op_name", spy_name)
    monkeypatch.setattr(acl.prof, "get_op_type", spy_type)
    before = open_fds()
    runpy.run_path(str(SAMPLES / "subscribe_sample.py"), init_globals={
        "os": os, "model_id": model_id, "context": runtime,
        "input": datasets[0], "output": datasets[1]})

    stats = mock.stats()
    assert stats["recordsEmitted"] == len(OPS)
    assert stats["recordsWritten"] == len(OPS)
    assert stats["nameTableEntries"] == 0, "the sample fetched every name and type"
    assert [v for k, v in seen if k == "name"] == [op["name"] for op in OPS]
    assert [v for k, v in seen if k == "type"] == [op["type"] for op in OPS]
    assert open_fds() == before, "the library closed the write end, the sample the read end"
    assert mock.mode() == "OFF"


def test_session_sample_produces_a_prof_dir(runtime, datasets, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the sample's PROF_INIT_PATH is the relative path '...'
    model_id = mock.load_model(OPS)
    runpy.run_path(str(SAMPLES / "session_sample.py"), init_globals={
        "os": os, "model_id": model_id, "context": runtime,
        "input": datasets[0], "output": datasets[1],
        # Used by the sample but defined in its `# ......` part.
        "ACL_PROF_AICPU": 0x0008, "ACL_PROF_HCCL_TRACE": 0x0020})
    prof_dirs = list((tmp_path / "...").glob("PROF_*"))
    assert len(prof_dirs) == 1
    config = json.loads((prof_dirs[0] / "device_0" / "mock_config.json").read_text())
    assert config["dataTypeConfig"] == 0x0001 | 0x0002 | 0x0008 | 0x0004 | 0x0020
    assert "SYS_HARDWARE_MEM_FREQ" in json.dumps(config)
    assert mock.mode() == "OFF"


def test_msproftx_sample_records_every_event(tmp_path):
    namespace = runpy.run_path(str(SAMPLES / "msproftx_sample.py"))
    with aclprof.Profiler(tmp_path, devices=(0,),
                          data_types=aclprof.DataType.ACL_API | aclprof.DataType.MSPROFTX) as prof:
        assert namespace["run"]() is None  # None: no "create stamp failed" path
    events = (prof.result_dirs[0] / "host" / "msproftx.jsonl").read_text().splitlines()
    kinds: dict[str, int] = {}
    for line in events:
        event = json.loads(line)
        assert event["message"] == "test msprof tx"
        kinds[event["kind"]] = kinds.get(event["kind"], 0) + 1
    assert kinds == {"mark": 200000, "push_pop": 200000, "range": 200000}
    assert mock.stats()["stampsInUse"] == 0


FAILING_OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000,
     "inputs": [{"dtype": 1, "format": 0, "shape": [8, 3, 224, 224]},
                {"dtype": 1, "format": 4, "shape": [64, 3, 7, 7]}],
     "outputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}]},
    {"name": "relu1", "type": "Relu", "duration_ns": 200,
     "inputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}],
     "outputs": [{"dtype": 1, "format": 3, "shape": [8, 4, 112, 112, 16]}]},
]


def test_exception_sample_reads_the_failed_op_and_its_tensors(runtime, datasets, monkeypatch):
    """The seed's AI Core exception sample, verbatim but for the import, reports the op the
    mock failed: the spies see what its callback read, on the runtime's thread."""
    model_id = mock.load_model(FAILING_OPS, device=0)
    mock.inject_op_failure(model_id, "relu1")
    seen: dict[str, object] = {"dims": []}
    real_desc, real_dim = acl.mdl.create_and_get_op_desc, acl.get_tensor_desc_dim_v2
    real_thread = acl.rt.get_thread_id_from_exception_info

    def spy_desc(device_id, stream_id, task_id, length):
        result = real_desc(device_id, stream_id, task_id, length)
        seen["desc"] = (device_id, stream_id, task_id, result[0], result[2], result[4], result[5])
        return result

    def spy_dim(desc, index):
        value, ret = real_dim(desc, index)
        seen["dims"].append((value, ret))
        return value, ret

    def spy_thread(info):
        seen["thread"] = real_thread(info)
        seen["callback_thread"] = threading.get_native_id()
        return seen["thread"]

    monkeypatch.setattr(acl.mdl, "create_and_get_op_desc", spy_desc)
    monkeypatch.setattr(acl, "get_tensor_desc_dim_v2", spy_dim)
    monkeypatch.setattr(acl.rt, "get_thread_id_from_exception_info", spy_thread)
    try:
        namespace = runpy.run_path(str(SAMPLES / "exception_sample.py"), init_globals={
            "model_id": model_id, "context": runtime, "input": datasets[0], "output": datasets[1]})
    finally:
        acl.rt.set_exception_info_callback(None)
    assert namespace["ret"] == 500002  # ACL_ERROR_GE_FAILURE from the synchronous execute
    # device 0, the model's stream (its id in the mock), task = the op's position, its name,
    # one input and one output, every call 0.
    assert seen["desc"] == (0, model_id, 1, "relu1", 1, 1, 0)
    assert seen["dims"] == [(8, 0), (8, 0)]
    assert seen["thread"] == threading.get_native_id(), "the thread that executed the model"
    assert seen["callback_thread"] != threading.get_native_id(), "run on the runtime's thread"
    stats = mock.stats()
    assert stats["opFailures"] == 1 and stats["exceptionCallbacks"] == 1
    assert stats["tensorDescsInUse"] == 0, "the sample destroyed both arrays"
