"""The /metrics text (Prometheus text exposition format 0.0.4), rendered within a series budget.

``prometheus_client.generate_latest`` builds every sample as a Python object and the whole
text in memory, with no bound: one agent's long WATCH relabels or 10k op names made a
scrape of 771 MB or of 310k series (daemon/README.md "Prometheus series budget"). Here the
text is written line by line, byte for byte as ``generate_latest`` writes it (same names,
types, label order and escaping: ``tests/test_hostile2_metrics.py`` compares them), into
chunks of at most ``CHUNK`` bytes, and each series is admitted against the budget first:

- a histogram label set (``SERIES_PER_HISTOGRAM`` series, ``SERIES_PER_FINE_HISTOGRAM`` for
  the fine histogram: its buckets, ``_count`` and ``_sum``) is charged, against the share of
  its histogram family, to the **agent** that created it: the (host, pid) of the first
  aggregate key that feeds it, i.e. one agent process (its service is a label of the
  series). Beyond ``per_agent`` series, or the same fraction of ``max_bytes``, an agent's
  newer label sets are left out;
- every series counts against ``max_series`` in all, and the text against ``max_bytes``
  (the /metrics share of the memory budget): beyond either, later series are left out.

Label sets are admitted in the order their first key was registered, which never changes
(keys are never removed), so the exposed set is stable from scrape to scrape: an agent that
adds series later cannot push out another's. What is left out is counted by reason
(``agent_share``, ``total``, ``bytes``) in the rendering (``Rendering.refused``), reported by
STATUS and by /metrics itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.utils import floatToGoString

from .aggregate.aggregator import PromSeries
from .aggregate.quantiles import BINS_PER_OCTAVE, FINE_EIGHTHS, NFINE, NPROM, PROM_EXPONENTS

__all__ = ["Budget", "Rendering", "TextBuilder", "escape", "family_text", "histogram_lines", "histogram_steps",
           "LINES_PER_STEP",
           "SERIES_PER_HISTOGRAM", "SERIES_PER_FINE_HISTOGRAM", "FINE_LE", "CHUNK", "REFUSAL_REASONS"]

#: series of one histogram label set: NPROM bucket lines (the last is +Inf), _count, _sum
SERIES_PER_HISTOGRAM = NPROM + 2
#: series of one fine histogram label set (FINE_EIGHTHS buckets, +Inf, _count, _sum)
SERIES_PER_FINE_HISTOGRAM = NFINE + 2
#: the text is kept in chunks of about this size (sent as they are: no join, no copy)
CHUNK = 64 << 10
REFUSAL_REASONS = ("agent_share", "total", "bytes")
#: lines (series) rendered between two yields of histogram_steps, at most (a step of ~1-2 ms):
#: 66 label sets of the op histogram (31 lines each), 9 of the fine one (220 lines each)
LINES_PER_STEP = 2048
_LE = [floatToGoString(2.0**k * 1e-9) for k in PROM_EXPONENTS] + ["+Inf"]
#: the fine histogram's le values (seconds, as prometheus_client writes floats)
FINE_LE = [floatToGoString(2.0 ** (j / BINS_PER_OCTAVE) * 1e-9) for j in FINE_EIGHTHS] + ["+Inf"]


def escape(value: str) -> str:
    """A label value as the text format writes it (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@dataclass(frozen=True)
class Budget:
    """The series budget of one rendering (daemon/README.md "Prometheus series budget")."""

    max_series: int
    per_agent: int
    max_bytes: int

    @property
    def agent_bytes(self) -> int:
        """An agent's share of the bytes: the same fraction as its share of the series."""
        return self.max_bytes * min(self.per_agent, self.max_series) // self.max_series


@dataclass(frozen=True)
class Rendering:
    """One rendered /metrics text, shared by every scrape it serves (never modified)."""

    chunks: tuple[bytes, ...]
    size: int
    series: int
    #: series left out, by reason (REFUSAL_REASONS)
    refused: dict[str, int]
    #: agents (host, pid) that had series left out for their share
    agents_over_share: int
    #: time.monotonic() when the rendering started, and how long it took
    started: float
    seconds: float


@dataclass
class TextBuilder:
    """Lines into chunks; counts series and bytes, and what the budget left out."""

    budget: Budget
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    series: int = 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSAL_REASONS, 0))
    _pending: list[bytes] = field(default_factory=list)
    _pending_size: int = 0

    def admit(self, series: int, nbytes: int) -> str | None:
        """None if ``series`` more series of ``nbytes`` bytes fit the budget, else the
        reason they do not (and they are counted as refused)."""
        if self.series + series > self.budget.max_series:
            reason = "total"
        elif self.size + nbytes > self.budget.max_bytes:
            reason = "bytes"
        else:
            return None
        self.refused[reason] += series
        return reason

    def add(self, data: bytes, series: int) -> None:
        self._pending.append(data)
        self._pending_size += len(data)
        self.size += len(data)
        self.series += series
        if self._pending_size >= CHUNK:
            self._cut()

    def _cut(self) -> None:
        if self._pending:
            self.chunks.append(b"".join(self._pending))
            self._pending, self._pending_size = [], 0

    def finish(self, started: float, agents_over_share: int) -> Rendering:
        self._cut()
        return Rendering(tuple(self.chunks), self.size, self.series, dict(self.refused), agents_over_share,
                         started, time.monotonic() - started)


