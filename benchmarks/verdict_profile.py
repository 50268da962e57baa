"""Where a verdict's seconds go: a steady stream of mixed candidates through one Evaluator with
cached baselines, each verdict broken down by stage (issue 45's profile).

The stream: KernelBench tasks of the chosen levels (or the built-in suite), each candidate one of
- `identity`: the reference as its own candidate (`class ModelNew(Model): pass`, permissive): OK;
- `wrong`: the reference with every output moved beyond the fp32 tolerance: INCORRECT;
- `crash`: a forward that aborts the worker process: RUNTIME_ERROR.
Every task's baselines are measured first (reported apart, not in the profile). Then `--n`
candidates are submitted with `--in-flight` of them queued at once, so the device slot never waits
for the submitter.

Per verdict: the seconds from submission to verdict, the build, the eval worker's time on the
device slot (`eval_s`) and its stages (`EvalResult.stage_seconds`: when each stage ended, from the
moment the slot was taken; successive differences are each stage's seconds). Over the run: verdicts
per hour, the share of the wall time the device slot was held by an eval job, per stage the
median seconds and the share of all eval seconds, and the identity candidates' speedups vs eager
(each should be 1.00x: their spread is what a change to the pipeline may not widen). Written after
every 10 verdicts (a call cut by its time limit keeps what it measured). `--prepare-during-jobs`
judges with `Evaluator(prepare_during_jobs=True)`; `--eval-spares N` starts N warm eval workers
together instead of worker_setup.SPARE_WORKERS' count (an experiment: fewer device-idle warm-ups per
verdict, a CUDA context more per spare); `--cache-dir` shared between runs measures the baselines
once (benchmarks/throughput.sh runs the variants side by side).

    CUDA_GYM_KERNELBENCH=.kb python benchmarks/verdict_profile.py --backend cuda --n 300 --out $OUT/profile.json
    python benchmarks/verdict_profile.py --backend cpu --suite builtin --n 20 --out /tmp/profile.json
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import random
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cuda_gym.eval import EvalConfig, Evaluator  # noqa: E402
from cuda_gym.eval.worker_setup import SPARE_WORKERS  # noqa: E402
from cuda_gym.tasks import load_suite  # noqa: E402

IDENTITY = "\n\nclass ModelNew(Model):\n    pass\n"
WRONG = ("\n\nclass ModelNew(Model):\n    def forward(self, *inputs):\n"
         "        out = super().forward(*inputs)\n        return out + 0.01 + 0.01 * out.abs()\n")
CRASH = "\n\nimport os\n\nclass ModelNew(Model):\n    def forward(self, *inputs):\n        os.abort()\n"
KINDS = {"identity": (IDENTITY, "OK", 3), "wrong": (WRONG, "INCORRECT", 1), "crash": (CRASH, "RUNTIME_ERROR", 1)}


def stage_durations(stage_seconds: dict[str, float]) -> dict[str, float]:
    """Each top-level stage's own seconds from the cumulative end times, and the parts of
    `reference` as `reference.<part>`: the worker times its parts from the start of its job
    (`reference.setup`, `.describe`, `.checksums` end times), so `reference.start` is what came
    before the job ran (taking the worker, sending the job, and a deferred worker's device set-up)."""
    durations, previous = {}, 0.0
    for name, ended in sorted(((n, t) for n, t in stage_seconds.items() if "." not in n), key=lambda item: item[1]):
        durations[name] = round(ended - previous, 4)
        previous = ended
    parts = sorted(((n, t) for n, t in stage_seconds.items() if n.startswith("reference.")), key=lambda item: item[1])
    if parts and "reference" in stage_seconds:
        durations["reference.start"] = round(stage_seconds["reference"] - parts[-1][1], 4)
        previous = 0.0
        for name, ended in parts:
            durations[name] = round(ended - previous, 4)
            previous = ended
    return durations


def identity_speedups(rows: list[dict]) -> list[float]:
    """The speedups vs eager of the identity candidates among `rows` (verdicts that have one)."""
    return [r["speedup_vs_eager"] for r in rows if r["kind"] == "identity" and r.get("speedup_vs_eager")]


def identity_spread(speedups: list[float]) -> dict:
    """How far the identity candidates' speedups vs eager stray from 1.00x: count, median, range, and
    how many are within 3%."""
    return {"count": len(speedups), "median": round(statistics.median(speedups), 4) if speedups else None,
            "min": round(min(speedups), 4) if speedups else None, "max": round(max(speedups), 4) if speedups else None,
            "within_3_percent": sum(abs(s - 1.0) <= 0.03 for s in speedups)}


def summarize(rows: list[dict], wall_s: float) -> dict:
    if not rows:
        return {}
    eval_total = sum(r["eval_s"] for r in rows)
    stages: dict[str, list[float]] = {}
    for r in rows:
        for name, seconds in r["stages"].items():
            stages.setdefault(name.rstrip("0123456789"), []).append(seconds)  # trial0, trial1 ... as "trial"
    return {
        "verdicts": len(rows), "as_expected": sum(r["got"] == r["expected"] for r in rows),
        "verdicts_per_hour": round(3600 * len(rows) / wall_s, 1), "wall_s": round(wall_s, 1),
        "median_latency_s": round(statistics.median(r["latency_s"] for r in rows), 3),
        "median_eval_s": round(statistics.median(r["eval_s"] for r in rows), 3),
        "median_build_s": round(statistics.median(r["build_s"] for r in rows), 3),
        # The device slot is held for an eval job's whole time (eval_s); the rest of the wall is the
        # slot idle or held for something else (a spare warming, a baseline).
        "eval_share_of_wall": round(eval_total / wall_s, 3),
        "median_after_stages_s": round(statistics.median(r["after_stages_s"] for r in rows), 4),
        "identity_speedup_vs_eager": identity_spread(identity_speedups(rows)),
        "stages": {name: {"median_s": round(statistics.median(values), 4),
                          "share_of_eval": round(sum(values) / eval_total, 3) if eval_total else None,
                          "count": len(values)} for name, values in sorted(stages.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--suite", default="kernelbench", choices=["kernelbench", "builtin"])
    parser.add_argument("--levels", default="1,2")
    parser.add_argument("--tasks", type=int, default=40, help="distinct tasks in the stream (a seeded sample)")
    parser.add_argument("--n", type=int, default=300, help="candidates in the stream")
    parser.add_argument("--in-flight", type=int, default=4, help="candidates queued at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-minutes", type=float, default=8.0, help="stop submitting after this long")
    parser.add_argument("--baselines", default="eager,compile", help="comma-separated baselines to measure and cache")
    parser.add_argument("--prepare-during-jobs", action="store_true", help="Evaluator(prepare_during_jobs=True)")
    parser.add_argument("--cache-dir", help="the evaluator's cache (default: CUDA_GYM_CACHE or ~/.cache/cuda_gym)")
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument("--eval-spares", type=int, help="warm eval workers started together (default: SPARE_WORKERS')")
    parser.add_argument("--timing-reps", type=int, help="EvalConfig.timing_reps (default: the config's)")
    parser.add_argument("--timing-budget-s", type=float, help="EvalConfig.timing_budget_s (default: the config's)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    levels = {int(level) for level in args.levels.split(",")}
    pool = [t for t in load_suite(args.suite) if t.level in levels]
    rng = random.Random(args.seed)
    tasks = rng.sample(pool, min(args.tasks, len(pool)))
    names = list(KINDS)
    plan = [(rng.choice(tasks), rng.choices(names, weights=[KINDS[k][2] for k in names])[0]) for _ in range(args.n)]
    timing = {name: value for name, value in (("timing_reps", args.timing_reps), ("timing_budget_s", args.timing_budget_s))
              if value is not None}
    config = EvalConfig(policy="permissive", baselines=tuple(args.baselines.split(",")), **timing)
    if args.eval_spares is not None:  # the pool reads the count at each acquire
        SPARE_WORKERS[args.backend]["eval"] = args.eval_spares
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record: dict = {"benchmark": "verdict_profile", "date": dt.date.today().isoformat(), "backend": args.backend,
                    "suite": args.suite, "levels": sorted(levels), "seed": args.seed, "n": args.n,
                    "in_flight": args.in_flight, "label": args.label, "prepare_during_jobs": args.prepare_during_jobs,
                    "eval_spares": SPARE_WORKERS[args.backend]["eval"],
                    "config": dataclasses.asdict(config), "tasks": [t.id for t in tasks]}

    def save() -> None:
        out.write_text(json.dumps(record, indent=1) + "\n")

    with Evaluator(args.backend, config, cache_dir=args.cache_dir,
                   prepare_during_jobs=args.prepare_during_jobs) as evaluator:
        record["device"] = evaluator.device_name
        started = time.monotonic()
        for task in tasks:  # the baselines, cached before the stream
            evaluator.baselines(task, backend=args.backend)
        record["baseline_seconds"] = round(time.monotonic() - started, 1)
        save()
        rows: list[dict] = []
        record["verdicts"] = rows
        pending: dict = {}
        queue = list(enumerate(plan))
        started = time.monotonic()
        deadline = started + 60 * args.max_minutes
        while queue or pending:
            while queue and len(pending) < args.in_flight and time.monotonic() < deadline:
                index, (task, kind) = queue.pop(0)
                future = evaluator.submit(task, task.source + KINDS[kind][0], backend=args.backend)
                pending[future] = (index, task, kind, time.monotonic())
            if time.monotonic() >= deadline:
                queue.clear()
            if not pending:
                break
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for future in done:
                index, task, kind, submitted = pending.pop(future)
                result = future.result()
                rows.append({"index": index, "task_id": task.id, "kind": kind, "expected": KINDS[kind][1],
                             "got": result.error_code.value, "latency_s": round(time.monotonic() - submitted, 4),
                             "build_s": result.compile_seconds, "eval_s": result.eval_seconds,
                             "speedup_vs_eager": result.speedup_vs_eager,
                             "stages": stage_durations(result.stage_seconds),
                             # the eval seconds after the last stage the worker reported (its end, the hand-over)
                             "after_stages_s": round(result.eval_seconds - max(result.stage_seconds.values(), default=0.0), 4),
                             "message": result.message[:160]})
                if rows[-1]["got"] != rows[-1]["expected"]:
                    print(f"#{index} {task.id} {kind}: {rows[-1]['got']} {result.message[:120]}", flush=True)
                if len(rows) % 10 == 0:
                    record["summary"] = summarize(rows, time.monotonic() - started)
                    save()
                    print(f"{len(rows)} verdicts, {record['summary']['verdicts_per_hour']:.0f}/h", flush=True)
        record["summary"] = summarize(rows, time.monotonic() - started)
    save()
    print(json.dumps(record["summary"], indent=1))
    print(f"wrote {out}")
    return 0 if record["summary"] and record["summary"]["as_expected"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
