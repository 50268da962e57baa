"""The verdict: `ErrorCode` and the JSON-serializable, versioned `EvalResult`."""
from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any

# The JSON form's version; what each version changed is listed in docs/environment.md ("The result").
RESULT_SCHEMA_VERSION = 9


class ErrorCode(str, enum.Enum):
    """What happened to a candidate. Exactly one per evaluation."""

    OK = "OK"  # compiled, correct and timed
    INVALID_ACTION = "INVALID_ACTION"  # not parseable Python, or no `class ModelNew`
    COMPILE_ERROR = "COMPILE_ERROR"  # the native build failed
    COMPILE_TIMEOUT = "COMPILE_TIMEOUT"  # the native build ran past `compile_timeout_s`
    RUNTIME_ERROR = "RUNTIME_ERROR"  # raised, crashed, exited or hit a CUDA error while running
    TIMEOUT = "TIMEOUT"  # ran past `eval_timeout_s` (hang, infinite loop)
    OUT_OF_MEMORY = "OUT_OF_MEMORY"  # device or host allocation failed
    INCORRECT = "INCORRECT"  # ran, but outputs differ from the reference (or inputs were mutated)
    FORBIDDEN = "FORBIDDEN"  # broke the evaluation policy (PyTorch compute, no own kernel, tampering)
    TASK_ERROR = "TASK_ERROR"  # the reference itself failed: not the candidate's fault
    INTERNAL_ERROR = "INTERNAL_ERROR"  # the evaluator failed: a bug, please report it