def _header(name: str, doc: str, mtype: str) -> bytes:
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n".encode()


def _sample_line(name: str, labels: dict[str, str], value: float) -> str:
    if labels:
        inner = ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}} {floatToGoString(value)}\n"
    return f"{name} {floatToGoString(value)}\n"


def family_text(out: TextBuilder, family: Any, force: bool = False) -> None:
    """One prometheus_client metric family (counters, gauges; no OpenMetrics extras), each
    sample admitted against the budget (the HELP/TYPE lines are no series), unless ``force``
    (the endpoint's own few series, which say what was left out)."""
    name, mtype = family.name, family.type
    if mtype == "counter":
        name += "_total"
    head = _header(name, family.documentation, mtype)
    out.add(head, 0)
    for s in family.samples:
        line = _sample_line(s.name, s.labels, s.value).encode()
        if force or out.admit(1, len(line)) is None:
            out.add(line, 1)


def histogram_lines(name: str, labels: dict[str, str], cum: Sequence[int], count: int, sum_s: float,
                    les: Sequence[str] = _LE) -> bytes:
    """The lines of one histogram label set, as generate_latest writes them (labels sorted,
    ``le`` among them); ``les`` the bucket bounds as text, the last "+Inf"."""
    items = sorted(labels.items())
    before = ",".join(f'{k}="{escape(v)}"' for k, v in items if k < "le")
    after = ",".join(f'{k}="{escape(v)}"' for k, v in items if k > "le")
    pre = f"{name}_bucket{{{before}{',' if before else ''}le=\""
    post = f"\"{',' if after else ''}{after}}} "
    lines = [f"{pre}{le}{post}{floatToGoString(float(v))}\n" for le, v in zip(les[:-1], cum[:-1])]
    lines.append(f"{pre}+Inf{post}{floatToGoString(float(count))}\n")
    both = ",".join(f'{k}="{escape(v)}"' for k, v in items)
    lab = f"{{{both}}}" if both else ""
    lines.append(f"{name}_count{lab} {floatToGoString(float(count))}\n")
    lines.append(f"{name}_sum{lab} {floatToGoString(sum_s)}\n")
    return "".join(lines).encode()


def histogram_text(out: TextBuilder, name: str, doc: str, label_names: Sequence[str], host_label: str,
                   series: Iterable[PromSeries], owners: Sequence[tuple[int, str, int]], *,
                   les: Sequence[str] = _LE) -> int:
    """:func:`histogram_steps` in one piece; returns how many agents went over their share."""
    over: set[tuple[str, int]] = set()
    for _ in histogram_steps(out, name, doc, label_names, host_label, series, owners, les=les, over=over):
        pass
    return len(over)


def histogram_steps(out: TextBuilder, name: str, doc: str, label_names: Sequence[str], host_label: str,
                    series: Iterable[PromSeries], owners: Sequence[tuple[int, str, int]], *,
                    les: Sequence[str] = _LE, over: set[tuple[str, int]]) -> Iterator[None]:
    """An op histogram within the budget: label sets in the order of their first key,
    each charged to its owner (host, pid) against the agent's share of this histogram;
    ``les`` are its bucket bounds as text; ``over`` collects the agents over their share
    across the histograms of one rendering. Yields after every ``LINES_PER_STEP`` lines'
    worth of label sets (the event loop renders in slices: aclprofd.loopjobs)."""
    out.add(_header(name, doc, "histogram"), 0)
    b = out.budget
    per_agent, agent_bytes = b.per_agent, b.agent_bytes
    used: dict[tuple[str, int], tuple[int, int]] = {}
    per_set = len(les) + 2
    every = max(1, LINES_PER_STEP // per_set)
    rows = sorted(zip(owners, series), key=lambda r: r[0][0])
    for i, ((_, host, pid), (lab, cum, count, sum_ns)) in enumerate(rows, 1):
        if i % every == 0:
            yield
        agent = (host, pid)
        n, nbytes = used.get(agent, (0, 0))
        if n + per_set > per_agent:
            out.refused["agent_share"] += per_set
            over.add(agent)
            continue
        data = histogram_lines(name, dict(zip(label_names, (host_label, *lab))), cum.tolist(), count, sum_ns / 1e9,
                               les)
        if nbytes + len(data) > agent_bytes:
            out.refused["agent_share"] += per_set
            over.add(agent)
            continue
        if out.admit(per_set, len(data)) is None:
            used[agent] = (n + per_set, nbytes + len(data))
            out.add(data, per_set)
