"""`Judgement`: a worker's messages in, a verdict out, decided on the evaluator's side of the pipe.

The eval worker runs candidate code, so everything it sends is checked here: each message's
signature and order (sandbox.verify), the correctness trials against the reference's outputs,
every timed call's output digest, the host pairing's per-pair digests, the strict policy's audits
and the profiled forward's kernels. The first failure is the verdict; `finish()` decides the rest.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np

from . import cupy_support, output_digest, sandbox, triton_support
from .config import EvalConfig
from .correctness import ToleranceFloor, compare, degenerate_reason, judge_stats, tolerance_floor, widest_floor
from .protocol import Message
from .result import ErrorCode, EvalResult, TimingStats, TrialResult
from .reward import DEGENERATE_FLAG
from .timing import PAIRS, UNTRACKED_WORK_FLAG

_INTERNAL_KERNEL_MARKERS = ("at::", "c10::")
# A paired median more than this factor off the candidate's own median, or the reference's more than
# this off the eager baseline's, is not used: host speeds differ between processes by up to 1.75x
# (docs/decisions/003-host-pairing-on-cuda.md), a tampered call by more.
PAIRED_AGREEMENT = 2.0


def complete_reference_error(report: Any, trials: int) -> dict[str, Any] | None:
    """A worker's float64 measurement of the reference (`task_setup.TaskSetup.reference_error_meta`) as it is
    kept and given to later jobs, {"draws": [[{"norm", "abs", "bad"} or None per output] per trial],
    "skipped": "", "seconds": 0.0}; None where it was skipped, is not one entry per trial or is malformed."""
    if not isinstance(report, dict) or report.get("skipped") or not isinstance(report.get("draws"), list):
        return None
    if len(report["draws"]) != trials:
        return None
    try:
        draws = [[{key: float(error[key]) for key in ("norm", "abs", "bad")} if error else None for error in draw]
                 for draw in report["draws"]]
    except (TypeError, KeyError, ValueError):
        return None
    values = [value for draw in draws for error in draw if error for value in error.values()]
    if not all(math.isfinite(value) and value >= 0 for value in values):  # it widens tolerances: never NaN or < 0
        return None
    return {"draws": draws, "skipped": "", "seconds": 0.0}


def _audit_failed(audit: dict[str, Any]) -> bool:
    """Whether audited calls (the op recorder's report) ran PyTorch compute ops, skipped the
    candidate's native code, or found the recorder disabled: what the strict policy forbids."""
    return bool(audit.get("forbidden_ops") or audit.get("without_native") or not audit.get("intact", True))


class Judgement:
    """Turns a worker's messages into a verdict. Decides on the evaluator's side of the pipe."""

    def __init__(self, config: EvalConfig, result: EvalResult, key: bytes | None = None,
                 degenerate: str | None = None):
        self.config = config
        # Why the task cannot tell a kernel from a constant ('' where it can), None until known:
        # given where an earlier evaluation found it, else found from the reference message.
        self.degenerate = degenerate
        self.result = result
        self.key = key
        self.seq = 0
        self.stage = "setup"
        self.reference: list[list[np.ndarray]] = []
        self.reference_specs: list[list[dict]] = []
        self.distributions: list[str] = []
        self.limits_not_applied: list[str] = []
        self.timing_digests: list[np.ndarray] = []  # the reference's output digest per timed call (output_digest)
        self._arrays: dict[str, list[np.ndarray]] = {}  # the output digests of the timing and pairing messages
        # Per trial and output, the widened tolerances where the fp32 reference is rounding noise (else None).
        self.tolerance_floors: list[list[ToleranceFloor | None]] = []
        self.measured_reference_error: dict[str, Any] | None = None  # the worker's report, when complete
        self.decided = False
        self.timing: dict[str, Any] | None = None
        self.pairing: dict[str, Any] | None = None  # EvalConfig.host_pairing's report, checked in finish()
        self.checks: dict[str, Any] | None = None
        self.kernels: dict[str, Any] | None = None  # the profiled forward after the timing (cuda)
        self.started = time.monotonic()

    def verdict(self, code: ErrorCode, message: str) -> bool:
        if not self.decided:
            self.decided = True
            self.result.error_code = code
            self.result.message = message
        return False  # stop reading: the verdict is in

    def on_message(self, message: Message) -> bool:
        if self.key is not None and message.kind != "ready":
            if not sandbox.verify(self.key, self.seq, message.kind, message.meta, message.arrays):
                return self.verdict(ErrorCode.FORBIDDEN, "a message on the worker's channel failed authentication: "
                                    "it was written by candidate code, not by the worker")
            self.seq += 1
        meta = message.meta
        stage = message.kind if message.kind != "trial" else f"trial{meta.get('index')}"
        self.result.stage_seconds[str(stage)[:32]] = round(time.monotonic() - self.started, 4)
        if message.kind == "ready":
            return True
        if message.kind == "error":
            code = meta.get("code", "RUNTIME_ERROR")
            code = ErrorCode(code) if code in ErrorCode.__members__ else ErrorCode.RUNTIME_ERROR
            self.result.runtime_log += str(meta.get("traceback", ""))
            return self.verdict(code, str(meta.get("message", "")))
        if message.kind == "reference":
            return self._on_reference(message)
        if message.kind == "pairing":
            self.pairing = meta
            self._arrays["pairing"] = message.arrays
            return True
        if message.kind == "loaded":
            self.stage = "the first forward (trial 0's draw)" if meta.get("first_look") else "timing"
            return True
        if message.kind == "first_look":
            return self._on_first_look(message)
        if message.kind == "trial":
            return self._on_trial(message)
        if message.kind == "checks":
            return self._on_checks(meta)
        if message.kind == "timing":
            self.timing = meta
            self._arrays["timing"] = message.arrays
            self.stage = "the correctness trials"
            return True
        if message.kind == "memory":
            self._on_memory(meta)
            return True
        if message.kind == "kernels":
            self.kernels = meta
            return True
        return self.verdict(ErrorCode.FORBIDDEN, f"the worker sent an unexpected message {message.kind!r}")

    def _on_memory(self, meta: dict[str, Any]) -> None:
        """The worker's memory peaks (phase_clock.PhaseClock.memory_meta) into `device_memory`. Sent
        after candidate code ran in that process: what is not a finite number (or a short name)
        is left out, never an error, so the verdict stays the checks' to make."""
        def gib(value: Any) -> float | None:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            return float(value) if ok else None

        memory_info = self.result.device_memory
        for key in ("peak_gib", "peak_allocated_gib"):
            value = gib(meta.get(key))
            if value is not None:
                memory_info[key] = value
        if isinstance(meta.get("peak_phase"), str):
            memory_info["peak_phase"] = meta["peak_phase"][:40]
        phases = meta.get("phase_peak_gib")
        if isinstance(phases, dict):
            memory_info["phase_peak_gib"] = {
                str(name)[:40]: [gib(v) for v in pair] for name, pair in list(phases.items())[:20]
                if isinstance(pair, list) and len(pair) == 2 and all(gib(v) is not None for v in pair)}

    def _on_reference(self, message: Message) -> bool:
        if self.stage != "setup":
            return self.verdict(ErrorCode.FORBIDDEN, "the worker sent a second reference message: "
                                "candidate code wrote to the worker's channel")
        self.limits_not_applied = list(message.meta.get("limits_not_applied", []))
        # When each part of the reference stage ended (setup, describe, checksums).
        ended = self.result.stage_seconds.get("reference", 0.0) - float(message.meta.get("seconds", 0.0))
        for part, seconds in dict(message.meta.get("parts_s", {})).items():
            ended += float(seconds)
            self.result.stage_seconds[f"reference.{part}"[:32]] = round(ended, 4)
        self.reference_specs = message.meta.get("outputs", [])
        offset = 0
        for specs in self.reference_specs:
            self.reference.append(message.arrays[offset: offset + len(specs)])
            offset += len(specs)
        self.distributions = message.meta.get("distributions", [])
        self.timing_digests = list(message.arrays[offset:])
        self.result.device_memory = {k: float(v) for k, v in dict(message.meta.get("memory", {})).items()}
        noise = self._read_reference_error(message.meta.get("reference_error"))
        if self.degenerate is None:  # not yet known for this task (Evaluator keeps it with the baselines)
            self.degenerate = str(message.meta.get("seed_ignored") or "") or degenerate_reason(
                self.reference[: self.config.correctness_trials], self.tolerance_floors, self.config)
        reason = self.degenerate
        warnings = [f"{reason}; this task cannot tell a kernel from a constant, so speed earns nothing here "
                    "(reward at most 1)"] if reason else []
        if reason:
            self.result.flags.append(DEGENERATE_FLAG)
        if noise:
            self.result.flags.append("reference_rounding_noise")
            warnings.append(noise)
        if warnings:
            self.result.message = "warning: " + "; ".join(warnings)
        self.stage = "loading the candidate"
        return True

    def _read_reference_error(self, report: Any) -> str:
        """The worker's measurement of the fp32 reference against its float64 twin, made before the
        candidate existed, by this worker or, after its timings, by the task's first baseline worker
        (`task_setup.TaskSetup._measure_reference_error`; 'seconds' 0 where given): sets `tolerance_floors` and
        `result.reference_error`. Returns what to tell the user where tolerances were widened, else ''."""
        report = report if isinstance(report, dict) else {}
        trials = len(self.reference)
        complete = complete_reference_error(report, trials)
        if complete is None:
            self.result.reference_error = {"skipped": str(report.get("skipped") or "not measured")[:500]}
            return ""
        self.measured_reference_error = complete
        errors = complete["draws"]
        self.tolerance_floors = [[tolerance_floor(error, self.config) for error in draw] for draw in errors]
        measured = [[error for error in draw if error] for draw in errors]
        self.result.reference_error = {
            "rel_norm": [max((e["norm"] for e in draw), default=0.0) for draw in measured],
            "max_abs": [max((e["abs"] for e in draw), default=0.0) for draw in measured],
            "seconds": float(report.get("seconds", 0.0))}
        widened = [index for index, floors in enumerate(self.tolerance_floors) if any(floors)]
        if not widened:
            return ""
        policy = self.config.rel_norm_tolerance
        rel_norm = [max([policy] + [f.rel_norm for f in floors if f]) for floors in self.tolerance_floors]
        absolute = [max(f.abs for f in floors if f) if any(floors) else None for floors in self.tolerance_floors]
        self.result.reference_error.update(multiple=self.config.reference_noise_multiple,
                                           rel_norm_tolerance=rel_norm, abs_tolerance=absolute)
        worst = max(self.result.reference_error["rel_norm"][i] for i in widened)
        widest_abs = max(absolute[i] for i in widened)
        return (f"the fp32 reference is itself up to {worst:.3g} of its norm from its float64 twin on "
                f"{len(widened)} of {trials} draws (the {self.config.precision} tolerance is {policy:g}), so "
                f"those draws are judged at {self.config.reference_noise_multiple:g} times the reference's own error: "
                f"relative error up to {max(rel_norm):.3g}, every element within {widest_abs:.3g} "
                "(EvalResult.reference_error)")

    def _on_trial(self, message: Message) -> bool:
        meta = message.meta
        index = int(meta.get("index", -1))
        if not 0 <= index < len(self.reference) or index != len(self.result.trials):
            return self.verdict(ErrorCode.FORBIDDEN, "the worker reported trials out of order")
        if meta.get("tampered"):
            return self._tampered(meta["tampered"])
        if not meta.get("recording_intact", False):
            return self.verdict(ErrorCode.FORBIDDEN, "the candidate disabled or replaced the ATen op recorder")
        return self._record_trial(index, self._judged_call(index, message))

    def _on_first_look(self, message: Message) -> bool:
        """Trial 0's draw, run once before the timing (eval_job._first_look): outputs wrong there
        are trial 0's verdict now, without the timed calls; a pass decides nothing, since the trials
        after the timing judge the draw again."""
        if not self.reference or self.result.trials:
            return self.verdict(ErrorCode.FORBIDDEN, "the worker reported a first look out of order")
        self.stage = "timing"
        if message.meta.get("tampered"):
            return self._tampered(message.meta["tampered"])
        trial = self._judged_call(0, message)
        return True if trial.passed else self._record_trial(0, trial)

    def _judged_call(self, index: int, message: Message) -> TrialResult:
        """A forward on trial `index`'s draw (a trial, or the first look): its outputs compared,
        and failed where it changed its inputs."""
        trial = self._compare_trial(index, message.meta.get("outputs", []), message.arrays)
        if message.meta.get("mutated_inputs"):
            trial.passed = False
            trial.message = (f"the forward modified its input(s) {message.meta['mutated_inputs']}; inputs must stay "
                             "unchanged")
        return trial

    def _record_trial(self, index: int, trial: TrialResult) -> bool:
        """Trial `index`'s result kept, and a failed one's verdict (from the trials or the first look)."""
        self.result.trials.append(trial)
        if not trial.passed:
            return self.verdict(ErrorCode.INCORRECT, f"trial {index} ({trial.distribution} inputs): {trial.message}")
        return True

    def _tampered(self, changes: list[str]) -> bool:
        return self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process: " + ", ".join(changes))

    def _compare_trial(self, index: int, specs: list[dict], arrays: list[np.ndarray]) -> TrialResult:
        """Whole outputs are compared here; large ones by the worker's statistics AND here on a sample."""
        distribution = self.distributions[index]
        ref_specs = self.reference_specs[index]
        floors = self.tolerance_floors[index] if index < len(self.tolerance_floors) else []
        if len(specs) != len(ref_specs) or len(arrays) != len(specs):
            return TrialResult(distribution, False, float("inf"), float("inf"), float("inf"),
                               f"returned {len(specs)} outputs, the reference returns {len(ref_specs)}")
        for position, (spec, ref_spec) in enumerate(zip(specs, ref_specs)):
            label = f"output {position}" if len(ref_specs) > 1 else "output"
            if spec.get("shape") != ref_spec["shape"]:
                return TrialResult(distribution, False, float("inf"), float("inf"), float("inf"),
                                   f"{label} has shape {tuple(spec.get('shape', ()))}, expected {tuple(ref_spec['shape'])}")
            if not ref_spec["full"]:
                stats = spec.get("stats")
                if not isinstance(stats, dict):
                    return TrialResult(distribution, False, float("inf"), float("inf"), float("inf"),
                                       f"{label}: no error statistics (dtype {spec.get('dtype')}, expected {ref_spec['dtype']})")
                size = int(np.prod(ref_spec["shape"]))
                failure = judge_stats({k: float(stats.get(k, float("inf"))) for k in
                                       ("nonfinite", "abs", "rel", "norm", "bad")}, label, size, self.config,
                                      floors[position] if position < len(floors) else None)
                if failure:
                    return TrialResult(distribution, False, float(stats.get("abs", float("inf"))),
                                       float(stats.get("rel", float("inf"))), float(stats.get("norm", float("inf"))), failure)
        trial = compare(arrays, self.reference[index], cand_dtypes=[s.get("dtype") for s in specs],
                        ref_dtypes=[s["dtype"] for s in ref_specs], config=self.config, distribution=distribution,
                        floors=floors)
        for spec in specs:  # report the whole-output errors where the worker measured them
            stats = spec.get("stats") or {}
            trial.max_abs_error = max(trial.max_abs_error, float(stats.get("abs", 0.0)))
            trial.max_rel_error = max(trial.max_rel_error, float(stats.get("rel", 0.0)))
            trial.rel_norm_error = max(trial.rel_norm_error, float(stats.get("norm", 0.0)))
        return trial

    def _on_checks(self, meta: dict[str, Any]) -> bool:
        self.checks = meta
        self.stage = "the kernel check"
        self.result.flags += list(meta.get("flags", []))
        forbidden = meta.get("forbidden_ops") or {}
        self.result.forbidden_ops = sorted(forbidden)
        triton_support.apply_report(self.result, meta.get("triton"))
        cupy_support.apply_report(self.result, meta.get("cupy"))
        if meta.get("tampered"):
            return self._tampered(meta["tampered"])
        if self.config.policy == "strict":
            if forbidden:
                ops = ", ".join(f"{op} x{n}" for op, n in sorted(forbidden.items()))
                return self.verdict(ErrorCode.FORBIDDEN, f"the forward ran PyTorch compute ops on the task's data "
                                    f"({ops}); under the strict policy that compute must run in the candidate's own "
                                    "kernels (constants made in the forward may be computed and moved)")
            if int(meta.get("native_calls", 0)) == 0:
                return self.verdict(ErrorCode.FORBIDDEN, "the forward never called the candidate's native code "
                                    "(load_kernels functions, load_inline module functions, Triton or CuPy kernel "
                                    "launches)")
        return True

    def _on_kernels(self) -> None:
        """The profiled forward after the timing: which GPU kernels ran (strict: one of the candidate's own)."""
        kernels = self.kernels or {}
        self.result.kernels = [str(k) for k in kernels.get("kernels", [])][:50]
        self.result.kernel_profile = [dict(entry) for entry in kernels.get("profile", [])]
        if kernels.get("tampered"):
            self._tampered(kernels["tampered"])
            return
        if self.config.policy != "strict":
            return
        audit = kernels.get("audit") or {}
        if _audit_failed(audit):
            self.verdict(ErrorCode.FORBIDDEN, "the profiled forward behaved differently from the correctness "
                         "trials (PyTorch compute ops, no call of the candidate's native code, or the op recorder "
                         "disabled)")
            return
        library = cupy_support.library_kernels(self.result.kernels, (self.checks or {}).get("cupy"),
                                               _INTERNAL_KERNEL_MARKERS)
        if library:
            self.verdict(ErrorCode.FORBIDDEN, "the forward ran CuPy array operations on the GPU (kernels: "
                         f"{', '.join(library[:5])}); under the strict policy CuPy's own routines are judged as "
                         "PyTorch compute is: the compute must run in the candidate's own RawKernel / RawModule kernels")
            return
        own = [k for k in self.result.kernels
               if not any(m in k for m in _INTERNAL_KERNEL_MARKERS) and not k.startswith(cupy_support.LIBRARY_PREFIX)]
        if not own:
            self.verdict(ErrorCode.FORBIDDEN, "no kernel of the candidate's own ran on the GPU during the forward")

    def _on_timing(self) -> None:
        timing = self.timing or {}
        if timing.get("tampered"):
            self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process while it was timed: "
                         + ", ".join(timing["tampered"]))
            return
        inputs, digests = timing.get("digest_inputs", []), self._arrays.get("timing", [])
        if not inputs or len(inputs) != len(digests) or len(inputs) < int((timing.get("stats") or {}).get("reps", 1)):
            self.verdict(ErrorCode.FORBIDDEN, "the timing report has fewer output digests than timed calls")
            return
        # Where the reference is rounding noise, the widest widened tolerance stands for every timed
        # call (their inputs are draws whose reference error was not measured).
        floor = widest_floor(self.tolerance_floors)
        expected = self.timing_digests
        for rep, (which, got) in enumerate(zip(inputs, digests)):
            if not isinstance(which, int) or not 0 <= which < len(expected):
                self.verdict(ErrorCode.FORBIDDEN, f"timed call {rep} reports an input that was never given")
                return
            wrong = output_digest.mismatch(got, expected[which], self.config, floor)
            if wrong:
                self.verdict(ErrorCode.INCORRECT, f"timed call {rep} returned a wrong result ({wrong}): every timed "
                             "call is held to the trials' tolerances; outputs cached, skipped, computed differently "
                             "when timed, or finished after the call returned fail here")
                return
        if UNTRACKED_WORK_FLAG in timing.get("flags", []):
            self.verdict(ErrorCode.INCORRECT, "timed calls left work running on another stream after they returned "
                         "(the device was still busy after the current stream finished): a caller would read an "
                         "unfinished output. Join side streams and library streams to the current stream (an "
                         "event wait) before forward returns")
            return
        audit = timing.get("audit") or {}
        if self.config.policy == "strict" and _audit_failed(audit):
            ops = ", ".join(f"{op} x{n}" for op, n in sorted((audit.get("forbidden_ops") or {}).items()))
            self.verdict(ErrorCode.FORBIDDEN, "timed calls behaved differently from the correctness trials: "
                         + (f"they ran PyTorch compute ops ({ops})" if ops else
                            "the op recorder was disabled" if not audit.get("intact", True) else
                            f"{audit.get('without_native')} of them never called the candidate's native code"))
            return
        self.result.candidate_time = TimingStats(**timing["stats"])
        self.result.flags += list(timing.get("flags", []))

    def _on_pairing(self) -> None:
        """EvalConfig.host_pairing's report, reduced here from the raw per-pair times: each pair's
        candidate output must match the reference's own output on the same input (the timed calls'
        checksum tolerance; pairs where the reference is not finite are left out), or the verdict is
        INCORRECT; a change to the process, or (strict) PyTorch compute in an audited paired call, is
        FORBIDDEN. The pairing stands only if its medians agree within PAIRED_AGREEMENT with the
        candidate's own timing and the eager baseline; then `EvalResult.host_pairing` is set."""
        pairing = self.pairing
        if pairing is None:
            return
        if pairing.get("tampered"):
            self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process during its paired "
                         "timing: " + ", ".join(pairing["tampered"]))
            return
        audit = pairing.get("audit") or {}  # also where the pairing stopped on the reference's failure
        if self.config.policy == "strict" and _audit_failed(audit):
            self.verdict(ErrorCode.FORBIDDEN, "paired timing calls behaved differently from the correctness trials "
                         "(PyTorch compute ops, no call of the candidate's native code, or the op recorder disabled)")
            return
        if "skipped" in pairing:
            self.result.host_pairing = {"skipped": str(pairing["skipped"])}
            return
        digests = self._arrays.get("pairing", [])
        candidate_inputs, reference_inputs = pairing.get("candidate_inputs", []), pairing.get("reference_inputs", [])
        if len(candidate_inputs) + len(reference_inputs) != len(digests):
            self.verdict(ErrorCode.FORBIDDEN, "the paired timing report's output digests do not match its calls")
            return
        candidate = dict(zip(candidate_inputs, digests[:len(candidate_inputs)]))
        reference = dict(zip(reference_inputs, digests[len(candidate_inputs):]))
        rows = pairing.get("pairs", [])
        if not rows or any(int(row[0]) not in candidate or int(row[0]) not in reference for row in rows):
            self.verdict(ErrorCode.FORBIDDEN, "the paired timing report lacks output digests of some pairs")
            return
        floor = widest_floor(self.tolerance_floors)
        ratios, candidate_ms, reference_ms = [], [], []
        for index, cand_ms, ref_ms in rows:
            want, got = reference[int(index)], candidate[int(index)]
            if not np.isfinite(want).all():
                continue  # this rotation breaks the reference: not a comparison
            wrong = output_digest.mismatch(got, want, self.config, floor)
            if wrong:
                self.verdict(ErrorCode.INCORRECT, f"a paired timing call returned a result that differs from the "
                             f"reference's on the same input ({wrong}): the candidate computed differently while "
                             "it was timed against the reference")
                return
            if cand_ms > 0 and ref_ms > 0:
                ratios.append(ref_ms / cand_ms)
                candidate_ms.append(cand_ms)
                reference_ms.append(ref_ms)
        if len(ratios) < PAIRS[0] // 2:
            self.result.host_pairing = {"skipped": f"only {len(ratios)} comparable pairs"}
            return
        paired = {"ratio": statistics.median(ratios), "pairs": len(ratios),
                  "candidate_ms": statistics.median(candidate_ms), "reference_ms": statistics.median(reference_ms)}
        own, eager = self.result.candidate_time, self.result.eager_time
        for name, paired_ms, other in (("the candidate's own timing", paired["candidate_ms"], own),
                                       ("the eager baseline", paired["reference_ms"], eager)):
            if other is not None and not 1 / PAIRED_AGREEMENT <= paired_ms / other.median_ms <= PAIRED_AGREEMENT:
                # Kept for the record under "measured", never as the pairing's ratio: a skipped
                # pairing sets no speedup (EvalResult.compared_candidate_ms).
                self.result.host_pairing = {"skipped": f"the paired median {paired_ms:.4g} ms is beyond "
                                            f"{PAIRED_AGREEMENT:g}x of {name} ({other.median_ms:.4g} ms)",
                                            "measured": paired}
                return
        self.result.host_pairing = paired

    def finish(self) -> None:
        if self.decided:
            return
        if self.checks is None or len(self.result.trials) < self.config.correctness_trials:
            self.verdict(ErrorCode.RUNTIME_ERROR, f"the worker stopped during {self.stage} without a verdict")
            return
        if self.timing is None:
            self.verdict(ErrorCode.RUNTIME_ERROR, "the worker stopped before timing finished")
            return
        self._on_timing()
        if self.decided:
            return
        self._on_pairing()
        if self.decided:
            return
        if self.result.backend == "cuda":
            if self.kernels is None:
                self.verdict(ErrorCode.RUNTIME_ERROR, "the worker stopped before the profiled forward (kernel check)")
                return
            self._on_kernels()
            if self.decided:
                return
        self.result.correct = True
        trials = self.result.trials
        self.result.max_abs_error = max(t.max_abs_error for t in trials)
        self.result.max_rel_error = max(t.max_rel_error for t in trials)
        self.result.rel_norm_error = max(t.rel_norm_error for t in trials)
        message = self.result.message
        self.verdict(ErrorCode.OK, message if message.startswith("warning") else "correct")

