"""RayEvaluator throughput against the local Evaluator on one mixed stream, and its scaling over actors.

Measured side by side in one call on one machine:
  parity   the local Evaluator, then a RayEvaluator with 1 actor, each on its own copy of the mixed
           stream (fresh variants: both build every candidate): candidates per hour and the ratio
           Ray / local (target: at least 0.9). With --rounds > 1 the two alternate.
  scaling  a RayEvaluator with N actors for each N of --actors the cluster can hold (one GPU per
           actor on cuda): a stream of --stream x N candidates, candidates per hour, and the
           scaling efficiency rate(N) / (N x rate(1)) (target: at least 0.85).
The stream is benchmarks/evaluation_speed.py's: the built-in tasks that have a reference solution,
as new legitimate variants, wrong, crashing and non-compiling candidates (4:2:1:1). Every verdict is
checked against what its kind must get. Baselines are measured (and shared through the cache
directory) before any clock starts, as in a long RL run.

    python benchmarks/ray_throughput.py --backend cuda --stream 32 --actors 1,2,4,8 --out "$OUT"

Writes <out>/ray_throughput_<kind>_<date>.json, or ray_scaling_<kind>_<date>.json when more than one
actor count was measured (<kind>: backend, device and GPU count, e.g. cuda_h200_x8).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evaluation_speed as speed  # noqa: E402 - the mixed stream's builders

from cuda_gym.eval import ErrorCode, EvalConfig, Evaluator  # noqa: E402
from cuda_gym.tasks import solution_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KINDS = ["legit", "legit", "legit", "legit", "wrong", "wrong", "crash", "compile_error"]
EXPECTED = {"legit": ErrorCode.OK, "wrong": ErrorCode.INCORRECT, "crash": ErrorCode.RUNTIME_ERROR,
            "compile_error": ErrorCode.COMPILE_ERROR}


def mixed_stream(tasks: list, backend: str, count: int, tag: str) -> list[tuple[str, object, str]]:
    """(kind, task, candidate) x count; `tag` makes every candidate's content new (built afresh)."""
    stream = []
    for index in range(count):
        task = tasks[index % len(tasks)]
        source = speed.variant(solution_path(task, backend).read_text(), f"{tag}_{index}")
        kind = KINDS[index % len(KINDS)]
        candidate = {"legit": source, "wrong": source + speed.WRONG_SUFFIX, "crash": source + speed.CRASH_SUFFIX,
                     "compile_error": speed.broken(source)}[kind]
        stream.append((kind, task, candidate))
    return stream


def run_stream(evaluator, stream: list, label: str) -> dict:
    """Submit the whole stream at once and wait for every verdict; the clock covers exactly that."""
    started = time.perf_counter()
    futures = [(kind, task, evaluator.submit(task, candidate)) for kind, task, candidate in stream]
    verdicts: Counter = Counter()
    unexpected = []
    compile_s, eval_s = [], []
    for kind, task, future in tqdm(futures, desc=label, unit="cand"):
        result = future.result()
        verdicts[f"{kind}:{result.error_code.value}"] += 1
        if result.error_code is not EXPECTED[kind]:
            unexpected.append({"kind": kind, "task": task.id, "verdict": result.error_code.value,
                               "message": result.message[:300]})
        if result.compiled and not result.build_cached:
            compile_s.append(result.compile_seconds)
        if result.eval_seconds:
            eval_s.append(result.eval_seconds)
    seconds = time.perf_counter() - started
    return {"candidates": len(stream), "seconds": round(seconds, 3),
            "candidates_per_hour": round(len(stream) / seconds * 3600, 1), "verdicts": dict(verdicts),
            "all_verdicts_as_expected": not unexpected, "unexpected": unexpected,
            "compile_s_median": statistics.median(compile_s) if compile_s else None,
            "eval_stage_s_median": statistics.median(eval_s) if eval_s else None}


