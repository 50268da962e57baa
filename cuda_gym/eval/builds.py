"""`Builds`: a candidate's build stage, in a CPU worker with CUDA hidden, cached by content.

A candidate key (its source, backend, torch version and CUDA arch) that built once is marked in
`<cache>/builds/<key>.ok` and not built again; at most `BUILD_CACHE_LIMIT` builds are kept. A failed
build is a verdict (COMPILE_ERROR, COMPILE_TIMEOUT, or RUNTIME_ERROR for an import that raised or
crashed), written into the `EvalResult`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

from .candidate import Candidate
from .config import EvalConfig
from .logs import trim_compile_log
from .pool import WorkerDied, WorkerPool, WorkerTimeout, run_job
from .protocol import Message
from .result import ErrorCode, EvalResult
from .worker_setup import WorkerSetup

BUILD_CACHE_LIMIT = 2000  # build directories kept; the oldest are removed beyond this


class Builds:
    """Builds candidates `build_workers` at a time on worker processes from `pool`."""

    def __init__(self, setup: WorkerSetup, pool: WorkerPool, build_workers: int, torch_version: str):
        self.setup = setup
        self.cache_dir = setup.cache_dir
        self.torch_version = torch_version
        self._pool = pool
        self._slots = threading.Semaphore(build_workers)
        self._header_lock = threading.Lock()
        self._header_checked = False

    def _prepare_precompiled_header(self) -> None:
        """Build cuda_gym's precompiled torch/extension.h ($CUDA_GYM_PCH_DIR, else `<cache>/pch`;
        fastbuild.py) once, here, outside any sandbox, before the first load_inline build: the fast
        forms compile their C++ file against it (docs/decisions/005-split-load-inline-builds.md).
        Workers read it, never write it."""
        with self._header_lock:
            if self._header_checked:
                return
            self._header_checked = True
            started = time.monotonic()
            env = os.environ | self.setup.base_env("cuda")
            try:
                proc = subprocess.run([sys.executable, "-m", "cuda_gym.eval.fastbuild", env["CUDA_GYM_PCH_DIR"]],
                                      capture_output=True, text=True, env=env, timeout=900)
            except subprocess.TimeoutExpired:
                proc = subprocess.CompletedProcess([], 1, "", "timed out after 900 s")
            if proc.returncode != 0 or "built nothing" not in proc.stdout:
                state = "ready" if proc.returncode == 0 else f"failed ({proc.stderr.strip()[-300:]})"
                print(f"cuda_gym: precompiled torch header for load_inline builds {state} after "
                      f"{time.monotonic() - started:.0f} s (once per cache directory)", file=sys.stderr)

    def build(self, candidate: Candidate, key: str, backend: str, config: EvalConfig, env: dict[str, str],
              result: EvalResult) -> bool:
        """Build `candidate` (cache key `key`) unless it built before; False, with the verdict in
        `result`, where the build failed."""
        marker = self.cache_dir / "builds" / f"{key}.ok"
        if marker.exists():
            result.build_cached = True
            os.utime(marker)
            return True
        if candidate.form == "python":
            return True  # nothing to compile; the policy check will judge it
        if candidate.form == "load_inline" and backend == "cuda":
            self._prepare_precompiled_header()
        started = time.monotonic()
        with self._slots:
            worker = self._pool.acquire(self.setup.spec("build", backend, config, env | {"CUDA_VISIBLE_DEVICES": ""}),
                                        spares=0)
            outcome: dict[str, Any] = {}

            def on_message(message: Message) -> bool:
                outcome[message.kind] = message.meta
                return message.kind not in ("built", "error")

            try:
                run_job(worker, {"candidate_source": candidate.source, "env": env | {"CUDA_VISIBLE_DEVICES": ""},
                                 "config": {"precision": config.precision}}, config.compile_timeout_s, on_message)
            except WorkerTimeout:
                outcome["timeout"] = True
            except WorkerDied as exc:
                outcome["died"] = str(exc)
            finally:
                log = worker.log_tail(config.max_log_chars)
                worker.kill()
        result.compile_seconds = round(time.monotonic() - started, 4)
        if "built" in outcome:
            forms = outcome["built"].get("inline_build_forms")  # written by candidate-side code: bounded
            if isinstance(forms, dict):
                result.inline_build_forms = {str(k)[:100]: str(v)[:600] for k, v in list(forms.items())[:20]}
            marker.write_text(f"{backend} torch {self.torch_version}\n")
            self._trim_build_cache()
            return True
        if outcome.get("timeout"):
            result.error_code = ErrorCode.COMPILE_TIMEOUT
            result.message = (f"the build ran past {config.compile_timeout_s:g} s and was stopped; "
                              "simplify the kernel source or use the cuda_gym.native form (no torch headers)")
        elif "error" in outcome:
            error = outcome["error"]
            code = error.get("code", "RUNTIME_ERROR")
            result.error_code = ErrorCode(code) if code in ErrorCode.__members__ else ErrorCode.RUNTIME_ERROR
            full = error.get("message", "")
            if result.error_code is ErrorCode.COMPILE_ERROR:
                result.message = "the build failed:\n" + trim_compile_log(full, max_errors=3, max_chars=1500)
            else:
                result.message = "the candidate module raised while it was imported: " + full[:1500]
            log = (full + "\n" + log)[-config.max_log_chars:]
        else:
            result.error_code = ErrorCode.RUNTIME_ERROR
            result.message = f"the candidate crashed while it was imported and built ({outcome.get('died', '')})"
        result.compile_log = log
        return False

    def _trim_build_cache(self) -> None:
        markers = sorted((self.cache_dir / "builds").glob("*.ok"), key=lambda p: p.stat().st_mtime)
        for marker in markers[:-BUILD_CACHE_LIMIT]:
            # The marker first: one left over a half-deleted build would skip that build next time.
            marker.unlink(missing_ok=True)
            shutil.rmtree(self.cache_dir / "inline" / marker.stem, ignore_errors=True)

