"""`cuda-gym solve --agent template`: the template agent over tasks; writes candidates and summary.json.

    cuda-gym solve --agent template --suite builtin --backend cuda --out runs/template
    cuda-gym solve --agent template --tasks builtin/L1/gelu,builtin/L2/linear_gelu --budget 8 --out runs/t

Per task: plan the reference onto the csrc/ templates, judge the default configuration and up to
`--budget - 1` more (random, or proposed by `--sb3-model model.zip`, a PPO/MaskablePPO model from
agents/schedule_ppo.py), keep the best. Writes `<out>/candidates/<task id>.py` (the best candidate of
each covered task), `<out>/results.jsonl` (one line per task: every configuration's verdict) and
`<out>/summary.json` in `cuda-gym agent`'s format (one episode per task; a task the templates do not
cover counts as failed, with best_error_code "NOT_COVERED" and the reason).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from cuda_gym.leaderboard.metrics import geomean
from cuda_gym.tasks.selection import add_task_options

NOT_COVERED = "NOT_COVERED"


def add_command(commands: argparse._SubParsersAction) -> None:
    from cuda_gym.cli import add_eval_options, suite_list

    solve = commands.add_parser(
        "solve", help="solve tasks with a non-LLM agent (template: fx trace -> csrc/ templates -> tuned knobs)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    solve.add_argument("--agent", default="template", choices=["template"], help="which agent (default template)")
    add_task_options(solve, levels_help="with --suite: only these levels, e.g. 1,2 (default all)")
    solve.add_argument("--suite", help=f"a whole suite: {suite_list()}")
    solve.add_argument("--data-path", help="KernelBench / Ops-6K data (else $CUDA_GYM_KERNELBENCH / $CUDA_GYM_OPS6K)")
    solve.add_argument("--budget", type=int, default=1, help="configurations judged per task (default 1: the default)")
    solve.add_argument("--sb3-model", help="an SB3 PPO / MaskablePPO model (.zip) that proposes configurations")
    solve.add_argument("--seed", type=int, default=0, help="random search seed (default 0)")
    solve.add_argument("--out", help="output directory (default: cuda_gym_results/solve_<time>)")
    add_eval_options(solve)
    solve.set_defaults(func=run_solve)


def select_tasks(tasks_arg: list[str] | None, suite: str | None, levels: list[int] | None,
                 data_path: str | None) -> list:
    """Tasks named by --tasks, or a suite's (levels') tasks; raises ValueError / KeyError with the fix."""
    from cuda_gym.tasks import get_task, load_suite

    if bool(tasks_arg) == bool(suite):
        raise ValueError("give either --tasks ID,ID or --suite NAME [--levels 1,2]")
    if tasks_arg:
        found = []
        for task_id in tasks_arg:
            kwargs = {"data_path": data_path} if not task_id.startswith("builtin/") and data_path else {}
            found.append(get_task(task_id, **kwargs))
        return found
    level_tuple = tuple(levels) if levels else None
    kwargs = {"data_path": data_path} if suite != "builtin" and data_path else {}
    found = load_suite(suite, levels=level_tuple, **kwargs)
    if not found:
        raise ValueError(f"suite {suite!r} has no tasks with levels {level_tuple}")
    return found


def task_entry(solution: Any) -> dict[str, Any]:
    """One task's line of summary.json (`cuda-gym agent`'s keys, plus coverage and configuration counts)."""
    best = solution.best.result if solution.best is not None else None
    return {
        "level": solution.level,
        "episodes": 1,
        "passed_episodes": int(bool(best is not None and best.correct)),
        "best_error_code": NOT_COVERED if solution.plan_error else (best.error_code.value if best else "NO_TURNS"),
        "best_speedup_vs_eager": best.speedup_vs_eager if best is not None and best.correct else None,
        "best_speedup_vs_compile": best.speedup_vs_compile if best is not None and best.correct else None,
        "configurations": len(solution.trials),
        "best_knobs": solution.best.knobs if solution.best is not None else None,
        "not_covered_reason": solution.plan_error,
    }


def _rates(entries: list[dict[str, Any]]) -> dict[str, Any]:
    count = len(entries)
    passed = [e for e in entries if e["passed_episodes"]]
    return {
        "episodes": count,
        "covered": sum(1 for e in entries if e["best_error_code"] != NOT_COVERED),
        "pass_rate": len(passed) / count if count else None,
        "faster_than_eager_rate": sum(1 for e in passed if (e["best_speedup_vs_eager"] or 0) > 1) / count
        if count else None,
        "faster_than_compile_rate": sum(1 for e in passed if (e["best_speedup_vs_compile"] or 0) > 1) / count
        if count else None,
        "geomean_speedup_vs_eager": geomean(e["best_speedup_vs_eager"] for e in passed),
        "geomean_speedup_vs_compile": geomean(e["best_speedup_vs_compile"] for e in passed),
    }


def summarize(solutions: Iterable[Any], **meta: Any) -> dict[str, Any]:
    """summary.json: overall and per-level rates, geomeans over correct tasks, and per-task entries."""
    tasks = {s.task_id: task_entry(s) for s in sorted(solutions, key=lambda s: s.task_id)}
    summary: dict[str, Any] = {"protocol": "best configuration of each task (one episode per task); "
                                           "faster = correct and speedup > 1"}
    summary.update(_rates(list(tasks.values())))
    by_level: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for entry in tasks.values():
        by_level[entry["level"]].append(entry)
    summary["levels"] = {str(level): _rates(by_level[level]) for level in sorted(by_level)}
    summary["tasks"] = tasks
    summary.update(meta)
    return summary


def write_outputs(out: Path, solutions: list[Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Write candidates/, results.jsonl and summary.json under `out` (rewritten whole: safe to call repeatedly)."""
    (out / "candidates").mkdir(parents=True, exist_ok=True)
    lines = []
    for solution in solutions:
        if solution.best_source is not None:
            (out / "candidates" / (solution.task_id.replace("/", "__") + ".py")).write_text(solution.best_source)
        lines.append(json.dumps({"task_id": solution.task_id, "level": solution.level,
                                 "not_covered_reason": solution.plan_error,
                                 "trials": [{"action": list(t.action), "knobs": t.knobs, "result": t.result.to_dict()}
                                            for t in solution.trials]}))
    temporary = out / "results.jsonl.tmp"
    temporary.write_text("\n".join(lines) + ("\n" if lines else ""))
    os.replace(temporary, out / "results.jsonl")
    summary = summarize(solutions, **meta)
    temporary = out / "summary.json.tmp"
    temporary.write_text(json.dumps(summary, indent=1))
    os.replace(temporary, out / "summary.json")
    return summary


