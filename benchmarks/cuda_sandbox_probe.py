"""Which worker confinement measures the CUDA driver tolerates, and in which order.

On the H200 the CUDA driver failed to initialize (error 304, cudaErrorOperatingSystem) in eval
workers that had the child watchdog and Landlock write restrictions applied before CUDA was
initialized. This probe runs each combination in a fresh process and reports which ones can
initialize CUDA, run a kernel, start the CUPTI profiler and load a prebuilt native kernel:

  none              nothing applied (control)
  watchdog          child subreaper + watchdog, before CUDA init
  landlock_before   Landlock before CUDA init (what failed)
  landlock_after    CUDA initialized first, then Landlock
  worker_order      watchdog, CUDA init, then Landlock (the order the eval worker uses)

    python benchmarks/cuda_sandbox_probe.py --out $OUT

Where `strace` exists, a failing `landlock_before` is re-run under it and the denied file
operations are reported.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS = ("none", "watchdog", "landlock_before", "landlock_after", "worker_order")
KERNEL = r'''
#include <cuda_runtime.h>
#include <cstdint>
__global__ void add_one_kernel(float* x, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" void add_one(float* x, int64_t n, cudaStream_t stream) {
    add_one_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, n);
}
'''


def _child(variant: str, scratch: str) -> dict:
    """Runs in the probed process: apply the measures in the variant's order, then use CUDA."""
    import torch

    from cuda_gym.eval import sandbox
    from cuda_gym.native import load_kernels

    steps: dict = {}

    def landlock() -> None:
        steps["landlock_not_applied"] = sandbox.restrict_writes(sandbox.writable_paths(scratch))

    sandbox.new_session()
    if variant in ("watchdog", "worker_order"):
        steps["watchdog"] = sandbox.contain_children()
    if variant == "landlock_before":
        landlock()
    try:
        torch.cuda.init()
        x = torch.ones(1 << 20, device="cuda")
        steps["init"] = "ok"
        if variant in ("landlock_after", "worker_order"):
            landlock()
        steps["matmul"] = float((x[:1024].view(32, 32) @ x[:1024].view(32, 32)).sum().item())
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            x.add_(1.0)
            torch.cuda.synchronize()
        steps["profiler_kernels"] = len([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA])
        lib = load_kernels(cuda=KERNEL, functions=["void add_one(float* x, int64_t n, cudaStream_t stream)"])
        lib.add_one(x, x.numel())
        torch.cuda.synchronize()
        steps["native_kernel"] = float(x[0].item())  # 1 + 1 + 1
        steps["ok"] = steps["native_kernel"] == 3.0 and steps["profiler_kernels"] > 0
    except BaseException as exc:  # noqa: BLE001 - the probe reports every failure
        steps["ok"] = False
        steps["error"] = f"{type(exc).__name__}: {exc}"[:600]
    return steps


def _run(variant: str, scratch: str, strace: bool = False) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--scratch", scratch]
    if strace:
        command = ["strace", "-f", "-qq", "-e", "trace=%file,%desc", "-Z", "-o", os.path.join(scratch, "strace.txt")] + command
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timed out after 180 s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"ok": False, "error": f"rc {proc.returncode}: {proc.stderr[-800:]}"}
    if strace:
        trace = Path(scratch, "strace.txt")
        denied = [line for line in trace.read_text().splitlines() if "EACCES" in line or "EPERM" in line] if trace.exists() else []
        result["denied_file_operations"] = denied[:40]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--scratch")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "cuda_gym_results"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.scratch)), flush=True)
        os._exit(0)  # the watchdog child must not run atexit handlers of this process
    import torch

    from cuda_gym.eval import sandbox

    cache = tempfile.mkdtemp(prefix="cg-probe-")
    os.environ["CUDA_GYM_KERNEL_CACHE"] = os.path.join(cache, "kernels")
    subprocess.run([sys.executable, __file__, "--child", "none", "--scratch", cache], capture_output=True, timeout=300)
    results = {}
    for variant in VARIANTS:  # the kernel is now cached: every variant only loads it
        scratch = tempfile.mkdtemp(prefix=f"cg-probe-{variant}-", dir=cache)
        results[variant] = _run(variant, scratch)
        print(variant, json.dumps(results[variant]), flush=True)
    if not results["landlock_before"].get("ok") and shutil.which("strace"):
        scratch = tempfile.mkdtemp(prefix="cg-probe-strace-", dir=cache)
        results["landlock_before_strace"] = _run("landlock_before", scratch, strace=True)
        print("landlock_before under strace", json.dumps(results["landlock_before_strace"])[:3000], flush=True)
    payload = {
        "benchmark": "cuda_sandbox_probe", "date": dt.date.today().isoformat(),
        "hardware": {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
                     "kernel": os.uname().release, "landlock_abi": sandbox.landlock_abi()},
        "versions": {"torch": torch.__version__}, "results": results,
    }
    out = Path(args.out) / f"cuda_sandbox_probe_{payload['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    print("wrote", out, "| worker_order ok:", results["worker_order"].get("ok"))
    sys.exit(0 if results["worker_order"].get("ok") else 3)


if __name__ == "__main__":
    main()
