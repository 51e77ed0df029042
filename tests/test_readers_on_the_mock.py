"""Issue 23's readers on workloads the mock library really runs: each hypothesis example loads
1-3 random models into the mock (random op names, types, durations and jitter; one model per
simulated process), subscribes, executes them and turns the delivered op records into export
records as the daemon does. Go's pprof and npm's pprof-format read ``--format pprof`` of them
(totals equal the csv export's), and oteltap receives ``aclprof otlp``'s histograms (bucket for
bucket our histogram). One reader start-up per example."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers.pprofread import csv_totals, read_go_pprof, read_pprof_format
from helpers.readers import go_pprof, node_modules
from helpers.workloads import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import aclprof
from aclprof import mock
from aclprof.exportfmt.pprof import write_pprof
from aclprof.protocol.quantshift import NBINS, bin_index

pytestmark = pytest.mark.timeout(300)

_NAME = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FFF, exclude_categories=("Cs", "Zs", "Cc")),
                min_size=1, max_size=12)
_OP = st.fixed_dictionaries({"name": _NAME, "type": st.sampled_from(["Conv2D", "MatMul", "Add", "Relu", "算子"]),
                             "duration_ns": st.integers(1, 5 * 10**8), "jitter": st.integers(0, 10**6)})


@st.composite
def mock_processes(draw: Any) -> list[dict[str, Any]]:
    """Export records of 1-3 simulated processes, each one random model run 1-40 times on the mock."""
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        ops = draw(st.lists(_OP, min_size=1, max_size=6))
        for op in ops:
            op["jitter"] = min(op["jitter"], op["duration_ns"])  # the mock needs duration >= jitter
        device, runs, seed = draw(st.integers(0, 3)), draw(st.integers(1, 40)), draw(st.integers(0, 2**32))
        out += _run(ops, device, runs, seed, pid=1000 + i, service=draw(st.sampled_from(["svc", "", "服务 b"])))
    return out


def _run(ops: list[dict[str, Any]], device: int, runs: int, seed: int, pid: int, service: str) -> list[dict[str, Any]]:
    model = mock.load_model(ops, device=device, seed=seed)
    try:
        with aclprof.subscribe(model, device=device) as sub:
            mock.execute(model, runs)
            mock.wait_writer_idle()
            records = []
            while len(records) < runs * len(ops):
                batch = sub.get_batch(10)
                assert batch is not None, "the mock's records did not arrive"
                records += batch.records()
    finally:
        mock.unload(model)
    # as the daemon's EXPORT sends them (daemon/PROTOCOL.md "record")
    return [{"ts": 1764400000.0, "host": "h", "pid": pid, "service": service, "device": r.device_id,
             "model": r.model_id, "op_type": r.op_type, "op_name": r.op_name, "start": r.start, "end": r.end,
             "duration_ns": r.duration, "flag": r.flag, "thread_id": r.thread_id} for r in records]


@pytest.mark.skipif(go_pprof() is None, reason="Go's pprof is not installed (.ci/run builds it; or set ACLPROF_PPROF)")
@pytest.mark.skipif(node_modules("pprof-format") is None, reason="node or npm's pprof-format is missing (.ci/run)")
@settings(max_examples=examples(8))
@given(mock_processes())
def test_pprof_readers_on_mock_workloads(tmp_path_factory: pytest.TempPathFactory,
                                         records: list[dict[str, Any]]) -> None:
    mock.reset()
    path = tmp_path_factory.mktemp("mockpprof") / "p.pb.gz"
    with open(path, "wb") as f:
        write_pprof([records], f)
    want = csv_totals(records)
    assert read_go_pprof(go_pprof() or "", [path]) == want
    assert read_pprof_format(node_modules("pprof-format") or "", [path]) == [want]


@pytest.fixture(scope="module")
def tap() -> Any:
    pytest.importorskip("opentelemetry.sdk", reason="the otlp extra is not installed (pip install -e '.[otlp]')")
    pytest.importorskip("oteltap", reason="oteltap is not installed (pip install -e '.[interop]')")
    from helpers.otlpreceiver import Tap

    with Tap() as t:
        yield t


@settings(max_examples=examples(15))
@given(mock_processes())
def test_oteltap_on_mock_workloads(tap: Any, records: list[dict[str, Any]]) -> None:
    from helpers.otlpreceiver import as_bins

    from aclprof.exportfmt.otlp import collect, push

    mock.reset()
    c = collect([records])
    got = tap.expect(c.series, lambda: push(c, tap.endpoint))
    by: dict[tuple[int, int, int, str], list[int]] = {}
    for r in records:
        by.setdefault((r["pid"], r["device"], r["model"], r["op_type"]), []).append(r["duration_ns"])
    assert len(got) == len(by)
    for _, p in got:
        a = {kv.key: kv.value for kv in p.attributes}
        d = np.array(by[(a["pid"].int_value, a["device"].int_value, a["model"].int_value, a["op_type"].string_value)])
        assert list(as_bins(p)) == list(np.bincount(bin_index(d), minlength=NBINS))
        assert (p.count, p.sum, p.min, p.max) == (len(d), int(d.sum()), int(d.min()), int(d.max()))

