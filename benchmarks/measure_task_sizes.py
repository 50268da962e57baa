#!/usr/bin/env python3
"""Time the eager forward of every built-in cuda_gym task at its backend's sizes.

For each task file under cuda_gym/tasks/builtin/level*/ this script executes the
source into a fresh namespace, overrides the module-level size constants with
CUDA_GYM["sizes"][backend], builds Model(*get_init_inputs()).eval() and times
model(*get_inputs()) under torch.no_grad() (median of --runs after --warmup).

It needs only torch and the standard library, so it can run on a bare GPU box:

    python benchmarks/measure_task_sizes.py --backend cpu            # 2 threads
    python benchmarks/measure_task_sizes.py --backend cuda
    python benchmarks/measure_task_sizes.py --backend cpu --filter L2/

A table goes to stdout and a JSON file to
cuda_gym_results/task_sizes_<backend>_<YYYY-MM-DD>.json (see --out; the current result is kept at
benchmarks/results/task_sizes/<device>/<date>.json).
The target eager time is 1-50 ms on cpu (2 threads) and 0.05-50 ms on cuda;
tasks outside it are flagged in the table and listed in the JSON.

CPU timings on a shared machine are easily inflated by other processes. With
--wait-idle SECONDS (Linux only) the script waits, before each cpu task, until
other processes use less than --busy-limit cores, and re-times a task whose
timing window was contended; the CPU used by others during the final timing is
recorded per task as "others_busy_cores".
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS_DIR = REPO_ROOT / "cuda_gym" / "tasks" / "builtin"
RESULTS_DIR = Path(__file__).resolve().parents[1] / "cuda_gym_results"
TARGET_MS = {"cpu": (1.0, 50.0), "cuda": (0.05, 50.0)}


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs from /proc/stat, or None off Linux."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


class OthersBusy:
    """Measures how many cores processes other than this one kept busy over a window."""

    def __enter__(self):
        self.start = (_cpu_jiffies(), time.process_time(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        self.end = (_cpu_jiffies(), time.process_time(), time.perf_counter())
        return False

    @property
    def cores(self) -> float | None:
        (j0, p0, t0), (j1, p1, t1) = self.start, self.end
        if j0 is None or j1 is None or t1 <= t0:
            return None
        busy_s = (j1[0] - j0[0]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, (busy_s - (p1 - p0)) / (t1 - t0))


def wait_for_idle(max_wait_s: float, busy_limit: float) -> float | None:
    """Block until others use < busy_limit cores over a 1 s window, or max_wait_s passed."""
    deadline = time.monotonic() + max_wait_s
    while True:
        with OthersBusy() as probe:
            time.sleep(1.0)
        if probe.cores is None or probe.cores < busy_limit or time.monotonic() >= deadline:
            return probe.cores
        time.sleep(2.0)


def discover_tasks() -> list[tuple[str, Path]]:
    """Return (task_id, path) for every task file, ordered by level then name."""
    tasks = []
    for level_dir in sorted(TASKS_DIR.glob("level*")):
        level = level_dir.name[len("level"):]
        for path in sorted(level_dir.glob("*.py")):
            if path.name.startswith("_"):
                continue
            tasks.append((f"builtin/L{level}/{path.stem}", path))
    return tasks


def read_metadata(source: str) -> dict:
    """Parse the CUDA_GYM dict literally (as the loader does), without executing code."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CUDA_GYM" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise ValueError("no module-level CUDA_GYM assignment")


def load_task(path: Path, backend: str) -> tuple[dict, dict]:
    """Execute a task file and apply the backend's sizes. Returns (namespace, sizes)."""
    source = path.read_text()
    meta = read_metadata(source)
    sizes = meta["sizes"][backend]
    namespace: dict = {"__name__": f"cuda_gym_task_{path.stem}", "__file__": str(path)}
    exec(compile(source, str(path), "exec"), namespace)
    for name, value in sizes.items():
        if name not in namespace:
            raise ValueError(f"size {name!r} has no module-level constant")
        namespace[name] = value
    return namespace, sizes


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    return obj


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return 0


def _shape(obj):
    if isinstance(obj, torch.Tensor):
        return list(obj.shape)
    if isinstance(obj, (list, tuple)):
        return [_shape(o) for o in obj]
    return None


def time_forward(model, inputs, backend: str, warmup: int, runs: int) -> list[float]:
    """Per-run forward times in milliseconds."""
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        if backend == "cuda":
            torch.cuda.synchronize()
            for _ in range(runs):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                model(*inputs)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(runs):
                t0 = time.perf_counter()
                model(*inputs)
                times.append((time.perf_counter() - t0) * 1e3)
    return times


