"""What the workers' fork server imports once, beside the worker code (pool.py), so that no fresh
worker pays for it: torch.compile's compiler. A compile baseline's first call in a fresh worker
spent about 2.5 s importing it (2.6 s on the 2-core CPU; the H200's warm-cache compile took 3.3 s
in all). The import touches no CUDA and starts no thread. It sets TORCHINDUCTOR_CACHE_DIR, which is
taken back here, so that each worker still finds its inductor cache from its own environment (an
eval worker's under its sandboxed TMPDIR, a baseline worker's in the shared default)."""
from __future__ import annotations

import os

_cache_dir_was_set = "TORCHINDUCTOR_CACHE_DIR" in os.environ

import torch._dynamo  # noqa: E402,F401
import torch._inductor.compile_fx  # noqa: E402,F401

if not _cache_dir_was_set:
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
