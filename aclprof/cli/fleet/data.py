"""What ``aclprof fleet`` computes, without any I/O: the PromQL it sends, the parsing of
Prometheus' instant-vector replies into per-host and fleet rows, and the outlier test.

The outlier test (the "slow card" question, per op type): for each (service, op type),
the hosts with at least ``min_count`` calls in the window are compared with each other by
a robust z-score of their p99 (Iglewicz and Hoaglin's modified z-score):

    z = 0.6745 * (p99_host - median) / scale,   scale = max(MAD, mad_floor * median, 1e-12 s)

with the median and the MAD (median absolute deviation) taken over those hosts. A host is
an outlier when ``|z| >= z_threshold`` (3.5 by default, the usual cut-off for this score),
and only when at least ``min_hosts`` hosts qualify (3 by default: with two hosts there is
no majority to call normal). The MAD floor (5 % of the median by default) matters because
identical hosts give identical interpolated quantiles, so the MAD of a healthy fleet is
often exactly 0; with the floor, a host must be at least ~26 % off the median (3.5 / 0.6745
* 5 %) to be flagged. The scores are scale-free: multiplying every p99 by a constant leaves
them unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

__all__ = ["METRIC", "Thresholds", "HostStat", "FleetRow", "FleetDataError", "valid_window", "valid_label",
           "promql_string", "selector", "RULE_WINDOWS", "queries", "parse_vector", "robust_z", "build_rows",
           "outliers", "to_json", "SORTS", "sort_rows"]

#: the fine histogram (8 buckets per power of two, devices summed): its histogram_quantile is
#: within 5 % of the exact quantile on smooth streams (daemon/README.md "Fine buckets")
METRIC = "aclprofd_op_duration_fine_seconds"
#: Iglewicz and Hoaglin: 0.6745 = the 0.75 quantile of the standard normal, so that z is on
#: the scale of a standard score for normal data.
_K = 0.6745
_ABS_FLOOR_S = 1e-12

_WINDOW = re.compile(r"^[1-9][0-9]{0,5}(s|m|h)$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class FleetDataError(ValueError):
    """A Prometheus reply that does not have the shape of an instant vector."""


@dataclass(frozen=True)
class Thresholds:
    """When a host's p99 counts as an outlier (see the module docstring)."""

    min_count: float = 100.0
    min_hosts: int = 3
    z: float = 3.5
    mad_floor: float = 0.05

    def as_dict(self) -> dict[str, float]:
        return {"min_count": self.min_count, "min_hosts": self.min_hosts, "z": self.z, "mad_floor": self.mad_floor}


@dataclass
class HostStat:
    """One host's numbers for one (service, op type) over the window."""

    host: str
    calls_per_s: float = 0.0
    count: float = 0.0
    device_s_per_s: float = 0.0
    p50_s: float = math.nan
    p99_s: float = math.nan
    z: float | None = None  # None: not scored (too few calls, or too few hosts)
    outlier: bool = False


@dataclass
class FleetRow:
    """One (service, op type) across the fleet, with its hosts."""

    service: str
    op_type: str
    calls_per_s: float = 0.0
    device_s_per_s: float = 0.0
    p50_s: float = math.nan
    p99_s: float = math.nan
    share: float = 0.0
    hosts: list[HostStat] = field(default_factory=list)
    scored_hosts: int = 0  # hosts that had enough calls to be compared

    @property
    def hosts_reporting(self) -> int:
        return sum(1 for h in self.hosts if h.calls_per_s > 0)

    @property
    def outliers(self) -> list[HostStat]:
        return [h for h in self.hosts if h.outlier]

    @property
    def median_host_p99_s(self) -> float:
        vals = [h.p99_s for h in self.hosts if h.z is not None]
        return median(vals) if vals else math.nan


def valid_window(text: str) -> bool:
    """A PromQL range this command accepts: a whole number of s, m or h (``30s``, ``1m``)."""
    return bool(_WINDOW.match(text))


def valid_label(text: str) -> bool:
    return bool(_LABEL.match(text))


def promql_string(value: str) -> str:
    """``value`` as a double-quoted PromQL string literal (backslash, quote and line breaks escaped)."""
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{out}"'


def selector(service: str | None = None, op_type_regex: str | None = None) -> str:
    """The label matchers of ``--service`` (exact) and ``--type`` (an RE2 regex, anchored by
    Prometheus), or "" for none."""
    parts = []
    if service is not None:
        parts.append(f"service={promql_string(service)}")
    if op_type_regex is not None:
        parts.append(f"op_type=~{promql_string(op_type_regex)}")
    return "{" + ",".join(parts) + "}" if parts else ""


#: the windows of daemon/prometheus/recording.rules.yml
RULE_WINDOWS = ("1m", "10m")