def run_solve(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from cuda_gym.cli import evaluator_config
    from cuda_gym.cli import make_evaluator

    from .template_agent import KnobSpace, TemplateAgent, sb3_policy

    try:
        tasks = select_tasks(args.tasks, args.suite, args.levels, args.data_path)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    if args.budget < 1:
        print("error: --budget must be >= 1", file=sys.stderr)
        return 2
    policy = None
    if args.sb3_model:
        if not Path(args.sb3_model).exists():
            print(f"error: --sb3-model {args.sb3_model} does not exist (train one with agents/schedule_ppo.py)",
                  file=sys.stderr)
            return 2
        policy = sb3_policy(args.sb3_model)
    out = Path(args.out) if args.out else Path("cuda_gym_results") / f"solve_{dt.datetime.now():%Y%m%d_%H%M%S}"
    if out.exists() and any(out.iterdir()):
        print(f"error: --out {out} exists and is not empty; pick a new directory", file=sys.stderr)
        return 2
    config = evaluator_config(args)
    with make_evaluator(args, config) as evaluator:
        if policy is not None:
            try:
                policy.check_space(KnobSpace.for_plan(None, evaluator.backend))
            except ValueError as exc:
                print(f"error: --sb3-model: {exc}", file=sys.stderr)
                return 2
        agent = TemplateAgent(evaluator, evaluator.backend, seed=args.seed, eval_config=config)
        meta = {"agent": "template", "backend": evaluator.backend, "device": evaluator.device_name,
                "budget": args.budget, "sb3_model": args.sb3_model, "date": dt.datetime.now().isoformat(timespec="seconds"),
                "config": {"precision": config.precision, "policy": config.policy,
                           "baselines": list(config.baselines)}}
        pending = [agent.submit(task, args.budget, policy) for task in tqdm(tasks, desc="planning", unit="task")]
        solutions = []
        for item in tqdm(pending, desc="judging", unit="task"):
            solutions.append(agent.finish(item))
            write_outputs(out, solutions, meta)
    summary = write_outputs(out, solutions, meta)
    print(f"{summary['covered']}/{summary['episodes']} tasks covered, pass rate {summary['pass_rate']:.0%}, "
          f"geomean vs eager {summary['geomean_speedup_vs_eager']}, vs compile {summary['geomean_speedup_vs_compile']}")
    print(f"wrote {out}/summary.json, results.jsonl, candidates/")
    return 0
