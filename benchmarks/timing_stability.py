"""Where the spread of short-kernel timings between fresh processes comes from.

Each of `--processes` fresh processes times the same ops (gelu, softmax, cumsum at the built-in
CUDA task sizes; eager PyTorch, so no build is involved) four ways, `--reps` repeats each, the way
cuda_gym's Timer does it (L2 flush and a device sync before every repeat):

  event          CUDA events around the call, as the Timer does now: includes the host's time to
                 issue the call, while the GPU waits for it
  event_blocked  the same, but a ~1 ms GPU sleep is queued first, so the call is issued while the
                 GPU is still busy and the events time the device work alone
  host_issue     host time to issue the call (measured in the blocked mode)
  back_to_back   20 calls between two events without syncs, per call

The spread (max/min - 1) of the per-process medians says which measurement is stable across
processes. Writes <out>/timing_stability_<date>.json (default out: cuda_gym_results/).

    python benchmarks/timing_stability.py --processes 10
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, statistics, sys, time
import torch
import torch.nn.functional as F
reps = int(sys.argv[1])
ops = {
    "gelu": (F.gelu, torch.randn(8192, 8192, device="cuda")),
    "softmax": (lambda x: torch.softmax(x, dim=-1), torch.randn(4096, 16384, device="cuda")),
    "cumsum": (lambda x: torch.cumsum(x, dim=1), torch.randn(4096, 8192, device="cuda")),
}
flush = torch.empty(64 * 2**20, device="cuda")
sleep_cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 1e-3)  # ~1 ms at full clock
out = {}
for name, (fn, x) in ops.items():
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    rows = {"event": [], "event_blocked": [], "host_issue": [], "back_to_back": []}
    for _ in range(reps):
        flush.zero_(); torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); y = fn(x); e.record(); torch.cuda.synchronize()
        rows["event"].append(s.elapsed_time(e)); del y
        flush.zero_(); torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        s.record(); t0 = time.perf_counter(); y = fn(x); t1 = time.perf_counter(); e.record()
        torch.cuda.synchronize()
        rows["event_blocked"].append(s.elapsed_time(e)); rows["host_issue"].append((t1 - t0) * 1e3); del y
    torch.cuda.synchronize()
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        s.record()
        for _ in range(20):
            fn(x)
        e.record(); torch.cuda.synchronize()
        rows["back_to_back"].append(s.elapsed_time(e) / 20)
    out[name] = {k: statistics.median(v) for k, v in rows.items()}
print("RESULT", json.dumps(out))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--out", default=str(ROOT / "cuda_gym_results"))
    args = parser.parse_args()
    import torch

    runs = []
    for index in range(args.processes):
        proc = subprocess.run([sys.executable, "-c", CHILD, str(args.reps)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        runs.append(json.loads(proc.stdout.split("RESULT", 1)[1]))
        print(index, json.dumps(runs[-1]), flush=True)
    summary = {}
    for op in runs[0]:
        summary[op] = {}
        for method in runs[0][op]:
            values = [run[op][method] for run in runs]
            summary[op][method] = {"median_ms": statistics.median(values), "spread": max(values) / min(values) - 1,
                                   "per_process_ms": values}
            print(f"{op:<8} {method:<14} median {statistics.median(values):.4f} ms  spread "
                  f"{max(values) / min(values) - 1:6.1%}")
    payload = {
        "benchmark": "timing_stability", "date": dt.date.today().isoformat(),
        "hardware": {"device": torch.cuda.get_device_name(), "cpu_count": os.cpu_count(), "machine": platform.machine()},
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "processes": args.processes, "reps": args.reps, "results": summary,
    }
    out = Path(args.out) / f"timing_stability_{payload['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
