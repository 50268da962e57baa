"""Where the level-3 identity spread comes from, and which estimator of a call's time survives it.

    CUDA_GYM_KERNELBENCH=.kb python3 benchmarks/host_noise.py --tasks L3/19_MobileNetV1,L3/35_LSTM --out $OUT/noise.json

For each task, fresh plain-PyTorch processes (no cuda_gym code) load the same KernelBench reference
with the same seed and inputs, one after the other as the judge's workers do:
- three default processes, each timing `--rounds` rounds of `--reps` calls, then the same forward
  captured in a CUDA graph and replayed (device time alone, no host issue), where capture works;
- one process pinned to a single core with one torch thread and the garbage collector off;
- one process holding two copies of the model, A and B, timed call by call in alternation.
A timed call is the judge's open repeat: L2 flush, device-wide sync, CUDA events on the current
stream around the forward, sync. Each call's event time, host issue time (forward's return) and
wall time are kept, with each round's involuntary context switches, the system's steal time and
the processor the process ran on. Every model is the same, so every ratio should be 1.00; the
summary says, per estimator (median, 10th percentile, minimum, fastest round's median), how often
two processes agree within 3%.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORKER = r"""
import gc, importlib.util, json, os, resource, sys, time
import torch
path, pinned, copies = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
if pinned:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("task_module", path)
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
models = []
for _ in range(copies):
    torch.manual_seed(0)
    models.append(module.Model(*module.get_init_inputs()).cuda().eval())
torch.manual_seed(1)
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
flush = torch.empty(64 * 2**20, dtype=torch.float32, device="cuda")
def steal():
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])
def cpu():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])
def once(fn):
    flush.zero_()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter_ns()
    start.record()
    fn()
    t1 = time.perf_counter_ns()
    end.record()
    torch.cuda.synchronize()
    t2 = time.perf_counter_ns()
    return [round(start.elapsed_time(end), 4), round((t1 - t0) / 1e6, 4), round((t2 - t0) / 1e6, 4)]
calls = [lambda m=m: m(*inputs) for m in models]
with torch.no_grad():
    for fn in calls:
        for _ in range(3):
            once(fn)
    started = time.perf_counter()
    while time.perf_counter() - started < 0.3:
        for fn in calls:
            once(fn)
    if pinned:
        gc.collect(); gc.disable()
    print("ready", flush=True)
    for line in sys.stdin:
        command, _, count = line.strip().partition(" ")
        if command == "q":
            break
        n = int(count)
        before = (resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw, steal(), time.perf_counter())
        if command == "r":
            out = {"calls": [[once(fn) for fn in calls] for _ in range(n)]}
        elif command == "g":
            try:
                graph = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    calls[0](); calls[0]()
                torch.cuda.current_stream().wait_stream(side)
                with torch.cuda.graph(graph):
                    calls[0]()
                out = {"calls": [[once(graph.replay)] for _ in range(n)]}
            except Exception as error:
                out = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
        after = (resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw, steal(), time.perf_counter())
        out.update(involuntary_switches=after[0] - before[0], steal_jiffies=after[1] - before[1],
                   seconds=round(after[2] - before[2], 3), cpu=cpu())
        print(json.dumps(out), flush=True)
