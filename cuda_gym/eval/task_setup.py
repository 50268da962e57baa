"""A job's task, set up before any candidate code exists in the worker: the reference model, the
task's base inputs, the memory plan, the correctness trials' reference outputs (with the fp32
reference's error against its float64 twin), and the timing input sets."""
from __future__ import annotations

import copy
import time
import traceback
from typing import Any

import torch

from ..tasks.task import load_task_namespace
from . import memory
from .channel import Channel, send_error
from .config import EvalConfig
from .correctness import ToleranceFloor, flatten_outputs, output_stats, tolerance_floor
from .draws import Draw, draw_label, fallback_draw, make_draw
from .failures import is_oom
from .output_report import as_tensor, compact, finite
from .timed_inputs import TimedInputs, changed_inputs, on_private_globals, seed_check

_perf_counter = time.perf_counter


def to_device(value: Any, device: str) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def reference_and_inputs(namespace: dict, seed: int, device: str) -> tuple[list[Any], Any, list[Any]]:
    """The task's init inputs, its reference model in eval mode and its base inputs, each seeded as
    every worker seeds them (the prewarm's compile then sees what the baseline worker's does)."""
    init_inputs = list(namespace["get_init_inputs"]())
    # Built on the device directly: creating large inputs and weights on the CPU costs seconds.
    with torch.device(device):
        torch.manual_seed(seed)
        model = namespace["Model"](*init_inputs).to(device).eval()
        torch.manual_seed(seed + 1)
        inputs = [to_device(v, device) for v in namespace["get_inputs"]()]
    return init_inputs, model, inputs


class NonFiniteReference(ValueError):
    """The reference's output is not finite on a draw nor on the plain draw that replaced it."""