@dataclass
class TimingStats:
    """Times of one callable, in milliseconds, over `reps` timed repetitions."""

    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    reps: int
    method: str  # how it was measured, e.g. "cuda_event_held", "cuda_event" or "wall+device_sync"
    # The timer's other measurements (ms), for reports: with held repeats, the open repeats' median
    # and host issue time, the held repeats' device and issue medians and the hold's length.
    detail: dict[str, float] = field(default_factory=dict)

    @property
    def spread(self) -> float:
        """Relative interquartile spread (IQR / median)."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0


@dataclass
class TrialResult:
    """Correctness of the candidate on one input draw."""

    distribution: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    rel_norm_error: float
    message: str = ""


@dataclass
class EvalResult:
    """Everything the evaluator knows about one candidate. Serialize with `to_json()`."""

    task_id: str
    backend: str
    error_code: ErrorCode
    message: str = ""
    schema_version: int = RESULT_SCHEMA_VERSION
    device: str = ""
    torch_version: str = ""
    precision: str = "fp32"
    policy: str = "strict"
    candidate_hash: str = ""
    language: str = ""  # the candidate's kernel language: "cuda" (native forms) or "triton"; "" before parsing
    compiled: bool = False
    correct: bool = False
    trials: list[TrialResult] = field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    rel_norm_error: float | None = None
    candidate_time: TimingStats | None = None
    eager_time: TimingStats | None = None  # cached baseline: the median worker of up to config.baseline_workers
    compile_time: TimingStats | None = None
    # With EvalConfig.host_pairing: the candidate timed call by call against a fresh reference in its
    # own worker: {"ratio" (median reference / candidate per pair), "pairs", "candidate_ms",
    # "reference_ms"}, or {"skipped": why} (with "measured": those numbers where the paired medians
    # fell outside the 2x band); empty where no pairing was asked for.
    host_pairing: dict[str, Any] = field(default_factory=dict)
    # The baselines' own pairing (from their cache entry): {"eager_over_compile": the median per-pair
    # ratio of eager's time over torch.compile's, timed call by call in the baseline workers}, or
    # {"skipped": why}. Where measured, the speedup vs compile is the speedup vs eager over this.
    compile_pairing: dict[str, Any] = field(default_factory=dict)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    # With EvalConfig.confirm_faster: each fresh eval worker's candidate median when the first claimed a
    # milestone (> 5% faster than a baseline) and a second judged the candidate again; the slower stands.
    candidate_worker_medians_ms: list[float] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # suspicions and warnings, machine-readable
    forbidden_ops: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)  # device kernels the forward launched (cuda)
    # One profiled forward after the timing (cuda): {"name", "count", "total_us"} per device kernel
    # (copies and fills included), the largest total first; the times are one call's, not the median's.
    kernel_profile: list[dict[str, Any]] = field(default_factory=list)
    compile_log: str = ""
    runtime_log: str = ""
    compile_seconds: float = 0.0  # the build stage (0 when the build was cached)
    eval_seconds: float = 0.0  # the evaluation stage in its worker(s) (not queueing, not baselines); both when confirmed
    stage_seconds: dict[str, float] = field(default_factory=dict)  # when each stage ended, from eval start (kept worker)
    build_cached: bool = False
    # load_inline builds: {name: "split" | "stripped" | "as_written", "<name>.not_split": why} (cuda_gym/eval/fastbuild.py)
    inline_build_forms: dict[str, str] = field(default_factory=dict)
    limits_not_applied: list[str] = field(default_factory=list)  # sandbox measures the worker could not apply
    # The eval worker's memory plan (cuda_gym/eval/memory.py): inputs, outputs, budget and use in GiB,
    # resident reference outputs and timing sets; on CUDA `peak_gib`, the most its allocator reserved,
    # `peak_allocated_gib`, the most its live tensors took (memory scrubs left out), `peak_phase`, the job's phase of the
    # reserved peak, and `phase_peak_gib`: {phase: [reserved, allocated]} (cuda_gym/eval/phase_clock.py).
    device_memory: dict[str, Any] = field(default_factory=dict)
    # The fp32 reference's own error, measured in the eval worker before the candidate loaded (its
    # float64 twin on each correctness draw): per draw, `rel_norm` (||ref32 - ref64|| / ||ref32||) and
    # `max_abs`, and `seconds`. Where it is beyond the policy's tolerances (flag
    # `reference_rounding_noise`), `multiple` and per draw the `rel_norm_tolerance` and `abs_tolerance`
    # the candidate was held to (None: the policy's). `skipped`: why it was not measured (the
    # policy's tolerances stood).
    reference_error: dict[str, Any] = field(default_factory=dict)

    def baseline_ms(self) -> dict[str, float | None]:
        """The baseline medians the speedups compare with: eager and torch.compile as cached, each
        the median worker of up to `config.baseline_workers` fresh workers (the lower of two when
        the first two agreed within `config.baseline_agreement`)."""
        return {"eager": self.eager_time.median_ms if self.eager_time else None,
                "compile": self.compile_time.median_ms if self.compile_time else None}

    def compared_candidate_ms(self) -> float | None:
        """The candidate time the speedups compare with the baselines: with a paired timing
        (`host_pairing`) and an eager baseline, the eager baseline's time divided by the paired
        ratio (the candidate's time at the baseline workers' host speed); else its own median."""
        if self.candidate_time is None:
            return None
        ratio, eager = self.host_pairing.get("ratio"), self.baseline_ms()["eager"]
        if ratio and eager and "skipped" not in self.host_pairing:
            return eager / ratio
        return self.candidate_time.median_ms

    @property
    def ok(self) -> bool:
        return self.error_code is ErrorCode.OK

    def to_dict(self) -> dict[str, Any]:
        """Every field, for every verdict: a value not measured is None (a timing, a speedup, an
        error), a list or dict of things not found is empty. Keys and types: docs/environment.md."""
        data = dataclasses.asdict(self)
        data["error_code"] = self.error_code.value
        return data

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        """The result behind `to_dict()`'s output, also of an older schema version or with keys left
        out (they take their defaults). Fields an older version had and this one dropped are
        ignored; the rebuilt result says the version it was read from in `schema_version`. A
        newer version raises `ValueError`: its fields may mean what this version cannot tell."""
        version = data.get("schema_version")
        if not isinstance(version, int) or version > RESULT_SCHEMA_VERSION:
            raise ValueError(f"EvalResult schema {version!r} is newer than this cuda_gym reads "
                             f"({RESULT_SCHEMA_VERSION}); upgrade cuda_gym to read it")
        data = _known_fields(cls, data)
        data["error_code"] = ErrorCode(data["error_code"])
        data["trials"] = [TrialResult(**_known_fields(TrialResult, t)) for t in data.get("trials") or []]
        for key in ("candidate_time", "eager_time", "compile_time"):
            if data.get(key) is not None:
                data[key] = TimingStats(**_known_fields(TimingStats, data[key]))
        return cls(**data)

    def summary(self) -> str:
        """One human-readable line."""
        parts = [f"{self.task_id} [{self.backend}] {self.error_code.value}"]
        if self.candidate_time:
            parts.append(f"{self.candidate_time.median_ms:.4g} ms")
        if self.speedup_vs_eager is not None:
            parts.append(f"x{self.speedup_vs_eager:.2f} vs eager")
        if self.speedup_vs_compile is not None:
            parts.append(f"x{self.speedup_vs_compile:.2f} vs compile")
        if self.message and not self.ok:
            parts.append(self.message.splitlines()[0][:200])
        return " | ".join(parts)


def result_keys() -> tuple[str, ...]:
    """The keys of every `EvalResult.to_dict()`, in order."""
    return tuple(f.name for f in dataclasses.fields(EvalResult))


def _known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {key: value for key, value in data.items() if key in names}
