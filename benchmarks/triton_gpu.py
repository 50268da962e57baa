"""Triton candidates on the GPU, side by side with the recommended CUDA form, in one run:

  solutions   every shipped Triton reference solution judged by a fresh evaluator with the default
              EvalConfig (strict, fp32, eager and torch.compile baselines): verdict, time, speedups,
              compile seconds, kernels;
  latency     compile-plus-first-call seconds of each task's Triton solution and of its CUDA
              solution (cuda_gym.native.load_kernels), each in a fresh process with empty kernel
              and Triton caches, `--repeats` times; the medians side by side.

The Triton hostile files are judged by tests/test_hostile.py (`-m gpu -k triton`): see
benchmarks/triton_gpu.sh. Writes benchmarks/results/triton_gpu/<device>/<date>.json (or --out).
`--backend cpu` runs the same on the CPU (Triton's interpreter; timings there mean nothing): a
check of this script where no GPU is.

    python benchmarks/triton_gpu.py --backend cuda --repeats 3 --out $OUT/triton_gpu.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from candidate_forms import first_call_seconds as cold_first_call, judge_solutions, medians  # noqa: E402


def first_call_seconds(task_id: str, path: Path, backend: str) -> dict:
    """One cold measurement (candidate_forms: a fresh process, every cache empty); Triton's
    interpreter on the cpu backend."""
    return cold_first_call(task_id, path, backend, {"TRITON_INTERPRET": "1"} if backend == "cpu" else None)


def latency(backend: str, tasks: list, repeats: int, rows: list, save) -> None:
    """Appends a row per task to `rows` and saves the record after each (a call cut by its time limit
    keeps the tasks measured so far)."""
    from cuda_gym.tasks import solution_path

    for task in tasks:
        row = {"task_id": task.id}
        for language in ("triton", "cuda"):
            path = solution_path(task, backend, language=language)
            if path is None:
                continue
            samples = [first_call_seconds(task.id, path, backend) for _ in range(repeats)]
            row[language] = {"samples": samples, **medians(samples)}
        print(json.dumps({k: (v if k == "task_id" else v.get("median_total_s")) for k, v in row.items()}), flush=True)
        rows.append(row)
        save()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--repeats", type=int, default=3, help="cold first-call measurements per task and language")
    parser.add_argument("--tasks", help="comma-separated task ids (default: every task with a Triton solution)")
    parser.add_argument("--skip-judging", action="store_true", help="latency only")
    parser.add_argument("--out", help="output JSON (default benchmarks/results/triton_gpu/<device>/<date>.json)")
    args = parser.parse_args()

    import torch
    import triton

    from cuda_gym.tasks import load_suite, solution_path

    tasks = [t for t in load_suite("builtin") if solution_path(t, args.backend, language="triton")]
    if args.tasks:
        tasks = [t for t in tasks if t.id in set(args.tasks.split(","))]
    device = torch.cuda.get_device_name() if args.backend == "cuda" else f"cpu-{os.cpu_count()}core"
    out = Path(args.out) if args.out else (ROOT / "benchmarks" / "results" / "triton_gpu"
                                           / device.replace(" ", "_") / f"{dt.date.today().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": "triton_gpu", "date": dt.date.today().isoformat(), "backend": args.backend, "device": device,
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "note": "CPU: Triton's interpreter, timings mean nothing" if args.backend == "cpu" else "",
        "solutions": [], "all_ok": None, "latency": [],
    }

    def save() -> None:  # after each phase and each latency row: what a time limit cuts short is kept
        out.write_text(json.dumps(record, indent=1) + "\n")

    if not args.skip_judging:
        with tempfile.TemporaryDirectory(prefix="cuda_gym_triton_gpu_") as cache_dir:
            record["solutions"] = judge_solutions(args.backend, tasks, cache_dir, "triton")
        record["all_ok"] = all(r["verdict"] == "OK" for r in record["solutions"])
        save()
    latency(args.backend, tasks, args.repeats, record["latency"], save)
    save()
    print(f"wrote {out}")
    return 0 if args.skip_judging or record["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
