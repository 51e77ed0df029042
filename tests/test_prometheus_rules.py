"""daemon/prometheus: the rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``); the unit tests cover every alert firing and not firing, and
fail when a rule is broken; the Grafana dashboard is well formed and every query in it
parses and names only recording rules of recording.rules.yml or metrics a real aclprofd
exports (so a renamed rule or metric cannot leave a dead panel behind)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from helpers.daemons import InProcess
from helpers.prometheus import PROMTOOL, RULES_DIR, free_port, needs_promtool

RECORDING = RULES_DIR / "recording.rules.yml"
ALERTS = RULES_DIR / "alerts.rules.yml"
DASHBOARD = RULES_DIR / "grafana.json"
#: the regression detector's gauges (daemon/aclprofd/detector/metrics.py), exported only
#: while the detector has evaluated a key; and Prometheus' own series
DETECTOR = {"aclprofd_op_latency_shift", "aclprofd_op_latency_shift_lower", "aclprofd_op_latency_shift_upper",
            "aclprofd_op_regression_flag", "aclprofd_regressions_flagged_total"}
PROMETHEUS_OWN = {"up", "ALERTS"}
_METRIC_TOKEN = re.compile(r"(?<![\w:\"$.{])([a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+|aclprofd_[a-zA-Z0-9_]+|up|ALERTS)"
                           r"(?=\s*[{\[)]|\s*$|\s+(?:offset|/|and|or|unless|>|<|==))")


def _promtool(*args: str | Path) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120)


def _recorded() -> set[str]:
    return set(re.findall(r"^\s*- record: (\S+)\s*$", RECORDING.read_text(), re.M))


# -- promtool -----------------------------------------------------------------------------------

@needs_promtool
def test_promtool_check_rules():
    p = _promtool("check", "rules", RECORDING, ALERTS)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(_recorded())} rules found" in p.stdout
    assert "SUCCESS: 8 rules found" in p.stdout


@needs_promtool
@pytest.mark.parametrize("tests", sorted(p.name for p in RULES_DIR.glob("*.test.yml")))
def test_promtool_test_rules(tests):
    p = _promtool("test", "rules", RULES_DIR / tests)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout


def test_every_alert_is_tested_firing_and_not_firing():
    alerts = re.findall(r"^\s*- alert: (\S+)\s*$", ALERTS.read_text(), re.M)
    assert len(alerts) == 8
    text = "".join(p.read_text() for p in RULES_DIR.glob("*.test.yml"))
    cases = re.findall(r"alertname: (\S+)\n\s*exp_alerts:( \[\])?", text)
    firing = {name for name, empty in cases if not empty}
    silent = {name for name, empty in cases if empty}
    assert set(alerts) <= firing, set(alerts) - firing
    assert set(alerts) <= silent, set(alerts) - silent


@needs_promtool
@pytest.mark.parametrize("rules, old, new", [
    (ALERTS, "> 1.25", "> 3"),  # the fallback threshold
    (ALERTS, "on (host, service, model, op_type, quantile)", "on (host, service, model, op_type)"),
    (ALERTS, 'up{job="aclprofd"} == 0', "up == 0"),
    (ALERTS, "increase(aclprofd_protocol_errors_total[10m]) > 3", "increase(aclprofd_protocol_errors_total[10m]) > 0"),
    # a key's first failure: increase() alone misses the new series (issue 24)
    (ALERTS, "or (aclprofd_op_failures_total unless aclprofd_op_failures_total offset 5m)", ""),
    (ALERTS, "sum without (device) (", "sum without (device, code) ("),
    (RECORDING, "histogram_quantile(0.99, service_op_type_le", "histogram_quantile(0.9, service_op_type_le"),
    (RECORDING, "sum by (service, op_type) (host_service_op_type:aclprofd_op_calls:rate1m)",
     "sum by (service, op_type) (host_service_op_type:aclprofd_op_calls:rate10m)"),
])
def test_the_unit_tests_catch_a_broken_rule(tmp_path, rules, old, new):
    for f in RULES_DIR.iterdir():
        shutil.copy(f, tmp_path / f.name)
    text = rules.read_text()
    assert old in text
    (tmp_path / rules.name).write_text(text.replace(old, new, 1))
    results = [_promtool("test", "rules", t) for t in sorted(tmp_path.glob("*.test.yml"))]
    assert any(r.returncode != 0 for r in results), "a broken rule passed every unit test"


# -- the Grafana dashboard ----------------------------------------------------------------------

def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def _exprs(dash: dict) -> list[str]:
    exprs = [t["expr"] for p in _panels(dash) for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["query"]["query"])
            assert m, v["query"]
            exprs.append(m.group(1))
    return exprs


def _concrete(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced, as Prometheus would receive it."""
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def test_dashboard_structure():
    dash = _dashboard()
    assert dash["uid"] == "aclprof-fleet" and dash["title"]
    panels = _panels(dash)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "service", "op_type", "host"}
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            used = set(re.findall(r"\$\{?(\w+)\}?", t["expr"]))
            assert used <= variables, (p["title"], used - variables)
    # panels do not overlap
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine


