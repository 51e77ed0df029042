"""The baseline document, bounded by construction (issue 19, item 6).

One agent's 4096 cells with op names and types of 4 KiB of control characters made a
202 MB document (JSON escapes): ``baseline save``, ``BASELINE_GET`` and ``aclprof diff
live:`` failed for everyone, after a 2.6-3.0 s stall of the loop. :func:`build` writes the
document's JSON itself, row by row, within a byte budget (:data:`aclprofd.baselines.MAX_BYTES`,
under the wire's 16 MiB, so BASELINE_GET can always send what was saved):

- every service (the sender: pids merged) gets a max-min fair share of the bytes: the
  service with the fewest bytes so far takes its next row, heaviest rows (most samples)
  first, until its next row does not fit what is left. One service's long cells cost its
  own rows, never another service's;
- rows left out are counted in the document (``"truncated": {"rows": n, "services":
  {service: n}}``, at most 100 services named) and by the daemon (STATUS
  ``replies_truncated``, ``baseline.rows``);
- the cost is bounded by the budget: a row is encoded only when it is taken (plus at most
  one that does not fit per service), so 200 MB of cells cost ~12 MB of encoding.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclprof.protocol.baselinefmt import FORMAT, VERSION, check_name, encode_row
from aclprof.protocol.quantshift import BINS_PER_OCTAVE, NBINS

from .baselines import MAX_BYTES

__all__ = ["Built", "build"]

_NAMED_SERVICES = 100  # services named in "truncated" (the rest are in the row count)
_ROW_FIXED = 96        # a row's bytes besides its strings and bins (keys, brackets), at least


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


@dataclass
class Built:
    """A document as JSON bytes, with what :func:`build` kept and left out."""

    data: bytes
    rows: int
    rows_left_out: int = 0
    services_cut: dict[str, int] = field(default_factory=dict)


def build(name: str, cells: Sequence[tuple[str, str, str, str]], hists: np.ndarray, meta: dict[str, Any],
          budget: int = MAX_BYTES) -> Built:
    """The baseline document of ``cells`` (service, model, op_type, op_name) with their
    dense histograms, at most ``budget`` bytes of JSON (see the module docstring)."""
    check_name(name)
    totals = hists.sum(axis=1) if len(cells) else np.zeros(0)
    by_service: dict[str, list[int]] = {}
    for i in np.flatnonzero(totals > 0).tolist():
        by_service.setdefault(cells[i][0], []).append(i)
    for rows in by_service.values():
        rows.sort(key=lambda i: -totals[i])  # the heaviest first: they matter most to a diff
    head = {"format": FORMAT, "version": VERSION, "name": name, **meta, "nbins": NBINS,
            "bins_per_octave": BINS_PER_OCTAVE}
    # room for the head, the "truncated" object (100 named services at ~1.6 kB each at most)
    # and the brackets
    left = budget - len(_dumps(head)) - _NAMED_SERVICES * 1700 - 256
    encoded: dict[int, str] = {}
    heap = [(0, svc) for svc in by_service]
    heapq.heapify(heap)
    pos = dict.fromkeys(by_service, 0)
    cut: dict[str, int] = {}
    while heap:
        used, svc = heapq.heappop(heap)
        rows = by_service[svc]
        i = rows[pos[svc]]
        cell = cells[i]
        # a lower bound before encoding: a row that cannot fit is not encoded at all
        if sum(len(s) for s in cell) + _ROW_FIXED > left:
            cut[svc] = len(rows) - pos[svc]
            continue
        text = _dumps(encode_row(cell, hists[i]))
        if len(text) + 1 > left:
            cut[svc] = len(rows) - pos[svc]
            continue
        encoded[i] = text
        left -= len(text) + 1
        pos[svc] += 1
        if pos[svc] < len(rows):
            heapq.heappush(heap, (used + len(text) + 1, svc))
    left_out = sum(cut.values())
    if left_out:
        named = dict(sorted(cut.items(), key=lambda kv: -kv[1])[:_NAMED_SERVICES])
        head["truncated"] = {"rows": left_out, "budget_bytes": budget, "services": named}
    # before "rows": BASELINE_LIST reads a document's head only (aclprofd.baselines)
    head["row_count"] = len(encoded)
    body = ",".join(encoded[i] for i in sorted(encoded))  # the cells' order, as before
    data = (_dumps(head)[:-1] + ',"rows":[' + body + "]}").encode()
    return Built(data, len(encoded), left_out, cut)
