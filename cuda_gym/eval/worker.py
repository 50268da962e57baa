"""Code that runs inside a worker process (never in the evaluator's or the environment's process).

One process per job, forked from a fork server that has already imported torch, so a job pays
neither interpreter start nor the torch import; `pool.py` starts them and kills them with their
whole process group. Jobs:

- probe: report the backend and device (the evaluator's process never initializes CUDA itself).
- build: execute the candidate module with CUDA hidden, which compiles its native code into the
  build cache; the eval job then finds it built.
- eval: reference outputs first (sent out before any candidate code runs), then the candidate's
  correctness trials under the op recorder, then timing with a digest of every timed output.
- baseline: time the reference eagerly and under `torch.compile`.

Every message leaves through `protocol.encode`; the evaluator judges; this process only reports.
"""
from __future__ import annotations

import contextlib
import copy
import importlib
import json
import linecache
import os
import random
import re
import secrets
import statistics
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

from ..tasks.task import load_task_namespace
from . import fastbuild, memory, output_digest, protocol, sandbox, triton_support
from .config import EvalConfig, device_time
from .correctness import (Draw, ToleranceFloor, degenerate_reason, draw_label, flatten_outputs, make_draw,
                          output_stats, reshuffle, tolerance_floor)
from .native_calls import count_native_calls, native_call_total
from .op_policy import op_is_allowed
from .recorder import OpRecorder
from .tamper import TamperCheck
from .timed_inputs import InputsChanged, TimedInputs, TimedLoader, copy_into
from .timing import MAX_EXTRA_WARMUPS, PAIRS, ReferenceCallFailed, Timer, handles, prepare_hold, time_pairs
from .tripwire import prescan_code

_perf_counter = time.perf_counter


class _Channel:
    def __init__(self, conn: Any):
        self._conn = conn
        self._key: bytes | None = None
        self._seq = 0

    def authenticate(self, key_hex: str | None) -> None:
        """Sign every later message with the job's key (see sandbox.sign)."""
        self._key = bytes.fromhex(key_hex) if key_hex else None

    def send(self, kind: str, meta: dict | None = None, arrays: list[np.ndarray] = ()) -> None:
        if self._key is not None and kind != "exit":
            meta = sandbox.sign(self._key, self._seq, kind, meta or {}, list(arrays))
            self._seq += 1
        self._conn.send_bytes(protocol.encode(kind, meta, list(arrays)))


FULL_COMPARE_MAX_ELEMENTS = 1 << 20  # larger outputs are compared on the device, and sampled
SAMPLE_SIZE = 8192


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if type(value) not in _PLAIN_TENSORS:  # a subclass can defer its work
            raise TypeError(f"forward returned a tensor subclass ({type(value).__name__}); outputs must be "
                            "plain torch.Tensor objects")
        return value.detach()
    if type(value) in (bool, int, float):  # exactly: a subclass's __float__ would be the candidate's code
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
              config: Any = None, floors: list[ToleranceFloor | None] = ()) -> tuple[list[np.ndarray], list[dict]]:
    """What leaves the worker about one forward's outputs: each output whole when small, else a
    sample at seeded positions plus (for a candidate) its error statistics computed here, with
    each output's widened tolerances where the reference is rounding noise (`floors`)."""
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
                    spec["stats"] = output_stats(tensor, ref, config, floors[index] if index < len(floors) else None)
        specs.append(spec)
    return arrays, specs


