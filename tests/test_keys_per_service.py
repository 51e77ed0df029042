"""Per-service truth (issue 10): aggregates are keyed by service, process and model label,
and every view keeps them apart: Prometheus series, the csv export, SNAPSHOT groupings."""

from __future__ import annotations

import csv
import io
import socket
import urllib.request

import pytest
from helpers.daemons import Daemon
from helpers.procs import Worker, cli, wait_for
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(90)


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _durations(port: int) -> dict[tuple, float]:
    """``aclprofd_op_duration_seconds_count`` samples: sorted label items -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "aclprofd_op_duration_seconds_count":
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_two_services_with_the_same_model_id_stay_apart_in_prometheus_and_csv():
    """Two inference processes, services "alpha" (model labelled resnet50 v3) and "beta"
    (no label), both with model id 1 and a MatMulV2 op: two series told apart by service,
    and two csv rows; the old keys merged them into one of each (count 500)."""
    port = _free_port()
    d = Daemon(None, "--prometheus-host-label", "node-a", prometheus_port=port)
    d.start()
    workers = []
    try:
        alpha = Worker(d.socket, "--service", "alpha", "--model-label", "resnet50", "--model-version", "v3")
        workers.append(alpha)
        beta = Worker(d.socket, "--service", "beta", "--model-label", "")
        workers.append(beta)
        assert alpha.model == beta.model == 1
        assert alpha.run(200) == 1000 and beta.run(300) == 1500
        for w in workers:
            w.stop()
        wait_for(lambda: d.status()["records_total"] == 2500, what="2500 records at the daemon")

        series = {k: v for k, v in _durations(port).items() if ("op_type", "MatMulV2") in k}
        base = {"host": "node-a", "device": "0", "op_type": "MatMulV2"}
        assert series == {
            tuple(sorted({**base, "service": "alpha", "model": "resnet50@v3"}.items())): 200.0,
            tuple(sorted({**base, "service": "beta", "model": "1"}.items())): 300.0,
        }

        def matmul_rows():
            p = cli("export", "--since", "-10m", "--format", "csv", "--socket", d.socket)
            assert p.returncode == 0, p.stderr
            rows = [r for r in csv.DictReader(io.StringIO(p.stdout)) if r["OP Type"] == "MatMulV2"]
            return rows if sum(int(r["Count"]) for r in rows) == 500 else None

        rows = wait_for(matmul_rows, what="500 MatMulV2 records on disk")
        got = sorted((r["Service"], int(r["PID"]), r["Device_id"], r["Model Name"], int(r["Count"])) for r in rows)
        assert got == [("alpha", alpha.pid, "0", "1", 200), ("beta", beta.pid, "0", "1", 300)]
    finally:
        for w in workers:
            w.kill()
        d.cleanup()
