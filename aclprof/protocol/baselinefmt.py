"""The saved-baseline document: per-op latency histograms under a name.

The daemon writes it (``aclprof baseline save NAME``: ``<data_dir>/baselines/NAME.json``)
and sends it (BASELINE_GET); ``aclprof diff`` reads it. One JSON object::

    {"format": "aclprofd-baseline", "version": 1, "name": str, "saved_ts": float,
     "host": str, "source": str, "nbins": 322, "bins_per_octave": 8,
     "rows": [{"service": str, "model": str, "op_type": str, "op_name": str,
               "bins": [int, ...], "weights": [float, ...]}, ...]}

``bins``/``weights`` are a sparse histogram (the aggregator's bins, :func:`.quantshift.bin_index`:
bin ``b >= 1`` holds ``(2**((b-1)/8), 2**(b/8)]`` ns; weights are counts, decayed ones are
fractional). Version 1 did not change when the bins became upper-inclusive: a baseline saved
before holds durations of exactly ``2**k`` ns one bin up, which reads 4.4 % high at most, within a
quantile's stated resolution (daemon/README.md). :func:`decode` checks everything a hostile or damaged file
could get wrong and raises ValueError naming it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from .quantshift import BINS_PER_OCTAVE, NBINS

__all__ = ["FORMAT", "VERSION", "NAME_RE", "check_name", "encode", "encode_row", "decode", "MAX_ROWS"]

FORMAT = "aclprofd-baseline"
VERSION = 1
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_ROWS = 1 << 16
_TEXT_MAX = 4096


def check_name(name: Any) -> str:
    """``name`` if it is a valid baseline name (1-64 of letters, digits, ``._-``, not starting
    with a dot or dash: it becomes a file name); else ValueError saying what is allowed."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        shown = repr(name)[:80]
        raise ValueError(f"bad baseline name {shown}: use 1-64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    return name


def encode(name: str, cells: Sequence[tuple[str, str, str, str]], hists: np.ndarray,
           meta: dict[str, Any]) -> dict[str, Any]:
    """The document of ``cells`` (service, model, op_type, op_name) with their dense
    histograms (rows x NBINS); empty rows are left out."""
    rows = [row for row in (encode_row(c, h) for c, h in zip(cells, hists)) if row["bins"]]
    return {"format": FORMAT, "version": VERSION, "name": check_name(name), **meta,
            "nbins": NBINS, "bins_per_octave": BINS_PER_OCTAVE, "rows": rows}


def encode_row(cell: Sequence[str], hist: np.ndarray) -> dict[str, Any]:
    """One row of the document: a cell (service, model, op_type, op_name) and its dense
    histogram as sparse ``bins``/``weights`` (empty lists for an empty histogram)."""
    nz = np.flatnonzero(hist > 0)
    service, model, op_type, op_name = cell
    return {"service": service, "model": model, "op_type": op_type, "op_name": op_name,
            "bins": nz.tolist(), "weights": [round(float(w), 3) for w in hist[nz]]}


def decode(doc: Any) -> tuple[list[tuple[str, str, str, str]], np.ndarray]:
    """``(cells, dense histograms)`` of a document; ValueError for anything malformed."""
    if not isinstance(doc, dict):
        raise ValueError("a baseline must be a JSON object")
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"not a {FORMAT} version {VERSION} document")
    if doc.get("nbins") != NBINS or doc.get("bins_per_octave") != BINS_PER_OCTAVE:
        raise ValueError("the baseline's histogram layout differs from this version's")
    rows = doc.get("rows")
    if not isinstance(rows, list) or len(rows) > MAX_ROWS:
        raise ValueError(f"'rows' must be a list of at most {MAX_ROWS} rows")
    cells: list[tuple[str, str, str, str]] = []
    hists = np.zeros((len(rows), NBINS), np.float64)
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"row {i} is not an object")
        ident = tuple(r.get(k) for k in ("service", "model", "op_type", "op_name"))
        if not all(isinstance(v, str) and len(v) <= _TEXT_MAX for v in ident):
            raise ValueError(f"row {i}: service, model, op_type and op_name must be strings "
                             f"of at most {_TEXT_MAX} characters")
        bins, weights = r.get("bins"), r.get("weights")
        if not isinstance(bins, list) or not isinstance(weights, list) or len(bins) != len(weights) \
                or len(bins) > NBINS:
            raise ValueError(f"row {i}: 'bins' and 'weights' must be lists of equal length (at most {NBINS})")
        if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < NBINS for b in bins):
            raise ValueError(f"row {i}: bins must be integers in 0..{NBINS - 1}")
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < 1e18 for w in weights):
            raise ValueError(f"row {i}: weights must be finite numbers >= 0")
        np.add.at(hists[i], np.asarray(bins, np.int64), np.asarray(weights, np.float64))
        cells.append((ident[0], ident[1], ident[2], ident[3]))  # type: ignore[arg-type]
    return cells, hists
