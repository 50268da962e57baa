"""What the workers' fork server does once, beside importing the worker code (pool.py), so that no
fresh worker pays for it at its first torch.compile (docs/decisions/010-fork-server-preloads.md):
- import torch.compile's compiler;
- inductor's check of which vector instructions its C++ (CPU) kernels may use (a dry compile per
  instruction set and a child Python that loads each result). Every forked worker inherits the
  answer it would have found itself (same machine, compiler and torch), and a sandboxed worker need
  not spawn the compiler and a child Python for it. Not where torch is a CUDA build on a machine
  with an NVIDIA driver: its workers compile for the GPU, and the check would only delay the first
  worker. A worker's own environment (WorkerSpec.env) does not enter the check; inductor's settings
  for it (TORCHINDUCTOR_VEC_ISA_OK, the C++ compiler) are read here, from the evaluator's environment;
- inductor's hash of torch's own source files (part of every compiled graph's cache key).
The import, the check and the hash touch no CUDA and leave no thread running. The import sets
TORCHINDUCTOR_CACHE_DIR, which is taken back here, so that each worker still finds its inductor
cache from its own environment (an eval worker's under its sandboxed TMPDIR, a baseline worker's in
the shared default)."""
from __future__ import annotations

import os

_cache_dir_was_set = "TORCHINDUCTOR_CACHE_DIR" in os.environ

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401
import torch._inductor.compile_fx  # noqa: E402,F401


def compiles_for_a_gpu() -> bool:
    """A CUDA build of torch on a machine with an NVIDIA driver (asks no CUDA library): the
    workers compile for the GPU, and the CPU's vector-ISA check is left to any that need it."""
    return bool(torch.version.cuda) and os.path.exists("/dev/nvidiactl")


def _check_cpu_vector_isa() -> None:
    """inductor's own check (its result is cached in this process, and so in every fork). Where
    it finds no usable instruction set (no C++ compiler, a full disk, a probe that timed out), its
    cached answer is dropped, so that each worker checks for itself, as it did without this."""
    if compiles_for_a_gpu():
        return
    try:
        from torch._inductor.cpu_vec_isa import VecISA, pick_vec_isa, valid_vec_isa_list

        if not pick_vec_isa():
            valid_vec_isa_list.cache_clear()
            VecISA._VecISA__bool__impl.cache_clear()  # each instruction set's own cached answer
    except Exception:  # noqa: BLE001 - the workers check for themselves then
        pass


def _hash_torch_source() -> None:
    """inductor's `torch_key` (cached in this process, and so in every fork)."""
    try:
        from torch._inductor.codecache import torch_key

        torch_key()
    except Exception:  # noqa: BLE001 - each worker computes it then
        pass


_check_cpu_vector_isa()
_hash_torch_source()

if not _cache_dir_was_set:
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
