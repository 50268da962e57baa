"""What the benchmarks that compare candidate forms (triton_gpu.py, cupy_gpu.py) share: judging a
form's reference solutions, and a candidate's cold compile-plus-first-call seconds measured in a
fresh process, with their medians."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs in a fresh process: build the candidate module, make the model, run the first forward.
FIRST_CALL = r'''
import json, sys, time, types, linecache
import torch
from cuda_gym.tasks import get_task
from cuda_gym.tasks.task import load_task_namespace
task_id, path, backend = sys.argv[1:4]
task = get_task(task_id)
namespace = load_task_namespace(task.source, task.sizes_for(backend), task.id)
torch.manual_seed(0)
inputs = [x.to(backend) if isinstance(x, torch.Tensor) else x for x in namespace["get_inputs"]()]
init = namespace["get_init_inputs"]()
source = open(path).read()
def sync():
    if backend == "cuda":
        torch.cuda.synchronize()
sync()
started = time.perf_counter()
module = types.ModuleType("candidate")
linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)
exec(compile(source, path, "exec"), module.__dict__)
built = time.perf_counter()
with torch.device(backend):
    model = module.ModelNew(*init).to(backend).eval()
with torch.no_grad():
    model(*inputs)
sync()
done = time.perf_counter()
# After the window: the output beside the task's reference on the same input and weights (one draw,
# the judge's fp32 elementwise tolerance), so a measured form is also seen to compute the right thing.
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
with torch.device(backend):
    reference = namespace["Model"](*init).to(backend).eval()
try:
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        got, want = model(*inputs), reference(*inputs)
    matches = bool(torch.allclose(got.float(), want.float(), rtol=1e-3, atol=1e-4))
except Exception:  # weights named otherwise, or an output that is not one tensor: not compared
    matches = None
print(json.dumps({"build_s": built - started, "first_call_s": done - built, "total_s": done - started,
                  "matches_reference": matches}), flush=True)
# The measurement is out; skip the interpreter's teardown (atexit handlers, module unloading), which
# no form's user waits for and which costs the benchmark its time limit if a library is slow at exit.
import os
os._exit(0)
'''


def cold_env(cold: str) -> dict[str, str]:
    """The environment with every kernel cache a form can hit under the empty folder `cold`:
    cuda_gym's kernels and precompiled headers, Triton's, CuPy's, torch extensions'."""
    return dict(os.environ, CUDA_GYM_KERNEL_CACHE=f"{cold}/kernels", CUDA_GYM_PCH_DIR=f"{cold}/pch",
                TRITON_CACHE_DIR=f"{cold}/triton", CUPY_CACHE_DIR=f"{cold}/cupy", TORCH_EXTENSIONS_DIR=f"{cold}/inline")


def first_call_seconds(task_id: str, path: Path, backend: str, extra_env: dict[str, str] | None = None) -> dict:
    """One cold measurement in a fresh process with every cache empty (`cold_env`) and `extra_env`:
    {"build_s", "first_call_s", "total_s", "process_wall_s", "matches_reference"}, or {"error": the
    process's stderr tail}."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cuda_gym_cold_") as cold:
        proc = subprocess.run([sys.executable, "-c", FIRST_CALL, task_id, str(path), backend],
                              env=cold_env(cold) | (extra_env or {}), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    # The process's whole wall time beside the measured window: what the benchmark's own run costs.
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_wall_s": round(time.perf_counter() - started, 2)}


def medians(samples: list[dict]) -> dict:
    """The medians of the measurements that did not fail (None where all did)."""
    good = [s for s in samples if "error" not in s]
    return {f"median_{key}": statistics.median(s[key] for s in good) if good else None
            for key in ("total_s", "build_s", "first_call_s")}


def judge_files(backend: str, files: list[tuple], cache_dir: str) -> list[dict]:
    """Each (task, candidate file) judged by one evaluator with the default EvalConfig, all submitted
    at once so their builds overlap: file, verdict, time, baselines, speedups, compile and eval
    seconds, flags and kernels, in the order given."""
    from cuda_gym.eval import EvalConfig, Evaluator

    rows = []
    with Evaluator(backend, EvalConfig(), cache_dir=cache_dir) as evaluator:
        futures = [evaluator.submit(task, path.read_text()) for task, path in files]
        for (task, path), future in zip(files, futures):
            result = future.result()
            path = path.resolve()
            rows.append({"task_id": task.id, "file": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                         "verdict": result.error_code.value, "message": result.message[:300],
                         "language": result.language, "time_ms": result.candidate_time.median_ms
                         if result.candidate_time else None, **result.baseline_ms(),
                         "speedup_vs_eager": result.speedup_vs_eager, "speedup_vs_compile": result.speedup_vs_compile,
                         "compile_seconds": result.compile_seconds, "eval_seconds": result.eval_seconds,
                         "flags": result.flags, "forbidden_ops": result.forbidden_ops, "kernels": result.kernels})
            print(result.summary(), flush=True)
    return rows


def judge_solutions(backend: str, tasks: list, cache_dir: str, language: str) -> list[dict]:
    """Each task's `language` reference solution judged (`judge_files`)."""
    from cuda_gym.tasks import solution_path

    return judge_files(backend, [(task, solution_path(task, backend, language=language)) for task in tasks], cache_dir)
