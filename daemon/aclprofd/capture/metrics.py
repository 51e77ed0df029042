"""The flight recorder's Prometheus series (a part of ``aclprofd.metrics``' collector), read
at scrape time from the recorder's counters (ints) and its published list of captures (one
immutable tuple), so the HTTP thread takes no lock and touches no directory:

- ``aclprofd_captures_total``: captures written since the daemon started;
- ``aclprofd_capture_errors_total``: captures that failed (full disk, unwritable directory,
  a writer child that died or timed out);
- ``aclprofd_captures_not_taken_total{reason}``: flags without a capture (``rate_limited``,
  ``dropped``, ``abandoned``);
- ``aclprofd_captures_kept`` / ``aclprofd_captures_bytes``: captures on disk now, and their size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .recorder import CaptureService

__all__ = ["capture_families"]


def capture_families(rec: CaptureService | None) -> Iterator[Any]:
    """The flight recorder's metric families (nothing for a daemon without one)."""
    if rec is None:
        return
    entries = rec.store.published  # one attribute read: a consistent list
    yield CounterMetricFamily("aclprofd_captures", "Flight recorder captures written", value=rec.made)
    yield CounterMetricFamily("aclprofd_capture_errors", "Flight recorder captures that failed (see the log)",
                              value=rec.errors)
    not_taken = CounterMetricFamily("aclprofd_captures_not_taken",
                                    "Regression flags without a capture, by reason", labels=["reason"])
    for reason, n in (("rate_limited", rec.rate_limited), ("dropped", rec.dropped), ("abandoned", rec.abandoned)):
        not_taken.add_metric([reason], n)
    yield not_taken
    yield GaugeMetricFamily("aclprofd_captures_kept", "Flight recorder captures on disk", value=len(entries))
    yield GaugeMetricFamily("aclprofd_captures_bytes", "Bytes of the flight recorder's captures on disk",
                            value=sum(e.bytes for e in entries))
