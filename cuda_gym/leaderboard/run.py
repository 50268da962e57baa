"""Judge a set of submissions under a hidden seed and build the leaderboard record.

`run_leaderboard` evaluates one candidate per task with an `Evaluator` whose input draws (model
weights, the task's inputs and the transformed correctness draws, `EvalConfig.seed`) come
from a seed drawn for this run with `secrets` and shown to no one until every verdict is in. The
record it returns (the content of `leaderboard.json`) reveals the seed, so the run can be repeated
with `seed=` / `--seed`. `write_leaderboard` writes leaderboard.json, leaderboard.md and the plots.
"""
from __future__ import annotations

import datetime as dt
import json
import secrets
from concurrent.futures import as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from .metrics import BASELINES, DEFAULT_FAILURE_SPEEDUP, FAST_P_THRESHOLDS, MISSING, Row, leaderboard_metrics
from .submissions import Submissions

if TYPE_CHECKING:  # cuda_gym.eval imports torch: only where a run needs it
    from ..eval.result import EvalResult
    from ..tasks.task import Task

LEADERBOARD_SCHEMA = 1
SEED_LIMIT = 2**31 - 1


def draw_secret_seed() -> int:
    """A seed no submitter can know in advance (the OS's cryptographic random source)."""
    return 1 + secrets.randbelow(SEED_LIMIT - 1)


def run_leaderboard(submissions: Submissions, tasks: "list[Task]", evaluator: Any, *, seed: int | None = None,
                    name: str = "submissions", origin: str = "", suite: str = "",
                    failure_speedup: float = DEFAULT_FAILURE_SPEEDUP, progress: bool = True,
                    results_log: str | Path | None = None) -> dict[str, Any]:
    """Evaluate every task's submission and return the leaderboard record (see docs/leaderboard.md).

    seed: None draws a secret seed (the default: hidden-seed mode); an int repeats a revealed run.
    A task without a submission, or whose trajectory had no candidate, is a failure (verdict
    MISSING or INVALID_ACTION); nothing is skipped.
    results_log: a JSONL file to which each verdict is appended as soon as it is in
    (`{"task_id", "seed", "result"}`), so an interrupted run keeps what it judged.
    """
    from ..eval.result import ErrorCode, EvalResult

    if not tasks:
        raise ValueError("no tasks selected for the leaderboard")
    seed_mode = "secret" if seed is None else "given"
    seed = draw_secret_seed() if seed is None else int(seed)
    if not 0 <= seed <= SEED_LIMIT:
        raise ValueError(f"seed must be in [0, {SEED_LIMIT}], got {seed}")
    config = evaluator.config.replace(seed=seed)
    backend = evaluator.backend

    results: dict[str, EvalResult] = {}
    futures = {}
    for task in tasks:
        submission = submissions.by_task.get(task.id)
        if submission is None:
            continue
        if submission.source is None:
            results[task.id] = EvalResult(task_id=task.id, backend=backend, error_code=ErrorCode.INVALID_ACTION,
                                          message=f"no candidate to judge ({submission.origin})",
                                          precision=config.precision, policy=config.policy)
            continue
        futures[evaluator.submit(task, submission.source, config=config)] = task
    completed = as_completed(futures)
    if progress:
        from tqdm import tqdm

        completed = tqdm(completed, total=len(futures), desc="judging", unit="candidate")
    for future in completed:
        task = futures[future]
        results[task.id] = future.result()
        if results_log is not None:
            with open(results_log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"task_id": task.id, "seed": seed, "result": results[task.id].to_dict()}) + "\n")

    rows, entries = [], []
    for task in sorted(tasks, key=lambda t: (t.level, t.id)):
        submission = submissions.by_task.get(task.id)
        result = results.get(task.id)
        row = Row(task.id, task.level, result.error_code.value if result else MISSING, bool(result and result.correct),
                  result.speedup_vs_eager if result else None, result.speedup_vs_compile if result else None)
        rows.append(row)
        entries.append(_entry(row, result, submission.origin if submission else ""))
    measured = tuple(b for b in BASELINES if b in config.baselines)
    return {
        "schema": LEADERBOARD_SCHEMA,
        "kind": "cuda_gym.leaderboard",
        "name": name,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cuda_gym_version": __version__,
        "torch_version": getattr(evaluator, "torch_version", ""),
        "submissions": origin,
        "submission_kind": submissions.kind,
        "suite": suite,
        "backend": backend,
        "device": evaluator.device_name,
        "seed": {"value": seed, "mode": seed_mode},
        "config": {"precision": config.precision, "policy": config.policy, "baselines": list(measured),
                   "correctness_trials": config.correctness_trials, "confirm_faster": config.confirm_faster},
        "failure_speedup": failure_speedup,
        "thresholds": list(FAST_P_THRESHOLDS),
        "summary": leaderboard_metrics(rows, failure_speedup=failure_speedup, measured=measured),
        "results": entries,
        "unmatched": list(submissions.unmatched),
        "eval_results": {task_id: result.to_dict() for task_id, result in sorted(results.items())},
    }


