"""``aclprof diff requests:KEY=VALUE ...``: the request bills the daemon kept (issue 25), as
:class:`~aclprof.cli.diff_sources.Histograms` whose rows are per-request quantities.

One sample per bill in every row: ``(request wall)`` and ``(request device)`` (the request's
wall and device time), and for each op type in any bill, that type's device time in the
request (0 in a bill without it; ``(other)`` is what the agent folded beyond its top 16
types). So ``aclprof diff requests:version=A requests:version=B`` compares, for example, the
p99 request device time of version B with A's, and ranks the op types by how much their
per-request p99 moved. The raw samples are kept: the quantiles, their intervals and the ratio
bounds are read from them (nearest rank at quantshift's ranks: exact), not from bins, and the
verdict follows the same rule (:func:`aclprof.protocol.quantshift.judge`).
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from aclprof.cli.common import EXIT_UNREACHABLE, CliError
from aclprof.protocol.quantshift import NBINS, Shift, bin_index

if TYPE_CHECKING:
    from aclprof.cli.client import Client
    from aclprof.cli.diff_sources import Histograms

__all__ = ["WALL", "DEVICE", "parse_attrs", "load_requests", "from_bills", "exact_quantile", "sample_shift",
           "MAX_BILLS"]

WALL, DEVICE = "(request wall)", "(request device)"
#: bills one REQUESTS reply carries at most (aclprofd.bills.MAX_TOP): a source that matches more
#: is refused, since the reply would be only the slowest of them (a biased sample)
MAX_BILLS = 1000


def parse_attrs(rest: str) -> dict[str, str]:
    """``KEY=VALUE[,KEY=VALUE...]`` of a ``requests:`` spec; ValueError naming the problem."""
    from aclprof.cli.argtypes import key_value

    attrs: dict[str, str] = {}
    for part in rest.split(","):
        try:
            k, v = key_value(part)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"requests:{rest}: {exc} (use requests:KEY=VALUE[,KEY=VALUE...])") from None
        if k in attrs:
            raise ValueError(f"requests:{rest}: {k!r} is given twice")
        attrs[k] = v
    return attrs


def load_requests(spec: str, client: Client, service: str | None) -> Histograms:
    """The bills matching ``spec``'s attributes (and ``service``) the daemon kept."""
    from aclprof.protocol import wire

    protocol = int(client.welcome.get("protocol", 1))
    if protocol < 4:
        raise CliError(f"{spec}: the daemon speaks protocol {protocol}; request bills need 4 (upgrade aclprofd)",
                       EXIT_UNREACHABLE)
    attrs = parse_attrs(spec.partition(":")[2])
    reply = client.request(wire.Kind.REQUESTS, {"service": service, "model": None, "attrs": attrs, "since": None,
                                                "top": MAX_BILLS}, wire.Kind.REQUESTS_REPLY)
    bills = reply.get("bills") or []
    if len(bills) >= MAX_BILLS:
        raise CliError(f"{spec}: {MAX_BILLS} or more kept bills match, more than one reply carries (it would "
                       "hold only the slowest); narrow it with --service or another attribute")
    if not bills:
        raise CliError(f"{spec}: no kept request bill has these attributes"
                       + (f" in service {service!r}" if service is not None else "")
                       + " (aclprof requests --attr KEY=VALUE lists them)")
    return from_bills(spec, bills, service)


def from_bills(spec: str, bills: list[dict[str, Any]], service: str | None = None) -> Histograms:
    """One sample per bill per row (see the module's docstring), binned and kept raw; the rows'
    service is ``service`` (the daemon filtered by it) or "" (services merged)."""
    from aclprof.cli.diff_sources import Histograms

    types = sorted({t[0] for b in bills for t in (b.get("types") or [])})
    rows: dict[str, list[int]] = {WALL: [], DEVICE: [], **{t: [] for t in types}}
    for b in bills:
        rows[WALL].append(int(b["wall_ns"]))
        rows[DEVICE].append(int(b["device_ns"]))
        mine = {t[0]: int(t[1]) for t in (b.get("types") or [])}
        for t in types:
            rows[t].append(mine.get(t, 0))
    samples = {k: np.sort(np.asarray(v, np.float64)) for k, v in rows.items()}
    hists = np.zeros((len(rows), NBINS))
    for i, v in enumerate(samples.values()):
        np.add.at(hists[i], bin_index(v), 1.0)
    return Histograms(spec, [(service or "", "", k, "") for k in rows], hists, samples)


def _ci(sorted_samples: np.ndarray, q: float, z: float) -> tuple[float, float, float]:
    """(low, estimate, high) of quantile ``q``: the samples at the ranks quantshift reads off a
    histogram (n q -+ z sqrt(n q (1 - q)), clipped to [1, n]), by nearest rank (exact)."""
    n = len(sorted_samples)
    if not n:
        return math.nan, math.nan, math.nan
    half = z * math.sqrt(n * q * (1.0 - q))
    ranks = [min(max(r, 1.0), float(n)) for r in (n * q - half, n * q, n * q + half)]
    lo, est, hi = (float(sorted_samples[math.ceil(r - 1e-9) - 1]) for r in ranks)
    return lo, est, hi


def exact_quantile(sorted_samples: np.ndarray, q: float) -> float:
    """The nearest-rank quantile: the smallest sample with at least ``q`` of them at or below it."""
    return _ci(sorted_samples, q, 0.0)[1]


def sample_shift(base: list[np.ndarray], cur: list[np.ndarray], q: float, z: float) -> Shift:
    """:func:`aclprof.protocol.quantshift.shift` on raw samples (row i: ``base[i]`` against
    ``cur[i]``, each sorted): exact quantiles and intervals, the ratio bounds as there, so
    :func:`~aclprof.protocol.quantshift.judge` gives the verdict by the same rule."""
    b = np.array([_ci(x, q, z) for x in base]).reshape(-1, 3)
    c = np.array([_ci(x, q, z) for x in cur]).reshape(-1, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b[:, 1] > 0, c[:, 1] / b[:, 1], np.nan)
        lower = np.where(b[:, 2] > 0, c[:, 0] / b[:, 2], np.nan)
        upper = np.where(b[:, 0] > 0, c[:, 2] / b[:, 0], np.nan)
    nb = np.array([float(len(x)) for x in base])
    nc = np.array([float(len(x)) for x in cur])
    return Shift(q, b[:, 1], b[:, 0], b[:, 2], nb, c[:, 1], c[:, 0], c[:, 2], nc, ratio, lower, upper)
