"""The `cuda-gym` command: list tasks, judge a candidate file, run the built-in reference solutions."""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import platform
import shutil
import sys
import textwrap
import time
from collections import defaultdict
from concurrent.futures import as_completed
from pathlib import Path

from . import __version__
from .speedup import geomean
from .tasks.selection import add_task_options


def _cmd_tasks_list(args: argparse.Namespace) -> int:
    from .tasks import load_suite, solution_path, suite_names
    from .tasks.degenerate import degenerate_reason

    suites = [args.suite] if args.suite else ["builtin"]
    for suite in suites:
        try:
            tasks = load_suite(suite, levels=tuple(args.levels) if args.levels else None)
        except (KeyError, FileNotFoundError, RuntimeError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"suite {suite}: {len(tasks)} tasks (suites: {', '.join(suite_names())})")
        id_width = max((len(task.id) for task in tasks), default=0) + 2
        # Descriptions are wrapped whole under their column; a narrow terminal still gets 30 characters a line.
        text_width = max(30, shutil.get_terminal_size((100, 24)).columns - id_width - 3)
        for task in tasks:
            solved = [b for b in ("cuda", "cpu") if suite == "builtin" and solution_path(task, b)]
            solved += ["triton"] if suite == "builtin" and solution_path(task, "cuda", "triton") else []
            marks = f" [solutions: {', '.join(solved)}]" if solved else ""
            if degenerate_reason(task.id):
                marks += " [degenerate: left out of the environments and leaderboard by default]"
            lines = textwrap.wrap(task.description + marks, text_width, break_on_hyphens=False,
                                  break_long_words=False) or [""]
            print(f"  {task.id:<{id_width}} {lines[0]}")
            for line in lines[1:]:
                print(f"  {'':<{id_width}} {line}")
    return 0


def evaluator_config(args: argparse.Namespace):
    """The EvalConfig that `add_eval_options` asked for."""
    from .eval import EvalConfig

    baselines = ("eager",) if getattr(args, "no_compile_baseline", False) else ("eager", "compile")
    return EvalConfig(precision=args.precision, policy=args.policy, baselines=baselines)


def make_evaluator(args: argparse.Namespace, config=None):
    """The evaluator that `add_eval_options` asked for: a local `Evaluator` on `--backend`, or with
    `--ray` a `RayEvaluator` (cuda_gym.eval.distributed) with the same interface. `config`: the
    EvalConfig (default `evaluator_config(args)`). Use it as a context manager."""
    config = config or evaluator_config(args)
    if getattr(args, "judge", None):
        if getattr(args, "ray", None):
            raise SystemExit("error: --judge and --ray exclude each other (the service picks its own evaluator)")
        from .eval.remote import JudgeError, RemoteEvaluator, read_token

        try:
            evaluator = RemoteEvaluator(args.judge, read_token(args.judge_token_file), config=config)
        except (OSError, ValueError, JudgeError) as exc:
            raise SystemExit(f"error: --judge {args.judge}: {exc}") from None
        if args.backend != "auto" and args.backend != evaluator.backend:
            raise SystemExit(f"error: --backend {args.backend}, but the judge at {args.judge} judges on "
                             f"{evaluator.backend}")
        return evaluator
    if getattr(args, "ray", None):
        try:
            from .eval.distributed import RayEvaluator

            return RayEvaluator(args.backend, args.ray_actors, address=None if args.ray == "auto" else args.ray,
                                config=config)
        except (ImportError, ValueError, RuntimeError) as exc:
            raise SystemExit(f"error: --ray {args.ray}: {exc}") from None
    if getattr(args, "ray_actors", None):
        raise SystemExit("error: --ray-actors needs --ray auto|ADDRESS")
    from .eval import Evaluator

    return Evaluator(args.backend, config)