class TaskSetup:
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
        self.init_inputs, self.model, self.base = reference_and_inputs(self.namespace, self.seed, device)
        # get_inputs() looked up in a copy of the task's namespace made now, before any candidate code
        # runs; where it is repeatable, the draws after the first and the timed inputs are fresh draws;
        # where it ignores the seed (`seed_ignored`, a reason), the task is degenerate.
        self.get_inputs = on_private_globals(self.namespace["get_inputs"])
        self.inputs_unrepeatable, self.seed_ignored = seed_check(self.get_inputs, device)
        self.fallback: set[int] = set()  # draws replaced by a plain one: the reference was not finite or raised
        self.distributions: list[str] = []
        self.reference_outputs: list[list[torch.Tensor] | None] = []
        self.timing_sets: list[list[Any]] = []
        self.timed_inputs: TimedInputs | None = None  # made with the timing sets
        used = memory.device_used_bytes(device)
        # The first reference pass measures the outputs and the reference's own workspace (beyond
        # its copy of the inputs, which the plan counts apart).
        first_inputs = [clone(v) for v in self.base]
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with_copy = memory.device_used_bytes(device)
        self.first_output = self.reference_output(0, first_inputs)
        changed = changed_inputs(self.base, first_inputs)
        if changed:  # the reference as its own candidate would be INCORRECT: the task is at fault
            raise ValueError(f"the reference's forward modifies its input(s) {changed}; a task's forward must leave "
                             "its inputs unchanged (docs/task-format.md)")
        del first_inputs
        if not finite(self.first_output):
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
                trials=self.trial_count, timing_sets=config["timing_input_sets"] if self.inputs_unrepeatable else 0,
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
        """Draw `index` (0: the task's own inputs, the objects themselves; clone before use), made
        by `draws.py` from the job's seed: fresh draws of a repeatable task's get_inputs(), else
        rearrangements of the base inputs."""
        get_inputs = None if self.inputs_unrepeatable else self.get_inputs
        if index in self.fallback:
            return fallback_draw(self.base, self.seed + 100 + index, self.device, get_inputs)
        return make_draw(self.base, index, self.seed + 2, self.device, get_inputs)

    def reference_output(self, index: int, inputs: list[Any] | None = None) -> list[torch.Tensor]:
        """The reference's outputs on draw `index` (or on `inputs`, that draw already made). A
        draw after the first whose outputs are not finite, or on which the reference raises, is
        replaced, once, by a plain draw (draws.fallback_draw); a reference still not finite there
        is the task's error (NonFiniteReference), since no candidate's output could match it."""
        def forward(values: list[Any]) -> list[torch.Tensor]:
            if any(a is b for a, b in zip(values, self.base)):
                values = [clone(v) for v in values]  # the base stays pristine
            return [compact(as_tensor(v)) for v in flatten_outputs(self.model(*values))]

        with torch.no_grad():
            if inputs is not None:
                return forward(inputs)
            _, outputs = self._usable_draw(index, forward)
        if not finite(outputs):
            raise NonFiniteReference(f"the reference's output is not finite on input draw {index} nor on the plain "
                                     "draw that replaced it: a task's outputs must be finite (docs/task-format.md), "
                                     "since a candidate's NaN or inf is never correct")
        return outputs

    def _usable_draw(self, index: int, forward: Any) -> tuple[Draw, list[torch.Tensor]]:
        """Draw `index` and `forward`'s outputs on it, the draw first replaced by a plain one
        where its integer inputs leave the task's range, the outputs are not finite, or `forward`
        raises (not on draw 0, nor on a plain draw)."""
        draw = self.draw(index)
        try:
            in_range = self.within_task_range(draw)
            outputs = forward(draw.inputs) if in_range else []
            replace = not in_range or not finite(outputs)
        except Exception as exc:  # noqa: BLE001 - a transformed draw may leave what the task accepts
            if index == 0 or index in self.fallback or is_oom(exc):
                raise
            replace = True
        if replace and index not in self.fallback:
            self.fallback.add(index)
            draw = None  # freed before the plain draw is made
            draw = self.draw(index)
            outputs = forward(draw.inputs)
        return draw, outputs

    def within_task_range(self, draw: Draw) -> bool:
        """Whether each integer or boolean input of a transformed draw lies within the range of the
        task's own inputs: indices made from a float generator (`(torch.rand(n) * k).long()`) are
        negative in the negated draw, and a reference that wraps them gives finite outputs that no
        correct gather matches. A plain draw is the task's own kind of input."""
        if draw.distribution in ("task", "fresh", "shuffled"):
            return True
        for value, base in zip(draw.inputs, self.base):
            if (isinstance(value, torch.Tensor) and isinstance(base, torch.Tensor) and value.numel() and base.numel()
                    and not (value.is_floating_point() or value.is_complex())):
                if bool(value.min() < base.min()) or bool(value.max() > base.max()):
                    return False
        return True

    def draw_label(self, index: int) -> str:
        """What draw `index` is called in the verdict (its distribution, or "fresh"/"shuffled" where
        it fell back), without making it."""
        if index in self.fallback:
            return "shuffled" if self.inputs_unrepeatable else "fresh"
        return draw_label(index, fresh=not self.inputs_unrepeatable)

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
            self.distributions.append(self.draw_label(index))
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
                          else clone(v) for v in draw.inputs]
                del draw
                twin_outputs = [as_tensor(v) for v in flatten_outputs(twin(*inputs))]
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
        """The resident timing input sets: the draws after the trials' (the same in every worker),
        which only a task whose get_inputs() is not repeatable rotates (its plan keeps them; a
        repeatable task's timed calls get fresh draws, and the base inputs serve as the live
        tensors' template). Then where the timed calls' inputs come from (timed_inputs.TimedInputs)."""
        first = self.trial_count
        for index in range(first, first + self.plan.timing_sets):
            with torch.no_grad():
                draw, _ = self._usable_draw(index, lambda values: self.reference_output(index, values))
            self.timing_sets.append(draw.inputs)
        if not self.timing_sets:  # fresh draws, or no room for another set: the base inputs serve
            self.timing_sets.append(self.base)
        self.timed_inputs = TimedInputs(self.get_inputs, self.device, self.timing_sets, self.inputs_unrepeatable)

    def release_reference_outputs(self) -> None:
        self.reference_outputs = [None] * len(self.reference_outputs)


def _config_for_stats(config: dict) -> EvalConfig:
    return EvalConfig(precision=config["precision"])


def fresh_reference(setup: TaskSetup, job: dict, device: str) -> Any:
    """A new instance of the reference, given the setup model's weights: what a candidate's
    `ModelNew` is made as (the same seed, device and weights)."""
    torch.manual_seed(job["seed"])
    with torch.device(device):
        model = setup.namespace["Model"](*setup.init_inputs)
    model.load_state_dict(setup.model.state_dict())
    return model.to(device).eval()


def setup_or_error(channel: Channel, job: dict, device: str) -> TaskSetup | None:
    """The task's setup, or None after sending TASK_ERROR: the reference failed or does not fit.
    On CUDA, a setup that runs out of memory while other processes still free theirs (a worker
    killed just before this one started tears down for a while) is tried once more after the
    device's free memory has stopped rising."""
    for attempt in (0, 1):
        try:
            return TaskSetup(job, device)
        except memory.NotEnoughMemory as exc:
            report = (f"the task does not fit this device: {exc}", "")
            short = True
        except BaseException as exc:  # noqa: BLE001
            short = is_oom(exc)
            report = (memory.out_of_memory_message(device, None, "the reference") if short
                      else f"the reference failed: {type(exc).__name__}: {exc}", traceback.format_exc(limit=8))
        # Here, out of the except clause, the failed attempt's tensors are no longer referenced.
        if not (attempt == 0 and short and device == "cuda" and memory.wait_for_freed_device_memory()):
            break
    send_error(channel, "TASK_ERROR", report[0], traceback=report[1])
    return None

