"""How much a host-bound model's time moves from one fresh process to the next, and what the timer
can do about it.

Each child process builds the tasks as a baseline worker does and times each reference twice with
the worker's own timing code under one timer setting. Children of the settings run interleaved
(A B C A B C ...), one at a time, nothing else on the machine. The spread of one setting's
per-process medians (max / min) is what decides whether a candidate timed in one process and a
baseline timed in another can be compared; the two timings inside a process show the drift within it.

    CUDA_GYM_KERNELBENCH=.kb python benchmarks/process_spread.py --tasks kernelbench/L3/19_MobileNetV1 --out $OUT

Writes process_spread_<backend>_<date>.json into --out.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {
    "3 warm-up reps (timer revision 3)": {"timing_warmup_s": 0.0},
    "+ warm-up until 0.3 s": {"timing_warmup_s": 0.3},
    # The whole process on the GPU's NUMA-local cores from its first instruction (memory first-touched there).
    "+ warm-up until 0.3 s, process on the GPU-local cores": {"timing_warmup_s": 0.3,
                                                              "affinity": "gpu_local"},
    "+ warm-up until 0.3 s, process on one GPU-local core": {"timing_warmup_s": 0.3,
                                                             "affinity": "gpu_local_one"},
}


def topology() -> dict:
    """CPU, NUMA and GPU placement facts of this host (Linux sysfs; nothing needs CUDA)."""
    facts: dict = {"cpus_allowed": sorted(os.sched_getaffinity(0))}
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    facts["numa_nodes"] = {n.name: (n / "cpulist").read_text().strip() for n in nodes}
    gpus = []
    for device in sorted(Path("/sys/bus/pci/devices").glob("*")):
        try:
            if (device / "vendor").read_text().strip() != "0x10de" or not (device / "class").read_text().startswith("0x03"):
                continue
            gpus.append({"pci": device.name, "numa_node": (device / "numa_node").read_text().strip(),
                         "local_cpulist": (device / "local_cpulist").read_text().strip()})
        except OSError:
            continue
    facts["gpus"] = gpus
    try:
        facts["lscpu"] = subprocess.run(["lscpu"], capture_output=True, text=True).stdout[:1400]
    except OSError:
        pass
    return facts


def _cpulist(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-")
            cpus.extend(range(int(low), int(high) + 1))
        elif part.strip():
            cpus.append(int(part))
    return cpus

CHILD = r'''
import json, os, sys
cpus = json.loads(sys.argv[4])
if cpus:
    os.sched_setaffinity(0, cpus)
from pathlib import Path
import torch
from cuda_gym.eval import timing
from cuda_gym.eval.task_setup import TaskSetup
from cuda_gym.eval.timed_calls import time_model
from cuda_gym.eval.worker_device import set_precision, warm_up_kernels
from cuda_gym.tasks import get_task

backend, setting, task_ids = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].split(",")
config = {"correctness_trials": 5, "timing_input_sets": 3, "warmup_reps": 3, "timing_reps": 50,
          "timing_min_reps": 10, "timing_budget_s": 1.0, "l2_flush": True, "precision": "fp32",
          "policy": "permissive", "baselines": ["eager"], "device_memory_gb": 64.0, **setting}
if backend == "cuda":
    torch.cuda.init()
    capability = torch.cuda.get_device_capability()
    os.environ[timing.HOLD_LIBRARY_ENV] = str(timing.build_hold_library(Path("/tmp/cg-spread-hold"), capability))
    warm_up_kernels("cuda")
    timing.prepare_hold()
set_precision("fp32")
for task_id in task_ids:
    task = get_task(task_id)
    job = {"task_id": task.id, "task_source": task.source, "sizes": task.sizes_for(backend), "seed": 0,
           "config": config}
    setup = TaskSetup(job, backend)
    setup.prepare_trials(lambda index, outputs: None)
    setup.prepare_timing_sets()
    medians = []
    for _ in range(2):
        stats, flags, _ = time_model(setup.model, setup, backend, config)
        medians.append(stats.median_ms)
    print(json.dumps({"task_id": task_id, "medians_ms": medians, "method": stats.method, "flags": flags}), flush=True)
    del setup
    if backend == "cuda":
        torch.cuda.empty_cache()
'''


def run_child(backend: str, setting: dict, task_ids: list[str], facts: dict) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    setting = dict(setting)
    affinity = setting.pop("affinity", None)
    local = _cpulist(facts["gpus"][0]["local_cpulist"]) if affinity and facts.get("gpus") else []
    cpus = local if affinity == "gpu_local" else local[-1:] if affinity == "gpu_local_one" else []
    done = subprocess.run([sys.executable, "-c", CHILD, backend, json.dumps(setting), ",".join(task_ids),
                           json.dumps(cpus)],
                          capture_output=True, text=True, env=env, timeout=900)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        rows.append({"error": (done.stderr or done.stdout)[-2000:]})
    return rows


def summarise(runs: dict[str, list[list[dict]]], task_ids: list[str]) -> dict:
    summary = {}
    for name, children in runs.items():
        per_task = {}
        for task_id in task_ids:
            firsts = [r["medians_ms"][0] for child in children for r in child if r.get("task_id") == task_id]
            seconds = [r["medians_ms"][1] for child in children for r in child if r.get("task_id") == task_id]
            if not firsts:
                continue
            per_task[task_id] = {
                "process_medians_ms": [round(v, 4) for v in firsts],
                "spread_across_processes": round(max(firsts) / min(firsts), 4),
                "second_timing_ratio_median": round(statistics.median(b / a for a, b in zip(firsts, seconds)), 4),
            }
        spreads = [v["spread_across_processes"] for v in per_task.values()]
        summary[name] = {"tasks": per_task, "max_spread": max(spreads) if spreads else None,
                         "median_spread": statistics.median(spreads) if spreads else None}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True, help="comma-separated task ids")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per setting")
    parser.add_argument("--settings", help="'|'-separated names of SETTINGS to run (default: all)")
    parser.add_argument("--out", default=str(ROOT / "cuda_gym_results"))
    args = parser.parse_args()
    task_ids = [t for t in args.tasks.split(",") if t]
    date = dt.date.today().isoformat()
    out = Path(args.out) / f"process_spread_{args.backend}_{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    chosen = {name: SETTINGS[name] for name in (args.settings.split("|") if args.settings else SETTINGS)}
    facts = topology()
    print(json.dumps(facts, indent=1), flush=True)
    runs: dict[str, list[list[dict]]] = {name: [] for name in chosen}
    started = time.time()
    for round_index in range(args.processes):
        for name, setting in chosen.items():
            rows = run_child(args.backend, setting, task_ids, facts)
            runs[name].append(rows)
            print(f"round {round_index} {name}: {len(rows)} rows ({time.time() - started:.0f} s)", flush=True)
            for row in rows:
                print("   ", row if "error" in row else f"{row['task_id']}: {row['medians_ms']}", flush=True)
            payload = {"date": date, "backend": args.backend, "topology": facts, "settings": chosen, "runs": runs,
                       "summary": summarise(runs, task_ids), "seconds": round(time.time() - started, 1)}
            out.write_text(json.dumps(payload, indent=1))
    for name, block in payload["summary"].items():
        print(f"{name}: median spread x{block['median_spread']}, max x{block['max_spread']}")
        for task_id, row in block["tasks"].items():
            print(f"   {task_id}: {row['process_medians_ms']} spread x{row['spread_across_processes']}"
                  f" second/first x{row['second_timing_ratio_median']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
