"""The entry point of a worker process (never the evaluator's or the environment's process): it
confines the process (sandbox.py), readies the device, reads one job and runs it.

One process per job, forked from a fork server that has already imported torch, so a job pays
neither interpreter start nor the torch import; `pool.py` starts them and kills them with their
whole process group. Jobs:

- probe: report the backend and device (the evaluator's process never initializes CUDA itself).
- build (candidate_load.py): execute the candidate module with CUDA hidden, which compiles its
  native code into the build cache; the eval job then finds it built.
- eval (eval_job.py): reference outputs first (sent out before any candidate code runs), then the
  candidate timed with a digest of every timed output, then its correctness trials under the op
  recorder.
- baseline (baseline_job.py): time the reference eagerly and under `torch.compile`; or prewarm,
  torch.compile's untimed first call of a task.

Every message leaves through the job's Channel (channel.py); the evaluator judges; this process
only reports.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import torch
# Imported here, before any snapshot: importing them later rebinds torch attributes
# (torch._dynamo wraps torch.manual_seed), which would look like tampering.
import torch._dynamo  # noqa: F401
import torch.profiler  # noqa: F401
import torch.utils.cpp_extension  # noqa: F401

from . import sandbox
from .baseline_job import run_baseline, run_prewarm
from .candidate_load import run_build
from .channel import Channel, send_error
from .eval_job import run_eval
from .tripwire import prescan_code
from .worker_device import init_device, set_precision


def worker_main(conn: Any, setup: dict) -> None:
    """Entry point of a worker process; `setup` is JSON-able (see pool.py)."""
    channel = Channel(conn)
    try:
        failed = [] if sandbox.die_with_parent() else ["die_with_parent"]  # limits not applied
        sandbox.new_session()
        sandbox.redirect_output(setup["log_path"])
        sandbox.close_inherited_fds(keep=[conn.fileno()])
        os.chdir(setup["scratch_dir"])
        os.environ.update(setup["env"])
        failed += sandbox.apply_limits(max_file_mb=setup["max_file_mb"], address_space_gb=setup["address_space_gb"])
        confined = setup["role"] in ("build", "eval")
        if setup.get("yield_cpu"):
            failed += sandbox.yield_cpu()
        if confined:
            failed += [] if sandbox.contain_children() else ["child_watchdog"]
        # CUDA eval workers apply Landlock after the driver is up, so that no rule set can fail the
        # driver's first-use setup (benchmarks/cuda_sandbox_probe.py tries each order).
        cuda_first = setup["role"] == "eval" and setup["backend"] == "cuda"
        if confined and not cuda_first:
            failed += sandbox.restrict_writes(sandbox.writable_paths(setup["scratch_dir"]))
        isolated = sandbox.isolate_network() if setup["isolate_network"] else False
        backend = setup["backend"]
        if setup["role"] == "probe":
            ok = backend == "cuda" and torch.cuda.is_available()
            info = {"backend": "cuda" if ok else "cpu", "torch_version": torch.__version__}
            if ok:
                info["device"] = torch.cuda.get_device_name()
                info["capability"] = list(torch.cuda.get_device_capability())
            channel.send("probe", info)
            return
        # A deferred worker readies the device when its job arrives (pool.py: it may have started
        # while another job held the device).
        deferred = bool(setup.get("defer_device")) and setup["role"] != "build"
        device_name = "" if setup["role"] == "build" or deferred else init_device(backend, setup.get("cpu_threads"))
        if setup["role"] in ("eval", "baseline"):
            prescan_code()  # the tripwire's walk of the evaluator's code, done while a spare
        if cuda_first and not deferred:
            failed += sandbox.restrict_writes(sandbox.writable_paths(setup["scratch_dir"]))
        channel.send("ready", {"device": device_name, "limits_not_applied": failed, "network_isolated": isolated})
        job = json.loads(conn.recv_bytes())
        channel.authenticate(job.pop("channel_key", None))
        job.setdefault("limits_not_applied", [])
        if deferred:
            init_device(backend, setup.get("cpu_threads"))
            if cuda_first:
                job["limits_not_applied"] += sandbox.restrict_writes(sandbox.writable_paths(setup["scratch_dir"]))
        # The job's own environment (TORCH_EXTENSIONS_DIR: this candidate's build directory). A
        # warm spare started before the job was known; a second Landlock layer narrows its writes
        # from every candidate's build directory to this candidate's.
        job_env = job.pop("env", None) or {}
        os.environ.update(job_env)
        if confined and setup["role"] == "eval" and job_env.get("TORCH_EXTENSIONS_DIR"):
            job["limits_not_applied"] += sandbox.restrict_writes(sandbox.writable_paths(setup["scratch_dir"]))
        set_precision(job["config"]["precision"])
        if setup["role"] == "build":
            run_build(channel, job)
        elif setup["role"] == "baseline" and job.get("prewarm"):
            run_prewarm(channel, job, backend)
        elif setup["role"] == "baseline":
            run_baseline(channel, job, backend)
        else:
            run_eval(channel, job, backend)
    except BaseException as exc:  # noqa: BLE001
        try:
            send_error(channel, "RUNTIME_ERROR", f"worker failed: {type(exc).__name__}: {exc}",
                       traceback=traceback.format_exc(limit=8))
        except (OSError, ValueError):
            pass
    finally:
        try:
            channel.send("exit", {})
            conn.close()
        except (OSError, ValueError):
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
