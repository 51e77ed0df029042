"""The allowed values of the regression detector's parameters, one rule for the daemon's
settings (``aclprofd.config``: ``detector_min_effect``, ``detector_min_count``,
``detector_z``) and ``aclprof diff``'s options (``--min-effect``, ``--min-count``, ``--z``),
which judge shifts with the same :func:`aclprof.protocol.quantshift.judge`.

Each check takes a string (a flag, an environment variable) or a number (TOML) and returns
the value, or raises ValueError saying what was expected; each caller names the setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Bound", "MIN_EFFECT", "MIN_COUNT", "Z"]


@dataclass(frozen=True)
class Bound:
    """A number from ``low`` (excluded unless ``low_inclusive``) to ``high`` (included; None:
    no upper bound); ``integer``: a whole number."""

    what: str
    low: float
    high: float | None
    low_inclusive: bool = True
    integer: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        low = f"from {self.low:g}" if self.low_inclusive else f"above {self.low:g}"
        if self.high is None:
            return f"{kind} {'of at least' if self.low_inclusive else 'above'} {self.low:g}"
        return f"{kind} {low} to {self.high:g}"

    def check(self, value: Any) -> Any:
        """``value`` as an int (``integer``) or a float, or ValueError."""
        v: float | int | None
        if isinstance(value, bool):
            v = None  # TOML true/false is not a number
        elif self.integer:
            if isinstance(value, str):
                try:
                    v = int(value.strip(), 10)
                except ValueError:  # also a number of more than 4300 digits
                    v = None
            elif isinstance(value, int):
                v = value
            else:
                v = int(value) if isinstance(value, float) and value.is_integer() else None
        else:
            try:
                v = float(value)
            except (TypeError, ValueError):
                v = None
        if v is None or not math.isfinite(v) or not (v >= self.low if self.low_inclusive else v > self.low) \
                or (self.high is not None and v > self.high):
            raise ValueError(f"{value!r} is not {self.what}: {self.describe()}")
        return v


#: the smallest shift called slower/faster (a ratio's distance from 1)
MIN_EFFECT = Bound("a fraction (0.05 = 5 %)", 0.0, 10.0, low_inclusive=False)
#: samples needed on each side before a row is judged
MIN_COUNT = Bound("a sample count", 1, None, integer=True)
#: the half-width of the quantile intervals, in standard errors of the rank
Z = Bound("an interval half-width in standard errors", 0.5, 10.0)
