"""A worker's device, made ready while the worker is a spare: CUDA initialized, the kernels every job
uses loaded, the timer's hold kernel prepared; the CPU's thread count; the precision flags; a device
synchronize."""
from __future__ import annotations

import torch

from . import output_digest
from .output_report import host_array
from .timing import prepare_hold


def set_precision(precision: str) -> None:
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def warm_up_kernels(device: str) -> None:
    """Load, while this worker is a spare, the kernels every job uses (input draws, rotations,
    checksums, samples) and the cuBLAS/cuDNN handles most references use: with lazy module
    loading each costs milliseconds on first use, which the job would otherwise pay."""
    generator = torch.Generator(device=device)
    generator.manual_seed(0)
    x = torch.randn(64, 64, device=device)
    y = torch.roll(x.reshape(-1), 7).reshape(x.shape)
    y.copy_(x)
    output_digest.DigestMaker(1)([x @ y, torch.rand(64, device=device, dtype=torch.float64)], 0)
    positions = torch.randint(0, x.numel(), (16,), generator=generator, device=device)
    host_array(x.reshape(-1)[positions])
    torch.isfinite(x).all()
    torch.nn.functional.conv2d(x.view(1, 1, 64, 64), torch.ones(1, 1, 3, 3, device=device))
    torch.empty(1024, device=device).zero_()
    # Its first call settles lazy global state (on Hopper it moves cuDNN attention to the front of the
    # SDP priority order), which the switch watch would otherwise charge to a candidate calling it.
    query = torch.randn(1, 1, 8, 8, device=device)
    torch.nn.functional.scaled_dot_product_attention(query, query, query)
    sync(device)


def init_device(backend: str, cpu_threads: int | None) -> str:
    if backend == "cuda":
        torch.cuda.init()
        torch.ones(1024, device="cuda")
        # No CUDA profiler (CUPTI) before the timing: once it has run in a process, every later kernel
        # launch costs more host time (docs/decisions/001-no-profiler-before-timing.md).
        warm_up_kernels("cuda")
        prepare_hold()  # the timer's hold kernel, loaded before any candidate code
        return torch.cuda.get_device_name()
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    return f"cpu ({torch.get_num_threads()} threads)"


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
