"""The /metrics series of the connection limits per reason and of the shared tables'
per-agent shares (issue 19), from one counters snapshot: kept apart from
:mod:`aclprofd.metrics` so that it gains one line.

- ``aclprofd_connections_refused_by_reason_total{reason}``: connections refused or evicted
  by the limits (``total``, ``without_hello``, ``control``, ``agent_share``, ``agent_uid``);
  their sum is ``aclprofd_connections_refused_total``;
- ``aclprofd_agent_idle_closed_total``: agents closed for sending nothing for
  ``agent_idle_timeout`` (an agent without heartbeats; it reconnects);
- ``aclprofd_agent_connections_open``, ``aclprofd_agent_connections_largest_uid``;
- ``aclprofd_table_refused_total{table}`` and ``aclprofd_table_evicted_total{table}``:
  entries refused for their agent's share (``aggregate_keys``, ``detector_cells``) and
  aged out (agent gone, not fed for ``table_idle_timeout``, or at RESET);
  ``aclprofd_table_entries{table}``: entries in use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .status import CountersSnapshot

__all__ = ["limit_families", "by_label"]


def by_label(family: type[CounterMetricFamily] | type[GaugeMetricFamily], name: str, doc: str, label: str,
             items: Iterable[tuple[str, float]]) -> Metric:
    """A family with one series per ``(label value, value)`` of ``items`` (a counter or gauge
    by reason, by table, ...)."""
    fam = family(name, doc, labels=[label])
    for value_of_label, n in items:
        fam.add_metric([value_of_label], n)
    return fam


def limit_families(s: CountersSnapshot) -> Iterator[Metric]:
    yield by_label(CounterMetricFamily, "aclprofd_connections_refused_by_reason",
                   "Connections refused or evicted by the connection limits, by reason", "reason",
                   s.connections_refused_by)
    yield CounterMetricFamily("aclprofd_agent_idle_closed", "Agent connections closed for sending nothing",
                              value=s.agent_idle_closed)
    yield GaugeMetricFamily("aclprofd_agent_connections_open", "Agent connections open now", value=s.open_agents)
    yield GaugeMetricFamily("aclprofd_agent_connections_largest_uid",
                            "Agent connections open now of the uid that has the most", value=s.agents_largest_uid)
    t_refused = CounterMetricFamily("aclprofd_table_refused",
                                    "Shared table entries refused because their agent held its share",
                                    labels=["table"])
    t_evicted = CounterMetricFamily("aclprofd_table_evicted",
                                    "Shared table entries aged out (agent gone and not fed)", labels=["table"])
    t_used = GaugeMetricFamily("aclprofd_table_entries", "Shared table entries in use", labels=["table"])
    for table, st in sorted(s.tables.items()):
        t_refused.add_metric([table], st.get("refused", 0))
        t_evicted.add_metric([table], st.get("evicted", 0))
        t_used.add_metric([table], st.get("in_use", 0))
    yield t_refused
    yield t_evicted
    yield t_used