def dispatch_overhead(evaluator, task, count: int) -> dict:
    """Per-candidate cost of the path around the judging: `count` malformed actions (INVALID_ACTION
    at once, nothing built or run) submitted together; the rate one driver can hand out candidates."""
    started = time.perf_counter()
    futures = [evaluator.submit(task, f"not python ( {index}") for index in range(count)]
    codes = Counter(future.result().error_code.value for future in futures)
    seconds = time.perf_counter() - started
    return {"candidates": count, "seconds": round(seconds, 4), "per_candidate_ms": round(seconds / count * 1000, 3),
            "verdicts": dict(codes), "all_invalid_action": codes == Counter({"INVALID_ACTION": count})}


def warm(evaluator, tasks: list) -> float:
    """Baselines of every task (cached in the shared cache directory) and warm spares; seconds taken."""
    started = time.perf_counter()
    for task in tqdm(tasks, desc="baselines", unit="task"):
        evaluator.baselines(task)
    evaluator.wait_until_warm()
    return round(time.perf_counter() - started, 2)


def kind_name(backend: str, device: str, gpus: int) -> str:
    if backend == "cpu":
        return f"cpu_x{os.cpu_count()}"
    slug = re.sub(r"[^a-z0-9]+", "_", device.lower().replace("nvidia", "")).strip("_") or "gpu"
    return f"cuda_{slug}_x{gpus}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--stream", type=int, default=32, help="candidates per actor in each stream")
    parser.add_argument("--actors", default="1", help="actor counts to measure, e.g. 1,2,4,8 (1 is always measured)")
    parser.add_argument("--rounds", type=int, default=1, help="local / 1-actor Ray rounds, alternating")
    parser.add_argument("--levels", default="1,2,3", help="task levels in the stream")
    parser.add_argument("--no-compile-baseline", action="store_true", help="only the eager baseline")
    parser.add_argument("--baseline-workers", type=int, default=1,
                        help="fresh workers per baseline (measured before the clocks; 1 keeps the warm-up short)")
    parser.add_argument("--overhead", type=int, default=200,
                        help="malformed actions sent through local and 1-actor Ray evaluators (dispatch cost)")
    parser.add_argument("--cache-dir", default=None, help="default: a fresh temporary directory")
    parser.add_argument("--out", default=str(ROOT / "cuda_gym_results"))
    args = parser.parse_args()
    import ray
    import torch

    from cuda_gym.eval.distributed import RayEvaluator

    counts = sorted({1, *(int(n) for n in args.actors.split(","))})
    config = EvalConfig(baselines=("eager",) if args.no_compile_baseline else ("eager", "compile"),
                        baseline_workers=args.baseline_workers)
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="cg-ray-")
    tasks = speed.solved_tasks(args.backend, tuple(int(x) for x in args.levels.split(",")))
    date = dt.date.today().isoformat()
    report: dict = {"benchmark": "ray_throughput", "date": date, "backend": args.backend,
                    "stream": {"per_actor": args.stream, "tasks": len(tasks), "kinds": dict(Counter(KINDS))},
                    "config": {"baselines": list(config.baselines), "baseline_workers": config.baseline_workers,
                               "timing_reps": config.timing_reps, "correctness_trials": config.correctness_trials},
                    "local": [], "ray": {}}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def write() -> Path:
        measured = sorted(int(n) for n in report["ray"])
        name = "ray_scaling" if len(measured) > 1 else "ray_throughput"
        path = out_dir / f"{name}_{report.get('kind', args.backend)}_{date}.json"
        path.write_text(json.dumps(report, indent=1))
        return path

    # Our objects are a few KB (sources, verdicts): a small object store starts fast and fits any /dev/shm.
    ray.init(include_dashboard=False, log_to_driver=True, object_store_memory=2 * 2**30)
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    report["versions"] = {"torch": torch.__version__, "ray": ray.__version__, "python": platform.python_version()}
    report["cluster"] = {"cpus": int(resources.get("CPU", 0)), "gpus": gpus}
    feasible = [n for n in counts if args.backend == "cpu" or n <= gpus]
    report["skipped_actor_counts"] = {str(n): f"needs {n} GPUs, the machine has {gpus}"
                                      for n in counts if n not in feasible}

    def ray_run(actors: int, label: str, size: int) -> dict:
        started = time.perf_counter()
        with RayEvaluator(args.backend, actors, config=config, cache_dir=cache_dir) as evaluator:
            start_s = round(time.perf_counter() - started, 2)
            warm_s = warm(evaluator, tasks)
            row = run_stream(evaluator, mixed_stream(tasks, args.backend, size, f"{label}_{os.getpid()}"), label)
            if actors == 1 and args.overhead:
                row["dispatch_overhead"] = dispatch_overhead(evaluator, tasks[0], args.overhead)
            stats = evaluator.stats()
            row |= {"actors": actors, "actor_start_s": start_s, "warm_s": warm_s,
                    "build_workers_per_actor": evaluator.build_workers, "jobs_per_actor": evaluator.jobs_per_actor,
                    "cpus_per_actor": evaluator.cpus_per_actor, "device": evaluator.device_name,
                    "actor_deaths": stats.get("actor_deaths", 0), "baseline_store": stats["baselines"] | {
                        "measured_by_key": len(stats["baselines"].get("measured_by_key", {}))}}
        return row

    def local_run(label: str) -> dict:
        with Evaluator(args.backend, config, cache_dir=cache_dir) as local:
            report.setdefault("hardware", {"device": local.device_name, "cpu_count": os.cpu_count(),
                                           "machine": platform.machine()})
            report.setdefault("kind", kind_name(args.backend, local.device_name, gpus))
            report["held_timing"] = local.held_timing
            warm_s = warm(local, tasks)
            row = run_stream(local, mixed_stream(tasks, args.backend, args.stream, f"{label}_{os.getpid()}"), label)
            if args.overhead:
                row["dispatch_overhead"] = dispatch_overhead(local, tasks[0], args.overhead)
            return row | {"warm_s": warm_s, "build_workers": local.build_workers}

    for round_index in range(args.rounds):  # local and 1-actor Ray alternate; only one evaluator exists at a time
        report["local"].append(local_run(f"local{round_index}"))
        write()
        report["ray"].setdefault("1", []).append(ray_run(1, f"ray1r{round_index}", args.stream))
        write()
    for actors in [n for n in feasible if n > 1]:
        report["ray"][str(actors)] = [ray_run(actors, f"ray{actors}", args.stream * actors)]
        write()

    local_rate = statistics.median(row["candidates_per_hour"] for row in report["local"])
    one_rate = statistics.median(row["candidates_per_hour"] for row in report["ray"]["1"])
    report["parity"] = {"local_candidates_per_hour": local_rate, "ray_1_actor_candidates_per_hour": one_rate,
                        "ratio_ray_to_local": round(one_rate / local_rate, 3), "target_ratio": 0.9}
    report["scaling"] = {n: {"candidates_per_hour": rows[0]["candidates_per_hour"],
                             "efficiency": round(rows[0]["candidates_per_hour"] / (int(n) * one_rate), 3)}
                         for n, rows in report["ray"].items()}
    rows = report["local"] + [row for rows in report["ray"].values() for row in rows]
    report["all_verdicts_as_expected"] = all(row["all_verdicts_as_expected"] and row.get(
        "dispatch_overhead", {"all_invalid_action": True})["all_invalid_action"] for row in rows)
    path = write()
    ray.shutdown()
    print(json.dumps({key: report[key] for key in ("parity", "scaling", "all_verdicts_as_expected",
                                                   "skipped_actor_counts")}, indent=1))
    print(f"wrote {path}")
    return 0 if report["all_verdicts_as_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
