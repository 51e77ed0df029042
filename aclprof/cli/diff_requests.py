"""``aclprof diff requests:KEY=VALUE ...``: the request bills the daemon kept (issue 25), as
:class:`~aclprof.cli.diff_sources.Histograms` whose rows are per-request quantities.

One sample per bill in every row: ``(request wall)`` and ``(request device)`` (the request's
wall and device time), and for each op type in any bill, that type's device time in the
request (0 in a bill without it; ``(other)`` is what the agent folded beyond its top 16
types). So ``aclprof diff requests:version=A requests:version=B`` compares, for example, the
p99 request device time of version B with A's, and ranks the op types by how much their
per-request p99 moved. The raw samples are kept: the diff reports exact (nearest-rank)
quantiles next to the binned ones its intervals are computed from.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import numpy as np

from aclprof.cli.common import EXIT_UNREACHABLE, CliError
from aclprof.protocol.quantshift import NBINS, bin_index

if TYPE_CHECKING:
    from aclprof.cli.client import Client
    from aclprof.cli.diff_sources import Histograms

__all__ = ["WALL", "DEVICE", "parse_attrs", "load_requests", "from_bills", "exact_quantile", "MAX_BILLS"]

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


def exact_quantile(sorted_samples: np.ndarray, q: float) -> float:
    """The nearest-rank quantile: the smallest sample with at least ``q`` of them at or below it."""
    n = len(sorted_samples)
    return float(sorted_samples[max(0, int(np.ceil(q * n)) - 1)])