def _cmd_eval(args: argparse.Namespace) -> int:
    from .eval.candidate import InvalidCandidate, parse_candidate
    from .tasks import get_task

    path = Path(args.candidate)
    if not path.exists():
        print(f"error: candidate file {path} does not exist", file=sys.stderr)
        return 2
    try:
        task = get_task(args.task)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    source = path.read_text(encoding="utf-8")
    try:
        parse_candidate(source)
    except InvalidCandidate as exc:
        # Nothing to build or run: answered without an evaluator, whose worker and torch take seconds to start.
        result = _invalid_action(task.id, args, str(exc))
    else:
        with make_evaluator(args) as evaluator:
            result = evaluator.evaluate(task, source)
    if args.json:
        print(result.to_json(indent=2))
    else:
        print(result.summary())
        if not result.ok and (result.compile_log or result.runtime_log):
            print((result.compile_log or result.runtime_log)[-2000:])
    return 0 if result.ok else 1


def _invalid_action(task_id: str, args: argparse.Namespace, message: str):
    """The INVALID_ACTION verdict the evaluator would give, without starting one: its `backend` is
    the one asked for (`auto` unresolved) and its `device` empty, since no worker was asked."""
    from importlib.metadata import PackageNotFoundError, version

    from .eval.result import ErrorCode, EvalResult

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = ""
    return EvalResult(task_id=task_id, backend=args.backend, error_code=ErrorCode.INVALID_ACTION, message=message,
                      torch_version=torch_version, precision=args.precision, policy=args.policy)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _cmd_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .tasks import load_suite, solution_path

    config = evaluator_config(args)
    evaluator_started = time.monotonic()
    suite = load_suite("builtin", levels=tuple(args.levels) if args.levels else None)
    if args.tasks:
        unknown = sorted(set(args.tasks) - {t.id for t in suite})
        if unknown:
            print(f"error: not built-in tasks{' of the levels asked for' if args.levels else ''}: "
                  f"{', '.join(unknown)} (`cuda-gym tasks list` shows them)", file=sys.stderr)
            return 2
        suite = [t for t in suite if t.id in args.tasks]
    with make_evaluator(args, config) as evaluator:
        backend = evaluator.backend
        language = getattr(args, "language", "cuda")
        tasks = [t for t in suite if solution_path(t, backend, language)]
        if not tasks:
            print(f"error: none of the {len(suite)} built-in tasks asked for has a {language} reference solution "
                  f"for backend {backend} (`cuda-gym tasks list` marks those that do)", file=sys.stderr)
            return 2
        written_in = " in Triton" if language == "triton" else ""
        print(f"cuda-gym run: judging {len(tasks)} of {len(suite)} built-in tasks, those with a reference "
              f"solution{written_in} for {backend} (the others are for agents to solve), on {evaluator.device_name}; "
              f"baselines: {', '.join(config.baselines)} (evaluator ready after "
              f"{time.monotonic() - evaluator_started:.0f} s)")
        if backend == "cpu" and language == "cuda":
            print("On the CPU the reference solutions are plain C++ written to be correct, not tuned kernels: "
                  "their speedups say little (some are many times slower than PyTorch's); every verdict should be OK.")
        prewarm_started = time.monotonic()
        prewarmed = evaluator.prewarm(tasks)  # {} where it did nothing
        if prewarmed:
            failed = sum(1 for why in prewarmed.values() if why)
            print(f"torch.compile baselines of {len(prewarmed)} tasks compiled side by side in "
                  f"{time.monotonic() - prewarm_started:.0f} s"
                  + (f" ({failed} failed; their baseline workers compile them)" if failed else ""))
        if language == "triton" and backend == "cpu":
            print("Triton on the CPU runs in Triton's interpreter: correctness and policies are judged, the "
                  "timings mean nothing (flag triton_interpreted).")
        futures = {evaluator.submit(t, solution_path(t, backend, language).read_text(encoding="utf-8")): t
                   for t in tasks}
        results = []
        for future in tqdm(as_completed(futures), total=len(futures), desc="evaluating", unit="task"):
            results.append(future.result())
        device = evaluator.device_name
    results.sort(key=lambda r: r.task_id)
    print()
    print(f"{'task':<36} {'verdict':<14} {'time ms':>9} {'eager ms':>9} {'compile ms':>10} {'vs eager':>8} {'vs compile':>10}")
    for r in results:
        baseline = r.baseline_ms()
        print(f"{r.task_id:<36} {r.error_code.value:<14} "
              f"{_fmt(r.candidate_time and r.candidate_time.median_ms, '9.4g')} "
              f"{_fmt(baseline['eager'], '9.4g')} "
              f"{_fmt(baseline['compile'], '10.4g')} "
              f"{_fmt(r.speedup_vs_eager, '8.2f')} {_fmt(r.speedup_vs_compile, '10.2f')}")
    by_level = defaultdict(list)
    for r in results:
        by_level[int(r.task_id.split("/")[1][1:])].append(r)
    summary = {}
    print()
    print(f"{'level':<6} {'pass':>6} {'fast_1 eager':>13} {'fast_1 compile':>15} {'geomean vs eager':>17} {'geomean vs compile':>19}")
    for level in sorted(by_level):
        rs = by_level[level]
        passed = [r for r in rs if r.correct]
        row = {
            "tasks": len(rs),
            "pass_rate": len(passed) / len(rs),
            "fast_1_vs_eager": sum(1 for r in passed if (r.speedup_vs_eager or 0) > 1) / len(rs),
            "fast_1_vs_compile": sum(1 for r in passed if (r.speedup_vs_compile or 0) > 1) / len(rs),
            "geomean_speedup_vs_eager": geomean([r.speedup_vs_eager for r in passed]),
            "geomean_speedup_vs_compile": geomean([r.speedup_vs_compile for r in passed]),
        }
        summary[f"L{level}"] = row
        print(f"L{level:<5} {row['pass_rate']:>6.0%} {row['fast_1_vs_eager']:>13.0%} {row['fast_1_vs_compile']:>15.0%} "
              f"{_fmt(row['geomean_speedup_vs_eager'], '17.2f')} {_fmt(row['geomean_speedup_vs_compile'], '19.2f')}")
    out = Path(args.out) if args.out else Path("cuda_gym_results") / (
        f"run_{backend}_{dt.datetime.now().strftime('%Y%m%d_%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    import torch

    payload = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "cuda_gym_version": __version__,
        "backend": backend,
        "device": device,
        "host": {"machine": platform.machine(), "processor": platform.processor(), "python": platform.python_version(),
                 "torch": torch.__version__},
        "config": {"precision": config.precision, "policy": config.policy, "baselines": list(config.baselines)},
        "summary": summary,
        "results": [r.to_dict() for r in results],
    }
    out.write_text(json.dumps(payload, indent=1))
    print(f"\nwrote {out}")
    return 0 if all(r.correct for r in results) else 1


