"""The aggregator's per-batch fold as it was before ``fold_batch`` (issue 21), kept as the
reference the identity tests (tests/test_fold_batch.py) run beside the C call on the same
batches: a gather and multiply-add of the histogram codes, ``group_sum``, ``fold``,
``fold_buckets``, a fancy assignment of ``last_fed`` and a masked sum of the "other" key's
records (each step tested against its numpy form in tests/test_batchgroup.py)."""

from __future__ import annotations

import numpy as np
from aclprofd.aggregate.aggregator import _FINE_OF_BIN, _PROM_OF_BIN, Aggregator
from aclprofd.aggregate.quantiles import NBINS, group_sum

from aclprof.protocol._batchgroup import fold, fold_buckets

__all__ = ["ReferenceAggregator"]


class ReferenceAggregator(Aggregator):
    """An :class:`Aggregator` whose batches take the steps ``fold_batch`` replaced."""

    def _fold_batch(self, gkeys: np.ndarray, inv: np.ndarray, bins: np.ndarray, count: np.ndarray,
                    total: np.ndarray, mn: np.ndarray, mx: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        hcodes, hcount = group_sum(gkeys[inv] * NBINS + bins, None)
        fold(gkeys, count, total, mn, mx, hcodes, hcount, self.count, self.total, self.min, self.max,
             self.hist, self.prom, self.prom_sum, _PROM_OF_BIN)
        self.last_fed[gkeys] = now
        fold_buckets(gkeys, total, hcodes, hcount, self.fine, self.fine_sum, _FINE_OF_BIN)
        other = gkeys == self.other_key
        if other.any():
            self.other_records += int(count[other].sum())
        return hcodes, hcount
