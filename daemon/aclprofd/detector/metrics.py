"""The regression detector's Prometheus series (a part of ``aclprofd.metrics``' collector).

Read at scrape time from the detector's last published view (one immutable object, host
label included), so the HTTP thread never touches the loop's arrays or settings. One
series per evaluated (service, model, op_type) group and quantile (``p50``, ``p99``);
``host`` is the daemon's host label:

- ``aclprofd_op_latency_shift``: current / baseline quantile ratio (1.10 = 10 % slower);
- ``aclprofd_op_latency_shift_lower`` / ``_upper``: its confidence bounds;
- ``aclprofd_op_regression_flag``: 1 while the detector flags the quantile, else 0;
- ``aclprofd_regressions_flagged_total``: flags raised since the daemon started.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .engine import QNAMES, DetectorView

__all__ = ["detector_families"]

_LABELS = ["host", "service", "model", "op_type", "quantile"]


def detector_families(view: DetectorView) -> Iterator[Any]:
    """The detector's metric families, from its published view (``DetectorService.published``:
    read once by the caller, one immutable object, so the families are consistent)."""
    host = view.host
    fams = {
        "shift": GaugeMetricFamily("aclprofd_op_latency_shift",
                                   "Op latency quantile, current window / baseline (regression detector)",
                                   labels=_LABELS),
        "lower": GaugeMetricFamily("aclprofd_op_latency_shift_lower",
                                   "Lower confidence bound of aclprofd_op_latency_shift", labels=_LABELS),
        "upper": GaugeMetricFamily("aclprofd_op_latency_shift_upper",
                                   "Upper confidence bound of aclprofd_op_latency_shift", labels=_LABELS),
    }
    flag = GaugeMetricFamily("aclprofd_op_regression_flag",
                             "1 while the regression detector flags this op type's quantile", labels=_LABELS)
    for row in view.rows:
        for qn in QNAMES.values():
            r = row.get(qn)
            if r is None:
                continue
            labels = [host, row["service"], row["model"], row["op_type"], qn]
            for key, fam in fams.items():
                if r[key] is not None:
                    fam.add_metric(labels, r[key])
            flag.add_metric(labels, 1.0 if r["flagged"] else 0.0)
    yield from fams.values()
    yield flag
    yield CounterMetricFamily("aclprofd_regressions_flagged", "Op latency regressions flagged (quantiles raised)",
                              value=view.flagged_total)
