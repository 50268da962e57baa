#!/usr/bin/env python3
"""Task synthesis at scale: run the whole `cuda_gym.synth` pipeline once and record what it did.

    python benchmarks/synth_scale.py --backend cpu --n 500                       # this machine
    CUDA_GYM_KERNELBENCH=.kb python benchmarks/synth_scale.py --backend cuda --n 1000 --compile-check 50 \
        --workers 12 --time-budget 240 --no-progress --out $OUT                 # an H200 host, ~6-8 min

It writes the tasks into --tasks-out (default: a temporary directory, removed afterwards), loads
them back as the `synth` suite, and writes JSON (default
cuda_gym_results/synth_scale_<backend>_<date>.json; a directory for --out puts it there) with the
funnel counts per filter stage, the operator-count histogram, seconds per stage, seconds per kept
task and per checked candidate, eager-time statistics of the kept tasks, and the first rejection
messages of each stage. KernelBench for decontamination: --kernelbench or $CUDA_GYM_KERNELBENCH.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "cuda_gym_results"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"min": ordered[0], "median": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))],
            "max": ordered[-1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--n", type=int, default=500, help="tasks wanted (default 500)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile-check", default="50", help="'all' or a sample size (default 50)")
    parser.add_argument("--workers", type=int, help="filter workers (default: the pipeline's)")
    parser.add_argument("--kernelbench", help="KernelBench data (default $CUDA_GYM_KERNELBENCH)")
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--time-budget", type=float, help="stop drawing candidates after this many seconds")
    parser.add_argument("--tasks-out", help="keep the synthesized tasks in this directory")
    parser.add_argument("--out", help="JSON path, or a directory for the default file name")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    import torch

    from cuda_gym.synth import SynthConfig, synthesize, write_result
    from cuda_gym.tasks import load_suite

    compile_check = args.compile_check if args.compile_check == "all" else int(args.compile_check)
    config = SynthConfig(n=args.n, backend=args.backend, seed=args.seed, compile_check=compile_check,
                         workers=args.workers, kernelbench=args.kernelbench,
                         include_transformers=False if args.no_transformers else None,
                         time_budget_s=args.time_budget, progress=not args.no_progress)
    load_before = _load()
    started = time.perf_counter()
    result = synthesize(config)
    wall_s = time.perf_counter() - started
    tasks_dir = Path(args.tasks_out) if args.tasks_out else Path(tempfile.mkdtemp(prefix="synth_scale_"))
    write_result(result, tasks_dir, overwrite=True)
    loaded = load_suite("synth", data_path=tasks_dir)
    if not args.tasks_out:
        shutil.rmtree(tasks_dir, ignore_errors=True)

    eager = [t.eager_ms for t in result.tasks if t.eager_ms is not None]
    by_level = defaultdict(list)
    for task in result.tasks:
        by_level[task.plan.level].append(task.eager_ms)
    examples = defaultdict(list)
    for rejection in result.rejected:
        if len(examples[rejection["stage"]]) < 3:
            examples[rejection["stage"]].append({k: rejection.get(k) for k in ("name", "message", "eager_ms")})
    funnel = dict(result.funnel_rows())
    checked = max(funnel.get("checked", 0), 1)
    today = dt.date.today().isoformat()
    report = {
        "benchmark": "synth_scale",
        "date": today,
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "backend": args.backend,
        "device": result.device,
        "host": {"cpu": _cpu_model(), "cores": os.cpu_count(), "load_average_before": load_before,
                 "load_average_after": _load(), "python": platform.python_version(), "torch": torch.__version__},
        "config": {"n": config.n, "seed": config.seed, "compile_check": config.compile_check,
                   "workers": config.worker_count(), "window_ms": list(config.window),
                   "calibrate_rounds": config.calibrate_rounds, "time_budget_s": config.time_budget_s,
                   "ast_threshold": config.ast_threshold, "signature_threshold": config.signature_threshold},
        "kernelbench": result.kernelbench,
        "tasks_written": len(result.tasks),
        "tasks_loaded_as_suite": len(loaded),
        "funnel": funnel,
        "pass_rate_of_checked": round(funnel.get("passed_execution", 0) / checked, 4),
        "op_count_histogram": result.op_count_histogram(),
        "seconds": {**result.seconds, "wall": round(wall_s, 2)},
        "seconds_per_task": round(wall_s / max(len(result.tasks), 1), 4),
        "filter_seconds_per_checked_candidate": round(result.seconds.get("execution_filter", 0.0) / checked, 4),
        "compile_seconds_per_checked_task": round(result.seconds.get("compile_check", 0.0)
                                                  / max(funnel.get("compile_checked", 0), 1), 3),
        "eager_ms": _stats(eager),
        "eager_ms_by_level": {level: _stats(values) for level, values in sorted(by_level.items())},
        "batch_calibrated": sum(t.calibrated for t in result.tasks),
        "compile_check": {"checked": funnel.get("compile_checked", 0),
                          "passed": sum(t.compile_check == "passed" for t in result.tasks)},
        "distinct_signatures": len({tuple(t.plan.ops) for t in result.tasks}),
        "rejection_examples": dict(examples),
    }
    if args.out:
        out = Path(args.out)
        out = out / f"synth_scale_{args.backend}_{today}.json" if out.is_dir() or not out.suffix else out
    else:
        out = RESULTS / f"synth_scale_{args.backend}_{today}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("tasks_written", "funnel", "op_count_histogram", "seconds",
                                              "seconds_per_task", "eager_ms", "compile_check")}, indent=1))
    print(f"wrote {out}")
    return 0 if len(loaded) == len(result.tasks) else 1


if __name__ == "__main__":
    sys.exit(main())