def queries(window: str, host_label: str = "host", sel: str = "", rules: bool = False) -> dict[str, str]:
    """The instant queries of one refresh: per host (calls/s, calls in the window, device
    seconds/s, p50, p99) and for the fleet (p50, p99 over the summed buckets: exact to the
    bucket, since every aclprofd has the same ones). Calls/s and device time of the fleet
    are the sums of the per-host values, so they need no query of their own.

    With ``rules``, the same numbers are read from the recording rules of
    daemon/prometheus/recording.rules.yml (windows 1m and 10m, host label ``host``): one
    precomputed series per host, service and op type instead of every raw bucket series,
    which is what a large fleet needs (see daemon/README.md, the series budget)."""
    if not valid_window(window):
        raise ValueError(f"window {window!r}: a whole number of s, m or h (30s, 1m, 10m)")
    if not valid_label(host_label):
        raise ValueError(f"host label {host_label!r} is not a Prometheus label name")
    if rules:
        if window not in RULE_WINDOWS or host_label != "host":
            raise ValueError(f"the recording rules have windows {' and '.join(RULE_WINDOWS)} and the host label "
                             f"'host' (asked: window {window!r}, host label {host_label!r})")
        seconds = {"1m": 60, "10m": 600}[window]
        hst, fl = "host_service_op_type", "service_op_type"
        return {
            "calls": f"{hst}:aclprofd_op_calls:rate{window}{sel}",
            "count": f"{hst}:aclprofd_op_calls:rate{window}{sel} * {seconds}",
            "device": f"{hst}:aclprofd_op_device_seconds:rate{window}{sel}",
            "p50": f"{hst}:aclprofd_op_duration_seconds:p50_{window}{sel}",
            "p99": f"{hst}:aclprofd_op_duration_seconds:p99_{window}{sel}",
            "fleet_p50": f"{fl}:aclprofd_op_duration_seconds:p50_{window}{sel}",
            "fleet_p99": f"{fl}:aclprofd_op_duration_seconds:p99_{window}{sel}",
        }
    h = f"{host_label}, service, op_type"
    f = "service, op_type"
    bucket = f"rate({METRIC}_bucket{sel}[{window}])"
    return {
        "calls": f"sum by ({h}) (rate({METRIC}_count{sel}[{window}]))",
        "count": f"sum by ({h}) (increase({METRIC}_count{sel}[{window}]))",
        "device": f"sum by ({h}) (rate({METRIC}_sum{sel}[{window}]))",
        "p50": f"histogram_quantile(0.5, sum by ({h}, le) ({bucket}))",
        "p99": f"histogram_quantile(0.99, sum by ({h}, le) ({bucket}))",
        "fleet_p50": f"histogram_quantile(0.5, sum by ({f}, le) ({bucket}))",
        "fleet_p99": f"histogram_quantile(0.99, sum by ({f}, le) ({bucket}))",
    }


def parse_vector(reply: Any) -> list[tuple[dict[str, str], float]]:
    """The samples of a ``/api/v1/query`` reply (already JSON-decoded) whose result is an
    instant vector; FleetDataError names what is wrong with anything else."""
    if not isinstance(reply, Mapping):
        raise FleetDataError(f"reply is a JSON {type(reply).__name__}, not an object")
    if reply.get("status") != "success":
        raise FleetDataError(f"status is {str(reply.get('status'))[:40]!r}, not 'success'")
    data = reply.get("data")
    if not isinstance(data, Mapping):
        raise FleetDataError("no 'data' object")
    if data.get("resultType") != "vector":
        raise FleetDataError(f"resultType is {str(data.get('resultType'))[:40]!r}, not 'vector'")
    result = data.get("result")
    if not isinstance(result, list):
        raise FleetDataError("'data.result' is not a list")
    out = []
    for i, item in enumerate(result):
        if not isinstance(item, Mapping):
            raise FleetDataError(f"result[{i}] is not an object")
        metric, value = item.get("metric"), item.get("value")
        if not isinstance(metric, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in metric.items()):
            raise FleetDataError(f"result[{i}].metric is not an object of strings")
        if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
            raise FleetDataError(f"result[{i}].value is not [time, \"number\"]")
        try:
            number = float(value[1])  # Prometheus writes NaN and +Inf as strings too
        except ValueError:
            raise FleetDataError(f"result[{i}].value {value[1][:40]!r} is not a number") from None
        out.append((dict(metric), number))
    return out


def robust_z(values: Sequence[float], mad_floor: float = 0.05) -> list[float]:
    """The modified z-score of each value against the median and MAD of all of them (see
    the module docstring); ``values`` must be finite and non-empty."""
    if not values:
        raise ValueError("robust_z needs at least one value")
    m = median(values)
    mad = median(abs(v - m) for v in values)
    scale = max(mad, mad_floor * abs(m), _ABS_FLOOR_S)
    return [_K * (v - m) / scale for v in values]