"""


class Worker:
    def __init__(self, path: Path, pinned: bool = False, copies: int = 1):
        self.process = subprocess.Popen([sys.executable, "-c", WORKER, str(path), "1" if pinned else "0", str(copies)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        line = self.process.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"worker for {path} did not start: {line!r}")

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        try:
            self.process.stdin.write("q\n")
            self.process.stdin.close()
        except OSError:
            pass
        self.process.wait(timeout=60)


def host_ms(call: list[float]) -> float:
    """What the judge charges an open repeat: the event time (which includes host issue when the GPU waits)."""
    return call[0]


def estimators(rounds: list[list[float]]) -> dict[str, float]:
    every = sorted(t for r in rounds for t in r)
    return {"median": statistics.median(every), "p10": every[len(every) // 10], "min": every[0],
            "best_round_median": min(statistics.median(r) for r in rounds)}


def agreement(per_process: list[dict[str, float]]) -> dict[str, float]:
    """The worst ratio between any two processes, per estimator."""
    worst = {}
    for name in per_process[0]:
        ratios = [a[name] / b[name] for a, b in itertools.permutations(per_process, 2)]
        worst[name] = round(max(ratios), 4)
    return worst


def run_task(path: Path, task: str, reps: int, rounds: int) -> dict:
    started = time.time()
    processes = []
    for index in range(3):
        worker = Worker(path)
        timed = [worker.ask(f"r {reps}") for _ in range(rounds)]
        graph = worker.ask(f"g {reps}")
        worker.close()
        processes.append({"kind": "default", "rounds": timed, "graph": graph})
    worker = Worker(path, pinned=True)
    processes.append({"kind": "pinned", "rounds": [worker.ask(f"r {reps}") for _ in range(rounds)]})
    worker.close()
    worker = Worker(path, copies=2)
    paired = [worker.ask(f"r {reps}") for _ in range(rounds)]
    worker.close()
    per_process = [estimators([[host_ms(c[0]) for c in r["calls"]] for r in p["rounds"]]) for p in processes]
    graphs = [statistics.median(c[0][0] for c in p["graph"]["calls"]) for p in processes[:3] if "calls" in p["graph"]]
    pair_ratios = [host_ms(c[0]) / host_ms(c[1]) for r in paired for c in r["calls"]]
    summary = {
        "task": task,
        "estimates_ms": per_process,
        "worst_ratio_default": agreement(per_process[:3]),
        "worst_ratio_with_pinned": agreement(per_process),
        "graph_replay_ms": graphs,
        "graph_worst_ratio": round(max(graphs) / min(graphs), 4) if graphs else None,
        "graph_error": next((p["graph"]["error"] for p in processes[:3] if "error" in p["graph"]), None),
        "issue_ms_median": statistics.median(c[0][1] for p in processes[:3] for r in p["rounds"] for c in r["calls"]),
        "in_process_pair": {"median_ratio": statistics.median(pair_ratios),
                            "round_medians": [round(statistics.median(host_ms(c[0]) / host_ms(c[1]) for c in r["calls"]), 4)
                                              for r in paired],
                            "estimator_ratio": {k: round(v, 4) for k, v in zip(
                                ("median", "p10", "min", "best_round_median"),
                                (a / b for a, b in zip(
                                    estimators([[host_ms(c[0]) for c in r["calls"]] for r in paired]).values(),
                                    estimators([[host_ms(c[1]) for c in r["calls"]] for r in paired]).values())))}},
        "seconds": round(time.time() - started, 1),
    }
    return {"summary": summary, "processes": processes, "paired": paired}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernelbench", default=os.environ.get("CUDA_GYM_KERNELBENCH"))
    parser.add_argument("--tasks", required=True, help="comma-separated, e.g. L3/19_MobileNetV1")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-minutes", type=float, default=8.0, help="stop between tasks after this long")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not args.kernelbench:
        parser.error("give --kernelbench or set CUDA_GYM_KERNELBENCH to the KernelBench data folder")
    root = Path(args.kernelbench)
    if (root / "KernelBench").is_dir():
        root = root / "KernelBench"
    out = Path(args.out)
    rows = json.loads(out.read_text())["tasks"] if out.exists() else []
    done = {r["summary"]["task"] for r in rows}
    began = time.time()
    for task in args.tasks.split(","):
        if task in done:
            continue
        if time.time() - began > 60 * args.max_minutes:
            print("time limit: stopping before", task, flush=True)
            break
        level, name = task.split("/")
        path = root / f"level{level.lstrip('L')}" / f"{name}.py"
        try:
            rows.append(run_task(path, task, args.reps, args.rounds))
        except Exception as error:  # noqa: BLE001 - one task's failure is recorded, the rest go on
            rows.append({"summary": {"task": task, "error": f"{type(error).__name__}: {error}"}})
        print(json.dumps({k: v for k, v in rows[-1]["summary"].items() if k != "estimates_ms"}), flush=True)
        out.write_text(json.dumps({"tasks": rows, "reps": args.reps, "rounds": args.rounds,
                                   "date": time.strftime("%Y-%m-%d")}, indent=None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
