"""`cuda-gym leaderboard SUBMISSIONS (--suite S [--levels ...] | --tasks ...) --out DIR`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..tasks.selection import add_task_options


def add_command(commands) -> None:
    from ..cli import add_eval_options, suite_list

    sub = commands.add_parser(
        "leaderboard", help="judge a folder of candidates or a rollout's trajectories.jsonl under a hidden seed",
        description="Judge one candidate per task with inputs drawn from a secret seed (revealed in the output), "
                    "and write leaderboard.json, leaderboard.md, fast_p.png and speedups.png: pass rate, fast_p "
                    "for p in 0, 1, 1.05, 1.2, 1.5, 2 vs eager and torch.compile, geomean speedups, per level.")
    sub.add_argument("submissions", help="a folder laid out L<level>/<task name>.py (or KernelBench's "
                                         "level<level>/<name>.py), or a trajectories.jsonl from `cuda-gym agent`")
    selection = sub.add_mutually_exclusive_group(required=True)
    selection.add_argument("--suite", help=f"judge every task of this suite ({suite_list()})")
    add_task_options(sub, tasks_group=selection, tasks_help="judge these tasks only",
                     levels_help="with --suite: only these levels")
    sub.add_argument("--data-path", help="KernelBench / Ops-6K data (else $CUDA_GYM_KERNELBENCH / $CUDA_GYM_OPS6K)")
    sub.add_argument("--out", required=True, help="folder for leaderboard.json, leaderboard.md and the PNGs")
    sub.add_argument("--seed", type=int, help="repeat a run with its revealed seed (default: a secret seed "
                                              "drawn for this run and revealed at the end)")
    sub.add_argument("--compare", metavar="OTHER_JSON", help="another run's leaderboard.json, set side by side")
    sub.add_argument("--name", help="this run's name in the report (default: the submissions' folder name)")
    sub.add_argument("--failure-speedup", type=float, default=1.0,
                     help="what a failed or missing task counts as in 'geomean (all)' (default 1.0)")
    sub.add_argument("--no-plots", action="store_true", help="skip the PNG plots (no matplotlib needed)")
    sub.add_argument("--include-degenerate", action="store_true",
                     help="with --suite, keep the tasks whose output cannot tell a kernel from a constant "
                          "(left out by default: cuda-gym tasks list marks them)")
    add_eval_options(sub)
    sub.set_defaults(func=_cmd_leaderboard)


def _select_tasks(args: argparse.Namespace):
    from ..tasks import get_task, load_suite
    from ..tasks.degenerate import without_degenerate

    kwargs = {"data_path": args.data_path} if args.data_path else {}
    if args.suite:
        suite_kwargs = kwargs if args.suite != "builtin" else {}
        tasks = load_suite(args.suite, levels=tuple(args.levels) if args.levels else None, **suite_kwargs)
        return tasks if args.include_degenerate else without_degenerate(tasks)
    if args.levels:
        raise ValueError("--levels selects within --suite; with --tasks, list the tasks you want")
    tasks = []
    for task_id in dict.fromkeys(args.tasks):
        suite_kwargs = kwargs if not task_id.startswith("builtin/") else {}
        tasks.append(get_task(task_id, **suite_kwargs))
    return tasks


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from ..cli import make_evaluator
    from .run import load_leaderboard, run_leaderboard, write_leaderboard
    from .submissions import SubmissionError, read_submissions

    try:
        tasks = _select_tasks(args)
        if not tasks:
            raise ValueError("the selection has no tasks")
        submissions = read_submissions(args.submissions, tasks)
        compare = load_leaderboard(args.compare) if args.compare else None
        if not args.no_plots:
            from .plots import _pyplot

            _pyplot()  # fail before judging, not after, when matplotlib is missing
    except (KeyError, ValueError, FileNotFoundError, SubmissionError, ImportError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    path = Path(args.submissions)
    name = args.name or (path.name if path.is_dir() else path.parent.name or path.stem)
    seed_note = "the seed is secret until the end" if args.seed is None else f"seed {args.seed} (given)"
    print(f"cuda-gym leaderboard: {len(submissions.by_task)} submissions for {len(tasks)} tasks "
          f"({len(submissions.unmatched)} not matching any task); {seed_note}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_log = out / "eval_results.jsonl"  # each verdict as it comes: an interrupted run keeps them
    results_log.unlink(missing_ok=True)
    with make_evaluator(args) as evaluator:
        record = run_leaderboard(submissions, tasks, evaluator, seed=args.seed, name=name, origin=str(path),
                                 suite=args.suite or "tasks", failure_speedup=args.failure_speedup,
                                 results_log=results_log)
    paths = write_leaderboard(record, args.out, compare=compare, compare_path=args.compare or "",
                              plots=not args.no_plots)
    overall = record["summary"]["overall"]
    print(f"\npass rate {overall['correct']}/{overall['tasks']}", end="")
    for baseline in record["config"]["baselines"]:
        fast = overall["fast_p"][baseline]
        geo = overall["geomean_correct"][baseline]
        print(f" | fast_1 vs {baseline} {100 * fast['1.0']:.0f}%"
              + (f", geomean (correct) {geo:.2f}x" if geo else ""), end="")
    seed = record["seed"]["value"]
    print(f"\nseed: {seed} ({'secret until now' if record['seed']['mode'] == 'secret' else 'given'}; "
          f"--seed {seed} repeats it)")
    for file in paths.values():
        print(f"wrote {file}")
    return 0