def _exported_metrics() -> set[str]:
    """The series names a real aclprofd exposes (from its /metrics TYPE lines)."""
    with InProcess(prometheus_port=free_port()) as d:
        assert d.daemon.metrics is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{d.daemon.metrics.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "counter":
            names.add(name if name.endswith("_total") else f"{name}_total")
        else:
            names.add(name)
    assert "aclprofd_op_duration_seconds_bucket" in names and "aclprofd_records_total" in names
    return names


def test_dashboard_and_rules_name_only_defined_series():
    exported = _exported_metrics()
    assert exported >= DETECTOR, DETECTOR - exported  # the regression alert reads the detector's own series
    known = _recorded() | exported | PROMETHEUS_OWN
    dash_exprs = _exprs(_dashboard())
    rule_exprs = re.findall(r"^\s*expr: (.+)$", RECORDING.read_text(), re.M)
    alert_text = ALERTS.read_text()
    used: set[str] = set()
    for expr in dash_exprs + rule_exprs + [alert_text]:
        names = set(_METRIC_TOKEN.findall(_concrete(expr)))
        assert names <= known, (expr[:200], names - known)
        used |= names
    # the dashboard is built on the recording rules, and covers both levels and both windows
    dash_used = {n for e in dash_exprs for n in _METRIC_TOKEN.findall(_concrete(e))}
    for rule in ("service_op_type:aclprofd_op_calls:rate1m", "service_op_type:aclprofd_op_device_time:share1m",
                 "service_op_type:aclprofd_op_duration_seconds:p50_1m",
                 "service_op_type:aclprofd_op_duration_seconds:p99_1m",
                 "service_op_type:aclprofd_op_duration_seconds:p99_10m",
                 "host_service_op_type:aclprofd_op_duration_seconds:p99_1m"):
        assert rule in dash_used, rule
    assert "aclprofd_op_duration_seconds_bucket" not in dash_used  # the rules did that work


def test_fleet_rules_mode_reads_recorded_series():
    from aclprof.cli.fleet.data import RULE_WINDOWS, queries

    for window in RULE_WINDOWS:
        names = {n for e in queries(window, rules=True).values() for n in _METRIC_TOKEN.findall(e)}
        assert names and names <= _recorded(), names - _recorded()


def test_the_name_check_sees_a_dead_name():
    # the check above must not pass vacuously: a misspelt rule is found by the token pattern
    expr = _concrete('service_op_type:aclprofd_op_call:rate1m{service=~"$service"} / on () aclprofd_recods_total')
    assert set(_METRIC_TOKEN.findall(expr)) == {"service_op_type:aclprofd_op_call:rate1m", "aclprofd_recods_total"}


@needs_promtool
def test_every_dashboard_query_parses(tmp_path):
    # promtool parses each expression as a recording rule (no server needed)
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(_exprs(_dashboard())):
        lines += [f"      - record: dashboard_query_{i}", f"        expr: {json.dumps(_concrete(expr))}"]
    f = tmp_path / "dash.rules.yml"
    f.write_text("\n".join(lines) + "\n")
    p = _promtool("check", "rules", f)
    assert p.returncode == 0, p.stdout + p.stderr
    bad = tmp_path / "bad.rules.yml"
    bad.write_text(f.read_text().replace("sum(", "sum((", 1))
    assert _promtool("check", "rules", bad).returncode != 0
