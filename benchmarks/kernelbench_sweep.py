"""The judge on the real benchmark: every KernelBench task, the identity candidate (each reference
submitted as its own `ModelNew`, which must come out correct at 1.00x) or a folder of candidates.

Resumable: rows already in the output file are kept and their tasks skipped, so a long sweep runs
as several shorter ones (`--max-minutes` stops cleanly between tasks). Big tasks first by default,
so that a partial sweep still covers the memory plan.

    CUDA_GYM_KERNELBENCH=/path/to/KernelBench python benchmarks/kernelbench_sweep.py --out results.json
    python benchmarks/kernelbench_sweep.py --candidates my_kernels/ --levels 1,2

The candidates folder holds `level1/19_ReLU.py` (KernelBench's layout) or `L1/19_ReLU.py`. Writes
`{"tasks": [{task_id, level, device, error_code, speedup_vs_eager, speedup_vs_compile, peak_device_gib,
seconds, ...}], "summary": {...}}` and prints a per-level summary. Beside those, each row keeps
where its time and memory went: the baseline workers' phases (`baseline_worker_wall_s`) and peaks
(`baseline_peak_gib`, `baseline_worker_memory`), the eval worker's stages (`eval_stage_seconds`) and
its memory plan and peaks per phase (`memory`).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

IDENTITY = "\n\nclass ModelNew(Model):\n    \"\"\"The reference itself (identity candidate).\"\"\"\n"


def candidate_for(task, folder: Path | None) -> str | None:
    if folder is None:
        return task.source + IDENTITY
    name = task.name if task.name.endswith(".py") else f"{task.name}.py"
    for sub in (f"level{task.level}", f"L{task.level}"):
        path = folder / sub / name
        if path.exists():
            return path.read_text(encoding="utf-8")
    return None


def write_atomically(path: Path, payload: dict) -> None:
    """A sweep killed mid-write keeps its previous file whole (the next run resumes from it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(payload, indent=1))
    os.replace(partial, path)