def _entry(row: Row, result: "EvalResult | None", origin: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"task_id": row.task_id, "level": row.level, "verdict": row.verdict,
                             "correct": row.correct, "speedup_vs_eager": row.speedup_vs_eager,
                             "speedup_vs_compile": row.speedup_vs_compile, "time_ms": None, "eager_ms": None,
                             "compile_ms": None, "message": "no submission for this task" if result is None else "",
                             "origin": origin, "candidate_hash": "", "language": ""}
    if result is not None:
        baseline = result.baseline_ms()
        entry.update(time_ms=result.candidate_time.median_ms if result.candidate_time else None,
                     eager_ms=baseline["eager"], compile_ms=baseline["compile"],
                     message="" if result.ok else " ".join(result.message.split())[:300],
                     candidate_hash=result.candidate_hash, language=result.language)
    return entry


def load_leaderboard(path: str | Path) -> dict[str, Any]:
    """A leaderboard.json written by `write_leaderboard`; a clear ValueError for anything else."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"comparison file {path} does not exist; pass a leaderboard.json of an earlier run") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not readable JSON ({exc}); pass a leaderboard.json of an earlier run") from None
    if not isinstance(record, dict) or record.get("kind") != "cuda_gym.leaderboard":
        raise ValueError(f"{path} is not a cuda_gym leaderboard.json (no kind 'cuda_gym.leaderboard')")
    if record.get("schema") != LEADERBOARD_SCHEMA:
        raise ValueError(f"{path} has leaderboard schema {record.get('schema')}, this cuda_gym writes "
                         f"{LEADERBOARD_SCHEMA}; re-run that leaderboard")
    return record


def write_leaderboard(record: dict[str, Any], out_dir: str | Path, compare: dict[str, Any] | None = None,
                      compare_path: str = "", plots: bool = True) -> dict[str, Path]:
    """Write leaderboard.json, leaderboard.md and (plots=True, needs matplotlib) fast_p.png and
    speedups.png into `out_dir`; returns {name: path}. `compare`: another run's record, set side
    by side in the markdown, the plots and the JSON's "compare" section."""
    from .report import markdown

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record = dict(record)
    if compare is not None:
        record["compare"] = {"name": compare.get("name", ""), "path": compare_path, "seed": compare.get("seed"),
                             "backend": compare.get("backend"), "device": compare.get("device"),
                             "summary": compare["summary"]}
    paths = {"json": out / "leaderboard.json", "markdown": out / "leaderboard.md"}
    if plots:
        from .plots import plot_fast_p, plot_speedups

        paths["fast_p"] = plot_fast_p(record, out / "fast_p.png", compare=compare)
        paths["speedups"] = plot_speedups(record, out / "speedups.png", compare=compare)
    paths["json"].write_text(json.dumps(record, indent=1), encoding="utf-8")
    images = [p.name for key, p in paths.items() if key in ("fast_p", "speedups")]
    paths["markdown"].write_text(markdown(record, compare=compare, images=images), encoding="utf-8")
    return paths
