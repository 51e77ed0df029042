"""The fine Prometheus histogram (issue 23 item 5) in process, without a Prometheus server:
its buckets are the aggregates' bin edges, its counts equal the exact counts of the records
(integer arithmetic: d <= 2**(j/8) as d**8 <= 2**j) at every edge, its label sets sum the
devices of a (service, model, op type), and it is rendered next to the power-of-two one,
byte for byte as prometheus_client writes it."""

from __future__ import annotations

import numpy as np
from aclprofd.aggregate.aggregator import Aggregator, KeySource
from aclprofd.aggregate.quantiles import BINS_PER_OCTAVE, FINE_EIGHTHS, NFINE, PROM_EXPONENTS, fine_bucket
from aclprofd.promtext import FINE_LE, SERIES_PER_FINE_HISTOGRAM, histogram_lines
from helpers.promexact import exact_le_counts
from helpers.records import make_records
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.utils import floatToGoString

NAMES = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "mm1"}


def test_the_fine_edges_are_every_bin_edge_of_the_power_of_two_range():
    assert FINE_EIGHTHS[0] == PROM_EXPONENTS[0] * BINS_PER_OCTAVE and FINE_EIGHTHS[-1] == PROM_EXPONENTS[-1] * 8
    assert list(FINE_EIGHTHS) == list(range(56, 273)) and NFINE == 218 and SERIES_PER_FINE_HISTOGRAM == 220
    assert FINE_LE[-1] == "+Inf" and FINE_LE[0] == floatToGoString(128e-9)
    # every power-of-two le is one of them
    assert {floatToGoString(2.0**k * 1e-9) for k in PROM_EXPONENTS} <= set(FINE_LE)


def test_fine_bucket_of_a_bin():
    bins = np.array([0, 1, 56, 57, 100, 272, 273, 400])
    assert fine_bucket(bins).tolist() == [0, 0, 0, 1, 44, 216, 217, 217]


@given(st.lists(st.integers(1, 2**36), min_size=1, max_size=300), st.integers(0, 3))
def test_fine_counts_are_exact_at_every_edge(durations, devices):
    d = np.array(durations, dtype=np.int64)
    agg = Aggregator(clock=lambda: 1000.0)
    recs = make_records(len(d), types=(1,), names=(3,), durations=d)
    recs["device_id"] = np.arange(len(d)) % (devices + 1)  # spread over devices: summed
    recs["model_id"] = 9
    agg.ingest(KeySource("h", 1, None), recs, NAMES)
    series, owners = agg.prometheus_fine_series()
    ((labels, cum, count, total),) = series
    assert labels == ("", "9", "Conv2D") and count == len(d) and total == int(d.sum())
    assert cum.tolist() == [*exact_le_counts(d, FINE_EIGHTHS), len(d)]
    assert [o[1:] for o in owners] == [("h", 1)]  # charged to the agent (host, pid) that sent it
    # the same records in the power-of-two buckets: one per device, equal at the shared edges
    coarse = agg.prometheus_view()
    assert sum(c for _, _, c, _ in coarse) == count
    both = sum(np.asarray(b) for _, b, _, _ in coarse)
    assert both[:-1].tolist() == [int(cum[k * 8 - FINE_EIGHTHS[0]]) for k in PROM_EXPONENTS]


def test_fine_lines_are_prometheus_clients_byte_for_byte():
    from prometheus_client.core import HistogramMetricFamily
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    cum = list(range(NFINE))
    fam = HistogramMetricFamily("m", "d", labels=["host", "op_type"])
    fam.add_metric(["x", "y"], [(le, float(v)) for le, v in zip(FINE_LE[:-1], cum[:-1])] + [("+Inf", 217.0)], 0.5)

    class C:
        def collect(self):
            yield fam
    reg = CollectorRegistry()
    reg.register(C())
    want = b"".join(line + b"\n" for line in generate_latest(reg).splitlines() if not line.startswith(b"#"))
    want = b"\n".join(x for x in want.split(b"\n") if b"_created" not in x)
    mine = histogram_lines("m", {"host": "x", "op_type": "y"}, cum, 217, 0.5, FINE_LE)
    assert mine.strip() == want.strip()