def measure(path: Path, backend: str, warmup: int, runs: int, seed: int,
            wait_idle_s: float = 0.0, busy_limit: float = 0.25) -> dict:
    namespace, sizes = load_task(path, backend)
    device = torch.device("cuda" if backend == "cuda" else "cpu")
    torch.manual_seed(seed)
    model = namespace["Model"](*namespace["get_init_inputs"]()).eval().to(device)
    inputs = _to(list(namespace["get_inputs"]()), device)
    with torch.no_grad():
        out = model(*inputs)
    result = {
        "sizes": sizes,
        "input_mb": _nbytes(inputs) / 2**20,
        "output_mb": _nbytes(out) / 2**20,
        "output_shape": _shape(out),
    }
    del out
    if backend == "cpu" and wait_idle_s > 0:
        for attempt in range(3):
            wait_for_idle(wait_idle_s, busy_limit)
            with OthersBusy() as window:
                times = time_forward(model, inputs, backend, warmup, runs)
            if window.cores is None or window.cores < busy_limit:
                break
        result["others_busy_cores"] = window.cores
    else:
        times = time_forward(model, inputs, backend, warmup, runs)
    lo, hi = TARGET_MS[backend]
    median = statistics.median(times)
    result.update(
        median_ms=median,
        min_ms=min(times),
        max_ms=max(times),
        in_range=lo <= median <= hi,
    )
    return result


def device_name(backend: str) -> str:
    if backend == "cuda":
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per task (median is reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch.set_num_threads for the cpu backend (0 = leave torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--filter", default="", help="only tasks whose id contains this substring")
    parser.add_argument("--out", type=Path, default=None, help="JSON output path")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                        help="cpu only: before each task wait up to SECONDS for other processes to go quiet, "
                             "and re-time contended tasks (0 = off)")
    parser.add_argument("--busy-limit", type=float, default=0.25, metavar="CORES",
                        help="cores other processes may use and still count as quiet (with --wait-idle)")
    args = parser.parse_args(argv)

    if args.backend == "cuda" and not torch.cuda.is_available():
        print("error: --backend cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if args.backend == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)

    tasks = [(tid, p) for tid, p in discover_tasks() if args.filter in tid]
    if not tasks:
        print(f"no tasks under {TASKS_DIR} match {args.filter!r}", file=sys.stderr)
        return 2

    lo, hi = TARGET_MS[args.backend]
    print(f"backend={args.backend} device={device_name(args.backend)} torch={torch.__version__} "
          f"threads={torch.get_num_threads()} target={lo}-{hi} ms")
    header = f"{'task':<44} {'median ms':>10} {'min ms':>9} {'in MB':>8} {'out MB':>8}  flag"
    print(header)
    print("-" * len(header))

    results, errors = {}, {}
    for task_id, path in tasks:
        try:
            r = measure(path, args.backend, args.warmup, args.runs, args.seed,
                        args.wait_idle, args.busy_limit)
        except Exception as exc:  # keep going; report at the end
            errors[task_id] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            print(f"{task_id:<44} ERROR {errors[task_id]}")
            continue
        finally:
            if args.backend == "cuda":
                torch.cuda.empty_cache()
        results[task_id] = r
        flag = "" if r["in_range"] else ("TOO SLOW" if r["median_ms"] > hi else "TOO FAST")
        if (r.get("others_busy_cores") or 0) >= args.busy_limit:
            flag += f" (contended: others used {r['others_busy_cores']:.2f} cores)"
        print(f"{task_id:<44} {r['median_ms']:>10.3f} {r['min_ms']:>9.3f} "
              f"{r['input_mb']:>8.1f} {r['output_mb']:>8.1f}  {flag}", flush=True)

    out_of_range = sorted(t for t, r in results.items() if not r["in_range"])
    today = datetime.date.today().isoformat()
    report = {
        "backend": args.backend,
        "date": today,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device_name": device_name(args.backend),
        "cuda_version": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "runs": args.runs,
        "warmup": args.warmup,
        "seed": args.seed,
        "wait_idle_s": args.wait_idle,
        "target_ms": [lo, hi],
        "out_of_range": out_of_range,
        "errors": errors,
        "tasks": results,
    }
    out_path = args.out or RESULTS_DIR / f"task_sizes_{args.backend}_{today}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")

    print("-" * len(header))
    print(f"{len(results)} measured, {len(out_of_range)} out of range, {len(errors)} errors -> {out_path}")
    for task_id in out_of_range:
        print(f"  out of range: {task_id} ({results[task_id]['median_ms']:.3f} ms)")
    return 1 if (errors or out_of_range) else 0


if __name__ == "__main__":
    sys.exit(main())