def summarize(rows: list[dict]) -> dict:
    from cuda_gym.leaderboard.metrics import geomean

    levels: dict = {}
    for level in sorted({r["level"] for r in rows}):
        mine = [r for r in rows if r["level"] == level]
        ok = [r for r in mine if r["error_code"] == "OK"]
        eager = [r["speedup_vs_eager"] for r in ok if r.get("speedup_vs_eager")]
        levels[str(level)] = {
            "tried": len(mine), "ok": len(ok),
            "devices": dict(sorted(Counter(str(r.get("device")) for r in mine).items())),
            "errors": {code: sum(r["error_code"] == code for r in mine) for code in sorted({r["error_code"] for r in mine})},
            "eager_within_2pct": sum(abs(s - 1) <= 0.02 for s in eager),
            "eager_within_3pct": sum(abs(s - 1) <= 0.03 for s in eager),
            "eager_within_10pct": sum(abs(s - 1) <= 0.10 for s in eager),
            "median_speedup_vs_eager": statistics.median(eager) if eager else None,
            # For the identity, how the reference itself fares against torch.compile (no target).
            "geomean_speedup_vs_compile": geomean(r["speedup_vs_compile"] for r in ok if r.get("speedup_vs_compile")),
            "max_peak_device_gib": max((r.get("peak_device_gib") or 0 for r in mine), default=0),
            "seconds": round(sum(r["seconds"] for r in mine), 1),
        }
    return levels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernelbench", help="KernelBench data (default: $CUDA_GYM_KERNELBENCH)")
    parser.add_argument("--candidates", help="folder of candidates (default: the identity candidate)")
    parser.add_argument("--levels", default="1,2,3")
    parser.add_argument("--tasks", help="comma-separated task ids (default: every task of --levels)")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--policy", default="permissive", choices=["strict", "permissive"],
                        help="permissive by default: the identity candidate calls PyTorch")
    parser.add_argument("--no-compile-baseline", action="store_true")
    parser.add_argument("--baseline-workers", type=int, default=None,
                        help="fresh workers per baseline (default: EvalConfig's, 3 with the 2%% agreement stop)")
    parser.add_argument("--host-pairing", default=None,
                        help="backends whose host-bound timings are paired, comma-separated (default: "
                             "EvalConfig.host_pairing's; 'none' compares with the cached baselines only)")
    parser.add_argument("--no-confirm", action="store_true",
                        help="one eval worker per task even when it claims a milestone (EvalConfig.confirm_faster "
                             "off)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop between tasks before this long: a task is not started when the longest one "
                             "of its level so far would end past it")
    parser.add_argument("--prewarm", type=int, default=None,
                        help="compile this many tasks' torch.compile baselines at once before they are timed "
                             "(Evaluator.prewarm; default half the cores, at most 8; 1 turns it off)")
    parser.add_argument("--prewarm-chunk", type=int, default=8, help="tasks prewarmed together")
    parser.add_argument("--timing-reps", type=int, help="EvalConfig.timing_reps (default: the config's)")
    parser.add_argument("--timing-budget-s", type=float, help="EvalConfig.timing_budget_s (default: the config's)")
    parser.add_argument("--out", required=True, help="result JSON (resumed when it exists)")
    parser.add_argument("--rejudge-onto", metavar="CARD",
                        help="judge again the resumed rows that a card not named CARD (say, H200) measured (the old "
                             "rows are kept under 'superseded'), so that one file ends with every row from that card; "
                             "on a card not so named, nothing is judged")
    args = parser.parse_args()

    from cuda_gym.eval import EvalConfig, Evaluator
    from cuda_gym.eval.config import TIMER_REVISION
    from cuda_gym.tasks import get_task
    from cuda_gym.tasks.kernelbench import load_kernelbench

    levels = {int(x) for x in args.levels.split(",") if x}
    try:
        if args.tasks:  # KernelBench's from --kernelbench (else $CUDA_GYM_KERNELBENCH), the others by id
            ids = [t for t in args.tasks.split(",") if t]
            kernelbench = ({t.id: t for t in load_kernelbench(args.kernelbench)}
                           if any(i.startswith("kernelbench/") for i in ids) else {})
            missing = [i for i in ids if i.startswith("kernelbench/") and i not in kernelbench]
            if missing:
                raise KeyError(f"no task {missing[0]!r} in the KernelBench data read")
            tasks = [kernelbench[i] if i in kernelbench else get_task(i) for i in ids]
        else:
            tasks = [t for t in load_kernelbench(args.kernelbench) if t.level in levels]
    except Exception as exc:  # noqa: BLE001 - a missing dataset or task gets its own help text
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    payload = json.loads(out.read_text()) if out.exists() else {"tasks": []}
    for row in payload["tasks"]:  # rows written before rows carried their device: the file's device then
        row.setdefault("device", payload.get("device"))
    folder = Path(args.candidates) if args.candidates else None
    baselines = ("eager",) if args.no_compile_baseline else ("eager", "compile")
    config = EvalConfig(policy=args.policy, baselines=baselines)
    if args.baseline_workers is not None:
        config = config.replace(baseline_workers=args.baseline_workers)
    if args.host_pairing is not None:
        config = config.replace(host_pairing=tuple(b for b in args.host_pairing.split(",") if b and b != "none"))
    if args.no_confirm:
        config = config.replace(confirm_faster=False)
    if args.timing_reps is not None:
        config = config.replace(timing_reps=args.timing_reps)
    if args.timing_budget_s is not None:
        config = config.replace(timing_budget_s=args.timing_budget_s)
    for key in ("timing_reps", "timing_budget_s"):  # one file, one timing setting
        if payload.get(key) is not None and payload[key] != getattr(config, key):
            print(f"error: {out} was measured with {key}={payload[key]}, not {getattr(config, key)}: "
                  "write another file", file=sys.stderr)
            return 2
    payload.update({"date": dt.date.today().isoformat(), "backend": args.backend, "policy": args.policy,
                    "candidates": str(folder) if folder else "identity", "baselines": list(baselines),
                    "baseline_workers": config.baseline_workers, "baseline_agreement": config.baseline_agreement,
                    "timer_revision": TIMER_REVISION, "confirm_faster": config.confirm_faster,
                    "host_pairing": list(config.host_pairing), "timing_reps": config.timing_reps,
                    "timing_budget_s": config.timing_budget_s, "host": platform.node()})
    started = time.monotonic()
    longest: dict[int, float] = {}  # the longest task of each level so far (resumed rows included), in seconds
    for row in payload["tasks"]:
        longest[row["level"]] = max(longest.get(row["level"], 0.0), row["seconds"] or 0.0)
    stopped = False
    with Evaluator(args.backend, config) as evaluator:
        payload["device"] = evaluator.device_name  # this run's; a resumed file's rows each name their own
        wanted = {t.id for t in tasks}
        if args.rejudge_onto:
            card = args.rejudge_onto.lower()
            if card not in evaluator.device_name.lower():  # nothing judged here: the rows are for that card
                print(f"--rejudge-onto {args.rejudge_onto}: this run's card is {evaluator.device_name}; "
                      "nothing is judged", flush=True)
                return 0
            kept, elsewhere = [], []
            for row in payload["tasks"]:
                (elsewhere if row["task_id"] in wanted and card not in str(row["device"]).lower() else kept).append(row)
            payload["tasks"] = kept
            payload.setdefault("superseded", []).extend(dict(row, why=f"judged again on {evaluator.device_name}")
                                                        for row in elsewhere)
            if elsewhere:
                print(f"{len(elsewhere)} rows from other cards to judge again on {evaluator.device_name}", flush=True)
        done = {row["task_id"] for row in payload["tasks"]}
        todo = [t for t in tasks if t.id not in done]
        # Big level-1 tasks first, then level 3, then the rest: a partial sweep covers memory and timing.
        todo.sort(key=lambda t: (0 if t.level == 1 and t.name.split("_", 1)[0] in BIG else 1 if t.level == 3 else 2,
                                 t.level, t.name))
        prewarmed: set[str] = set()

        def out_of_time(task) -> bool:
            return bool(args.max_minutes) and (time.monotonic() - started + longest.get(task.level, 0.0)
                                               > 60 * args.max_minutes)

        for position, task in enumerate(tqdm(todo, desc="sweep", unit="task")):
            if out_of_time(task):
                stopped = True  # a shorter task later in the order may still fit
                continue
            source = candidate_for(task, folder)
            if source is None:
                continue
            if task.id not in prewarmed:
                # The next tasks' torch.compile baselines compiled side by side before they are timed.
                chunk = [t for t in todo[position:position + args.prewarm_chunk]
                         if t.id not in prewarmed and candidate_for(t, folder) is not None]
                prewarm_started = time.monotonic()
                outcomes = evaluator.prewarm(chunk, parallel=args.prewarm)  # {} where it did nothing
                prewarmed.update(t.id for t in chunk)
                if outcomes:
                    payload.setdefault("prewarm", []).append({
                        "tasks": len(outcomes), "failed": {k: why for k, why in outcomes.items() if why},
                        "seconds": round(time.monotonic() - prewarm_started, 2)})
                if out_of_time(task):
                    stopped = True  # the prewarm took the time this task needed
                    continue
            task_started = time.monotonic()
            result = evaluator.evaluate(task, source)
            base = evaluator.baselines(task)
            peaks = [p for p in (result.device_memory.get("peak_gib"), base.get("peak_gib")) if p is not None]
            row = {
                "task_id": task.id, "level": task.level, "device": evaluator.device_name,
                "error_code": result.error_code.value,
                "speedup_vs_eager": result.speedup_vs_eager, "speedup_vs_compile": result.speedup_vs_compile,
                "peak_device_gib": max(peaks) if peaks else None, "seconds": round(time.monotonic() - task_started, 2),
                "candidate_ms": result.candidate_time.median_ms if result.candidate_time else None,
                "candidate_method": result.candidate_time.method if result.candidate_time else None,
                "candidate_worker_medians_ms": result.candidate_worker_medians_ms,  # [] unless confirmed
                "eager_ms": result.eager_time.median_ms if result.eager_time else None,
                "compile_ms": result.compile_time.median_ms if result.compile_time else None,
                "candidate_detail": result.candidate_time.detail if result.candidate_time else None,
                "eager_method": result.eager_time.method if result.eager_time else None,
                "host_pairing": result.host_pairing,  # {} when not asked; {"skipped": why}; else ratio, pairs
                "eager_detail": result.eager_time.detail if result.eager_time else None,
                "baseline_worker_medians_ms": base.get("worker_medians_ms"),
                "baseline_worker_methods": base.get("worker_methods"),
                "baseline_worker_wall_s": base.get("worker_wall_s"),
                "baseline_compile_cache": base.get("compile_cache"),
                "baseline_compile_pairings": base.get("compile_pairings"),  # each worker's eager/compile ratio
                "eval_seconds": result.eval_seconds, "build_seconds": result.compile_seconds,
                "eval_stage_seconds": result.stage_seconds,  # when each stage of the eval worker ended
                "flags": result.flags, "memory": result.device_memory,  # the eval worker's plan and peaks
                "baseline_peak_gib": base.get("peak_gib"), "baseline_worker_memory": base.get("worker_memory"),
                "baseline_workers": config.baseline_workers, "timer_revision": TIMER_REVISION,
                "confirm_faster": config.confirm_faster,
                "message": "" if result.ok else result.message[:500],
            }
            payload["tasks"].append(row)
            longest[task.level] = max(longest.get(task.level, 0.0), row["seconds"])
            payload["summary"] = summarize(payload["tasks"])
            write_atomically(out, payload)
            tqdm.write(f"{task.id}: {row['error_code']} x{row['speedup_vs_eager'] or 0:.3f} "
                       f"peak {row['peak_device_gib'] or 0:.1f} GiB {row['seconds']:.1f} s")
    if stopped:
        print(f"stopped at the {args.max_minutes} min limit; run again to resume", flush=True)
    payload["summary"] = summarize(payload["tasks"])
    write_atomically(out, payload)
    print(f"\n{'level':<6}{'tried':>6}{'OK':>5}{'±2%':>6}{'±3%':>6}{'±10%':>6}{'vs compile':>11}{'peak GiB':>10}{'s':>8}")
    for level, row in payload["summary"].items():
        compiled = row["geomean_speedup_vs_compile"]
        print(f"{level:<6}{row['tried']:>6}{row['ok']:>5}{row['eager_within_2pct']:>6}{row['eager_within_3pct']:>6}"
              f"{row['eager_within_10pct']:>6}{f'{compiled:.3f}' if compiled else '-':>11}"
              f"{row['max_peak_device_gib']:>10.1f}{row['seconds']:>8.0f}")
    prewarm_s = sum(chunk["seconds"] for chunk in payload.get("prewarm", []))
    if prewarm_s:  # not in the tasks' own seconds above
        print(f"torch.compile prewarm: {prewarm_s:.0f} s in {len(payload['prewarm'])} chunks")
    print(f"wrote {out}")
    return 0


# Level-1 tasks whose inputs plus output reach 12 GiB or more (measured on meta tensors).
BIG = {"19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "34", "35", "36",
       "37", "38", "39", "45", "76", "87", "46"}

if __name__ == "__main__":
    sys.exit(main())
