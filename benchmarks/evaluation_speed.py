"""Evaluation speed and timing fidelity, measured side by side in one run on one machine.

Sections (all on the built-in tasks that have a reference solution for the backend):
  latency     per-candidate evaluate() wall time with a warm worker (the spare has finished warming
              up), cached build and baselines
  throughput  a mixed stream (new legitimate variants, wrong, crashing and non-compiling
              candidates) submitted at once: candidates per hour, verdict counts
  fidelity    one candidate evaluated 10 times, each in a fresh worker: spread of its speedup
  env         gymnasium env.step() vs Evaluator.evaluate() on the same cached candidate

    python benchmarks/evaluation_speed.py --backend cuda --sections latency,throughput,fidelity,env

Writes <out>/evaluation_speed_<backend>_<date>.json (default out: cuda_gym_results/; the current
result is kept at benchmarks/results/evaluation_speed/<device>/<date>.json).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from cuda_gym.eval import EvalConfig, Evaluator
from cuda_gym.tasks import get_task, load_suite, solution_path

ROOT = Path(__file__).resolve().parents[1]

WRONG_SUFFIX = '''

_Correct = ModelNew


class ModelNew(_Correct):
    """Deliberately wrong: zeroes the correct output."""

    def forward(self, *args):
        out = super().forward(*args)
        return out.zero_() if isinstance(out, torch.Tensor) else out
'''

CRASH_SUFFIX = '''

_Correct = ModelNew


class ModelNew(_Correct):
    def forward(self, *args):
        raise RuntimeError("deliberate failure")
'''


def _inject(source: str, text: str) -> str:
    """Put `text` at the top of the candidate's first raw-string kernel source."""
    marker = 'r"""' if 'r"""' in source else "r'''"
    return source.replace(marker, marker + "\n" + text + "\n", 1)


def variant(source: str, tag: str) -> str:
    """The same kernel with a different content hash, so it is compiled anew (as in RL)."""
    return _inject(source, f"// variant {tag}")


def broken(source: str) -> str:
    return _inject(source, "this does not compile;")


def solved_tasks(backend: str, levels: tuple[int, ...]) -> list:
    return [t for t in load_suite("builtin", levels=levels) if solution_path(t, backend)]


KERNELBENCH_CANDIDATES = {"cuda": [("builtin/L1/gelu", ROOT / "benchmarks" / "candidates" / "kernelbench_gelu_cuda.py")]}


def section_latency(evaluator: Evaluator, backend: str, repeats: int, levels: tuple[int, ...]) -> dict:
    """The reference solutions (recommended form), then KernelBench-format candidates (load_inline)."""
    rows = {}
    jobs = [(task, task.id, solution_path(task, backend).read_text()) for task in solved_tasks(backend, levels)]
    jobs += [(get_task(task_id), f"{task_id} (load_inline)", path.read_text())
             for task_id, path in KERNELBENCH_CANDIDATES.get(backend, [])]
    for task, name, source in tqdm(jobs, desc="latency"):
        first = evaluator.evaluate(task, source)  # builds, measures and caches the baselines
        seconds = []
        for _ in range(repeats):
            evaluator.wait_until_warm()  # latency with a warm worker; the throughput section runs back to back
            started = time.perf_counter()
            result = evaluator.evaluate(task, source)
            seconds.append(time.perf_counter() - started)
        rows[name] = {"median_s": statistics.median(seconds), "all_s": seconds, "verdict": result.error_code.value,
                         "stage_seconds": result.stage_seconds, "eval_seconds": result.eval_seconds,
                         "first_eval_s": first.eval_seconds + first.compile_seconds,
                         "candidate_ms": result.candidate_time.median_ms if result.candidate_time else None}
    medians = [r["median_s"] for name, r in rows.items() if "(load_inline)" not in name]
    return {"tasks": rows, "median_of_medians_s": statistics.median(medians), "max_median_s": max(medians),
            "note": "median_of_medians_s and max_median_s cover the reference solutions (recommended form)"}


def section_throughput(evaluator: Evaluator, backend: str, count: int) -> dict:
    tasks = solved_tasks(backend, (1, 2, 3))
    stream = []
    kinds = ["legit", "legit", "legit", "legit", "wrong", "wrong", "crash", "compile_error"]
    for index in range(count):
        task = tasks[index % len(tasks)]
        source = solution_path(task, backend).read_text()
        kind = kinds[index % len(kinds)]
        tag = f"{os.getpid()}_{index}"
        if kind == "legit":
            candidate = variant(source, tag)
        elif kind == "wrong":
            candidate = variant(source, tag) + WRONG_SUFFIX
        elif kind == "crash":
            candidate = variant(source, tag) + CRASH_SUFFIX
        else:
            candidate = broken(variant(source, tag))
        stream.append((kind, task, candidate))
    for task in tasks:  # baselines are cached per task before the clock starts, as in a long RL run
        evaluator.baselines(task)
    started = time.perf_counter()
    futures = [(kind, evaluator.submit(task, candidate)) for kind, task, candidate in stream]
    verdicts: Counter = Counter()
    compile_s, eval_s = [], []
    for kind, future in tqdm(futures, desc="throughput"):
        result = future.result()
        verdicts[f"{kind}:{result.error_code.value}"] += 1
        if result.compiled and not result.build_cached:
            compile_s.append(result.compile_seconds)
        if result.eval_seconds:
            eval_s.append(result.eval_seconds)
    elapsed = time.perf_counter() - started
    return {"candidates": count, "seconds": elapsed, "candidates_per_hour": count / elapsed * 3600,
            "verdicts": dict(verdicts), "build_workers": evaluator.build_workers,
            "native_compile_s_median": statistics.median(compile_s) if compile_s else None,
            "eval_stage_s_median": statistics.median(eval_s) if eval_s else None}


