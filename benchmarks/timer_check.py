"""A quick check of cuda_gym's Timer on the GPU (seconds): loads the hold kernel, times gelu at the
built-in task size with held repeats, and prints what was reported. Exits 1 when the held path
fails (then run the session with CUDA_GYM_TIMER_HOLD=0: every repeat open).

    python benchmarks/timer_check.py
"""
from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.nn.functional as F

from cuda_gym.eval.timing import HOLD_LIBRARY_ENV, Timer, build_hold_library, prepare_hold


def main() -> int:
    directory = tempfile.mkdtemp(prefix="cg-hold-")
    os.environ[HOLD_LIBRARY_ENV] = str(build_hold_library(directory, torch.cuda.get_device_capability()))
    ready = prepare_hold()
    x = torch.randn(8192, 8192, device="cuda")
    live = [x.clone()]
    sets = [torch.randn_like(x) for _ in range(3)]
    timer = Timer("cuda", warmup_reps=3, reps=40, min_reps=10, budget_s=1.0, l2_flush=True)
    stats, flags, sums = timer.run(F.gelu, live, lambda k: live[0].copy_(sets[k]), 3,
                                   lambda out: [float(out.sum())])
    print(f"hold ready: {ready}; reported {stats.method} median {stats.median_ms:.4f} ms "
          f"(iqr {stats.iqr_ms:.4f}, {stats.reps} reps), flags {flags}, {len(sums)} checksums, {stats.detail}")
    return 0 if ready and stats.method == "cuda_event_held" and len(sums) >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
