"""Where a KernelBench identity sweep's time goes, from its committed rows (kernelbench_sweep.py's
JSON), per card: the seconds of every task, of its evaluation, of its baseline workers by phase, and
the part that only the torch.compile baseline costs (its warm-up in each worker, its timing, the
eager/compile pairing, and the ahead-of-time compiles of `Evaluator.prewarm`). The question it
answers: how far below the sweep's wall time can a sweep with both baselines go while each baseline
worker still does what it does today, and how much of that is the torch.compile baseline alone.

Rows are grouped by the card that judged them (a resumed sweep can span machines); prewarm seconds
are recorded per chunk, not per task, so they are given for the whole file only.

    python benchmarks/sweep_floor.py benchmarks/results/kernelbench_sweep/h200/2026-12-05.json --out floor.json
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

WORKER_PHASES = ("settle", "setup", "reference_history", "compile_warmup", "eager_timing", "compile_timing",
                 "compile_pairing", "profile")
COMPILE_ONLY = ("compile_warmup", "compile_timing", "compile_pairing")


def breakdown(rows: list[dict]) -> dict:
    """Seconds summed over `rows`: tasks, evaluations, baseline worker jobs and their phases."""
    total = collections.Counter()
    for row in rows:
        total["task_s"] += row.get("seconds") or 0.0
        total["eval_s"] += row.get("eval_seconds") or 0.0
        for worker in row.get("baseline_worker_wall_s") or []:
            total["baseline_workers"] += 1
            total["baseline_job_s"] += worker.get("job", 0.0)
            for phase in WORKER_PHASES:
                total[f"worker_{phase}_s"] += worker.get(phase, 0.0)
    out = {key: round(value, 1) for key, value in sorted(total.items())}
    out["tasks"] = len(rows)
    out["compile_baseline_only_s"] = round(sum(total[f"worker_{p}_s"] for p in COMPILE_ONLY), 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="a kernelbench_sweep JSON with both baselines")
    parser.add_argument("--out", help="write the breakdown here as JSON")
    args = parser.parse_args()
    sweep = json.loads(Path(args.sweep).read_text())
    by_card: dict[str, list[dict]] = collections.defaultdict(list)
    for row in sweep["tasks"]:
        by_card[row.get("device") or sweep.get("device", "unknown")].append(row)
    prewarm_s = round(sum(chunk.get("seconds", 0.0) for chunk in sweep.get("prewarm") or []), 1)
    whole = breakdown(sweep["tasks"])
    record = {"benchmark": "sweep_floor", "source": args.sweep, "baselines": sweep.get("baselines"),
              "by_card": {card: breakdown(rows) for card, rows in sorted(by_card.items())},
              "whole": whole | {"prewarm_s": prewarm_s,
                                "compile_baseline_only_s": round(whole["compile_baseline_only_s"] + prewarm_s, 1)}}
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
