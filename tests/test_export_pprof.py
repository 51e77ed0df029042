"""``aclprof export --format pprof`` read back by three independent decoders (issue 23 item 4):
Go's pprof (``pprof -raw``, built from Debian's golang-github-google-pprof-dev by ``.ci/run``),
npm's ``pprof-format`` and the protobuf package's parser with google/pprof's profile.proto
(compiled at test time). Their calls and nanoseconds per (service, pid, device, model, op type)
must equal the csv export's Count and Total Time of the same records, on randomised workloads."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.pprofread import Key, add_sample, as_tuples, csv_totals, read_go_pprof, read_pprof_format
from helpers.readers import compile_profile_proto, go_pprof, node_modules
from helpers.workloads import examples, workload
from hypothesis import given, settings
from hypothesis import strategies as st

from aclprof.exportfmt.pprof import SAMPLE_TYPES, write_pprof

CASES_PER_EXAMPLE = 8  # profiles per hypothesis example: the readers' start-up is paid per example
PID_STRIDE = 10**7  # case i's pids are moved to i * PID_STRIDE + pid: Go's pprof reads the cases merged

def read_protobuf(pb2_dir: str, path: Path) -> dict[Key, tuple[int, int]]:
    """The totals the protobuf package's parser reads with google/pprof's profile.proto."""
    if pb2_dir not in sys.path:
        sys.path.insert(0, pb2_dir)
    import profile_pb2  # type: ignore[import-not-found]

    prof = profile_pb2.Profile()
    prof.ParseFromString(gzip.decompress(path.read_bytes()))
    st_ = prof.string_table
    assert st_[0] == ""
    fn = {f.id: st_[f.name] for f in prof.function}
    loc = {lc.id: fn[lc.line[0].function_id] for lc in prof.location}
    acc: dict[Key, list[int]] = {}
    for s in prof.sample:
        add_sample(acc, [loc[i] for i in s.location_id], {st_[lb.key]: st_[lb.str] for lb in s.label}, list(s.value))
    return as_tuples(acc)


@pytest.fixture(scope="module")
def pb2_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = compile_profile_proto(tmp_path_factory.mktemp("pb2"))
    if d is None:
        pytest.skip("profile.proto (Debian golang-github-google-pprof-dev) or grpcio-tools is missing")
    return d


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    with open(path, "wb") as f:
        assert write_pprof([records], f) == len(records)


def test_a_profile_parses_with_profile_proto(tmp_path: Path, pb2_dir: str) -> None:
    records = [
        {"ts": 1.5, "pid": 9, "service": "svc", "device": 0, "model": 1, "op_type": "Conv2D", "op_name": "Conv2D",
         "start": 0, "end": 7, "duration_ns": 7},
        {"ts": 2.5, "pid": 9, "service": "svc", "device": 0, "model": 1, "op_type": "Conv2D", "op_name": "c1",
         "start": 0, "end": 2**40, "duration_ns": 2**40},
        {"ts": 3.0, "pid": 9, "service": "svc", "device": 0, "model": 0, "kind": "keypoint", "start": 0, "end": 1,
         "duration_ns": 1},
    ]
    _write(tmp_path / "p.pb.gz", records)
    assert read_protobuf(pb2_dir, tmp_path / "p.pb.gz") == csv_totals(records) == {
        ("svc", 9, 0, 1, "Conv2D"): (2, 2**40 + 7)}
    import profile_pb2  # type: ignore[import-not-found]

    prof = profile_pb2.Profile()
    prof.ParseFromString(gzip.decompress((tmp_path / "p.pb.gz").read_bytes()))
    s = prof.string_table
    assert [(s[t.type], s[t.unit]) for t in prof.sample_type] == list(SAMPLE_TYPES)
    assert s[prof.default_sample_type] == "device time"
    assert (prof.time_nanos, prof.duration_nanos) == (1_500_000_000, 1_500_000_000)
    # an op named like its type is two functions (their files name the level)
    assert sorted((s[f.name], s[f.filename]) for f in prof.function) == [
        ("Conv2D", "op name"), ("Conv2D", "op type"), ("c1", "op name"), ("model 1", "model"), ("svc", "service")]


@pytest.mark.skipif(go_pprof() is None, reason="Go's pprof is not installed (.ci/run builds it from Debian's "
                    "golang-github-google-pprof-dev; or set ACLPROF_PPROF)")
@pytest.mark.skipif(node_modules("pprof-format") is None, reason="node or npm's pprof-format is missing (.ci/run: "
                    "npm install --prefix .ci/node pprof-format@2.3.2; or set ACLPROF_NODE_MODULES)")
@settings(max_examples=examples(6))
@given(st.lists(workload(), min_size=CASES_PER_EXAMPLE, max_size=CASES_PER_EXAMPLE))
def test_real_pprof_readers_agree_with_the_csv(tmp_path_factory: pytest.TempPathFactory,
                                                cases: list[list[dict[str, Any]]]) -> None:
    tmp = tmp_path_factory.mktemp("pprof")
    paths = []
    for i, records in enumerate(cases):
        for r in records:
            r["pid"] += i * PID_STRIDE
        paths.append(tmp / f"{i}.pb.gz")
        _write(paths[-1], records)
    tool, modules = go_pprof(), node_modules("pprof-format")
    assert tool is not None and modules is not None
    wants = [csv_totals(records) for records in cases]
    disagreements = []
    for path, want, got in zip(paths, wants, read_pprof_format(modules, paths)):
        if got != want:
            disagreements.append(("pprof-format", path.name, got, want))
    merged = {k: v for want in wants for k, v in want.items()}  # disjoint: the pids differ
    got = read_go_pprof(tool, paths)
    if got != merged:
        disagreements.append(("go pprof", "all", got, merged))
    assert disagreements == []


def test_pprof_is_not_written_to_a_text_only_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from aclprof.cli.main import main

    # a stdout without a binary buffer (embedding): refused before any daemon is asked (none is there)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["export", "--format", "pprof", "--socket", str(tmp_path / "none.sock")]) == 2
    assert "--format pprof writes binary data: give -o FILE" in capsys.readouterr().err
