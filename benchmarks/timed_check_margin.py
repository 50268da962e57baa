"""What the timed calls' output digests need, measured on real reference outputs, and which tasks the
judge's degenerate detector flags.

For each task, as an eval worker sets it up (`task_setup.TaskSetup`: the same draws, the same float64
measurement of the reference's own rounding error), a correct but differently rounded output is
made: the reference's float64 twin on draw 0, cast to the output's dtype. It is compared with the
fp32 reference output twice: whole, as a trial is (`correctness.output_stats`/`judge_stats`, with
the task's widened tolerances), and through the digests of the timed calls (`output_digest.mismatch`)
under `--secrets` different secrets. Per task it records the true relative-norm error, the sketch's
estimate over each secret (min, median, max of estimate / truth), and how many secrets' digests
failed where the whole comparison passed (a false rejection). It also records the degenerate
detector's answer (`correctness.degenerate_reason` over the trial draws' samples and widened
tolerances), as the evaluator computes it.

    CUDA_GYM_KERNELBENCH=/path/to/KernelBench python benchmarks/timed_check_margin.py --suite kernelbench \
        --backend cuda --out margin.json
    python benchmarks/timed_check_margin.py --suite builtin --backend cpu --out margin_cpu.json

Resumable (tasks already in --out are skipped); `--max-minutes` stops between tasks.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path


def measure(task, backend: str, secrets: int) -> dict:
    import numpy as np
    import torch

    from cuda_gym.eval import EvalConfig, output_digest
    from cuda_gym.eval.output_report import describe_outputs, trial_sample_seed
    from cuda_gym.eval.task_setup import TaskSetup
    from cuda_gym.eval.worker_device import set_precision
    from cuda_gym.eval.correctness import degenerate_reason, flatten_outputs, judge_stats, output_stats, tolerance_floor

    config = EvalConfig()
    job = {"task_id": task.id, "task_source": task.source, "sizes": task.sizes_for(backend), "seed": 0,
           "config": {"correctness_trials": config.correctness_trials, "timing_input_sets": config.timing_input_sets,
                      "precision": config.precision, "device_memory_gb": config.device_memory_gb}}
    device = "cuda" if backend == "cuda" else "cpu"
    set_precision(config.precision)  # as every worker does (TF32 off under fp32)
    setup = TaskSetup(job, device)
    samples = []

    def describe(index, outputs):
        arrays, _ = describe_outputs(outputs, trial_sample_seed(job, index))
        samples.append(arrays)

    setup.prepare_trials(describe)
    floors = [[tolerance_floor(error, config) for error in draw] for draw in setup.reference_error]
    row = {"task_id": task.id, "degenerate": degenerate_reason(samples, floors, config),
           "reference_error_skipped": setup.reference_error_skipped}
    reference = setup.reference_outputs[0] if setup.reference_outputs and setup.reference_outputs[0] is not None \
        else setup.reference_output(0)
    try:
        with torch.no_grad():
            twin = copy.deepcopy(setup.model).double()
            inputs = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                      for v in setup.draw(0).inputs]
            truth = [torch.as_tensor(o).to(r.dtype) for o, r in zip(flatten_outputs(twin(*inputs)), reference)]
            del twin, inputs
    except Exception as exc:  # noqa: BLE001 - some references refuse float64
        row["skipped"] = f"float64: {type(exc).__name__}: {exc}"[:300]
        return row
    floor = floors[0][0] if floors and floors[0] else None
    outputs = []
    for position, (out, ref) in enumerate(zip(truth, reference)):
        if not ref.is_floating_point():
            continue
        stats = output_stats(out, ref, config, floor)
        whole = judge_stats(stats, "output", ref.numel(), config, floor)
        digest_failures, ratios = 0, []
        for secret in range(secrets):
            maker = output_digest.DigestMaker(secret)
            got, want = maker([out], 0), maker([ref], 0)
            failure = output_digest.mismatch(got, want, config, floor)
            digest_failures += bool(failure) and not whole
            base = output_digest.HEADER
            sketch = got[base:base + output_digest.SKETCH_BUCKETS] - want[base:base + output_digest.SKETCH_BUCKETS]
            true_sq = float(stats["norm"] * np.sqrt(want[output_digest.HEADER - 1])) ** 2
            if true_sq > 0:
                ratios.append(float(np.sqrt(np.sum(sketch ** 2) / true_sq)))
        outputs.append({"position": position, "numel": ref.numel(), "rel_norm": stats["norm"], "bad": stats["bad"],
                        "whole_check": whole[:200], "digest_false_rejections": digest_failures,
                        "estimate_over_truth": ([min(ratios), statistics.median(ratios), max(ratios)]
                                                if ratios else None)})
    row["outputs"] = outputs
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="builtin", choices=["builtin", "kernelbench"])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--levels", default="1,2,3")
    parser.add_argument("--secrets", type=int, default=50)
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch

    from cuda_gym.tasks import load_suite

    out = Path(args.out)
    payload = json.loads(out.read_text()) if out.exists() else {"tasks": []}
    done = {row["task_id"] for row in payload["tasks"]}
    levels = {int(level) for level in args.levels.split(",")}
    tasks = [t for t in load_suite(args.suite) if t.level in levels and t.id not in done]
    device = torch.cuda.get_device_name() if args.backend == "cuda" else f"cpu ({os.cpu_count()} cores)"
    payload["meta"] = {"command": " ".join(sys.argv), "device": device, "torch": torch.__version__,
                       "python": platform.python_version(), "date": dt.date.today().isoformat(),
                       "secrets": args.secrets}
    started = time.time()
    for task in tasks:
        if args.max_minutes and time.time() - started > 60 * args.max_minutes:
            break
        began = time.time()
        try:
            row = measure(task, args.backend, args.secrets)
        except Exception as exc:  # noqa: BLE001 - the task is recorded as not measured, the sweep goes on
            row = {"task_id": task.id, "error": f"{type(exc).__name__}: {exc}"[:400],
                   "traceback": traceback.format_exc(limit=3)[-800:]}
        row["seconds"] = round(time.time() - began, 2)
        payload["tasks"].append(row)
        print(json.dumps({k: row.get(k) for k in ("task_id", "degenerate", "seconds", "error")}), flush=True)
        if args.backend == "cuda":
            torch.cuda.empty_cache()
        partial = out.with_suffix(".partial")
        partial.write_text(json.dumps(payload, indent=1))
        os.replace(partial, out)
    rows = [r for r in payload["tasks"] if r.get("outputs")]
    ratios = [o["estimate_over_truth"][2] for r in rows for o in r["outputs"] if o["estimate_over_truth"]]
    payload["summary"] = {
        "tasks": len(payload["tasks"]), "measured": len(rows),
        "max_estimate_over_truth": max(ratios) if ratios else None,
        "digest_false_rejections": sum(o["digest_false_rejections"] for r in rows for o in r["outputs"]),
        "degenerate": sorted(r["task_id"] for r in payload["tasks"] if r.get("degenerate")),
    }
    out.write_text(json.dumps(payload, indent=1))
    print(json.dumps(payload["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
