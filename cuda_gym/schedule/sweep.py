"""The template agent's two-phase sweep over many tasks on one evaluator: phase A judges every covered
task's default configuration for correctness with the check judge (no baselines), phase B times the
correct ones with the recommended judge, then optional random tuning. `benchmarks/template_agent.py` is
its command line; docs/template-agent.md describes the phases and what each row holds.
"""
from __future__ import annotations

import hashlib
import random
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Any, Callable

from ..speedup import geomean


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
    """Per group ("all", suite, suite/level): counts from phase A, geomeans from phase B only."""
    groups: dict[str, list[dict]] = {}
    for task_id, row in rows.items():
        groups.setdefault(_group(task_id), []).append(row)
        groups.setdefault(task_id.split("/")[0], []).append(row)
        groups.setdefault("all", []).append(row)
    out = {}
    for name, items in sorted(groups.items()):
        b_rows = [r for r in items if r.get("b_correct")]
        b_compile = [r for r in b_rows if r.get("b_speedup_vs_compile")]
        out[name] = {
            "tasks": len(items),
            "covered": sum(1 for r in items if r.get("stages")),
            "judged": sum(1 for r in items if "a_error_code" in r),
            "correct": sum(1 for r in items if r.get("a_correct")),
            "b_judged": sum(1 for r in items if "b_error_code" in r),
            "b_correct": len(b_rows),
            "geomean_speedup_vs_eager": geomean(r.get("b_speedup_vs_eager") for r in b_rows),
            "compile_measured": len(b_compile),
            "geomean_speedup_vs_compile": geomean(r["b_speedup_vs_compile"] for r in b_compile),
            "geomean_speedup_vs_eager_same_tasks": geomean(r.get("b_speedup_vs_eager") for r in b_compile),
            "faster_than_eager": sum(1 for r in b_rows if (r.get("b_speedup_vs_eager") or 0) > 1),
            "faster_than_compile": sum(1 for r in b_compile if r["b_speedup_vs_compile"] > 1),
        }
    return out


def plan_all(tasks, backend: str) -> tuple[dict[str, dict], dict[str, Any]]:
    """(rows, plans): a row per task with its plan's stage kinds or why it is not covered."""
    from . import Unsupported, plan_task

    rows: dict[str, dict] = {}
    plans: dict[str, Any] = {}
    for task in tasks:
        try:
            plan = plan_task(task, backend)
        except Unsupported as exc:
            rows[task.id] = {"level": task.level, "not_covered": str(exc)}
            continue
        except Exception as exc:  # noqa: BLE001 - a task that fails to trace is not covered
            rows[task.id] = {"level": task.level, "not_covered": f"{type(exc).__name__}: {str(exc)[:200]}"}
            continue
        plans[task.id] = plan
        rows[task.id] = {"level": task.level, "stages": plan.stage_kinds}
    return rows, plans


def source_sha(source: str) -> str:
    """What a resumed verdict must match: the sha256 of the candidate's whole text (every template's
    source is in it, so a change to any template judges every task again)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def _record_check(row: dict, result, knobs: dict, sha: str) -> None:
    """Phase A: the verdict and the one timed call (no baseline, so no speedup); `sha`: the candidate's."""
    row["a_source_sha"] = sha
    row["a_error_code"] = result.error_code.value
    row["a_correct"] = bool(result.correct)
    row["a_check_ms"] = result.candidate_time.median_ms if result.candidate_time else None
    row["a_knobs"] = knobs
    if not result.correct:
        row["a_message"] = (result.message or "")[:300]


def _record_timed(row: dict, result, knobs: dict, sha: str, seconds: float | None = None) -> None:
    """Phase B: the verdict under the recommended judge, its speedups and candidate median."""
    row["b_source_sha"] = sha
    row["b_error_code"] = result.error_code.value
    row["b_correct"] = bool(result.correct)
    row["b_speedup_vs_eager"] = result.speedup_vs_eager
    row["b_speedup_vs_compile"] = result.speedup_vs_compile
    row["b_ms"] = result.candidate_time.median_ms if result.candidate_time else None
    row["b_eager_ms"] = result.eager_time.median_ms if result.eager_time else None
    row["b_compile_ms"] = result.compile_time.median_ms if result.compile_time else None
    row["b_knobs"] = knobs
    if seconds is not None:
        row["b_seconds"] = round(seconds, 2)
    if not result.correct:
        row["b_message"] = (result.message or "")[:300]
    elif result.flags:
        row["b_flags"] = list(result.flags)


def carried_fields(previous: dict[str, dict], task_id: str, knobs: dict, free: set[str], phase: str,
             sha: str) -> dict:
    """The fields of phase `phase` ("a" or "b") that a previous run's row holds for `task_id` when it
    judged the same candidate text (`sha`, its `source_sha`) in the same configuration, else {}. A knob the
    earlier run did not have yet counts as the same when the plan cannot change it (`free` names the
    knobs it can). A row without a sha is never carried."""
    row = previous.get(task_id) or {}
    old = row.get(f"{phase}_knobs")
    if f"{phase}_error_code" not in row or not isinstance(old, dict):
        return {}
    if row.get(f"{phase}_source_sha") != sha:
        return {}
    if any(old.get(k, v) != v for k, v in knobs.items()) or any(k not in old for k in free):
        return {}
    return {k: v for k, v in row.items() if k.startswith(f"{phase}_")}