def suite_list() -> str:
    """The registered suites, for help texts: "builtin, kernelbench, ops6k, synth"."""
    from .tasks import suite_names

    return ", ".join(suite_names())


def add_eval_options(sub: argparse.ArgumentParser, *, judge: bool = True) -> None:
    """The evaluator options every command that judges candidates takes (read by `evaluator_config` and
    `make_evaluator`: build the evaluator with `make_evaluator(args, config)`, so that --ray and --judge
    are honoured). `judge`: offer --judge (a remote `cuda-gym serve`); the service itself does not."""
    sub.add_argument("--backend", default="auto", choices=["auto", "cuda", "cpu"],
                     help="where to run (default: cuda if a GPU is visible, else cpu)")
    sub.add_argument("--precision", default="fp32", choices=["fp32", "tf32"], help="precision policy")
    sub.add_argument("--policy", default="strict", choices=["strict", "permissive"],
                     help="strict: all compute in the candidate's own kernels (default)")
    sub.add_argument("--no-compile-baseline", action="store_true",
                     help="skip the torch.compile baseline (faster; speedup vs compile is then absent)")
    sub.add_argument("--ray", metavar="auto|ADDRESS", default=None,
                     help="judge on a Ray cluster (pip install 'cuda_gym[ray]'; docs/scaling.md): 'auto' joins the "
                          "cluster Ray finds (RAY_ADDRESS, a local `ray start`) or starts a local one; else a Ray "
                          "address (host:6379, ray://host:10001)")
    sub.add_argument("--ray-actors", type=int, default=None,
                     help="with --ray: evaluator actors (default: one per GPU; on the cpu backend one per 4 cores)")
    if judge:
        sub.add_argument("--judge", metavar="URL", default=None,
                         help="judge on a `cuda-gym serve` service at URL (http://host:port; docs/serving.md) "
                              "instead of this machine")
        sub.add_argument("--judge-token-file", metavar="FILE", default=None,
                         help="with --judge: the service's bearer token (default: $CUDA_GYM_JUDGE_TOKEN)")