def _to_device(value: Any, device: str) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _compact(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`, or a copy of it where its storage is larger than itself: the kept reference outputs
    must hold what the memory plan counts for them (numel x element size). F.smooth_l1_loss and
    F.mse_loss with a reduction return a 0-dim tensor on an input-sized storage (ATen sizes the
    output like the input, then resizes it to ()), and a view output keeps its whole base alive: on
    KernelBench's L1/96_HuberLoss the five kept outputs held 20 GiB the plan saw as 20 bytes (peak
    76.1 GiB against a 64 GiB budget, 2026-12-05)."""
    try:
        larger = tensor.layout == torch.strided and tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size()
    except (RuntimeError, NotImplementedError):  # no plain storage (a subclass, a nested tensor): kept as it is
        return tensor
    return tensor.clone() if larger else tensor


def _set_precision(precision: str) -> None:
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def _warm_up_kernels(device: str) -> None:
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
    _host_array(x.reshape(-1)[positions])
    torch.isfinite(x).all()
    torch.nn.functional.conv2d(x.view(1, 1, 64, 64), torch.ones(1, 1, 3, 3, device=device))
    torch.empty(1024, device=device).zero_()
    # Its first call settles lazy global state (on Hopper it moves cuDNN attention to the front of the
    # SDP priority order), which the switch watch would otherwise charge to a candidate calling it.
    query = torch.randn(1, 1, 8, 8, device=device)
    torch.nn.functional.scaled_dot_product_attention(query, query, query)
    _sync(device)


def _init_device(backend: str, cpu_threads: int | None) -> str:
    if backend == "cuda":
        torch.cuda.init()
        torch.ones(1024, device="cuda")
        # No CUDA profiler (CUPTI) here: once it has run in a process, every later kernel launch
        # costs more host time (on the H200, host-bound level-3 models timed 20-38% slower after
        # it, and a second session moved them again: timing_parity_cuda_h200_2026-12-01_call1.json).
        # Workers time under the same conditions only if none runs before the timing.
        _warm_up_kernels("cuda")
        prepare_hold()  # the timer's hold kernel, loaded before any candidate code
        return torch.cuda.get_device_name()
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    return f"cpu ({torch.get_num_threads()} threads)"


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _reference_and_inputs(namespace: dict, seed: int, device: str) -> tuple[list[Any], Any, list[Any]]:
    """The task's init inputs, its reference model in eval mode and its base inputs, each seeded as
    every worker seeds them (the prewarm's compile then sees what the baseline worker's does)."""
    init_inputs = list(namespace["get_init_inputs"]())
    # Built on the device directly: creating large inputs and weights on the CPU costs seconds.
    with torch.device(device):
        torch.manual_seed(seed)
        model = namespace["Model"](*init_inputs).to(device).eval()
        torch.manual_seed(seed + 1)
        inputs = [_to_device(v, device) for v in namespace["get_inputs"]()]
    return init_inputs, model, inputs


class _TaskSetup:
    """The reference model, the task's base inputs and the memory plan, built before candidate
    code exists here. Input draws are made on demand (`draw`, deterministic from the seed) and only
    what the plan allows stays resident: the base inputs, a reference output per correctness trial
    while they fit (`reference_outputs`, None where it is recomputed after the candidate's trial)
    and the timing input sets (`timing_sets`)."""

    def __init__(self, job: dict, device: str):
        config = job["config"]
        self.device = device
        self.seed = job["seed"]
        self.trial_count = config["correctness_trials"]
        self.namespace = load_task_namespace(job["task_source"], job["sizes"], job["task_id"])
        self.init_inputs, self.model, self.base = _reference_and_inputs(self.namespace, self.seed, device)
        self.fallback: set[int] = set()  # draws whose transform made the reference non-finite
        self.distributions: list[str] = []
        self.reference_outputs: list[list[torch.Tensor] | None] = []
        self.timing_sets: list[list[Any]] = []
        self.timed_inputs: TimedInputs | None = None  # made with the timing sets
        used = memory.device_used_bytes(device)
        # The first reference pass measures the outputs and the reference's own workspace (beyond
        # its copy of the inputs, which the plan counts apart).
        first_inputs = [_clone(v) for v in self.base]
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with_copy = memory.device_used_bytes(device)
        self.first_output = self.reference_output(0, first_inputs)
        del first_inputs
        if not _finite(self.first_output):
            self.fallback.add(0)
            self.first_output = self.reference_output(0)
        self.output_nbytes = [o.numel() * o.element_size() for o in self.first_output]
        output_bytes = sum(self.output_nbytes)
        extra = (torch.cuda.max_memory_allocated() - with_copy - output_bytes) if device == "cuda" else output_bytes
        # Copies of the weights made after the plan (the job's `model_copies`, the same in baseline and
        # eval jobs so that both keep the same draws resident): the candidate's model or the baseline's
        # fresh reference, and the host pairing's reference instance. Where that second copy does not
        # fit, the plan is made without it and the pairing is skipped.
        self.weight_bytes = weights = memory.tensor_bytes([*self.model.parameters(), *self.model.buffers()])
        budget = memory.device_budget_bytes(device, config.get("device_memory_gb"))

        def plan(copies: int) -> memory.MemoryPlan:
            return memory.plan_memory(
                input_bytes=memory.tensor_bytes(self.base), output_bytes=output_bytes,
                reference_extra_bytes=max(0, int(extra)), used_bytes=used, budget_bytes=budget,
                trials=self.trial_count, timing_sets=config["timing_input_sets"],
                min_slack_bytes=memory.CUDA_SLACK_MIN_BYTES if device == "cuda" else 0,
                model_copy_bytes=copies * weights)

        copies = int(job.get("model_copies", 1))
        self.pairing_unplanned = ""
        try:
            self.plan = plan(copies)
        except memory.NotEnoughMemory:
            if copies < 2:
                raise
            self.plan = plan(1)
            self.pairing_unplanned = (f"the paired reference's copy of the weights ({weights / memory.GIB:.2f} GiB) "
                                      "does not fit the memory plan")
        self.stats_config = _config_for_stats(config)
        # The fp32 reference against its float64 twin, per trial and output (`_measure_reference_error`).
        self.reference_error: list[list[dict[str, float] | None]] = []
        self.reference_error_skipped = ""  # why it was not measured: the policy's tolerances then stand
        self.reference_error_seconds = 0.0
        # The evaluator's copy of an earlier job's measurement of this task (same sizes, seed and draws).
        known = job.get("reference_error")
        self.known_reference_error = (known["draws"] if isinstance(known, dict) and isinstance(known.get("draws"), list)
                                      and len(known["draws"]) == self.trial_count else None)

    def draw(self, index: int) -> Draw:
        """Draw `index` (0: the task's own inputs, the objects themselves; clone before use)."""
        if index in self.fallback:
            return reshuffle(self.base, self.seed + 100 + index, self.device)
        return make_draw(self.base, index, self.seed + 2, self.device)

    def reference_output(self, index: int, inputs: list[Any] | None = None) -> list[torch.Tensor]:
        """The reference's outputs on draw `index` (or on `inputs`, that draw already made). A
        draw whose outputs are not finite is replaced, once, by a plain shuffle of the base."""
        def forward(values: list[Any]) -> list[torch.Tensor]:
            if any(a is b for a, b in zip(values, self.base)):
                values = [_clone(v) for v in values]  # the base stays pristine
            return [_compact(_as_tensor(v)) for v in flatten_outputs(self.model(*values))]

        with torch.no_grad():
            outputs = forward(inputs if inputs is not None else self.draw(index).inputs)
            if index not in self.fallback and inputs is None and not _finite(outputs):
                self.fallback.add(index)
                outputs = forward(self.draw(index).inputs)
        return outputs

    def prepare_trials(self, describe: Any, measure_error: bool = True) -> None:
        """Every trial's reference output, passed to `describe(index, outputs)` (which sends it
        out), measured against the reference's float64 twin (`reference_error`) unless an earlier
        job measured it or `measure_error` is off, kept resident where the plan allows and freed
        otherwise. Baseline workers go through the same steps, so that their process history up to
        the timing stays the eval worker's. A baseline worker measures the float64 twin after its
        timings (`measure_reference_error_after`) and every later job of the task is given it, so
        no timed worker runs the twin before its timing."""
        # Every correctness draw is measured, not draw 0 alone: a floor is only as good as the draw
        # it was measured on (a centred or scaled draw can be worse conditioned than the task's
        # own), and each costs one float64 forward here, beside the fp32 forwards of the trials and
        # the timing checksums; the float64 copy of the model is made once for all of them.
        if self.known_reference_error is not None:  # measured by an earlier job of the task
            self.reference_error, twin = self.known_reference_error, None
        else:
            twin = self._float64_twin(self.first_output) if measure_error else None
        for index in range(self.trial_count):
            outputs = self.first_output if index == 0 else self.reference_output(index)
            self.distributions.append("shuffled" if index in self.fallback else draw_label(index))
            describe(index, outputs)
            if twin is not None and not self._measure_reference_error(twin, index, outputs):
                twin = None
            self.reference_outputs.append(outputs if index < self.plan.resident_outputs else None)
            del outputs
        del twin
        self.first_output = None

    def measure_reference_error_after(self) -> None:
        """The float64 measurement that `prepare_trials(measure_error=False)` left out, made at the
        end of a baseline job (the timing sets are freed first, so that the twin finds the room the
        plan gave it then). Nothing where an earlier job's measurement was given."""
        if self.known_reference_error is not None or self.reference_error:
            return
        self.timing_sets.clear()  # the list timed_inputs reads too

        def outputs(index: int) -> list[torch.Tensor]:
            kept = self.reference_outputs[index] if index < len(self.reference_outputs) else None
            return kept if kept is not None else self.reference_output(index)

        try:
            first = outputs(0)  # once: a draw not kept resident is a whole fp32 forward again
            twin = self._float64_twin(first)  # None: `reference_error_skipped` says why
            if twin is not None:
                for index in range(self.trial_count):
                    if not self._measure_reference_error(twin, index, first if index == 0 else outputs(index)):
                        break
        except Exception as exc:  # noqa: BLE001 - a recomputed fp32 output failed (say, out of memory)
            self.reference_error = []
            self.reference_error_skipped = f"the fp32 reference failed after the timings: {type(exc).__name__}: {exc}"

    def _float64_twin(self, first_outputs: list[torch.Tensor]) -> torch.nn.Module | None:
        """A float64 copy of the reference model (the same weights), or None, with
        `reference_error_skipped` saying why: it would not fit the memory plan, or copying failed.
        `first_outputs`: the reference's fp32 outputs on draw 0 (the twin's outputs' sizes)."""
        fits, why = memory.float64_twin_fits(self.plan, self.weight_bytes,
                                             memory.CUDA_SLACK_MIN_BYTES if self.device == "cuda" else 0)
        if not fits:
            self.reference_error_skipped = why
            return None
        started = _perf_counter()
        try:
            twin = copy.deepcopy(self.model).double()
            # Its outputs are the expected answer in float64: once freed they are scrubbed before
            # candidate code runs, as the reference's own are (on the CPU, blocks of their sizes).
            self.output_nbytes += [o.numel() * 8 for o in first_outputs if o.is_floating_point()]
            return twin
        except Exception as exc:  # noqa: BLE001 - the task still runs, under the policy's tolerances
            self.reference_error_skipped = f"the reference could not be copied to float64: {type(exc).__name__}: {exc}"
            return None
        finally:
            self.reference_error_seconds += _perf_counter() - started

    def _measure_reference_error(self, twin: torch.nn.Module, index: int, outputs: list[torch.Tensor]) -> bool:
        """How far the fp32 reference's `outputs` on draw `index` are from the truth: the float64
        twin on the same draw (floating inputs cast to float64, the same values) is compared with
        them as a candidate's outputs are (`output_stats`, relative to the fp32 reference's norm).
        Appends one entry per output to `reference_error` (None for a non-floating output) and
        returns True. Where the twin raises or gives non-finite or differently shaped outputs, the
        measurement is dropped for every draw, `reference_error_skipped` says why and it returns
        False. `outputs` are only read; the global random streams are restored afterwards, so the
        task's later forwards draw what they would have without this one."""
        started = _perf_counter()
        rng_devices = [torch.cuda.current_device()] if self.device == "cuda" else []
        reason, errors = "", []
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=rng_devices):
                draw = self.draw(index)
                inputs = [v.to(torch.float64, copy=True) if isinstance(v, torch.Tensor) and v.is_floating_point()
                          else _clone(v) for v in draw.inputs]
                del draw
                twin_outputs = [_as_tensor(v) for v in flatten_outputs(twin(*inputs))]
                del inputs
            if len(twin_outputs) != len(outputs):
                reason = f"the float64 reference returns {len(twin_outputs)} outputs, the fp32 one {len(outputs)}"
            for position, (ref, ref64) in enumerate(zip(outputs, twin_outputs)):
                if reason:
                    break
                if not ref.is_floating_point():
                    errors.append(None)
                elif tuple(ref64.shape) != tuple(ref.shape):
                    reason = (f"the float64 reference's output {position} has shape {tuple(ref64.shape)}, "
                              f"not {tuple(ref.shape)}")
                else:
                    stats = output_stats(ref64, ref, self.stats_config)
                    if stats["nonfinite"]:
                        reason = f"the float64 reference's output {position} is not finite on draw {index}"
                    errors.append({key: stats[key] for key in ("norm", "abs", "bad")})
            del twin_outputs
        except Exception as exc:  # noqa: BLE001 - some ops refuse float64; the task runs under the policy's tolerances
            reason = f"the reference fails in float64: {type(exc).__name__}: {exc}"
        finally:
            self.reference_error_seconds += _perf_counter() - started
        if reason:
            self.reference_error, self.reference_error_skipped = [], reason
            return False
        self.reference_error.append(errors)
        return True

    def reference_error_meta(self) -> dict[str, Any]:
        """The measurement as the reference message carries it to the evaluator."""
        return {"draws": self.reference_error, "skipped": self.reference_error_skipped[:500],
                "seconds": round(self.reference_error_seconds, 4)}

    def tolerance_floors(self, index: int) -> list[ToleranceFloor | None]:
        """Per output of trial `index`, its widened tolerances (`correctness.tolerance_floor`: the
        evaluator derives the same from the same measurement), or None."""
        if index >= len(self.reference_error):
            return []
        return [tolerance_floor(error, self.stats_config) for error in self.reference_error[index]]

    def prepare_timing_sets(self) -> None:
        """The resident timing input sets: the draws after the trials' (the same in every worker).
        Then where the timed calls' inputs come from (timed_inputs.TimedInputs)."""
        first = self.trial_count
        for index in range(first, first + self.plan.timing_sets):
            draw = self.draw(index)
            if not _finite(self.reference_output(index, draw.inputs)):  # falls back as a trial's draw does
                self.fallback.add(index)
                draw = self.draw(index)
            self.timing_sets.append(draw.inputs)
        if not self.timing_sets:  # no room for another set: every timed call rotates the base inputs
            self.timing_sets.append(self.base)
        self.timed_inputs = TimedInputs(self.namespace["get_inputs"], self.device, self.timing_sets)

    def release_reference_outputs(self) -> None:
        self.reference_outputs = [None] * len(self.reference_outputs)

def _finite(outputs: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(o).all()) for o in outputs if o.is_floating_point())


def _reference_digests(setup: _TaskSetup, config: dict, digest: output_digest.DigestMaker) -> tuple[list, list]:
    """Run the reference here, before any candidate code exists in this process, on the inputs the
    candidate's timed calls will get: a fresh draw of the task's inputs per call under a secret
    seed (timed_inputs; secret rotations of the timing sets where the task's draws cannot be made
    again). Returns the TimedInputs for the candidate's timer (as many timed calls as the reference
    made within the timing budget, then the warm-up inputs) and the digest of the reference's
    outputs for each timed call (output_digest: what the candidate's call k is compared with). (The
    reference is not timed here: its times come from the baseline workers.)"""
    chooser = random.SystemRandom()
    warmup = config["warmup_reps"]
    variants = [setup.timed_inputs.secret(chooser, index) for index in range(warmup + config["timing_reps"])]
    digests: list[np.ndarray] = []
    started = _perf_counter()
    with torch.no_grad():
        for rep in range(config["timing_reps"]):
            record = digest(setup.model(*setup.timed_inputs.values(variants[rep])), rep)
            for _ in range(3):  # a draw whose reference output is not finite is replaced
                if np.isfinite(record).all():
                    break
                variants[rep] = setup.timed_inputs.secret(chooser, rep, plain=True)
                record = digest(setup.model(*setup.timed_inputs.values(variants[rep])), rep)
            digests.append(record)
            if rep + 1 >= config["timing_min_reps"] and _perf_counter() - started > config["timing_budget_s"]:
                break
    return variants[: len(digests)] + variants[len(variants) - warmup:], digests


class _Audit:
    """The op recorder (its dispatch mode, without the profiler cross-check) around the calls
    that Timer.run audits; what they dispatched."""

    def __init__(self, policy: str):
        self.policy = policy
        self.calls = 0
        self.without_native = 0
        self.intact = True
        self.forbidden: dict[str, int] = {}

    @contextlib.contextmanager
    def __call__(self) -> Any:
        recorder = OpRecorder(cross_check=False)  # no profiler session in the timed process
        before = native_call_total()
        with recorder:
            yield
            self.intact = self.intact and recorder.is_active()
        self.calls += 1
        self.without_native += native_call_total() == before
        for op, count in recorder.ops.items():
            if not op_is_allowed(op, self.policy):
                self.forbidden[op] = self.forbidden.get(op, 0) + count

    def meta(self) -> dict:
        return {"calls": self.calls, "without_native": self.without_native, "intact": self.intact,
                "forbidden_ops": self.forbidden}


def _time_model(model: Any, setup: _TaskSetup, device: str, config: dict, variants: list,
                digest: output_digest.DigestMaker, audit: _Audit | None = None) -> tuple[Any, list[str], list]:
    """Timer.run over the secret `variants` (a fresh input per call; the candidate's calls partly
    audited), each call's outputs digested (output_digest) right after it, then its inputs
    checked unchanged (timed_inputs.InputsChanged)."""
    timer = Timer(device, warmup_reps=config["warmup_reps"], reps=len(variants) - config["warmup_reps"],
                  min_reps=config["timing_min_reps"], budget_s=config["timing_budget_s"],
                  l2_flush=config["l2_flush"], warmup_s=config.get("timing_warmup_s", 0.0))
    loader = TimedLoader([_clone(v) for v in setup.timing_sets[0]], variants, setup.timed_inputs.values)

    return timer.run(model, loader.live, loader.load, len(variants), loader.digest_then_verify(digest), audit=audit,
                     cover_sets=False)


def _sample_seed(job: dict, draw_index: int) -> int:
    return job["seed"] * 1_000_003 + 1000 * draw_index + 7


def _config_for_stats(config: dict) -> EvalConfig:
    return EvalConfig(precision=config["precision"])


def _device_bound(config: dict, method: str | None, detail: dict | None) -> bool:
    """EvalConfig.device_bound under the job's `device_bound_issue_ratio`."""
    return EvalConfig(device_bound_issue_ratio=config["device_bound_issue_ratio"]).device_bound(method, detail)


def _stats_meta(stats: Any) -> dict:
    return dict(stats.__dict__)


TIMED_INPUTS_ROTATED_FLAG = "timed_inputs_rotated"  # the task's draws cannot be repeated: timed_inputs
_COMPILE_WORDS = re.compile(r"torch\.compile|_dynamo|_inductor")


def _load_candidate(source: str) -> types.ModuleType:
    module = types.ModuleType("candidate")
    module.__file__ = os.path.join(os.getcwd(), "candidate.py")
    sys.modules["candidate"] = module
    # The source where inspect.getsource finds it (@triton.jit reads its kernel's source).
    linecache.cache["candidate.py"] = (len(source), None, source.splitlines(keepends=True), "candidate.py")
    exec(compile(source, "candidate.py", "exec"), module.__dict__)
    return module


def _classify_load_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if ("Error building extension" in text or "CalledProcessError" in text or "ninja" in text.lower()
            or "undefined symbol" in text or "could not be loaded" in text):
        return "COMPILE_ERROR"
    if _is_oom(exc):
        return "OUT_OF_MEMORY"
    return "RUNTIME_ERROR"


def _is_oom(exc: BaseException) -> bool:
    """Allocation failures: torch's CUDA allocator, a candidate's own cudaMalloc (a CUDA error that
    is not sticky), Python's, and the CPU allocator's (a RuntimeError). Seen on the H200: when NVML
    is unavailable, torch's CUDA allocator fails inside its out-of-memory report (an internal
    assert in CUDACachingAllocator.cpp) instead of raising OutOfMemoryError."""
    text = str(exc)
    return (isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or "can't allocate memory" in text
            or ("CUDACachingAllocator" in text and "nvmlInit" in text)
            or "CUDA error: out of memory" in text or "cudaErrorMemoryAllocation" in text)


def _is_cuda_error(exc: BaseException) -> bool:
    """A CUDA error (illegal address, trap, launch failure): sticky, so the process's CUDA state can
    no longer be queried, and the tamper check must not read it as tampering."""
    return "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError"


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
    channel.send("built", {"seconds": _perf_counter() - started, "inline_build_forms": fastbuild.BUILD_FORMS})


def _reference_failed(channel: _Channel, exc: BaseException, device: str, plan: Any) -> None:
    """TASK_ERROR for an exception the reference (trusted task code) raised: out of memory, with
    the numbers, or what it raised."""
    message = (memory.out_of_memory_message(device, plan, "the reference") if _is_oom(exc)
               else f"the reference failed: {type(exc).__name__}: {exc}")
    _error(channel, "TASK_ERROR", message, traceback=traceback.format_exc(limit=8))


def _fresh_reference(setup: _TaskSetup, job: dict, device: str) -> Any:
    """A new instance of the reference, given the setup model's weights: what a candidate's
    `ModelNew` is made as (the same seed, device and weights)."""
    torch.manual_seed(job["seed"])
    with torch.device(device):
        model = setup.namespace["Model"](*setup.init_inputs)
    model.load_state_dict(setup.model.state_dict())
    return model.to(device).eval()


def _setup_or_error(channel: _Channel, job: dict, device: str) -> _TaskSetup | None:
    """The task's setup, or None after sending TASK_ERROR: the reference failed or does not fit.
    On CUDA, a setup that runs out of memory while other processes still free theirs (a worker
    killed just before this one started tears down for a while) is tried once more after the
    device's free memory has stopped rising."""
    for attempt in (0, 1):
        try:
            return _TaskSetup(job, device)
        except memory.NotEnoughMemory as exc:
            report = (f"the task does not fit this device: {exc}", "")
            short = True
        except BaseException as exc:  # noqa: BLE001
            short = _is_oom(exc)
            report = (memory.out_of_memory_message(device, None, "the reference") if short
                      else f"the reference failed: {type(exc).__name__}: {exc}", traceback.format_exc(limit=8))
        # Here, out of the except clause, the failed attempt's tensors are no longer referenced.
        if not (attempt == 0 and short and device == "cuda" and memory.wait_for_freed_device_memory()):
            break
    _error(channel, "TASK_ERROR", report[0], traceback=report[1])
    return None


class _PhaseClock:
    """Seconds spent in each named phase of a job, in order (`phases`: name -> seconds), and on
    CUDA the most the caching allocator reserved in each (`reserved_gib`) beside the most live
    tensors took (`allocated_gib`; memory scrubs left out): where a job's peak comes from, and
    whether it is tensors or the allocator's cached segments. Each mark resets the allocator's
    peak counters (memory.PeakMeter); the first phase's peaks start at _TaskSetup's own reset,
    after the model and the base inputs were made."""

    def __init__(self, device: str = "cpu"):
        self.phases: dict[str, float] = {}
        self.reserved_gib: dict[str, float] = {}
        self.allocated_gib: dict[str, float] = {}
        self._meter = None
        self._cuda = device == "cuda"
        if self._cuda:
            try:
                self._meter = memory.PeakMeter()
            except Exception:  # noqa: BLE001 - a torch without these C functions: no peaks, the job runs
                self._meter = None
        memory.peak_meter = self._meter  # one job per worker process
        self._last = _perf_counter()

    def mark(self, name: str) -> float:
        """Ends the phase `name` now (and its memory peaks); returns its seconds."""
        now = _perf_counter()
        self.phases[name] = now - self._last
        self._last = now
        peaks = self._meter.take() if self._meter is not None else None
        if peaks is not None:
            self.reserved_gib[name], self.allocated_gib[name] = round(peaks[0], 3), round(peaks[1], 3)
        return self.phases[name]

    def memory_meta(self) -> dict[str, Any]:
        """The job's peaks so far (the phases' and the one running now), in GiB, and the phase of
        the reserved peak: {"peak_gib", "peak_allocated_gib", "peak_phase", "phase_peak_gib":
        {phase: [reserved, allocated]}}; {} off CUDA."""
        peaks = self._meter.take() if self._meter is not None else None
        phases = {name: [self.reserved_gib[name], self.allocated_gib[name]] for name in self.reserved_gib}
        if peaks is not None:
            phases["(current)"] = [round(peaks[0], 3), round(peaks[1], 3)]
        if not phases:  # off CUDA, or the C statistics could not be read: the allocator's own query
            return {"peak_gib": round(torch.cuda.max_memory_reserved() / memory.GIB, 3)} if self._cuda else {}
        phase = max(phases, key=lambda name: phases[name][0])
        return {"peak_gib": phases[phase][0], "peak_allocated_gib": max(pair[1] for pair in phases.values()),
                "peak_phase": phase, "phase_peak_gib": phases}


def _run_baseline(channel: _Channel, job: dict, device: str) -> None:
    """Eager and torch.compile times of the reference, timed under an eval worker's conditions:
    the same history up to the timing (the trials' reference outputs made, timing sets and
    checksums, memory scrubbed, the tamper check armed, a fresh instance of the model given the
    reference's weights) and the same timed calls (fresh rotated inputs, checksums, audits). On
    the H200 each of those steps moved a host-bound model's time by up to 25% in one process
    (timing_parity_cuda_h200_2026-12-01_call3.json), so only the same history times the reference
    submitted as its own candidate at 1.00x."""
    config = job["config"]
    clock = _PhaseClock(device)
    setup = _setup_or_error(channel, job, device)
    if setup is None:
        return
    clock.mark("setup")
    # The float64 measurement, where no earlier job made it, comes after the timings and is given
    # to every later job of the task: no timed worker, baseline or eval, runs it before its timing.
    measure_after = setup.known_reference_error is None
    samples: list[list[np.ndarray]] = []  # what an eval worker sends of each trial's reference outputs

    def describe(index: int, outputs: list[torch.Tensor]) -> None:
        samples.append(_describe(outputs, _sample_seed(job, index))[0])

    setup.prepare_trials(describe, measure_error=not measure_after)
    setup.prepare_timing_sets()
    digest = output_digest.DigestMaker(secrets.randbits(62))
    variants, _ = _reference_digests(setup, config, digest)
    memory.scrub_freed(device, setup.output_nbytes)
    model = _fresh_reference(setup, job, device)
    clock.mark("reference_history")
    result: dict[str, Any] = {"memory": setup.plan.to_meta(), "phase_s": clock.phases}
    compiled = None
    if "compile" in config["baselines"]:
        # Compiled before the tamper check is armed: its tripwire denies the frame lookups that
        # inductor's first import makes (torch.jit.script_method), as it would a candidate's.
        try:
            compiled = torch.compile(model)
            with torch.no_grad():
                compiled(*[_clone(v) for v in setup.timing_sets[0]])
        except Exception as exc:  # noqa: BLE001 - the eager time stands without it
            compiled = None
            result["errors"] = {"compile": f"torch.compile of the reference raised {type(exc).__name__}: "
                                           f"{str(exc)[:1200]}"}
        result["compile_warmup_s"] = clock.mark("compile_warmup")
        # Whether inductor found this model's compiled graph in its cache (Evaluator.prewarm).
        result["compile_cache"] = {name: count for name, count in torch._dynamo.utils.counters["inductor"].items()
                                   if name.startswith("fxgraph_cache")}
    count_native_calls()
    TamperCheck(device, "permissive")  # armed as for a candidate
    if "eager" in config["baselines"]:
        stats, _, _ = _time_model(model, setup, device, config, variants, digest, _Audit("permissive"))
        result["eager"] = _stats_meta(stats)
        clock.mark("eager_timing")
    if compiled is not None:
        stats, _, _ = _time_model(compiled, setup, device, config, variants, digest)
        result["compile"] = _stats_meta(stats)
        clock.mark("compile_timing")
        if job.get("pair_baselines") and "eager" in result:
            result["compile_pairing"] = _pair_baselines(compiled, model, setup, device, config, result)
            clock.mark("compile_pairing")
    if device == "cuda":
        result["memory"].update(clock.memory_meta())
    channel.send("baseline", result)  # the times first: a profiler that fails or hangs loses nothing
    if device == "cuda":
        # After both timings (the profiler slows later launches): one profiled forward of each, here
        # where torch.compile's code really runs (a compiled reference judged as a candidate runs
        # eagerly under the op recorder's dispatch mode: docs/evaluation-policy.md).
        profiles, errors = {}, {}
        for name, timed in (("eager", model if "eager" in config["baselines"] else None), ("compile", compiled)):
            if timed is None:
                continue
            try:
                profiles[name] = _profile_forward(timed, setup)
            except Exception as exc:  # noqa: BLE001 - the times stand without a profile
                errors[name] = f"the profiled forward raised {type(exc).__name__}: {exc}"[:500]
        clock.mark("profile")
        channel.send("baseline_profiles", {"profiles": profiles, "errors": errors, "phase_s": clock.phases})
    if measure_after:
        model = compiled = timed = variants = None  # noqa: F841 - freed: the twin gets the room its plan gave it
        setup.measure_reference_error_after()
        channel.send("baseline_reference_error", setup.reference_error_meta())
    # Whether the task can tell a kernel from a constant, decided here once per task (no candidate
    # code has run in this process) from the same draws and tolerances an eval worker's judge sees.
    floors = [setup.tolerance_floors(index) for index in range(setup.trial_count)]
    channel.send("baseline_degenerate", {"reason": degenerate_reason(samples, floors, setup.stats_config)})


def _run_prewarm(channel: _Channel, job: dict, device: str) -> None:
    """torch.compile's first call of the task's reference, untimed, so that the task's baseline
    workers later find its compiled code in the shared inductor cache (Evaluator.prewarm). The same
    model, input shapes and precision flags as the baseline worker's compile, so the same cache key."""
    started = time.perf_counter()
    import torch._inductor.config as inductor_config

    # Prewarms run side by side on one device, so Triton's autotuning of the compiled kernels would
    # pick configs from contended timings; its local cache would hand them to the baseline workers.
    # Off here, which the generated code keeps (the setting is not part of the graph's cache key):
    # each baseline worker then tunes its kernels itself, alone on the device, before its timing.
    inductor_config.autotune_local_cache = False
    inductor_config.compile_threads = max(1, int(job.get("compile_threads") or 1))  # not in the cache key
    namespace = load_task_namespace(job["task_source"], job["sizes"], job["task_id"])
    _, model, inputs = _reference_and_inputs(namespace, job["seed"], device)
    with torch.no_grad():
        torch.compile(model)(*inputs)
    _sync(device)
    channel.send("prewarm", {"seconds": round(time.perf_counter() - started, 3)})


def _pair_baselines(compiled: Any, model: Any, setup: _TaskSetup, device: str, config: dict,
                    result: dict) -> dict[str, Any]:
    """EvalConfig.host_pairing for the baselines: torch.compile's model and the eager one timed call
    by call in this worker (timing.time_pairs; no candidate code here, so no checks), unless both
    timings are device time (config.device_time). {"eager_over_compile": the median per-pair ratio, "pairs"}, or
    {"skipped": why}: a candidate's paired ratio against eager, divided by this, is its speedup
    over torch.compile under the same host speed."""
    if all(device_time(result[name]["method"], result[name].get("detail")) for name in ("eager", "compile")):
        return {"skipped": "both baselines' timings are device time (held, issued within it)"}
    live = [_clone(v) for v in setup.timing_sets[0]]

    def load_input(index: int) -> None:
        copy_into(live, setup.timing_sets[index % len(setup.timing_sets)])

    chooser = random.SystemRandom()
    plan = [(chooser.random() < 0.5, False) for _ in range(PAIRS[1])]
    try:
        paired = time_pairs(device, compiled, model, live, load_input, lambda out, index: None, plan, after_call=lambda: None,
                            warmup_reps=config["warmup_reps"], warmup_s=config.get("timing_warmup_s", 0.0))
    except Exception as exc:  # noqa: BLE001 - the unpaired compile speedup stands
        return {"skipped": f"the paired timing raised {type(exc).__name__}: {exc}"[:300]}
    ratios = [eager_ms / compile_ms for _, compile_ms, eager_ms in paired["pairs"] if compile_ms > 0]
    return {"eager_over_compile": statistics.median(ratios), "pairs": len(ratios)}


def _profile_forward(model: Any, setup: _TaskSetup) -> list[dict[str, Any]]:
    """One forward of trusted code (a baseline) under the CUDA profiler: `_kernel_profile`'s table."""
    return _kernel_profile(_profiled_device_events(model, setup, contextlib.nullcontext()))


def _profiled_device_events(model: Any, setup: _TaskSetup, around: Any) -> list[Any]:
    """The device events of one forward on input set 0 under the CUDA profiler, inside `around`
    (a context manager: the candidate's op-recorder audit, or nothing for trusted code)."""
    inputs = [_clone(v) for v in setup.timing_sets[0]]
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    with profiler, around:
        with torch.no_grad():
            model(*inputs)
        _sync("cuda")
    return [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _stream_sample(output: Any, seed: int) -> list[torch.Tensor]:
    """Each output tensor read at seeded positions, enqueued on the current stream right after the
    forward returned and before any synchronize: what a caller's next op on that stream sees."""
    samples = []
    for index, value in enumerate(flatten_outputs(output)):
        if isinstance(value, torch.Tensor) and type(value) in _PLAIN_TENSORS and value.numel():
            flat = value.detach().reshape(-1)
            samples.append(flat[_sample_positions(flat.numel(), seed + index, flat.device)])
    return samples


def _failure(exc: BaseException, tamper: Any, device: str, plan: Any, during: str) -> tuple[str, str]:
    """(error code, message) for an exception raised by candidate code."""
    changes = [] if _is_cuda_error(exc) else tamper.changes()
    if changes:
        return "FORBIDDEN", (f"{during} raised {type(exc).__name__}: {exc} (the candidate changed the evaluation "
                             f"process: {', '.join(changes)})")
    if isinstance(exc, InputsChanged):
        return "INCORRECT", str(exc)
    if _is_oom(exc):
        return "OUT_OF_MEMORY", memory.out_of_memory_message(device, plan, f"the candidate ({during})")
    return "RUNTIME_ERROR", f"{during} raised {type(exc).__name__}: {exc}"


def _run_eval(channel: _Channel, job: dict, device: str) -> None:
    config = job["config"]
    policy = config["policy"]
    started = _perf_counter()
    clock = _PhaseClock(device)
    setup = _setup_or_error(channel, job, device)
    if setup is None:
        return
    plan = setup.plan
    clock.mark("setup")
    arrays: list[np.ndarray] = []
    specs: list[list[dict]] = []
    trusted_samples: list[list[np.ndarray]] = []  # the reference's own values, for a recomputed reference

    def describe(index: int, outputs: list[torch.Tensor]) -> None:
        draw_arrays, draw_specs = _describe(outputs, _sample_seed(job, index))
        arrays.extend(draw_arrays)
        specs.append(draw_specs)
        trusted_samples.append(draw_arrays)

    try:
        setup.prepare_trials(describe)
        clock.mark("describe")
        setup.prepare_timing_sets()
        digest = output_digest.DigestMaker(secrets.randbits(62))
        variants, timing_digests = _reference_digests(setup, config, digest)
    except BaseException as exc:  # noqa: BLE001
        _reference_failed(channel, exc, device, plan)
        return
    clock.mark("checksums")
    memory.scrub_freed(device, setup.output_nbytes)  # no freed reference output reaches the candidate
    channel.send("reference", {"limits_not_applied": job.get("limits_not_applied", []),
                               "distributions": setup.distributions, "outputs": specs,
                               "timing_digests": len(timing_digests), "memory": plan.to_meta(),
                               "reference_error": setup.reference_error_meta(),
                               "seconds": _perf_counter() - started,
                               "parts_s": clock.phases}, arrays + timing_digests)
    del arrays, specs, timing_digests

    fastbuild.install()
    if policy == "permissive" and _COMPILE_WORDS.search(job["candidate_source"]):
        # Done before the tamper check is armed, as the compile baseline does: inductor's first import
        # makes frame lookups the tripwire denies in code it did not know when armed, and dynamo's
        # first compile patches nn.Module.__init__/__setstate__, which the check would report.
        importlib.import_module("torch._inductor.compile_fx")
        torch._dynamo.mutation_guard.install_generation_tagging_init()
    count_native_calls()
    triton_support.count_launches(device, job["candidate_source"])
    paired = _PairedReference(setup, job, device, variants) if job.get("pair_with_reference") else None
    tamper = TamperCheck(device, policy)  # last thing before candidate code: arms the tripwire
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
        changes = [] if _is_cuda_error(exc) else tamper.changes()
        code = "FORBIDDEN" if changes else _classify_load_error(exc)
        message = (memory.out_of_memory_message(device, plan, "the candidate (loading)") if code == "OUT_OF_MEMORY"
                   else f"{type(exc).__name__}: {exc}"
                   + (f" (the candidate changed the evaluation process: {', '.join(changes)})" if changes else ""))
        _error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return
    channel.send("loaded", {"seconds": _perf_counter() - started})
    clock.mark("load")

    # Timing comes before the correctness trials: the trials' op recorder runs a profiler session,
    # and after one the process's host overhead per op is no longer what a baseline worker's is.
    # The timed calls are checked by their output digests (made from the reference before any
    # candidate code ran) and a secret quarter of them by the op recorder's dispatch mode.
    audit = _Audit(policy)
    try:
        stats, timing_flags, digests = _time_model(model, setup, device, config, variants, digest, audit)
    except BaseException as exc:  # noqa: BLE001
        code, message = _failure(exc, tamper, device, plan, "a timed call")
        _error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return
    if setup.timed_inputs.rotated_why:  # the weaker scheme: rotations of resident sets (timed_inputs)
        timing_flags = [*timing_flags, TIMED_INPUTS_ROTATED_FLAG]
    timing_meta = {"stats": _stats_meta(stats), "flags": timing_flags, "digest_inputs": [which for which, _ in digests],
                   "timed_inputs": setup.timed_inputs.rotated_why or "fresh draws",
                   "audit": audit.meta(), "tampered": tamper.changes()}
    channel.send("timing", timing_meta, [record for _, record in digests])
    clock.mark("timing")
    if paired is not None:
        try:
            pairing_meta, pairing_digests = paired.time(model, stats, audit, config, tamper.switches_changed)
            channel.send("pairing", {**pairing_meta, "tampered": tamper.changes()}, pairing_digests)
        except _PairingTampered as exc:
            _error(channel, "FORBIDDEN", f"the candidate changed {exc} while it was timed against the reference")
            return
        except BaseException as exc:  # noqa: BLE001
            code, message = _failure(exc, tamper, device, plan, "a paired timing call")
            _error(channel, code, message, traceback=traceback.format_exc(limit=8))
            return
        del paired
        clock.mark("pairing")

    forbidden: dict[str, int] = {}
    native_calls = 0
    for index in range(setup.trial_count):
        draw = setup.draw(index)
        inputs = [_clone(v) for v in draw.inputs]
        memory.scrub_freed(device, setup.output_nbytes)
        recorder = OpRecorder()
        calls_before = native_call_total()
        try:
            with torch.no_grad(), recorder:
                output = model(*handles(inputs))  # the judge's own objects stay out of the candidate's reach
                still_recording = recorder.is_active()
            early = _stream_sample(output, _sample_seed(job, index)) if device == "cuda" else []
            _sync(device)
        except BaseException as exc:  # noqa: BLE001
            code, message = _failure(exc, tamper, device, plan, "forward")
            _error(channel, code, message, traceback=traceback.format_exc(limit=8))
            return
        native_calls += native_call_total() - calls_before
        for op, count in recorder.ops.items():
            if not op_is_allowed(op, policy):
                forbidden[op] = forbidden.get(op, 0) + count
        if early and not all(torch.equal(a, b) for a, b in zip(early, _stream_sample(output, _sample_seed(job, index)))):
            _error(channel, "INCORRECT", "the output was still being written when forward returned: an op on the "
                   "caller's current stream that read it right away saw other values than after a device-wide "
                   "synchronize. Work on another stream (a side stream, a non-blocking stream, a library handle "
                   "on its own stream) must be joined to the current stream (an event wait) before forward returns")
            return
        mutated = [i for i, (before, after) in enumerate(zip(draw.inputs, inputs))
                   if isinstance(before, torch.Tensor) and not torch.equal(before, after)]
        del inputs
        reference = setup.reference_outputs[index]
        try:
            if reference is None:  # not resident: the reference again, on the same draw
                switched = tamper.switches_changed()
                if switched:
                    _error(channel, "FORBIDDEN", "the candidate changed global switches before the reference was "
                           "computed again: " + ", ".join(switched))
                    return
                reference = setup.reference_output(index, draw.inputs)
                again, _ = _describe(reference, _sample_seed(job, index))
                if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(again, trusted_samples[index])):
                    _error(channel, "FORBIDDEN", "the reference, recomputed after the candidate loaded, no longer "
                           "gives its own earlier output: the candidate changed how PyTorch computes")
                    return
            del draw
            arrays, specs = _describe(output, _sample_seed(job, index), reference, setup.stats_config,
                                      setup.tolerance_floors(index))
        except TypeError as exc:
            _error(channel, "INCORRECT", str(exc))
            return
        except BaseException as exc:  # noqa: BLE001
            code, message = _failure(exc, tamper, device, plan, "checking the output")
            _error(channel, code, message, traceback=traceback.format_exc(limit=8))
            return
        channel.send("trial", {"index": index, "outputs": specs, "mutated_inputs": mutated,
                               "recording_intact": still_recording, "tampered": tamper.changes()}, arrays)
        del output, reference

    checks = {"forbidden_ops": forbidden, "native_calls": native_calls, "tampered": tamper.changes(), "flags": flags,
              "triton": triton_support.report()}
    channel.send("checks", checks)
    if device == "cuda":
        clock.mark("trials")
        setup.release_reference_outputs()
        channel.send("memory", clock.memory_meta())
    if device == "cuda":
        _send_kernels(channel, model, setup, policy, tamper)


class _PairingTampered(Exception):
    """The candidate changed what the paired reference's calls depend on while it was paired."""


class _PairedReference:
    """EvalConfig.host_pairing: a fresh instance of the reference, made and given the weights before
    any candidate code exists in this process, against which a host-bound candidate is timed call
    by call (timing.time_pairs). Every secret of the pairing (each pair's input rotations, order
    and audit pick) is drawn here too, before the candidate loads. What the process looked like
    (its threads and live child processes, torch's global module hooks, the reference's modules,
    their hooks, their classes and the globals of those classes' functions) is kept: if the
    candidate changed any of it before the pairing, the pairing is not used (a thread, a process, a
    hook or a patched method could run inside the reference's calls only); if it changes during
    the pairing, or the live inputs' layout does, the verdict is FORBIDDEN."""

    def __init__(self, setup: _TaskSetup, job: dict, device: str, variants: list):
        self.setup, self.device, self.error = setup, device, ""
        self.reference_device_time = bool(job.get("reference_device_time"))
        self.reference_ms = float(job.get("reference_ms") or 0.0)
        self.model = None
        if setup.pairing_unplanned:
            self.error = setup.pairing_unplanned
            return
        fresh = all(timed.seed is not None or any(timed.shifts) or not any(
            isinstance(v, torch.Tensor) and v.numel() > 1 for v in setup.timing_sets[timed.which]) for timed in variants)
        if not fresh:
            self.error = "rotated inputs break this task, so paired inputs would repeat"
            return
        chooser = random.SystemRandom()
        self.inputs = [setup.timed_inputs.secret(chooser, index) for index in range(MAX_EXTRA_WARMUPS + PAIRS[1])]
        self.plan = [(chooser.random() < 0.5, chooser.random() < 0.25) for _ in range(PAIRS[1])]
        self.digest = output_digest.DigestMaker(secrets.randbits(62))
        try:
            self.model = _fresh_reference(setup, job, device)
            self.fingerprint = self._fingerprint()
        except BaseException as exc:  # noqa: BLE001 - no pairing; the unpaired speedups stand
            self.model, self.error = None, f"the paired reference could not be made: {type(exc).__name__}: {exc}"

    def _fingerprint(self) -> list:
        hooks = [len(value) for name, value in sorted(vars(torch.nn.modules.module).items())
                 if name.startswith("_global_") and isinstance(value, dict)]
        modules = [(name, type(module), tuple(sorted(vars(module))),
                    tuple(len(getattr(module, attr, None) or {}) for attr in _MODULE_HOOKS))
                   for name, module in self.model.named_modules()]
        # The classes the reference's modules run (the task's Model is reachable through
        # nn.Module.__subclasses__()), every attribute by identity, and the globals their functions
        # read at call time (the task's namespace, `F` in torch.nn.modules.conv, ...).
        classes = {c for m in self.model.modules() for c in type(m).__mro__ if c is not object}
        class_state = sorted((c.__module__, c.__qualname__, id(c), tuple(sorted((k, id(v)) for k, v in vars(c).items())))
                             for c in classes)
        namespaces = {id(f.__globals__): f.__globals__ for c in classes for f in vars(c).values()
                      if isinstance(getattr(f, "__globals__", None), dict)}
        global_state = sorted((key, tuple(sorted((k, id(v)) for k, v in list(names.items()))))
                              for key, names in namespaces.items())
        return [len(os.listdir("/proc/self/task")), _live_children(), hooks, modules, class_state, global_state]

    def _changed(self) -> list[str]:
        now = self._fingerprint()
        what = ["threads", "child processes", "torch's global module hooks", "the reference's modules or hooks",
                "the reference's classes", "the globals the reference's code reads"]
        return [w for w, a, b in zip(what, now, self.fingerprint) if a != b]

    def time(self, model: Any, stats: Any, audit: _Audit, config: dict,
             switches_changed: Any) -> tuple[dict, list[np.ndarray]]:
        """(the pairing's report, the digests of its calls' outputs: the candidate's, then the
        reference's). `switches_changed()` (TamperCheck's) is read before the first call and
        after every call: a global switch the candidate changed never reaches a reference call."""
        if self.model is None:
            return {"skipped": self.error}, []
        if self.reference_device_time and device_time(stats.method, stats.detail):
            return {"skipped": "the candidate's and the reference's timings are device time (held, issued within "
                               "it): the pairing corrects host speed, and neither timing is host time"}, []
        if PAIRS[0] * (stats.median_ms + self.reference_ms) > 1000 * PAIR_TIME_LIMIT_S:
            return {"skipped": f"{PAIRS[0]} pairs would take more than {PAIR_TIME_LIMIT_S:g} s"}, []
        changed = self._changed()
        if changed:
            return {"skipped": f"the candidate changed {', '.join(changed)} after the paired reference was made"}, []
        setup = self.setup

        def after_call() -> None:
            memory.scrub_freed(self.device, keep_cache=True)
            sandbox.reset_malloc_perturb()
            switched = switches_changed()
            if switched:
                raise _PairingTampered("global switches: " + ", ".join(switched))

        after_call()
        loader = TimedLoader([_clone(v) for v in setup.timing_sets[0]], self.inputs, setup.timed_inputs.values)
        layout = [_layout(v) for v in loader.live]

        def load_input(index: int) -> None:
            if [_layout(v) for v in loader.live] != layout:
                raise _PairingTampered("the layout of the input tensors (address, shape, strides)")
            loader.load(index)

        try:
            result = time_pairs(self.device, model, self.model, loader.live, load_input, loader.digest_then_verify(self.digest),
                                self.plan, after_call=after_call,
                                audit=audit if config["policy"] == "strict" else None,
                                warmup_reps=config["warmup_reps"], warmup_s=config.get("timing_warmup_s", 0.0))
        except ReferenceCallFailed as exc:
            result = {"skipped": f"the paired reference failed: {exc}"}
        changed = self._changed()
        if changed:
            raise _PairingTampered(", ".join(changed))
        self.model = None
        memory.scrub_freed(self.device, setup.output_nbytes)
        candidate, reference = result.pop("candidate_digests", []), result.pop("reference_digests", [])
        meta = {**result, "candidate_inputs": [index for index, _ in candidate],
                "reference_inputs": [index for index, _ in reference], "audit": audit.meta()}
        return meta, [record for _, record in candidate] + [record for _, record in reference]


def _layout(value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return None
    return (value.data_ptr(), tuple(value.shape), value.stride(), value.storage_offset(), value.dtype)


PAIR_TIME_LIMIT_S = 20.0  # a task whose 40 pairs would take longer is not paired (the eval has 120 s)


def _live_children() -> int:
    """How many live (not zombie) processes have this one as their parent. The worker is a child
    subreaper (sandbox.contain_children), so orphaned descendants come back here too."""
    me, count = str(os.getpid()), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        count += fields[1].decode() == me and fields[0] != b"Z"
    return count


_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                 "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_state_dict_hooks")


def _send_kernels(channel: _Channel, model: Any, setup: _TaskSetup, policy: str, tamper: Any) -> None:
    """The GPU kernels one more forward runs, seen by the CUDA profiler. Only after the timing:
    once the profiler (CUPTI) has run in a process, kernel launches cost more host time there, and
    the baselines are timed in workers where it never ran."""
    audit = _Audit(policy)
    try:
        device_events = _profiled_device_events(model, setup, audit())
    except BaseException as exc:  # noqa: BLE001
        code, message = _failure(exc, tamper, "cuda", setup.plan, "the profiled forward")
        _error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return
    kernels = sorted({e.name for e in device_events if not e.name.startswith(("Memcpy", "Memset"))})
    channel.send("kernels", {"kernels": kernels, "profile": _kernel_profile(device_events),
                             "audit": audit.meta(), "tampered": tamper.changes()})


def _kernel_profile(device_events: list[Any], limit: int = 50) -> list[dict[str, Any]]:
    """Per device kernel: launches and summed device time (us) in the profiled forward, largest first."""
    totals: dict[str, list[float]] = {}
    for event in device_events:
        entry = totals.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += float(event.time_range.elapsed_us())
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:limit]
    return [{"name": name, "count": int(count), "total_us": round(total, 3)} for name, (count, total) in ranked]


def worker_main(conn: Any, setup: dict) -> None:
    """Entry point of a worker process; `setup` is JSON-able (see pool.py)."""
    channel = _Channel(conn)
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
        # CUDA eval workers apply Landlock after the driver is up: under an earlier rule set its
        # first-use setup failed (error 304 on the H200). With today's rules every order worked
        # there (benchmarks/cuda_sandbox_probe.py); this order is kept as the safe one.
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
        device_name = "" if setup["role"] == "build" else _init_device(backend, setup.get("cpu_threads"))
        if setup["role"] in ("eval", "baseline"):
            prescan_code()  # the tripwire's walk of the evaluator's code, done while a spare
        if cuda_first:
            failed += sandbox.restrict_writes(sandbox.writable_paths(setup["scratch_dir"]))
        channel.send("ready", {"device": device_name, "limits_not_applied": failed, "network_isolated": isolated})
        job = json.loads(conn.recv_bytes())
        channel.authenticate(job.pop("channel_key", None))
        # The job's own environment (TORCH_EXTENSIONS_DIR: this candidate's build directory). A
        # warm spare started before the job was known; a second Landlock layer narrows its writes
        # from every candidate's build directory to this candidate's.
        job_env = job.pop("env", None) or {}
        os.environ.update(job_env)
        if confined and setup["role"] == "eval" and job_env.get("TORCH_EXTENSIONS_DIR"):
            job["limits_not_applied"] = sandbox.restrict_writes(sandbox.writable_paths(setup["scratch_dir"]))
        _set_precision(job["config"]["precision"])
        if setup["role"] == "build":
            _run_build(channel, job)
        elif setup["role"] == "baseline" and job.get("prewarm"):
            _run_prewarm(channel, job, backend)
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
