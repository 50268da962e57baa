"""Code that runs inside a worker process (never in the evaluator's or the environment's process).

One process per job, forked from a fork server that has already imported torch, so a job pays
neither interpreter start nor the torch import; `pool.py` starts them and kills them with their
whole process group. Jobs:

- probe: report the backend and device (the evaluator's process never initializes CUDA itself).
- build: execute the candidate module with CUDA hidden, which compiles its native code into the
  build cache; the eval job then finds it built.
- eval: reference outputs first (sent out before any candidate code runs), then the candidate's
  correctness trials under the op recorder, then timing with checksums of every timed output.
- baseline: time the reference eagerly and under `torch.compile`.

Every message leaves through `protocol.encode`; the evaluator judges; this process only reports.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
import types
from typing import Any

import numpy as np
import torch
# Imported here, before any snapshot: importing them later rebinds torch attributes
# (torch._dynamo wraps torch.manual_seed), which would look like tampering.
import torch._dynamo  # noqa: F401
import torch.profiler  # noqa: F401
import torch.utils.cpp_extension  # noqa: F401

from .. import native
from ..tasks.task import load_task_namespace
from . import fastbuild, guard, protocol, sandbox
from .config import EvalConfig
from .correctness import flatten_outputs, make_draws, output_stats, reshuffle
from .timing import Timer

_perf_counter = time.perf_counter


class _Channel:
    def __init__(self, conn: Any):
        self._conn = conn

    def send(self, kind: str, meta: dict | None = None, arrays: list[np.ndarray] = ()) -> None:
        self._conn.send_bytes(protocol.encode(kind, meta, list(arrays)))


FULL_COMPARE_MAX_ELEMENTS = 1 << 20  # larger outputs are compared on the device, and sampled
SAMPLE_SIZE = 8192


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value)
    raise TypeError(f"forward returned a {type(value).__name__}; outputs must be tensors or numbers")


def _sample_positions(numel: int, seed: int, device: Any) -> torch.Tensor:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randint(0, numel, (SAMPLE_SIZE,), generator=generator, device=device)


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return tensor.cpu().contiguous().numpy()


def _describe(output: Any, sample_seed: int, reference: list[torch.Tensor] | None = None,
              config: Any = None) -> tuple[list[np.ndarray], list[dict]]:
    """What leaves the worker about one forward's outputs: each output whole when small, else a
    sample at seeded positions plus (for a candidate) its error statistics computed here."""
    arrays, specs = [], []
    for index, value in enumerate(flatten_outputs(output)):
        tensor = _as_tensor(value)
        spec: dict[str, Any] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", ""),
                                "full": tensor.numel() <= FULL_COMPARE_MAX_ELEMENTS}
        if spec["full"]:
            arrays.append(_host_array(tensor))
        else:
            positions = _sample_positions(tensor.numel(), sample_seed + index, tensor.device)
            arrays.append(_host_array(tensor.reshape(-1)[positions]))
            if reference is not None and index < len(reference):
                ref = reference[index]
                if tuple(ref.shape) == tuple(tensor.shape) and ref.dtype == tensor.dtype:
                    spec["stats"] = output_stats(tensor, ref, config)
        specs.append(spec)
    return arrays, specs


def _checksum(output: Any) -> list[float]:
    """Sum and L1 norm of each output, accumulated in float64 (no float64 copy of the output)."""
    sums = []
    for value in flatten_outputs(output):
        if isinstance(value, torch.Tensor):
            value = value.detach()
            if not value.is_floating_point():
                value = value.double()
            sums += [float(value.sum(dtype=torch.float64)),
                     float(torch.linalg.vector_norm(value, 1, dtype=torch.float64))]
        else:
            sums += [float(value), abs(float(value))]
    return sums


def _to_device(value: Any, device: str) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _set_precision(precision: str) -> None:
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def _init_device(backend: str, cpu_threads: int | None) -> str:
    if backend == "cuda":
        torch.cuda.init()
        warm = torch.ones(1024, device="cuda")
        # Start the profiler once while this worker is a spare: CUPTI's first start costs far more
        # than the kernel check on the candidate's first trial should.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            warm.add_(1.0)
            torch.cuda.synchronize()
        return torch.cuda.get_device_name()
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    return f"cpu ({torch.get_num_threads()} threads)"


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class _TaskSetup:
    """The reference model and all input draws, built before candidate code exists here."""

    def __init__(self, job: dict, device: str):
        config = job["config"]
        self.namespace = load_task_namespace(job["task_source"], job["sizes"], job["task_id"])
        self.init_inputs = list(self.namespace["get_init_inputs"]())
        # Built on the device directly: creating large inputs and weights on the CPU costs seconds.
        with torch.device(device):
            torch.manual_seed(job["seed"])
            self.model = self.namespace["Model"](*self.init_inputs).to(device).eval()
            torch.manual_seed(job["seed"] + 1)
            base = [_to_device(v, device) for v in self.namespace["get_inputs"]()]
        self.base = base
        count = config["correctness_trials"] + config["timing_input_sets"]
        draws = make_draws(base, count, job["seed"] + 2, device)
        self.draws = []
        self.reference_outputs: list[list[torch.Tensor]] = []
        with torch.no_grad():
            for index, draw in enumerate(draws):
                outputs = [_as_tensor(v) for v in flatten_outputs(self.model(*[_clone(v) for v in draw.inputs]))]
                if not all(torch.isfinite(o).all() for o in outputs if o.is_floating_point()):
                    draw = reshuffle(draw, base, job["seed"] + 100 + index, device)
                    outputs = [_as_tensor(v) for v in flatten_outputs(self.model(*[_clone(v) for v in draw.inputs]))]
                self.draws.append(draw)
                self.reference_outputs.append(outputs)  # kept alive: their memory is never handed out
        self.trials = self.draws[: config["correctness_trials"]]
        self.timing_sets = self.draws[config["correctness_trials"]:]


def _time_model(model: Any, setup: _TaskSetup, device: str, config: dict) -> tuple[Any, list[str], list]:
    timer = Timer(device, warmup_reps=config["warmup_reps"], reps=config["timing_reps"],
                  min_reps=config["timing_min_reps"], budget_s=config["timing_budget_s"],
                  l2_flush=config["l2_flush"])
    live = [_clone(v) for v in setup.timing_sets[0].inputs]

    def load_set(which: int) -> None:
        for dst, src in zip(live, setup.timing_sets[which].inputs):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)

    return timer.run(model, live, load_set, len(setup.timing_sets), _checksum)


def _sample_seed(job: dict, draw_index: int) -> int:
    return job["seed"] * 1_000_003 + 1000 * draw_index + 7


def _config_for_stats(config: dict) -> EvalConfig:
    return EvalConfig(precision=config["precision"])


def _stats_meta(stats: Any) -> dict:
    return dict(stats.__dict__)


def _poison(reference_outputs: list[Any], device: str) -> None:
    """Hand the allocator blocks full of NaN in the sizes the candidate is likely to request."""
    poison = []
    for outputs in reference_outputs[:2]:
        for value in outputs:
            if value.is_floating_point():
                poison.append(torch.full_like(value, float("nan")))
    _sync(device)
    del poison


def _load_candidate(source: str) -> types.ModuleType:
    module = types.ModuleType("candidate")
    module.__file__ = os.path.join(os.getcwd(), "candidate.py")
    sys.modules["candidate"] = module
    exec(compile(source, "candidate.py", "exec"), module.__dict__)
    return module


def _classify_load_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if ("Error building extension" in text or "CalledProcessError" in text or "ninja" in text.lower()
            or "undefined symbol" in text or "could not be loaded" in text):
        return "COMPILE_ERROR"
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return "OUT_OF_MEMORY"
    return "RUNTIME_ERROR"


def _error(channel: _Channel, code: str, message: str, **meta: Any) -> None:
    channel.send("error", {"code": code, "message": message, **meta})


def _run_build(channel: _Channel, job: dict) -> None:
    started = _perf_counter()
    fastbuild.install()
    try:
        _load_candidate(job["candidate_source"])
    except BaseException as exc:  # noqa: BLE001 - every failure is reported as a verdict
        _error(channel, _classify_load_error(exc), f"{type(exc).__name__}: {exc}",
               traceback=traceback.format_exc(limit=8))
        return
    channel.send("built", {"seconds": _perf_counter() - started})


def _run_baseline(channel: _Channel, job: dict, device: str) -> None:
    config = job["config"]
    setup = _TaskSetup(job, device)
    result: dict[str, Any] = {}
    if "eager" in config["baselines"]:
        stats, _, _ = _time_model(setup.model, setup, device, config)
        result["eager"] = _stats_meta(stats)
    if "compile" in config["baselines"]:
        compiled = torch.compile(setup.model)
        started = _perf_counter()
        with torch.no_grad():
            compiled(*[_clone(v) for v in setup.timing_sets[0].inputs])
        result["compile_warmup_s"] = _perf_counter() - started
        stats, _, _ = _time_model(compiled, setup, device, config)
        result["compile"] = _stats_meta(stats)
    channel.send("baseline", result)


def _run_eval(channel: _Channel, job: dict, device: str) -> None:
    config = job["config"]
    policy = config["policy"]
    started = _perf_counter()
    try:
        setup = _TaskSetup(job, device)
    except BaseException as exc:  # noqa: BLE001
        _error(channel, "TASK_ERROR", f"the reference failed: {type(exc).__name__}: {exc}",
               traceback=traceback.format_exc(limit=8))
        return
    arrays: list[np.ndarray] = []
    specs: list[list[dict]] = []
    for index, outputs in enumerate(setup.reference_outputs):
        draw_arrays, draw_specs = _describe(outputs, _sample_seed(job, index))
        arrays += draw_arrays
        specs.append(draw_specs)
    timing_checksums = [_checksum(o) for o in setup.reference_outputs[config["correctness_trials"]:]]
    channel.send("reference", {"distributions": [d.distribution for d in setup.draws], "outputs": specs,
                               "timing_checksums": timing_checksums, "seconds": _perf_counter() - started}, arrays)

    tamper = guard.TamperCheck(device)
    fastbuild.install()
    guard.count_native_calls()
    started = _perf_counter()
    try:
        module = _load_candidate(job["candidate_source"])
        model_class = getattr(module, "ModelNew", None)
        if model_class is None:
            _error(channel, "INVALID_ACTION", "the candidate module defines no ModelNew")
            return
        torch.manual_seed(job["seed"])
        with torch.device(device):
            model = model_class(*setup.init_inputs)
        if not isinstance(model, torch.nn.Module):
            _error(channel, "INVALID_ACTION", "ModelNew(...) is not a torch.nn.Module")
            return
        flags = []
        try:
            model.load_state_dict(setup.model.state_dict())
        except (RuntimeError, KeyError, ValueError):
            flags.append("weights_not_shared")  # different parameter names: same seed instead
        model = model.to(device).eval()
    except BaseException as exc:  # noqa: BLE001
        _error(channel, _classify_load_error(exc), f"{type(exc).__name__}: {exc}",
               traceback=traceback.format_exc(limit=8))
        return
    channel.send("loaded", {"seconds": _perf_counter() - started})

    forbidden: dict[str, int] = {}
    kernels: list[str] = []
    native_calls = 0
    for index, draw in enumerate(setup.trials):
        inputs = [_clone(v) for v in draw.inputs]
        _poison(setup.reference_outputs, device)
        recorder = guard.OpRecorder()
        calls_before = guard.native_call_total()
        profiler = None
        if device == "cuda" and index == 0:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            profiler.__enter__()
        try:
            with torch.no_grad(), recorder:
                output = model(*inputs)
                still_recording = recorder.is_active()
            _sync(device)
        except BaseException as exc:  # noqa: BLE001
            code = "OUT_OF_MEMORY" if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) else "RUNTIME_ERROR"
            _error(channel, code, f"forward raised {type(exc).__name__}: {exc}",
                   traceback=traceback.format_exc(limit=8))
            return
        finally:
            if profiler is not None:
                profiler.__exit__(None, None, None)
        native_calls += guard.native_call_total() - calls_before
        if profiler is not None:
            kernels = sorted({e.name for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA
                              and not e.name.startswith(("Memcpy", "Memset"))})
        for op, count in recorder.ops.items():
            if not guard.op_is_allowed(op, policy):
                forbidden[op] = forbidden.get(op, 0) + count
        mutated = [i for i, (before, after) in enumerate(zip(draw.inputs, inputs))
                   if isinstance(before, torch.Tensor) and not torch.equal(before, after)]
        try:
            arrays, specs = _describe(output, _sample_seed(job, index), setup.reference_outputs[index],
                                      _config_for_stats(config))
        except TypeError as exc:
            _error(channel, "INCORRECT", str(exc))
            return
        channel.send("trial", {"index": index, "outputs": specs, "mutated_inputs": mutated,
                               "recording_intact": still_recording, "tampered": tamper.changes()}, arrays)
        del output

    checks = {"forbidden_ops": forbidden, "kernels": kernels, "native_calls": native_calls,
              "tampered": tamper.changes(), "flags": flags}
    channel.send("checks", checks)
    if forbidden and policy == "strict":
        return  # the verdict is FORBIDDEN; timing it would only cost time
    stats, timing_flags, sums = _time_model(model, setup, device, config)
    channel.send("timing", {"stats": _stats_meta(stats), "flags": timing_flags, "checksums": sums,
                            "tampered": tamper.changes()})


def worker_main(conn: Any, setup: dict) -> None:
    """Entry point of a worker process; `setup` is JSON-able (see pool.py)."""
    channel = _Channel(conn)
    try:
        sandbox.new_session()
        sandbox.redirect_output(setup["log_path"])
        os.chdir(setup["scratch_dir"])
        os.environ.update(setup["env"])
        failed = sandbox.apply_limits(max_file_mb=setup["max_file_mb"], address_space_gb=setup["address_space_gb"])
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
        device_name = "" if setup["role"] == "build" else _init_device(backend, setup.get("cpu_threads"))
        channel.send("ready", {"device": device_name, "limits_not_applied": failed, "network_isolated": isolated})
        job = json.loads(conn.recv_bytes())
        _set_precision(job["config"]["precision"])
        if setup["role"] == "build":
            _run_build(channel, job)
        elif setup["role"] == "baseline":
            _run_baseline(channel, job, backend)
        else:
            _run_eval(channel, job, backend)
    except BaseException as exc:  # noqa: BLE001
        try:
            _error(channel, "RUNTIME_ERROR", f"worker failed: {type(exc).__name__}: {exc}",
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