# Commands that live beside the code they drive: each module has `add_command(commands)`, which adds
# its subparser (using `add_eval_options` where it judges candidates) with `set_defaults(func=...)`.
# Imported when the parser is built, so keep those modules' top-level imports light.
COMMAND_MODULES: tuple[str, ...] = (
    "cuda_gym.leaderboard.command",
    "cuda_gym.serve.command",
    "cuda_gym.synth.cli",
)

# Commands of other installed packages (the agents package: `agent`, `solve`, `train`) are entry points
# of this group, each naming a module with the same `add_command`; cuda_gym never imports them itself.
COMMAND_ENTRY_POINT_GROUP = "cuda_gym.commands"
AGENT_SIDE_COMMANDS = ("agent", "solve", "train")


def command_entry_points() -> list:
    """The installed `cuda_gym.commands` entry points, one per command name (the first found wins)."""
    from importlib.metadata import entry_points

    by_name: dict = {}
    for entry_point in entry_points(group=COMMAND_ENTRY_POINT_GROUP):
        by_name.setdefault(entry_point.name, entry_point)
    return [by_name[name] for name in sorted(by_name)]


def _missing_command_message(command: str) -> str:
    return (f"cuda-gym: the command {command!r} is not installed. The agents-side commands "
            f"({', '.join(AGENT_SIDE_COMMANDS)}) come from "
            f"the package cuda_gym_agents through the {COMMAND_ENTRY_POINT_GROUP!r} entry points, and none by that name is "
            "registered: install cuda_gym with pip (`pip install -e .` in a checkout) rather than running it "
            "from the source tree.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuda-gym",
        description="RL environments for writing fast, correct GPU kernels: list tasks, judge candidates, "
                    "and run the built-in reference solutions.",
    )
    parser.add_argument("--version", action="version", version=f"cuda_gym {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tasks = commands.add_parser("tasks", help="inspect task suites")
    tasks_commands = tasks.add_subparsers(dest="tasks_command", required=True, metavar="SUBCOMMAND")
    listing = tasks_commands.add_parser("list", help="list the tasks of a suite (default: builtin)")
    listing.add_argument("suite", nargs="?", help=f"suite name: {suite_list()} (default builtin)")
    add_task_options(listing, tasks=False)
    listing.set_defaults(func=_cmd_tasks_list)

    evaluate = commands.add_parser("eval", help="judge one candidate file against a task and print the verdict")
    evaluate.add_argument("task", help="task id, e.g. builtin/L1/softmax")
    evaluate.add_argument("candidate", help="a Python file defining class ModelNew")
    evaluate.add_argument("--json", action="store_true", help="print the full EvalResult as JSON")
    add_eval_options(evaluate)
    evaluate.set_defaults(func=_cmd_eval)

    run = commands.add_parser("run", help="evaluate the built-in reference solutions (the main job)")
    add_task_options(run, tasks_help="only these built-in tasks, e.g. builtin/L1/softmax,builtin/L2/linear_gelu")
    run.add_argument("--out", help="where to write the JSON results (default: cuda_gym_results/run_*.json)")
    add_eval_options(run)
    run.add_argument("--language", default="cuda", choices=["cuda", "triton"],
                     help="which reference solutions: cuda (CUDA C++, C++ on the cpu backend) or triton "
                          "(@triton.jit; on the cpu backend through Triton's interpreter). Default cuda")
    run.set_defaults(func=_cmd_run)

    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_command(commands)
    for entry_point in command_entry_points():
        entry_point.load().add_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    if argv and argv[0] in AGENT_SIDE_COMMANDS and argv[0] not in commands.choices:
        print(_missing_command_message(argv[0]), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
