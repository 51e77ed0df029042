"""The shipped Grafana dashboards type-check against Grafana's published dashboard schema
(npm ``@grafana/schema`` 13.x, through ``tsc``; tests/helpers/grafanaschema.py), issue 23
item 7. Was: 9 deviations (``definition`` on 7 query variables, unknown to the schema; one
``current: {}`` without ``text``/``value``; the host dashboard's ``__inputs``, an export-for-
sharing block naming a ``DS_PROMETHEUS`` input that nothing used). ``definition`` only
repeats ``query.query`` for Grafana's variable list (Grafana writes it back on save); the
datasource variable needs no ``current`` (Grafana picks the default data source); the
dashboards choose their data source with the ``datasource`` variable, not an import input.
No deliberate exception is left: :data:`EXCEPTIONS` would list one with its reason.

Skipped, naming what to install, where node or the npm packages are absent (``.ci/run``
installs them)."""

from __future__ import annotations

import json

import pytest
from helpers import grafanaschema
from helpers.procs import REPO

pytestmark = pytest.mark.skipif(grafanaschema.missing() is not None, reason=str(grafanaschema.missing()))

DASHBOARDS = ("daemon/grafana-dashboard.json", "daemon/prometheus/grafana.json")
#: (dashboard, TS error code, message) -> why the deviation is kept; none today
EXCEPTIONS: dict[tuple[str, str, str], str] = {}


def test_the_schema_is_the_pinned_major():
    assert grafanaschema.schema_version().split(".")[0] == "13"


@pytest.mark.parametrize("path", DASHBOARDS)
def test_dashboard_type_checks_against_grafana_schema(path):
    dash = json.loads((REPO / path).read_text())
    found = [(line, code, msg) for line, code, msg in grafanaschema.check(dash)
             if (path, code, msg) not in EXCEPTIONS]
    assert found == []


def test_the_check_sees_each_kind_of_deviation():
    """The two deviations the dashboards had, put back, are reported (the check is not vacuous)."""
    dash = json.loads((REPO / DASHBOARDS[1]).read_text())
    variables = dash["templating"]["list"]
    variables[0]["current"] = {}
    variables[1]["definition"] = variables[1]["query"]["query"]
    found = grafanaschema.check(dash)
    assert sorted(code for _, code, _ in found) == ["TS2353", "TS2739"], found
    assert any("'definition' does not exist" in m or '"definition"' in m for _, _, m in found)
    assert any("text, value" in m for _, _, m in found)