def section_fidelity(evaluator: Evaluator, backend: str, repeats: int, task_ids: list[str]) -> dict:
    rows = {}
    for task in [t for t in solved_tasks(backend, (1, 2, 3)) if t.id in task_ids]:
        source = solution_path(task, backend).read_text()
        speedups, times, iqrs, reps, methods, flags, details = [], [], [], [], [], [], []
        for _ in tqdm(range(repeats), desc=f"fidelity {task.id}"):
            # One worker's time per evaluation: the spread of single measurements, unconfirmed.
            result = evaluator.evaluate(task, source, config=evaluator.config.replace(confirm_faster=False))
            if result.ok:
                speedups.append(result.speedup_vs_eager)
                times.append(result.candidate_time.median_ms)
                iqrs.append(result.candidate_time.iqr_ms)
                reps.append(result.candidate_time.reps)
                methods.append(result.candidate_time.method)
                flags.append(result.flags)
                details.append(result.candidate_time.detail)
        if speedups:
            rows[task.id] = {"candidate_ms": times, "iqr_ms": iqrs, "reps": reps, "methods": methods, "flags": flags,
                             "timer_detail": details, "speedup_vs_eager": speedups,
                             "speedup_spread": max(speedups) / min(speedups) - 1,
                             "time_spread": max(times) / min(times) - 1}
    return rows


def section_env(evaluator: Evaluator, backend: str, repeats: int) -> dict:
    import gymnasium as gym

    import cuda_gym  # noqa: F401 - registers the environments

    task = solved_tasks(backend, (1,))[0]
    source = solution_path(task, backend).read_text()
    evaluator.evaluate(task, source)
    env = gym.make("CudaKernel-Builtin-v1", evaluator=evaluator, backend=backend)
    direct, stepped = [], []
    for _ in range(repeats):
        evaluator.wait_until_warm()
        started = time.perf_counter()
        evaluator.evaluate(task, source)
        direct.append(time.perf_counter() - started)
        env.reset(options={"task_id": task.id})
        evaluator.wait_until_warm()
        started = time.perf_counter()
        env.step(source)
        stepped.append(time.perf_counter() - started)
    env.close()
    return {"task": task.id, "evaluate_median_s": statistics.median(direct), "step_median_s": statistics.median(stepped),
            "step_overhead_s": statistics.median(stepped) - statistics.median(direct)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--sections", default="latency,throughput,fidelity,env")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stream", type=int, default=48, help="candidates in the throughput stream")
    parser.add_argument("--fidelity-tasks", default="builtin/L1/softmax,builtin/L2/linear_gelu")
    parser.add_argument("--fidelity-repeats", type=int, default=10)
    parser.add_argument("--levels", default="1,2", help="levels for the latency section")
    parser.add_argument("--no-compile-baseline", action="store_true")
    parser.add_argument("--cache-dir", default=None, help="default: a fresh temporary directory")
    parser.add_argument("--out", default=str(ROOT / "cuda_gym_results"))
    args = parser.parse_args()
    import torch

    config = EvalConfig(baselines=("eager",) if args.no_compile_baseline else ("eager", "compile"))
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="cg-speed-")
    sections = args.sections.split(",")
    report: dict = {}
    date = dt.date.today().isoformat()
    out = Path(args.out) / f"evaluation_speed_{args.backend}_{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with Evaluator(args.backend, config, cache_dir=cache_dir) as evaluator:
        payload = {
            "benchmark": "evaluation_speed",
            "date": date,
            "backend": args.backend,
            "hardware": {"device": evaluator.device_name, "cpu_count": os.cpu_count(), "machine": platform.machine()},
            "versions": {"torch": torch.__version__, "python": platform.python_version()},
            "config": {"baselines": list(config.baselines), "timing_reps": config.timing_reps,
                       "correctness_trials": config.correctness_trials, "held_timing": evaluator.held_timing,
                       "confirm_faster": config.confirm_faster, "fidelity_confirm_faster": False},
        }
        runs = {
            "latency": lambda: section_latency(evaluator, args.backend, args.repeats,
                                               tuple(int(x) for x in args.levels.split(","))),
            "throughput": lambda: section_throughput(evaluator, args.backend, args.stream),
            "fidelity": lambda: section_fidelity(evaluator, args.backend, args.fidelity_repeats,
                                                 args.fidelity_tasks.split(",")),
            "env": lambda: section_env(evaluator, args.backend, args.repeats),
        }
        for name in [n for n in sections if n in runs]:  # in the order asked for
            report[name] = runs[name]()
            # Written after every section, so a run stopped at a time limit keeps what it measured.
            out.write_text(json.dumps({**payload, "sections_done": list(report), **report}, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "latency"}, indent=1)[:4000])
    if "latency" in report:
        print("latency median of medians", report["latency"]["median_of_medians_s"], "max", report["latency"]["max_median_s"])
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
