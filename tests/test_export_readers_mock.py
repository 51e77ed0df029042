"""The commands of issue 23 items 3, 4 and 6 end to end: a real daemon, two services on the mock
(resnet-like models), and what ``aclprof export --format pprof``, ``--format msmonitor-db`` and
``aclprof otlp`` write read back by their real readers (Go's pprof, msprof-analyze, oteltap),
against the csv export and the records of the same window."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from typing import Any

import numpy as np
import pytest
from helpers.daemons import Daemon
from helpers.pprofread import read_go_pprof
from helpers.procs import Worker, cli, wait_for
from helpers.readers import go_pprof, msprof_analyze

from aclprof.protocol.quantshift import NBINS, bin_index

pytestmark = pytest.mark.timeout(120)

RUNS = 60


@pytest.fixture(scope="module")
def fed() -> Any:
    """A daemon that stored two services' records; yields (daemon, records as exported)."""
    daemon = Daemon().start()
    workers = []
    try:
        for service in ("ranker", "embedder"):
            w = Worker(daemon.socket, "--service", service, "--ops", "resnet")
            workers.append(w)
            w.run(RUNS)
        emitted = sum(w.stop()["mock"]["recordsEmitted"] for w in workers)

        def stored() -> list[dict[str, Any]]:
            p = cli("export", "--format", "jsonl", "--socket", daemon.socket, check=True)
            return [json.loads(line) for line in p.stdout.splitlines()]

        records = wait_for(lambda: (r := stored()) and len(r) == emitted and r, what="every record stored")
        yield daemon, records
    finally:
        for w in workers:
            w.kill()
        daemon.cleanup()


def _csv(daemon: Daemon) -> list[dict[str, str]]:
    p = cli("export", "--format", "csv", "--socket", daemon.socket, check=True)
    return list(csv.DictReader(io.StringIO(p.stdout)))


@pytest.mark.skipif(go_pprof() is None, reason="Go's pprof is not installed (.ci/run builds it; or set ACLPROF_PPROF)")
def test_pprof_export_read_by_go_pprof_equals_the_csv(fed: Any, tmp_path: Any) -> None:
    daemon, _ = fed
    out = tmp_path / "ops.pb.gz"
    p = cli("export", "--format", "pprof", "-o", str(out), "--socket", daemon.socket, check=True)
    assert "exported" in p.stderr
    got = read_go_pprof(go_pprof() or "", [out])
    want = {(r["Service"], int(r["PID"]), int(r["Device_id"]), int(r["Model Name"]), r["OP Type"]):
            (int(r["Count"]), round(float(r["Total Time(us)"]) * 1000)) for r in _csv(daemon)}
    assert got == want and len(want) >= 2


@pytest.mark.slow  # msprof-analyze's start-up (~7 s)
@pytest.mark.skipif(msprof_analyze() is None, reason="msprof-analyze is not installed (pip install -e '.[interop]')")
def test_msmonitor_db_export_read_by_msprof_analyze(fed: Any, tmp_path: Any) -> None:
    daemon, records = fed
    p = cli("export", "--format", "msmonitor-db", "-o", str(tmp_path / "dbs"), "--socket", daemon.socket, check=True)
    assert "of 2 process(es)" in p.stderr and "rank 0:" in p.stderr and "rank 1:" in p.stderr, p.stderr
    assert len(os.listdir(tmp_path / "dbs")) == 2
    run = subprocess.run([msprof_analyze() or "", "cluster", "-m", "compute_op_sum", "-d", str(tmp_path / "dbs"),
                          "-o", str(tmp_path / "out"), "--export_type", "text", "--force"], capture_output=True,
                         text=True, timeout=100, cwd=tmp_path)
    out = tmp_path / "out" / "cluster_analysis_output" / "ComputeOpSum" / "all_stats.csv"
    assert out.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(out, newline="") as f:
        got = {r["OpType"]: (int(r["Count"]), float(r["Median(Us)"]), float(r["Q3(Us)"])) for r in csv.DictReader(f)}
    by: dict[str, list[int]] = {}
    for r in records:
        by.setdefault(r["op_type"], []).append(r["duration_ns"])
    want = {t: (len(d), float(np.quantile(np.array(d) / 1e3, 0.5)), float(np.quantile(np.array(d) / 1e3, 0.75)))
            for t, d in by.items()}
    assert got.keys() == want.keys()
    for t in want:
        assert got[t][0] == want[t][0] and np.allclose(got[t][1:], want[t][1:], rtol=1e-12, atol=0), t
    # the csv export's counts too
    csv_counts: dict[str, int] = {}
    for r in _csv(daemon):
        csv_counts[r["OP Type"]] = csv_counts.get(r["OP Type"], 0) + int(r["Count"])
    assert csv_counts == {t: v[0] for t, v in got.items()}


def test_aclprof_otlp_received_by_oteltap(fed: Any) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otlp extra is not installed (pip install -e '.[otlp]')")
    pytest.importorskip("oteltap", reason="oteltap is not installed (pip install -e '.[interop]')")
    from helpers.otlpreceiver import Tap, as_bins

    daemon, records = fed
    by: dict[tuple[str, int, str], list[int]] = {}
    for r in records:
        by.setdefault((r["service"], r["pid"], r["op_type"]), []).append(r["duration_ns"])
    with Tap() as tap:
        result: list[Any] = []
        got = tap.expect(len(by), lambda: result.append(cli("otlp", "--endpoint", tap.endpoint, "--socket",
                                                               daemon.socket)))
    assert result[0].returncode == 0 and f"pushed {len(records):,} op records" in result[0].stderr, result[0].stderr
    for _, point in got:
        a = {kv.key: kv.value for kv in point.attributes}
        d = np.array(by[(a["service"].string_value, a["pid"].int_value, a["op_type"].string_value)])
        assert list(as_bins(point)) == list(np.bincount(bin_index(d), minlength=NBINS))
        assert (point.count, point.sum) == (len(d), int(d.sum()))


def test_aclprof_otlp_says_when_the_endpoint_refuses(fed: Any) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otlp extra is not installed (pip install -e '.[otlp]')")
    from helpers.procs import free_port

    daemon, _ = fed
    url = f"http://127.0.0.1:{free_port()}/v1/metrics"  # nothing listens there
    p = cli("otlp", "--endpoint", url, "--timeout", "1", "--socket", daemon.socket)
    assert p.returncode == 1 and f"{url} did not accept the metrics" in p.stderr, p.stderr
    p = cli("otlp", "--endpoint", "ftp://x/v1/metrics", "--socket", daemon.socket)
    assert p.returncode == 2 and "is not an http(s) URL" in p.stderr, p.stderr
