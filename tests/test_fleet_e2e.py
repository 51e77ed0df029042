"""The fleet end to end: three aclprofd daemons standing for three hosts (distinct
``--prometheus-host-label``), each with a mock service streaming through aclprof.agent
(tests/helpers/fleetservice.py, 200 model runs/s = 800 records/s), host-c's MatMul four
times slower; a real Prometheus server scrapes the three every second with the recording
and alerting rules of daemon/prometheus loaded; ``aclprof fleet --once --json`` must show
the three hosts and flag host-c's MatMul, and nothing else."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from helpers.daemons import Daemon
from helpers.procs import TESTS, cli, env, wait_for
from helpers.prometheus import (
    RULES_DIR,
    Prometheus,
    free_port,
    needs_prometheus,
    prometheus_factory,  # noqa: F401  (a fixture)
)

pytestmark = [needs_prometheus, pytest.mark.slow]

HOSTS = ("host-a", "host-b", "host-c")
SERVICE = str(TESTS / "helpers" / "fleetservice.py")


@contextlib.contextmanager
def fleet_hosts() -> Iterator[list[tuple[Daemon, int]]]:
    """Three daemons with their metrics ports and one service each; all stopped on exit."""
    daemons: list[tuple[Daemon, int]] = []
    services: list[subprocess.Popen] = []
    try:
        for i, host in enumerate(HOSTS):
            port = free_port()
            d = Daemon(None, "--prometheus-host-label", host, prometheus_port=port)
            daemons.append((d, port))
            d.start()
            slow = ["--slow-type", "MatMul", "--slow-factor", "4"] if host == "host-c" else []
            p = subprocess.Popen([sys.executable, SERVICE, "--socket", d.socket, "--service", "llm",
                                  "--rate", "200", "--seed", str(i + 1), *slow],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env())
            services.append(p)
        for p in services:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line and json.loads(line)["ready"], p.stderr.read() if p.stderr else ""
        yield daemons
    finally:
        for p in services:
            with contextlib.suppress(OSError):
                if p.stdin is not None:
                    p.stdin.close()  # the service stops its agent and exits
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
        for d, _ in daemons:
            d.cleanup()


def _fleet(url: str, *args: str) -> dict:
    p = cli("fleet", "--prometheus", url, "--once", "--json", *(args or ("--window", "10s")), timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_three_hosts_one_slow_op_type(prometheus_factory: Callable[..., Prometheus]):  # noqa: F811
    with fleet_hosts() as daemons:
        prom = prometheus_factory([f"127.0.0.1:{port}" for _, port in daemons],
                                  rule_files=[RULES_DIR / "recording.rules.yml", RULES_DIR / "alerts.rules.yml"])
        wait_for(lambda: prom.targets_up() == 3, timeout=20, interval=0.2, what="3 targets up")

        def ready() -> dict | None:
            doc = _fleet(prom.url)
            rows = {r["op_type"]: r for r in doc["rows"]}
            # the host list is its own query: it may lag the rows by a scrape
            if len(rows) == 4 and all(r["scored_hosts"] == 3 for r in rows.values()) and doc["hosts"] == list(HOSTS):
                return doc
            return None

        doc = wait_for(ready, timeout=30, interval=0.5, what="every op type scored on 3 hosts")
        assert doc["hosts"] == list(HOSTS)
        rows = {r["op_type"]: r for r in doc["rows"]}
        assert set(rows) == {"MatMul", "Conv2D", "Relu", "Softmax"}
        assert all(r["service"] == "llm" and r["hosts_reporting"] == 3 for r in rows.values())
        # the slow host and op type, and nothing else
        assert [(o["host"], o["op_type"], o["direction"]) for o in doc["outliers"]] == [("host-c", "MatMul", "slow")]
        mm = {h["host"]: h for h in rows["MatMul"]["hosts"]}
        assert mm["host-c"]["p99_s"] > 3 * mm["host-a"]["p99_s"] and mm["host-c"]["z"] > 3.5
        assert all(abs(h["z"]) < 3.5 for r in rows.values() for h in r["hosts"] if h["host"] != "host-c")
        # MatMul takes most device time: 90us (x4 on one host) against 40, 20 and 3us
        assert max(rows.values(), key=lambda r: r["share"])["op_type"] == "MatMul"
        assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)

        # the same answer from the recording rules (what a large fleet uses)
        def from_rules() -> dict | None:
            d = _fleet(prom.url, "--rules", "--window", "1m")
            rows = {r["op_type"]: r for r in d["rows"]}
            return d if len(rows) == 4 and all(r["scored_hosts"] == 3 for r in rows.values()) else None
        by_rules = wait_for(from_rules, timeout=20, interval=0.5, what="recording rules for 3 hosts")
        assert by_rules["source"] == "recording rules" and by_rules["hosts"] == list(HOSTS)
        assert [(o["host"], o["op_type"]) for o in by_rules["outliers"]] == [("host-c", "MatMul")]

        # the drill-down table of the slow host
        p = cli("fleet", "--prometheus", prom.url, "--window", "10s", "--once", "--host", "host-c", timeout=30)
        assert p.returncode == 0, p.stderr
        matmul = next(line for line in p.stdout.splitlines() if "MatMul" in line)
        assert "OUTLIER" in matmul and "host host-c" in p.stdout

        # the recording rules evaluate on the same data: per-host p99 of MatMul, host-c slowest
        def recorded() -> list[dict]:
            return prom.query('host_service_op_type:aclprofd_op_duration_seconds:p99_1m{op_type="MatMul"}')
        series = wait_for(lambda: len(recorded()) == 3 and recorded(), timeout=15, interval=0.5,
                          what="recorded per-host p99")
        p99 = {s["metric"]["host"]: float(s["value"][1]) for s in series}
        assert max(p99, key=lambda h: p99[h]) == "host-c" and p99["host-c"] > 3 * p99["host-a"]
        share = prom.query("sum(service_op_type:aclprofd_op_device_time:share1m)")
        assert float(share[0]["value"][1]) == pytest.approx(1.0)
        # every rule evaluates on real daemon data without an error (label matching included)
        groups = prom.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        # 30 rules: 29 + AclprofOpFailures (issue 24)
        assert {g["name"] for g in groups} == {"aclprof-ops", "aclprof-alerts"} and len(rules) == 30
        assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
        # every daemon is up: the down alert has nothing to say
        assert prom.query('ALERTS{alertname="AclprofdDown"}') == []

        # the Grafana dashboard's queries run on this server, and its fleet panels have data
        dash = json.loads((RULES_DIR / "grafana.json").read_text())
        panels = [p for row in dash["panels"] for p in [row, *row.get("panels", [])]]
        empty = []
        for panel in panels:
            for target in panel.get("targets", []):
                expr = re.sub(r"\$\{?\w+\}?", ".*", target["expr"])
                if not prom.query(expr):  # a query Prometheus refuses fails in prom.query
                    empty.append(panel["title"])
        # what has no data here: the detector (not in these daemons), yesterday, drops and errors
        assert set(empty) <= {"Latency shift vs baseline (aclprofd detector)", "p99 today / yesterday (10m)",
                              "Records dropped by agents / s"}, empty
        assert "p99 by op type (1m)" not in empty and "p99 of each host / fleet p99 (1m)" not in empty
