"""Leaderboard metrics: pass rate, fast_p and geometric-mean speedups, per level and overall.

Pure functions of `Row`s (one per task of the leaderboard), so they are checked by hand in the tests:

- `pass_rate`: correct tasks / all tasks (a task without a submission counts as a failure).
- `fast_p[baseline][p]`: the share of ALL tasks whose candidate is correct AND measured faster than
  the baseline by more than `p` (speedup > p, strictly), as KernelBench defines fast_p. A correct
  candidate whose speedup was not measured (its baseline failed) counts for no p, not even 0.
- `geomean_correct[baseline]`: the geometric mean of the measured speedups of the correct candidates
  (None when there is none).
- `geomean_all[baseline]`: the geometric mean over ALL tasks, where every task without a measured
  correct speedup (failed, wrong, missing, baseline not measured) counts as `failure_speedup`
  (default 1.0: the user keeps the PyTorch reference).
- Every metric of a baseline that the run did not measure for any task (e.g. `--no-compile-baseline`)
  is None.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..speedup import geomean  # noqa: F401  (re-exported: the metrics module is where callers look)

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 1.0, 1.05, 1.2, 1.5, 2.0)
BASELINES: tuple[str, ...] = ("eager", "compile")
DEFAULT_FAILURE_SPEEDUP = 1.0
MISSING = "MISSING"  # the verdict of a task that had no submission


@dataclass(frozen=True)
class Row:
    """One task's outcome: its verdict and, when correct and timed, its speedups."""

    task_id: str
    level: int
    verdict: str  # an ErrorCode value, or MISSING
    correct: bool
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None

    def speedup(self, baseline: str) -> float | None:
        """The measured speedup of a correct candidate against `baseline`, else None."""
        value = self.speedup_vs_eager if baseline == "eager" else self.speedup_vs_compile
        if not self.correct or value is None or not math.isfinite(value) or value <= 0:
            return None
        return float(value)


def threshold_key(p: float) -> str:
    """The JSON key of a fast_p threshold: "0", "1.0", "1.05", ..."""
    return "0" if p == 0 else repr(float(p))


def group_metrics(rows: list[Row], *, failure_speedup: float = DEFAULT_FAILURE_SPEEDUP,
                  thresholds: tuple[float, ...] = FAST_P_THRESHOLDS,
                  measured: tuple[str, ...] = BASELINES) -> dict:
    """The metrics of one group of rows (see the module docstring). `measured`: the baselines the
    run timed; the others' metrics are None."""
    if failure_speedup <= 0:
        raise ValueError(f"failure_speedup must be > 0, got {failure_speedup}")
    total = len(rows)
    correct = sum(1 for r in rows if r.correct)
    metrics: dict = {
        "tasks": total,
        "submitted": sum(1 for r in rows if r.verdict != MISSING),
        "correct": correct,
        "pass_rate": correct / total if total else None,
        "verdicts": dict(sorted(Counter(r.verdict for r in rows).items())),
        "fast_p": {}, "geomean_correct": {}, "geomean_all": {},
    }
    for baseline in BASELINES:
        if baseline not in measured or not total:
            metrics["fast_p"][baseline] = None
            metrics["geomean_correct"][baseline] = None
            metrics["geomean_all"][baseline] = None
            continue
        speedups = [r.speedup(baseline) for r in rows]
        timed = [s for s in speedups if s is not None]
        metrics["fast_p"][baseline] = {threshold_key(p): sum(1 for s in timed if s > p) / total for p in thresholds}
        metrics["geomean_correct"][baseline] = geomean(timed)
        metrics["geomean_all"][baseline] = geomean(s if s is not None else failure_speedup for s in speedups)
    return metrics


def leaderboard_metrics(rows: list[Row], **kwargs) -> dict:
    """{"overall": metrics, "L1": metrics, ...} for the levels present, in level order."""
    summary = {"overall": group_metrics(rows, **kwargs)}
    for level in sorted({r.level for r in rows}):
        summary[f"L{level}"] = group_metrics([r for r in rows if r.level == level], **kwargs)
    return summary


def rows_of(record: dict[str, Any]) -> list[Row]:
    """The metric rows of a leaderboard record (for plots and comparisons)."""
    return [Row(e["task_id"], int(e["level"]), e["verdict"], bool(e["correct"]), e.get("speedup_vs_eager"),
                e.get("speedup_vs_compile")) for e in record["results"]]