def run_sweep(evaluator, tasks, *, backend: str, time_budget_s: float, phase_a_share: float = 0.75,
              tune: int = 3, judge_config=None, write: Callable[[str, dict], None] | None = None,
              log: Callable[[str], None] = print, previous: dict[str, dict] | None = None) -> dict[str, dict]:
    """Plan `tasks`, run phase A (check judge) and phase B (`judge_config`, default `EvalConfig()`)
    and the tuning within `time_budget_s` seconds from the call; returns the rows (module docstring).
    `write(phase, rows)` is called after every verdict. Phase B starts a task only when the time
    left exceeds the longest phase B task so far, so the run ends near the budget. `previous` (the
    `tasks` of an earlier result) resumes it: a phase A or B verdict it holds for the configuration
    judged now (same knobs and the same candidate text, by sha256) is kept, not judged again."""
    from tqdm import tqdm

    from . import KnobSpace, render_candidate
    from cuda_gym.eval import EvalConfig

    started = time.monotonic()
    deadline = started + time_budget_s
    phase_a_end = started + phase_a_share * time_budget_s
    judge_config = judge_config or EvalConfig()
    config_a = judge_config.for_check()
    write = write or (lambda phase, rows: None)
    by_id = {t.id: t for t in tasks}

    rows, plans = plan_all(tasks, backend)
    log(f"planned {len(plans)}/{len(tasks)} tasks in {time.monotonic() - started:.0f} s")
    write("planned", rows)

    # Phase A: every covered task's default configuration under the check judge, all queued at once.
    previous = previous or {}
    sources: dict[str, tuple[str, dict, str]] = {}  # task -> (candidate text, knobs, its sha)
    futures = {}
    for task_id in round_robin(plans):
        space = KnobSpace.for_plan(plans[task_id])
        knobs = space.values(space.default())
        source = render_candidate(plans[task_id], knobs)
        sha = source_sha(source)
        sources[task_id] = (source, knobs, sha)
        carried = carried_fields(previous, task_id, knobs, space.free_names(), "a", sha)
        if carried:
            rows[task_id].update(carried)
            rows[task_id].update(carried_fields(previous, task_id, knobs, space.free_names(), "b", sha))
            continue
        futures[evaluator.submit(by_id[task_id], source, backend=backend, config=config_a)] = task_id
    if previous:
        log(f"resumed: {len(plans) - len(futures)} phase A verdicts and "
            f"{sum('b_error_code' in r for r in rows.values())} phase B verdicts kept")
    pending = set(futures)
    with tqdm(total=len(futures), desc="phase A (check)", unit="task", file=sys.stdout) as bar:
        while pending and time.monotonic() < phase_a_end:
            done, pending = wait(pending, timeout=max(0.1, phase_a_end - time.monotonic()),
                                 return_when=FIRST_COMPLETED)
            for future in done:
                _, knobs, sha = sources[futures[future]]
                _record_check(rows[futures[future]], future.result(), knobs, sha)
            bar.update(len(done))
            if done:
                write("A", rows)
        # At the cut: drop what has not started; what is running finishes and is recorded.
        running = {f for f in pending if not f.cancel()}
        for future in running:
            _, knobs, sha = sources[futures[future]]
            _record_check(rows[futures[future]], future.result(), knobs, sha)
            bar.update(1)
    for future in pending - running:
        rows[futures[future]]["a_not_judged"] = "phase A's share of the time budget ended first"
    write("A", rows)
    log(f"phase A: {sum('a_error_code' in r for r in rows.values())} judged, "
        f"{sum(bool(r.get('a_correct')) for r in rows.values())} correct, {time.monotonic() - started:.0f} s")

    # Phase B: the recommended judge, one task at a time, alternating groups so each is represented.
    order = round_robin([task_id for task_id, row in rows.items() if row.get("a_correct")
                         and "b_error_code" not in row])
    longest = 0.0
    for task_id in tqdm(order, desc="phase B (timed)", unit="task", file=sys.stdout):
        if deadline - time.monotonic() < max(longest, 1.0):
            break
        source, knobs, sha = sources[task_id]
        t0 = time.monotonic()
        result = evaluator.evaluate(by_id[task_id], source, backend=backend, config=judge_config)
        longest = max(longest, time.monotonic() - t0)
        _record_timed(rows[task_id], result, knobs, sha, time.monotonic() - t0)
        write("B", rows)
    log(f"phase B: {sum('b_error_code' in r for r in rows.values())} judged with the recommended judge, "
        f"{time.monotonic() - started:.0f} s")

    # Tuning: random configurations against the default, under the phase B judge (baselines cached).
    rng = random.Random(0)
    for task_id in order:
        row = rows[task_id]
        if tune <= 0 or deadline - time.monotonic() < max(longest, 1.0):
            break
        if not row.get("b_correct"):
            continue
        space = KnobSpace.for_plan(plans[task_id])
        tried = {space.default()}
        best = row.get("b_speedup_vs_compile") or row.get("b_speedup_vs_eager") or 0.0
        for _ in range(tune):
            if deadline - time.monotonic() < max(longest, 1.0):
                break
            action = space.sample(rng)
            if action in tried:
                continue
            tried.add(action)
            knobs = space.values(action)
            source = render_candidate(plans[task_id], knobs)
            result = evaluator.evaluate(by_id[task_id], source, backend=backend, config=judge_config)
            speed = result.speedup_vs_compile or result.speedup_vs_eager or 0.0
            row.setdefault("tuned", []).append({"knobs": knobs, "error_code": result.error_code.value,
                                                "speedup_vs_eager": result.speedup_vs_eager,
                                                "speedup_vs_compile": result.speedup_vs_compile})
            if result.correct and speed > best:
                best = speed
                _record_timed(row, result, knobs, source_sha(source))
        write("tune", rows)
    return rows
