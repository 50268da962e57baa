"""How far each task's fp32 reference is from the truth: the reference in float32 against the same
model and inputs in float64, on the task's own inputs.

    CUDA_GYM_KERNELBENCH=.kb python benchmarks/reference_conditioning.py --levels 2 --max-minutes 20 \\
        --out benchmarks/results/reference_conditioning_cpu_<date>.json [--resume that file]

Why: the judge compares a candidate with the fp32 reference at a relative-norm tolerance (5e-5 under
the fp32 policy). Where the fp32 reference is itself further than that from the float64 result, its
output is mostly rounding noise (KernelBench L2/23_Conv3d_GroupNorm_Mean: the true output is about
1e-16, the fp32 one about 1e-7), and a correct candidate that sums in another order is judged
INCORRECT. This lists those tasks. It changes no verdict.

Per task: `ref_rel_error` = ||ref32 - ref64|| / ||ref64|| over all outputs, `ref64_norm`,
`ref32_norm`, `seconds`, or `skipped` with the reason (inputs over --max-input-gib, a model that does
not run in float64, over --task-timeout on the CPU). The summary counts tasks whose `ref_rel_error` exceeds the fp32 policy's
tolerance. Results are written after every task; `--resume` skips the tasks a file already holds.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _input_gib(namespace) -> float:
    """The task's input size in GiB, from its inputs built on the meta device (no memory)."""
    import torch

    with torch.device("meta"):
        inputs = namespace["get_inputs"]()
    return sum(v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor)) / 2 ** 30


def _flat(output) -> list:
    if isinstance(output, (tuple, list)):
        return [o for item in output for o in _flat(item)]
    return [output]


def measure(task, backend: str, device: str, max_input_gib: float) -> dict:
    """The fp32 reference against float64 for one task (see the module docstring)."""
    import torch

    namespace = task.namespace(backend)
    gib = _input_gib(namespace)
    if gib > max_input_gib:
        return {"skipped": f"inputs are {gib:.2f} GiB (over --max-input-gib {max_input_gib})"}
    started = time.monotonic()
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]()).to(device).eval()
    torch.manual_seed(1)
    inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in namespace["get_inputs"]()]
    with torch.no_grad():
        ref32 = [o for o in _flat(model(*inputs)) if isinstance(o, torch.Tensor)]
        try:
            model64 = copy.deepcopy(model).double()
            inputs64 = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in inputs]
            ref64 = [o for o in _flat(model64(*inputs64)) if isinstance(o, torch.Tensor)]
        except Exception as exc:  # noqa: BLE001 - a model that does not run in float64 is reported, not fatal
            return {"skipped": f"float64 run failed: {type(exc).__name__}: {str(exc)[:200]}"}
    floats = [(a, b) for a, b in zip(ref32, ref64) if a.is_floating_point()]
    if not floats:
        return {"skipped": "no floating-point output"}
    diff = sum(float((a.double() - b).norm()) ** 2 for a, b in floats) ** 0.5
    norm64 = sum(float(b.norm()) ** 2 for _, b in floats) ** 0.5
    norm32 = sum(float(a.double().norm()) ** 2 for a, _ in floats) ** 0.5
    return {"ref_rel_error": diff / max(norm64, 1e-300), "ref64_norm": norm64, "ref32_norm": norm32,
            "input_gib": round(gib, 4), "seconds": round(time.monotonic() - started, 2)}


def _measure_child(send, task, backend: str, device: str, max_input_gib: float) -> None:
    try:
        send.send(measure(task, backend, device, max_input_gib))
    except Exception as exc:  # noqa: BLE001 - reported as the task's row
        send.send({"skipped": f"{type(exc).__name__}: {str(exc)[:200]}"})


def measure_with_limit(task, backend: str, device: str, max_input_gib: float, limit_s: float) -> dict:
    """`measure` in a spawned child that is killed after `limit_s` seconds (CPU only: float64
    convolutions on the CPU can take minutes; a forked child could hang in the parent's OpenMP
    pool). On CUDA, or with no limit, it runs in this process."""
    import multiprocessing

    if device != "cpu" or limit_s <= 0:
        return measure(task, backend, device, max_input_gib)
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_measure_child, args=(send, task, backend, device, max_input_gib), daemon=True)
    process.start()
    try:
        if receive.poll(limit_s):
            return receive.recv()
        return {"skipped": f"not done within --task-timeout {limit_s:g} s"}
    finally:
        if process.is_alive():
            process.kill()
        process.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernelbench", default=os.environ.get("CUDA_GYM_KERNELBENCH"),
                        help="KernelBench data (default $CUDA_GYM_KERNELBENCH)")
    parser.add_argument("--levels", default="1,2,3")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--max-input-gib", type=float, default=1.0,
                        help="skip tasks whose inputs are larger (default 1 GiB: float64 doubles them)")
    parser.add_argument("--task-timeout", type=float, default=60.0,
                        help="seconds per task on the CPU before it is skipped (default 60; 0: none)")
    parser.add_argument("--max-minutes", type=float, default=0.0, help="stop starting tasks after this (0: no limit)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", default=None, help="an earlier result file: its tasks are kept, not run again")
    args = parser.parse_args()
    if not args.kernelbench or not Path(args.kernelbench).exists():
        parser.error(f"KernelBench data not found at {args.kernelbench!r}: pass --kernelbench or set "
                     "$CUDA_GYM_KERNELBENCH to the folder holding KernelBench/level1...")
    import torch
    from tqdm import tqdm

    from cuda_gym.eval import EvalConfig
    from cuda_gym.tasks import load_suite

    tolerance = EvalConfig(precision="fp32").rel_norm_tolerance
    rows: dict[str, dict] = {}
    if args.resume:
        rows = dict(json.loads(Path(args.resume).read_text())["tasks"])
    tasks = load_suite("kernelbench", levels=tuple(int(x) for x in args.levels.split(",")),
                       data_path=args.kernelbench)
    backend = "cuda" if args.device == "cuda" else "cpu"
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
    for task in tqdm(todo, desc="fp32 vs float64 reference", unit="task", file=sys.stdout):
        if args.max_minutes and time.monotonic() - started > 60 * args.max_minutes:
            print(f"stopped after {args.max_minutes} min; resume with --resume {out}", flush=True)
            break
        try:
            rows[task.id] = measure_with_limit(task, backend, args.device, args.max_input_gib, args.task_timeout)
        except Exception as exc:  # noqa: BLE001 - one task's failure is recorded, the scan goes on
            rows[task.id] = {"skipped": f"{type(exc).__name__}: {str(exc)[:200]}"}
        write()
    write()
    over = json.loads(out.read_text())["summary"]["reference_off_truth_beyond_tolerance"]
    print(f"{len(over)} tasks whose fp32 reference is further than {tolerance:g} from float64: {', '.join(over)}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
