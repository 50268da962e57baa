"""Compile latency per candidate form, measured side by side in one run, cold (empty caches).

Forms, for the backend's built-in gelu task:
  native        cuda_gym.native.load_kernels: kernel source without torch headers (the recommended form)
  load_inline   KernelBench's form: torch/extension.h in the sources, pybind bindings via functions=
  load_inline_split the same source through cuda_gym's accelerated build as the evaluator's build
                   workers run it (cuda_gym/eval/fastbuild.py): kernels compiled without torch
                   headers, host wrappers in the C++ file with torch's precompiled header
  load_inline_split_O3 the same with extra_cflags=["-O3"] (served by the -O3 precompiled header)
  load_inline_stripped the previous accelerated build: one CUDA file with torch/types.h only,
                   precompiled header for the C++ part
  The precompiled headers (cuda_gym's, both variants) are built by an untimed warm-up first (once
  per cache directory); each accelerated build prints which form fastbuild used, and the JSON
  records it.

Each build runs in a fresh process with its own empty build directory, `--repeats` times; the
medians and the seconds of each ninja step (from .ninja_log) go to
<out>/compile_latency_<backend>_<date>.json (default out: cuda_gym_results/; the current result
is kept at benchmarks/results/compile_latency/<device>/<date>.json, docs/benchmarks.md).

    python benchmarks/compile_latency.py --backend cuda --repeats 3
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PCH_DIR = os.environ.get("CUDA_GYM_PCH_DIR") or str(Path.home() / ".cache" / "cuda_gym" / "pch")

NATIVE = {
    "cuda": '''
from cuda_gym.native import load_kernels
load_kernels(cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>
__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (int64_t)gridDim.x * blockDim.x) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}
extern "C" void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
    gelu_kernel<<<1024, 256, 0, stream>>>(x, y, n);
}
""", functions=["void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream)"])
''',
    "cpu": '''
from cuda_gym.native import load_kernels
load_kernels(cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu_forward(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
}
""", functions=["void gelu_forward(const float* x, float* y, int64_t n)"])
''',
}

LOAD_INLINE = {
    "cuda": '''
cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (int64_t)gridDim.x * blockDim.x) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}
torch::Tensor gelu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    gelu_kernel<<<1024, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
PREPARE
from torch.utils import cpp_extension
cpp_extension.load_inline(name="bench_gelu", cpp_sources="torch::Tensor gelu_forward(torch::Tensor x);",
                          cuda_sources=cuda_src, functions=["gelu_forward"], extra_cuda_cflags=["-O3"])
''',
    "cpu": '''
src = r"""
torch::Tensor gelu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* in = x.data_ptr<float>(); float* out = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * 0.70710678f));
    return y;
}
"""
PREPARE
from torch.utils import cpp_extension
cpp_extension.load_inline(name="bench_gelu", cpp_sources=src, functions=["gelu_forward"])
''',
}


def ninja_steps(build_root: str) -> dict[str, float]:
    """Seconds per build step (object files, link) from the ninja logs under `build_root`."""
    steps = {}
    for log in Path(build_root).rglob(".ninja_log"):
        for line in log.read_text().splitlines():
            fields = line.split("\t")
            if len(fields) >= 4 and not line.startswith("#"):
                steps[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000
    return steps


def build_once(code: str, backend: str) -> tuple[float, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="cg-compile-bench-") as tmp:
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=tmp, CUDA_GYM_KERNEL_CACHE=tmp, CUDA_GYM_PCH_DIR=PCH_DIR)
        if backend == "cuda":
            env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
        script = "import time, torch\nt0 = time.perf_counter()\n" + code + "\nprint('SECONDS', time.perf_counter() - t0)\n"
        script += "from cuda_gym.eval import fastbuild\nprint('FORMS', fastbuild.BUILD_FORMS)\n"
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        seconds = float(proc.stdout.split("SECONDS")[-1].split()[0])
        steps = ninja_steps(tmp)
        steps["forms"] = proc.stdout.split("FORMS")[-1].strip()
        return seconds, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--forms", default="native,load_inline,load_inline_split,load_inline_split_O3,load_inline_stripped")
    parser.add_argument("--out", default=str(ROOT / "cuda_gym_results"))
    args = parser.parse_args()
    import torch

    split = "from cuda_gym.eval import fastbuild\nfastbuild.install()"
    stripped = "from cuda_gym.eval import fastbuild\nfastbuild.install(split=False)"
    source = LOAD_INLINE[args.backend]
    forms = {
        "native": NATIVE[args.backend],
        "load_inline": source.replace("PREPARE", ""),
        "load_inline_split": source.replace("PREPARE", split),
        "load_inline_split_O3": source.replace("PREPARE", split).replace(
            'extra_cuda_cflags=["-O3"]', 'extra_cuda_cflags=["-O3"], extra_cflags=["-O3"]'),
        "load_inline_stripped": source.replace("PREPARE", stripped),
    }
    device = torch.cuda.get_device_name() if args.backend == "cuda" and torch.cuda.is_available() else "cpu"
    results: dict = {}
    payload = {
        "benchmark": "compile_latency",
        "date": dt.date.today().isoformat(),
        "backend": args.backend,
        "hardware": {"device": device, "cpu_count": os.cpu_count(), "machine": platform.machine()},
        "versions": {"torch": torch.__version__, "python": platform.python_version(),
                     "cuda": getattr(torch.version, "cuda", None)},
        "note": "cold builds, one at a time, each in a fresh process with an empty build directory; "
                "the accelerated forms reuse the precompiled headers built by the untimed warm-up",
        "results": results,
    }
    out = Path(args.out) / f"compile_latency_{args.backend}_{payload['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for form in args.forms.split(","):
        if form.startswith("load_inline_") and "precompiled_header_warmup_s" not in results:
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "cuda_gym.eval.fastbuild", PCH_DIR], check=True, capture_output=True)
            results["precompiled_header_warmup_s"] = time.perf_counter() - started
        seconds, steps = [], []
        for _ in range(args.repeats):
            total, breakdown = build_once(forms[form], args.backend)
            seconds.append(total)
            steps.append(breakdown)
            print(f"{form:<16} {total:8.2f} s  steps {breakdown}", flush=True)
        results[form] = {"median_s": statistics.median(seconds), "all_s": seconds, "ninja_steps_s": steps}
        out.write_text(json.dumps(payload, indent=1))  # after every form: a cut-off run keeps what it measured
    print(f"wrote {out}")
    for form, row in results.items():
        if isinstance(row, dict):
            print(f"{form:<16} median {row['median_s']:.2f} s")


if __name__ == "__main__":
    main()
