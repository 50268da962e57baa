"""How far each task's fp32 reference is from the truth, as the judge measures it: the identity
candidate is evaluated (permissive policy, no baselines) and the verdict's
`EvalResult.reference_error` is read, the fp32 reference against its float64 twin on every
correctness draw (`TaskSetup._measure_reference_error` in cuda_gym/eval/task_setup.py).

    CUDA_GYM_KERNELBENCH=.kb python benchmarks/reference_conditioning.py --levels 2 --max-minutes 20 \\
        --out benchmarks/results/reference_conditioning/cpu-2core/<date>.json [--resume that file]

Why: the judge compares a candidate with the fp32 reference at a relative-norm tolerance (5e-5 under
the fp32 policy). Where the fp32 reference is itself further than that from the float64 result, its
output is mostly rounding noise (KernelBench L2/23_Conv3d_GroupNorm_Mean: the true output is about
1e-16, the fp32 one about 1e-7), and the judge widens that task's tolerance to a multiple of the
reference's own error (`EvalConfig.reference_noise_multiple`). This lists those tasks, and checks that
the identity is still judged OK on them.

Per task: `ref_rel_error`, the worst draw's ||ref32 - ref64|| / ||ref32|| (the worst output),
`rel_norm` and `max_abs` per draw, `widened` (the judge widened some draw's tolerance),
`identity` (the identity's verdict), `seconds`; or `skipped` with the judge's reason (the float64
twin does not fit the memory plan or does not run) or the identity's failing verdict. The summary
counts tasks whose `ref_rel_error` exceeds the fp32 policy's tolerance. Results are written after
every task; `--resume` skips the tasks a file already holds.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def conditioning_config(timeout_s: float = 120.0):
    """The judge's settings for this scan: permissive (the identity calls PyTorch), no baselines, one
    timed call (`EvalConfig.for_check`); `timeout_s` bounds each evaluation."""
    from cuda_gym.eval import EvalConfig

    return EvalConfig(policy="permissive").for_check().replace(eval_timeout_s=timeout_s)


def row(result) -> dict:
    """One task's row from the identity's verdict (see the module docstring)."""
    measured = result.reference_error or {}
    identity = result.error_code.value
    seconds = round(result.compile_seconds + result.eval_seconds, 2)
    if "rel_norm" not in measured:
        why = measured.get("skipped") or f"the identity was judged {identity}: {result.message[:300]}"
        return {"skipped": why, "identity": identity, "seconds": seconds}
    return {"ref_rel_error": max(measured["rel_norm"], default=0.0), "rel_norm": measured["rel_norm"],
            "max_abs": measured["max_abs"], "widened": "rel_norm_tolerance" in measured,
            "identity": identity, "seconds": seconds}


def measure(evaluator, task) -> dict:
    """The identity evaluated on `task` by `evaluator` (made with `conditioning_config`); its row."""
    from benchmarks.kernelbench_sweep import candidate_for

    return row(evaluator.evaluate(task, candidate_for(task, None)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernelbench", default=os.environ.get("CUDA_GYM_KERNELBENCH"),
                        help="KernelBench data (default $CUDA_GYM_KERNELBENCH)")
    parser.add_argument("--levels", default="1,2,3")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--task-timeout", type=float, default=120.0,
                        help="seconds per evaluation before it is stopped and the task skipped (default 120)")
    parser.add_argument("--max-minutes", type=float, default=0.0, help="stop starting tasks after this (0: no limit)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", default=None, help="an earlier result file: its tasks are kept, not run again")
    args = parser.parse_args()
    if not args.kernelbench or not Path(args.kernelbench).exists():
        parser.error(f"KernelBench data not found at {args.kernelbench!r}: pass --kernelbench or set "
                     "$CUDA_GYM_KERNELBENCH to the folder holding KernelBench/level1...")
    import torch
    from tqdm import tqdm

    from cuda_gym.eval import Evaluator
    from cuda_gym.tasks import load_suite

    config = conditioning_config(args.task_timeout)
    tolerance = config.rel_norm_tolerance  # the fp32 policy's
    rows: dict[str, dict] = {}
    if args.resume:
        rows = dict(json.loads(Path(args.resume).read_text())["tasks"])
    tasks = load_suite("kernelbench", levels=tuple(int(x) for x in args.levels.split(",")),
                       data_path=args.kernelbench)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def write() -> None:
        measured = {k: r for k, r in rows.items() if "ref_rel_error" in r}
        over = sorted(k for k, r in measured.items() if r["ref_rel_error"] > tolerance)
        payload = {"date": dt.datetime.now().isoformat(timespec="seconds"), "device": args.device,
                   "torch": torch.__version__, "host": platform.node(), "fp32_tolerance": tolerance,
                   "summary": {"tasks": len(rows), "measured": len(measured),
                               "skipped": len(rows) - len(measured),
                               "reference_off_truth_beyond_tolerance": over},
                   "tasks": rows}
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=1))
        os.replace(tmp, out)

    todo = [t for t in tasks if t.id not in rows]
    with Evaluator(args.device, config) as evaluator:
        for task in tqdm(todo, desc="fp32 vs float64 reference", unit="task", file=sys.stdout):
            if args.max_minutes and time.monotonic() - started > 60 * args.max_minutes:
                print(f"stopped after {args.max_minutes} min; resume with --resume {out}", flush=True)
                break
            rows[task.id] = measure(evaluator, task)
            write()
    write()
    over = json.loads(out.read_text())["summary"]["reference_off_truth_beyond_tolerance"]
    print(f"{len(over)} tasks whose fp32 reference is further than {tolerance:g} from float64: {', '.join(over)}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
