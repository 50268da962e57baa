"""Why the reference, submitted as its own candidate, does not time at 1.00x on some tasks.

Phase 1 (`--steps`): for each task, one fresh process builds the task as a worker does, then times
the reference with the worker's own timing code after each step that an eval worker takes and a
baseline worker does not (cumulative, in the eval worker's order). The step after which the time
moves is the cause. Phase 2 (`--identity`): the real Evaluator judges the identity candidate
(`class ModelNew(Model): pass`, permissive policy, eager baseline) on the same tasks.

    CUDA_GYM_KERNELBENCH=.kb python benchmarks/timing_parity.py --tasks kernelbench/L3/9_ResNet18 --out $OUT

Writes timing_parity_<backend>_<date>.json into --out.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, sys, time
from pathlib import Path
import torch
from cuda_gym.eval import output_digest, timing
from cuda_gym.eval.native_calls import count_native_calls
from cuda_gym.eval.recorder import OpRecorder
from cuda_gym.eval.tamper import TamperCheck
from cuda_gym.eval.task_setup import TaskSetup, clone
from cuda_gym.eval.timed_calls import Audit, reference_digests, time_model
from cuda_gym.eval.tripwire import prescan_code
from cuda_gym.eval.worker_device import set_precision, sync, warm_up_kernels
from cuda_gym.tasks import get_task

task = get_task(sys.argv[1])
backend = sys.argv[2]
config = {"correctness_trials": 5, "timing_input_sets": 3, "warmup_reps": 3, "timing_reps": 50,
          "timing_min_reps": 10, "timing_budget_s": 1.0, "l2_flush": True, "precision": "fp32",
          "policy": "permissive", "baselines": ["eager"]}
job = {"task_id": task.id, "task_source": task.source, "sizes": task.sizes_for(backend), "seed": 0, "config": config}
rows = []

def measure(step, eval_style=False, audit=None):
    started = time.perf_counter()
    digest = output_digest.DigestMaker(12345)
    if eval_style:
        variants, _ = reference_digests(setup, config, digest)
    else:  # the plain input sets in turn, unrotated
        count = config["warmup_reps"] + config["timing_reps"]
        variants = [(k % len(setup.timing_sets), [0] * len(setup.timing_sets[0])) for k in range(count)]
    stats, flags, _ = time_model(setup.model, setup, backend, config, variants, digest, audit)
    rows.append({"step": step, "median_ms": stats.median_ms, "iqr_ms": stats.iqr_ms, "method": stats.method,
                 "reps": stats.reps, "flags": flags, "seconds": round(time.perf_counter() - started, 2)})

if backend == "cuda":
    torch.cuda.init()
    capability = torch.cuda.get_device_capability()
    os.environ[timing.HOLD_LIBRARY_ENV] = str(timing.build_hold_library(Path("/tmp/cg-parity-hold"), capability))
    warm_up_kernels("cuda")
    timing.prepare_hold()
set_precision("fp32")
setup = TaskSetup(job, backend)
setup.prepare_trials(lambda index, outputs: None)
setup.prepare_timing_sets()
measure("init, as every worker now (no profiler)")
measure("baseline style, eval inputs (variants + probe)", eval_style=True)
prescan_code()
count_native_calls()
tamper = TamperCheck(backend, "permissive")
measure("+ prescan_code, TamperCheck armed (audit hook)", eval_style=True)
measure("+ audits by the dispatch mode alone (the eval worker's timing now)", eval_style=True,
        audit=Audit("permissive"))
measure("baseline style, after those audits")
def recorded_forwards(cross_check):
    for index in range(5):
        inputs = [clone(v) for v in setup.timing_sets[0]]
        with torch.no_grad(), OpRecorder(cross_check=cross_check):
            setup.model(*inputs)
        sync(backend)
recorded_forwards(False)
measure("+ 5 forwards under the recorder's mode alone", eval_style=True)
recorded_forwards(True)
measure("+ 5 forwards under the full recorder (all-threads profiler): the trials", eval_style=True)
if backend == "cuda":
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        setup.model(*[clone(v) for v in setup.timing_sets[0]])
        torch.cuda.synchronize()
    measure("+ a CUDA profiler session (the kernel check)", eval_style=True)
measure("baseline style again, same process")
print(json.dumps({"task_id": task.id, "steps": rows, "tampered": tamper.changes()}))
'''


def steps_for(task_id: str, backend: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", CHILD, task_id, backend], capture_output=True, text=True,
                          env=env, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"task_id": task_id, "error": (done.stderr or done.stdout)[-3000:]}
    return json.loads(lines[-1])


def identity(task_ids: list[str], backend: str) -> list[dict]:
    from cuda_gym.eval import EvalConfig, Evaluator
    from cuda_gym.tasks import get_task

    config = EvalConfig(policy="permissive", baselines=("eager",), baseline_workers=1)
    rows = []
    with Evaluator(backend, config) as evaluator:
        for task_id in task_ids:
            task = get_task(task_id)
            result = evaluator.evaluate(task, task.source + "\n\nclass ModelNew(Model):\n    pass\n")
            rows.append({"task_id": task_id, "error_code": result.error_code.value,
                         "speedup_vs_eager": result.speedup_vs_eager, "flags": result.flags,
                         "candidate_ms": result.candidate_time.median_ms if result.candidate_time else None,
                         "candidate_method": result.candidate_time.method if result.candidate_time else None,
                         "eager_ms": result.eager_time.median_ms if result.eager_time else None,
                         "message": result.message[:300]})
            print(f"identity {task_id}: {rows[-1]['error_code']} x{rows[-1]['speedup_vs_eager']}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True, help="comma-separated task ids")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--no-steps", action="store_true")
    parser.add_argument("--identity", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "cuda_gym_results"))
    args = parser.parse_args()
    task_ids = [t for t in args.tasks.split(",") if t]
    payload: dict = {"date": dt.date.today().isoformat(), "backend": args.backend, "steps": [], "identity": []}
    out = Path(args.out) / f"timing_parity_{args.backend}_{payload['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not args.no_steps:
        for task_id in task_ids:
            started = time.time()
            row = steps_for(task_id, args.backend)
            payload["steps"].append(row)
            out.write_text(json.dumps(payload, indent=1))
            base = next((s["median_ms"] for s in row.get("steps", [])), None)
            print(f"{task_id} ({time.time() - started:.0f} s)" + (f": {row['error'][-300:]}" if "error" in row else ""))
            for step in row.get("steps", []):
                ratio = f"x{step['median_ms'] / base:.2f}" if base else ""
                print(f"   {step['median_ms']:9.3f} ms {ratio:>6} {step['method']:<16} {step['step']} {step['flags'] or ''}")
    if args.identity:
        payload["identity"] = identity(task_ids, args.backend)
        out.write_text(json.dumps(payload, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