def build_rows(samples: Mapping[str, Iterable[tuple[dict[str, str], float]]], host_label: str = "host",
               thresholds: Thresholds | None = None) -> list[FleetRow]:
    """Rows per (service, op type) from the parsed replies of :func:`queries`, with the
    per-host statistics, the device-time share and the outlier scores filled in."""
    th = thresholds or Thresholds()
    rows: dict[tuple[str, str], FleetRow] = {}
    hosts: dict[tuple[str, str, str], HostStat] = {}

    def row(metric: Mapping[str, str]) -> FleetRow:
        key = (metric.get("service", ""), metric.get("op_type", ""))
        if key not in rows:
            rows[key] = FleetRow(*key)
        return rows[key]

    for name, attr in (("calls", "calls_per_s"), ("count", "count"), ("device", "device_s_per_s"),
                       ("p50", "p50_s"), ("p99", "p99_s")):
        for metric, value in samples.get(name, ()):
            r = row(metric)
            hkey = (r.service, r.op_type, metric.get(host_label, ""))
            if hkey not in hosts:
                hosts[hkey] = HostStat(hkey[2])
                r.hosts.append(hosts[hkey])
            setattr(hosts[hkey], attr, value)
    for name, attr in (("fleet_p50", "p50_s"), ("fleet_p99", "p99_s")):
        for metric, value in samples.get(name, ()):
            setattr(row(metric), attr, value)
    total_device = 0.0
    for r in rows.values():
        r.hosts.sort(key=lambda hs: hs.host)
        r.calls_per_s = sum(_finite(hs.calls_per_s) for hs in r.hosts)
        r.device_s_per_s = sum(_finite(hs.device_s_per_s) for hs in r.hosts)
        total_device += r.device_s_per_s
        _score(r, th)
    for r in rows.values():
        r.share = r.device_s_per_s / total_device if total_device > 0 else 0.0
    return list(rows.values())


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def _score(r: FleetRow, th: Thresholds) -> None:
    eligible = [hs for hs in r.hosts if hs.count >= th.min_count and math.isfinite(hs.p99_s)]
    r.scored_hosts = len(eligible)
    if len(eligible) < th.min_hosts:
        return
    for hs, z in zip(eligible, robust_z([hs.p99_s for hs in eligible], th.mad_floor)):
        hs.z = z
        hs.outlier = abs(z) >= th.z


def outliers(rows: Iterable[FleetRow]) -> list[dict[str, Any]]:
    """Every flagged host, largest |z| first."""
    out = []
    for r in rows:
        med = r.median_host_p99_s
        for hs in r.outliers:
            out.append({"host": hs.host, "service": r.service, "op_type": r.op_type, "p99_s": _num(hs.p99_s),
                        "median_host_p99_s": _num(med), "fleet_p99_s": _num(r.p99_s), "z": _num(hs.z),
                        "direction": "slow" if (hs.z or 0) > 0 else "fast"})
    return sorted(out, key=lambda o: (-abs(o["z"] or 0), o["host"], o["service"], o["op_type"]))


SORTS: dict[str, Callable[[FleetRow], float]] = {"share": lambda r: -r.share, "calls": lambda r: -r.calls_per_s,
         "p99": lambda r: -_finite(r.p99_s), "p50": lambda r: -_finite(r.p50_s),
         "outlier": lambda r: -max((abs(h.z or 0) for h in r.hosts), default=0.0)}


def sort_rows(rows: Iterable[FleetRow], sort: str) -> list[FleetRow]:
    """Rows in the order of ``sort`` (one of SORTS), ties by service and op type."""
    key = SORTS[sort]
    return sorted(rows, key=lambda r: (key(r), r.service, r.op_type))


def _num(x: float | None) -> float | None:
    """JSON has no NaN or infinity: those are null."""
    return x if x is not None and math.isfinite(x) else None


def to_json(rows: Sequence[FleetRow], **meta: Any) -> dict[str, Any]:
    """The ``--once --json`` document: ``meta`` (prometheus, window, ...), the rows with
    their hosts, the flat outlier list and every host seen."""
    doc: dict[str, Any] = dict(meta)
    doc["hosts"] = sorted({hs.host for r in rows for hs in r.hosts if hs.calls_per_s > 0})
    doc["rows"] = [{
        "service": r.service, "op_type": r.op_type, "calls_per_s": _num(r.calls_per_s), "p50_s": _num(r.p50_s),
        "p99_s": _num(r.p99_s), "share": _num(r.share), "hosts_reporting": r.hosts_reporting,
        "scored_hosts": r.scored_hosts, "outliers": [hs.host for hs in r.outliers],
        "hosts": [{"host": hs.host, "calls_per_s": _num(hs.calls_per_s), "count": _num(hs.count),
                   "p50_s": _num(hs.p50_s), "p99_s": _num(hs.p99_s), "z": _num(hs.z), "outlier": hs.outlier}
                  for hs in r.hosts]} for r in rows]
    doc["outliers"] = outliers(rows)
    return doc
