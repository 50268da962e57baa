"""The template agent over KernelBench levels 1+2 and the built-in suite on one GPU, in a fixed time.

    CUDA_GYM_KERNELBENCH=.kb python benchmarks/template_agent.py --time-budget 450 --out $OUT

Phase A (correctness, eager speedups): every task the templates cover gets its default configuration,
judged with eager baselines only (one baseline worker), queued at once in an order that alternates
suites and levels (so a cut run still covers each), so the build workers overlap the device. Phase B (torch.compile),
from `--phase-a-share` of the budget on: the correct candidates are judged again (their builds are
cached) with eager and torch.compile baselines, in an order that alternates suites and levels, until
the budget ends; then, if time is left, `--tune` random configurations per task compete with the
default under the same judge. Results are written after every verdict, so a run cut by its time limit
keeps everything it measured:

    <out>/template_agent_cuda_<date>.json: per task the plan (stage kinds) or why it is not covered,
    the phase A verdict and speedup vs eager, the phase B verdict and speedups vs eager and compile,
    and per suite and level: tasks, covered, correct, geomeans vs eager and (over phase B) vs compile.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _geomean(values):
    kept = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in kept) / len(kept)) if kept else None


def _group(task_id: str) -> str:
    suite, level = task_id.split("/")[:2]
    return f"{suite}/{level}"


def _order_group(task_id: str) -> str:
    """Queue groups: the built-in suite (L1, L2, then L3, as listed), KernelBench L1, KernelBench L2."""
    return "builtin" if task_id.startswith("builtin/") else _group(task_id)


def round_robin(task_ids) -> list[str]:
    """Task ids reordered to alternate between the built-in suite, KernelBench L1 and KernelBench L2,
    so a run cut short has judged about as many of each."""
    groups: dict[str, list[str]] = {}
    for task_id in sorted(task_ids, key=lambda t: (t.startswith("builtin/L3"), t)):
        groups.setdefault(_order_group(task_id), []).append(task_id)
    order = []
    while any(groups.values()):
        for name in sorted(groups):
            if groups[name]:
                order.append(groups[name].pop(0))
    return order


def summarize(rows: dict[str, dict]) -> dict[str, dict]:
    groups: dict[str, list[dict]] = {}
    for task_id, row in rows.items():
        groups.setdefault(_group(task_id), []).append(row)
        groups.setdefault(task_id.split("/")[0], []).append(row)
        groups.setdefault("all", []).append(row)
    out = {}
    for name, items in sorted(groups.items()):
        correct_a = [r for r in items if r.get("a_correct")]
        b_rows = [r for r in items if r.get("b_correct") and r.get("b_speedup_vs_compile")]
        out[name] = {
            "tasks": len(items),
            "covered": sum(1 for r in items if r.get("stages")),
            "correct": len(correct_a),
            "geomean_speedup_vs_eager": _geomean(r.get("a_speedup_vs_eager") for r in correct_a),
            "compile_measured": len(b_rows),
            "geomean_speedup_vs_compile": _geomean(r["b_speedup_vs_compile"] for r in b_rows),
            "geomean_speedup_vs_eager_same_tasks": _geomean(r.get("b_speedup_vs_eager") for r in b_rows),
            "faster_than_compile": sum(1 for r in b_rows if r["b_speedup_vs_compile"] > 1),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-budget", type=float, default=450.0, help="seconds for the whole run (default 450)")
    parser.add_argument("--phase-a-share", type=float, default=0.6,
                        help="fraction of the budget after which phase B starts (default 0.6)")
    parser.add_argument("--tune", type=int, default=3, help="random configurations per task after phase B (default 3)")
    parser.add_argument("--kernelbench", default=os.environ.get("CUDA_GYM_KERNELBENCH"),
                        help="KernelBench data (default $CUDA_GYM_KERNELBENCH); without it only the built-in suite")
    parser.add_argument("--levels", default="1,2", help="KernelBench levels (default 1,2)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many tasks per suite (0: all)")
    parser.add_argument("--out", default=os.environ.get("OUT") or "cuda_gym_results")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    started = time.monotonic()
    deadline = started + args.time_budget
    phase_b_at = started + args.phase_a_share * args.time_budget

    from agents.template_agent import KnobSpace, Unsupported, plan_task, render_candidate
    from cuda_gym.eval import EvalConfig, Evaluator
    from cuda_gym.tasks import load_suite

    tasks = load_suite("builtin")
    if args.limit:
        tasks = tasks[:args.limit]
    if args.kernelbench:
        kb = load_suite("kernelbench", levels=tuple(int(x) for x in args.levels.split(",")),
                        data_path=args.kernelbench)
        tasks += kb[:args.limit] if args.limit else kb
    else:
        print("no KernelBench data (--kernelbench or $CUDA_GYM_KERNELBENCH): built-in suite only", flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / f"template_agent_{args.backend}_{dt.datetime.now():%Y-%m-%d_%H%M}.json"
    rows: dict[str, dict] = {}
    plans: dict[str, object] = {}
    by_id = {t.id: t for t in tasks}
    for task in tasks:
        try:
            plan = plan_task(task, args.backend)
        except Unsupported as exc:
            rows[task.id] = {"level": task.level, "not_covered": str(exc)}
            continue
        except Exception as exc:  # noqa: BLE001 - a task that fails to trace is not covered
            rows[task.id] = {"level": task.level, "not_covered": f"{type(exc).__name__}: {str(exc)[:200]}"}
            continue
        plans[task.id] = plan
        rows[task.id] = {"level": task.level, "stages": plan.stage_kinds}
    print(f"planned {len(plans)}/{len(tasks)} tasks in {time.monotonic() - started:.0f} s", flush=True)

    # The evaluator's defaults but one baseline worker and at most 0.5 s of timing per callable.
    config_a = EvalConfig(baselines=("eager",), baseline_workers=1, timing_budget_s=0.5)
    config_b = config_a.replace(baselines=("eager", "compile"))
    meta = {"date": dt.datetime.now().isoformat(timespec="seconds"), "backend": args.backend,
            "time_budget_s": args.time_budget, "host": platform.node(), "python": platform.python_version(),
            "eval_config": {"baseline_workers": 1, "timing_budget_s": 0.5, "timing_reps": config_a.timing_reps}}

    def write(phase: str) -> None:
        payload = {**meta, "phase": phase, "elapsed_s": round(time.monotonic() - started, 1),
                   "summary": summarize(rows), "tasks": rows}
        tmp = out_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=1))
        os.replace(tmp, out_path)

    def record(prefix: str, task_id: str, result, knobs=None) -> None:
        row = rows[task_id]
        row[f"{prefix}_error_code"] = result.error_code.value
        row[f"{prefix}_correct"] = bool(result.correct)
        row[f"{prefix}_speedup_vs_eager"] = result.speedup_vs_eager
        if prefix != "a":
            row[f"{prefix}_speedup_vs_compile"] = result.speedup_vs_compile
        row[f"{prefix}_ms"] = result.candidate_time.median_ms if result.candidate_time else None
        if knobs is not None:
            row[f"{prefix}_knobs"] = knobs
        if not result.correct:
            row[f"{prefix}_message"] = (result.message or "")[:300]

    write("planned")
    with Evaluator(args.backend, config_a) as evaluator:
        meta["device"] = evaluator.device_name
        sources: dict[str, tuple[str, dict]] = {}
        futures = {}
        for task_id in round_robin(plans):
            plan = plans[task_id]
            space = KnobSpace.for_plan(plan)
            knobs = space.values(space.default())
            sources[task_id] = (render_candidate(plan, knobs), knobs)
            futures[evaluator.submit(by_id[task_id], sources[task_id][0], config=config_a)] = task_id
        pending = set(futures)
        while pending and time.monotonic() < phase_b_at:
            done, pending = wait(pending, timeout=max(0.1, phase_b_at - time.monotonic()), return_when=FIRST_COMPLETED)
            for future in done:
                record("a", futures[future], future.result(), sources[futures[future]][1])
            write("A")
        for future in pending:
            future.cancel()
        print(f"phase A: {sum(1 for r in rows.values() if 'a_error_code' in r)} judged, "
              f"{sum(1 for r in rows.values() if r.get('a_correct'))} correct, "
              f"{time.monotonic() - started:.0f} s", flush=True)

        # Phase B: compile baselines, one task at a time, alternating groups so each is represented.
        order = round_robin([task_id for task_id, row in rows.items() if row.get("a_correct")])
        for task_id in order:
            if time.monotonic() > deadline - 5:
                break
            record("b", task_id, evaluator.evaluate(by_id[task_id], sources[task_id][0], config=config_b))
            write("B")
        print(f"phase B: {sum(1 for r in rows.values() if 'b_error_code' in r)} judged with compile baselines, "
              f"{time.monotonic() - started:.0f} s", flush=True)

        # Tuning: random configurations against the default, under the phase B judge.
        import random

        rng = random.Random(0)
        for task_id in order:
            if time.monotonic() > deadline - 10 or args.tune <= 0:
                break
            row = rows[task_id]
            if not row.get("b_correct"):
                continue
            space = KnobSpace.for_plan(plans[task_id])
            tried = {space.default()}
            best = row.get("b_speedup_vs_compile") or 0.0
            for _ in range(args.tune):
                if time.monotonic() > deadline - 10:
                    break
                action = space.sample(rng)
                if action in tried:
                    continue
                tried.add(action)
                knobs = space.values(action)
                result = evaluator.evaluate(by_id[task_id], render_candidate(plans[task_id], knobs), config=config_b)
                row.setdefault("tuned", []).append({"knobs": knobs, "error_code": result.error_code.value,
                                                    "speedup_vs_compile": result.speedup_vs_compile})
                if result.correct and (result.speedup_vs_compile or 0) > best:
                    best = result.speedup_vs_compile
                    record("b", task_id, result, knobs)
            write("tune")
    write("done")
    summary = summarize(rows)
    for name, entry in summary.items():
        print(f"{name:<16} tasks {entry['tasks']:>3} covered {entry['covered']:>3} correct {entry['correct']:>3} "
              f"geomean vs eager {entry['geomean_speedup_vs_eager']} | compile measured {entry['compile_measured']} "
              f"geomean vs compile {entry['geomean_speedup_vs_compile']}", flush=True)
    print(f"wrote {out_path} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
