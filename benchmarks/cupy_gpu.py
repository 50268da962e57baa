"""CuPy candidates on the GPU, side by side with the native and load_inline forms, in one run:

  solutions   every shipped CuPy reference solution judged by a fresh evaluator with the default
              EvalConfig (strict, fp32, eager and torch.compile baselines): verdict, time, speedups,
              compile seconds, kernels;
  latency     cold compile-plus-first-call seconds (a fresh process, empty kernel, CuPy and torch
              extension caches) of each task's CuPy solution, its native solution
              (cuda_gym.native.load_kernels) and, where one exists, a KernelBench-form load_inline
              candidate for the task (`LOAD_INLINE`); `--repeats` times each (`--inline-repeats` for
              load_inline, whose cold build takes close to a minute); the medians side by side;
  inline      (`--judge-inline`) the load_inline candidates of the chosen tasks judged like the
              solutions: the check that a form measured for its latency is also a correct kernel.

The JSON is written after each phase, so a run cut short keeps what it measured. The CuPy hostile
files are judged by tests/test_hostile.py (`-m gpu -k cupy`): see benchmarks/cupy_gpu.sh. Writes
benchmarks/results/cupy_gpu/<device>/<date>.json (or --out). `--dry-run` judges and measures
nothing: it writes the plan (tasks, the file of each form, the runs) and checks that every file
exists, with or without CuPy or a GPU.

    python benchmarks/cupy_gpu.py --backend cuda --repeats 3 --inline-repeats 1 --out $OUT/cupy_gpu.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from candidate_forms import first_call_seconds, judge_files, judge_solutions, medians  # noqa: E402

FORMS = ("cupy", "native", "load_inline")
# KernelBench-form (load_inline) candidates of the CuPy-solved tasks, in the repository.
LOAD_INLINE = {
    "builtin/L1/gelu": ROOT / "benchmarks" / "candidates" / "kernelbench_gelu_cuda.py",
    "builtin/L1/layer_norm": ROOT / "benchmarks" / "candidates" / "kernelbench_layer_norm_cuda.py",
    "builtin/L1/softmax": ROOT / "tests" / "inline_candidates" / "softmax_warp_reduce.py",
    "builtin/L1/sum_dim": ROOT / "benchmarks" / "candidates" / "kernelbench_sum_dim_cuda.py",
    "builtin/L2/bias_scale_sigmoid": ROOT / "tests" / "inline_candidates" / "bias_scale_sigmoid_struct.py",
    "builtin/L2/residual_layer_norm": ROOT / "benchmarks" / "candidates" / "kernelbench_residual_layer_norm_cuda.py",
    "builtin/L2/rms_norm_silu": ROOT / "benchmarks" / "candidates" / "kernelbench_rms_norm_silu_cuda.py",
}



def form_paths(task, backend: str) -> dict[str, Path]:
    """The candidate file of each form for a task (forms without one are left out)."""
    from cuda_gym.tasks import solution_path

    paths = {"cupy": solution_path(task, backend, language="cupy"), "native": solution_path(task, backend),
             "load_inline": LOAD_INLINE.get(task.id)}
    return {form: path for form, path in paths.items() if path is not None}


def latency(backend: str, tasks: list, repeats: int, inline_repeats: int, on_row=None) -> list[dict]:
    rows = []
    for task in tasks:
        row = {"task_id": task.id}
        for form, path in form_paths(task, backend).items():
            count = inline_repeats if form == "load_inline" else repeats
            if count <= 0:
                continue
            samples = [first_call_seconds(task.id, path, backend) for _ in range(count)]
            row[form] = {"file": str(path.relative_to(ROOT)), "samples": samples, **medians(samples)}
        print(json.dumps({k: (v if k == "task_id" else v.get("median_total_s")) for k, v in row.items()}), flush=True)
        rows.append(row)
        if on_row:
            on_row(rows)
    return rows


def summary(rows: list[dict]) -> dict:
    """Per form: the median over tasks of the per-task median cold seconds, and the tasks it covers."""
    out = {}
    for form in FORMS:
        values = [r[form]["median_total_s"] for r in rows if r.get(form, {}).get("median_total_s") is not None]
        out[form] = {"tasks": len(values), "median_total_s": statistics.median(values) if values else None}
    return out


def plan(backend: str, tasks: list, repeats: int, inline_repeats: int) -> dict:
    """What a run would do, and whether every file it needs exists."""
    rows, missing = [], []
    for task in tasks:
        paths = form_paths(task, backend)
        missing += [f"{task.id}: {form} {p}" for form, p in paths.items() if not p.exists()]
        rows.append({"task_id": task.id, **{form: str(p.relative_to(ROOT)) for form, p in paths.items()}})
    runs = sum((inline_repeats if form == "load_inline" else repeats)
               for row in rows for form in FORMS if form in row)
    return {"tasks": rows, "cold_runs": runs, "missing": missing}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--repeats", type=int, default=3, help="cold first-call measurements per task, CuPy and native")
    parser.add_argument("--inline-repeats", type=int, default=1, help="the same for load_inline (0: leave it out)")
    parser.add_argument("--tasks", help="comma-separated task ids (default: every task with a CuPy solution)")
    parser.add_argument("--skip-judging", action="store_true", help="latency only")
    parser.add_argument("--skip-latency", action="store_true", help="judging only")
    parser.add_argument("--judge-inline", action="store_true", help="also judge the tasks' load_inline candidates")
    parser.add_argument("--dry-run", action="store_true", help="write the plan only: no evaluation, no timing")
    parser.add_argument("--out", help="output JSON (default benchmarks/results/cupy_gpu/<device>/<date>.json)")
    args = parser.parse_args()

    from cuda_gym.tasks import load_suite, solution_path

    # The CuPy solutions are for the cuda backend; a CPU dry run plans with them.
    tasks = [t for t in load_suite("builtin", levels=(1, 2)) if solution_path(t, "cuda", language="cupy")]
    if args.tasks:
        wanted = set(args.tasks.split(","))
        tasks = [t for t in tasks if t.id in wanted]
    record = {"benchmark": "cupy_gpu", "date": dt.date.today().isoformat(), "backend": args.backend,
              "python": platform.python_version(), "plan": plan("cuda", tasks, args.repeats, args.inline_repeats)}
    if args.dry_run:
        device = f"{args.backend}-dry-run"
    else:
        if args.backend != "cuda":
            parser.error("CuPy kernels run on a GPU only: --backend cpu needs --dry-run")
        import cupy
        import torch

        device = torch.cuda.get_device_name()
        record.update(torch=torch.__version__, cupy=cupy.__version__, cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
                      nvrtc=".".join(map(str, cupy.cuda.nvrtc.getVersion())))
    record["device"] = device
    out = Path(args.out) if args.out else (ROOT / "benchmarks" / "results" / "cupy_gpu"
                                           / device.replace(" ", "_") / f"{record['date']}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        out.write_text(json.dumps(record, indent=1) + "\n")

    write()
    if args.dry_run:
        print(json.dumps(record["plan"], indent=1))
        print(f"wrote {out}")
        return 1 if record["plan"]["missing"] else 0
    if not args.skip_judging:
        with tempfile.TemporaryDirectory(prefix="cuda_gym_cupy_gpu_") as cache_dir:
            record["solutions"] = judge_solutions(args.backend, tasks, cache_dir, "cupy")
        record["all_ok"] = all(r["verdict"] == "OK" for r in record["solutions"])
        write()

    if args.judge_inline:
        with tempfile.TemporaryDirectory(prefix="cuda_gym_inline_gpu_") as cache_dir:
            inline = [(task, LOAD_INLINE[task.id]) for task in tasks if task.id in LOAD_INLINE]
            record["load_inline_judged"] = judge_files("cuda", inline, cache_dir)
        record["load_inline_all_ok"] = all(r["verdict"] == "OK" for r in record["load_inline_judged"])
        write()

    def partial(rows: list[dict]) -> None:
        record["latency"], record["latency_summary"] = rows, summary(rows)
        write()

    if not args.skip_latency:
        partial(latency(args.backend, tasks, args.repeats, args.inline_repeats, on_row=partial))
        print(json.dumps(record["latency_summary"]))
    print(f"wrote {out}")
    judged_ok = (args.skip_judging or record.get("all_ok")) and record.get("load_inline_all_ok", True)
    return 0 if judged_ok else 1


if __name__ == "__main__":
    sys.exit(main())
