"""Aggregates of speedups that the run summary (`cuda-gym run`) and the leaderboard share."""
from __future__ import annotations

import math
from typing import Iterable


def geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the speedups among `values`; None, zero, negative and non-finite values
    are not speedups and are left out (None when none is left)."""
    kept = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in kept) / len(kept)) if kept else None
