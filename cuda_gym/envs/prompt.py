"""The text the agent reads: the task prompt at reset and the feedback after every step.

Everything returned here fits the environment's observation space (printable ASCII, bounded
length): `to_observation` replaces other characters and trims.
"""
from __future__ import annotations

import math
import string
from typing import Any

from ..eval.candidate import LANGUAGES
from ..eval.config import EvalConfig
from ..eval.logs import shorten_paths, trim_compile_log
from ..eval.result import ErrorCode, EvalResult
from ..tasks.task import Task

CHARSET = string.printable  # letters, digits, punctuation, space, \t \n \r \x0b \x0c
_CHARSET_SET = frozenset(CHARSET)
_REPLACEMENTS = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
    "\u2026": "...", "\u00a0": " ", "\u2192": "->", "\u00d7": "x", "\u2264": "<=", "\u2265": ">=",
})

COMMANDS = ("compile", "check", "eval", "submit")
DEFAULT_COMMAND = "eval"

# --------------------------------------------------------------------------------------- helpers


def to_observation(text: str, max_chars: int) -> str:
    """Map `text` into the observation space: printable ASCII only, at most `max_chars` characters."""
    text = text.translate(_REPLACEMENTS)
    if any(c not in _CHARSET_SET for c in text):
        text = "".join(c if c in _CHARSET_SET else "?" for c in text)
    if len(text) > max_chars:
        marker = "\n[... trimmed to fit the observation limit ...]\n"
        keep = max(0, max_chars - len(marker))
        head = keep * 3 // 4
        text = text[:head] + marker + text[len(text) - (keep - head):] if keep else text[:max_chars]
    return text


def _fmt_ms(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.4g} ms"


def _fmt_err(value: float | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.3g}"


def tail_lines(text: str, count: int = 20, max_chars: int = 2500) -> str:
    lines = [shorten_paths(line.rstrip()) for line in text.strip().splitlines() if line.strip()]
    text = "\n".join(lines[-count:])
    return text if len(text) <= max_chars else "[...]" + text[-max_chars:]


# --------------------------------------------------------------------------------------- prompt

_CUDA_EXAMPLE = r'''import torch
import torch.nn as nn
from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float alpha, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}

extern "C" int scale_forward(const float* x, float* y, float alpha, int64_t n, cudaStream_t stream) {
    int64_t blocks = (n + 255) / 256;
    scale_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, y, alpha, n);
    return (int)cudaGetLastError();
}
""",
    functions=["int scale_forward(const float* x, float* y, float alpha, int64_t n, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self, alpha):                 # the same constructor arguments as Model
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        y = torch.empty_like(x)                # allocating outputs is allowed
        err = _lib.scale_forward(x, y, self.alpha, x.numel())  # tensors pass as pointers; the stream is added
        if err:
            raise RuntimeError(f"CUDA error {err}")
        return y'''

_CPU_EXAMPLE = r'''import torch
import torch.nn as nn
from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>

extern "C" void scale_forward(const float* x, float* y, float alpha, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}
""",
    functions=["void scale_forward(const float* x, float* y, float alpha, int64_t n)"],
    extra_cflags=["-fopenmp", "-march=native"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, alpha):                 # the same constructor arguments as Model
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        y = torch.empty_like(x)                # allocating outputs is allowed
        _lib.scale_forward(x, y, self.alpha, x.numel())  # tensors pass as raw pointers
        return y'''


TRITON_EXAMPLE = r'''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha):                 # the same constructor arguments as Model
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        x = x.contiguous()                     # a view op: allowed
        y = torch.empty_like(x)                # allocating outputs is allowed
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, y, self.alpha, n, BLOCK=1024)  # tensors pass as pointers
        return y'''


CUPY_EXAMPLE = r'''import cupy
import numpy as np
import torch
import torch.nn as nn

_scale = cupy.RawKernel(r"""
extern "C" __global__ void scale_kernel(const float* x, float* y, float alpha, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}
""", "scale_kernel")


class ModelNew(nn.Module):
    def __init__(self, alpha):                 # the same constructor arguments as Model
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        x = x.contiguous()                     # a view op: allowed
        y = torch.empty_like(x)                # allocating outputs is allowed
        n = x.numel()
        # tensors pass as zero-copy CuPy views; scalars as numpy types of the C parameter's width
        _scale(((n + 255) // 256,), (256,), (cupy.asarray(x), cupy.asarray(y), np.float32(self.alpha), np.int64(n)))
        return y'''


def language_name(backend: str, language: str = "cuda") -> str:
    """What the agent writes its kernels in."""
    if language == "triton":
        return "Triton"
    if language == "cupy":
        return "CUDA C++ (compiled by CuPy)"
    return "CUDA C++" if backend == "cuda" else "C++"


def triton_format(backend: str) -> str:
    """The candidate-format section for Triton candidates."""
    where = ("On this CPU backend the kernels run in Triton's interpreter (TRITON_INTERPRET=1): correctness and "
             "the policy are judged, but interpreted timings mean nothing, so a correct candidate earns 1 whatever "
             "its speed (flag triton_interpreted). Launch few, large programs (big BLOCK) so the interpreter "
             "stays quick." if backend == "cpu" else
             "Kernels are compiled by Triton on their first launch (cached across evaluations); triton.autotune "
             "runs its benchmarks on the first (warm-up) call, never inside a timed call, as long as the "
             "autotune key does not change between calls.")
    return f"""A Python source that defines `class ModelNew` whose forward launches `@triton.jit` kernels
(`kernel[grid](...)`, with or without `triton.autotune`). Tensors pass to kernels as pointers: make
them contiguous and allocate outputs with torch.empty / empty_like. Every launch counts as a call of
your own kernel. For fp32 tasks pass `input_precision="ieee"` to `tl.dot` (its default is TF32,
which fails the fp32 tolerance). {where}
Example:
```python
{TRITON_EXAMPLE}
```"""


def cupy_format(backend: str) -> str:
    """The candidate-format section for CuPy candidates (the cuda backend only)."""
    return f"""A Python source that defines `class ModelNew` whose forward launches CUDA C++ kernels compiled by
CuPy: `cupy.RawKernel(code, name)` for one `extern "C" __global__` kernel, `cupy.RawModule(code=...,
name_expressions=(...))` and `get_function(name)` for several or templated ones. A kernel compiles
with NVRTC on its first launch (about a tenth of a second; cached across evaluations). Launch with
`kernel(grid, block, args)`: pass each torch tensor as `cupy.asarray(t)` (a view, no copy; CuPy's
launch refuses a torch.Tensor itself; make tensors contiguous, pass parameters as `.detach()`,
allocate outputs with torch.empty / empty_like); pass scalars as numpy types of the C parameter's width (np.int32, np.int64,
np.float32). Launches run on torch's current stream. Every launch counts as a call of your own
kernel; CuPy's array functions (cupy.add, cupy.matmul, cupy.sum, ... and arithmetic on cupy
arrays) are library compute, judged as PyTorch ops are. Example ({backend}):
```python
{{CUPY_EXAMPLE}}
```""".replace("{{CUPY_EXAMPLE}}", CUPY_EXAMPLE)


def _rules(backend: str, config: EvalConfig, language: str = "cuda") -> str:
    device_code = language_name(backend, language)
    own_code = {"triton": "launch your own @triton.jit kernels",
                "cupy": "launch your own CuPy RawKernel / RawModule kernels"}.get(
                    language, f"call your own compiled {device_code} code")
    if config.policy == "strict":
        libraries = ("Calling cuBLAS / cuDNN (or any library) from your own C++ is allowed"
                     if backend == "cuda" else "Calling a library (BLAS, ...) from your own C++ is allowed")
        libraries += ": those calls do not go through PyTorch."
        if language == "cupy":
            libraries = ("CuPy's own array functions (elementwise, reductions, cupy.matmul and the cuBLAS under it) "
                         "count as library compute: used in the forward, they make the verdict FORBIDDEN.")
        policy = f"""\
- Policy: strict. ModelNew.forward may create tensors (torch.empty / empty_like / zeros ...), make
  views (view, reshape, transpose, permute, slicing, .contiguous() of an already contiguous tensor),
  make constants and move them, and {own_code}. All compute on the
  task's data must be yours: every PyTorch compute op (matmul, conv, F.*, +, *, sum, exp, .to() casts
  and device moves, copies such as .clone() or .contiguous() of a non-contiguous tensor, ...) on the
  inputs, the parameters or buffers, or anything computed, copied or viewed from them makes the
  verdict FORBIDDEN; so does a forward that never calls your native code. Constants are tensors the
  forward makes from literals or shapes (torch.zeros / ones / full / arange, zeros_like(x),
  torch.tensor of Python numbers): PyTorch ops on constants alone are allowed (e.g.
  torch.zeros(n).to(device), a dtype cast of a constant). Make and move constants before the first
  call into your native code (or inside it: torch::zeros(...).to(device) in a load_inline extension's
  C++ before its launch is fine): once a native call has returned, or task data has been read to the
  host (.item(), .tolist(), .numpy(), .cpu()), nothing the forward makes is a constant any more.
  {libraries}"""
    else:
        policy = """\
- Policy: permissive. PyTorch ops are allowed in the forward (as in KernelBench's prompt), but the
  point is still to replace the slow parts with your own kernels."""
    if config.precision == "fp32":
        precision = f"""\
- Precision: fp32, exact. Outputs must match the fp32 reference: relative error
  ||out - ref|| / ||ref|| <= {config.rel_norm_tolerance:g} and every element within
  {config.elementwise_rtol:g} * |ref| (plus a tiny absolute slack). TF32, fp16/bf16 math and other
  reduced-precision shortcuts are not allowed; use fp32 arithmetic (fp32 FMAs are fine). Where the
  fp32 reference is itself rounding noise (further from a float64 run than these bounds), the bounds
  widen to {config.reference_noise_multiple:g} times the reference's own error, and the verdict says so."""
    else:
        precision = f"""\
- Precision: tf32. TF32 tensor-core math is allowed (and enabled for the baselines too): relative error
  ||out - ref|| / ||ref|| <= {config.rel_norm_tolerance:g}, elements within {config.elementwise_rtol:g} * |ref|."""
    return f"""\
- ModelNew(*get_init_inputs()) must work, and ModelNew.forward(*get_inputs()) must return what
  Model.forward returns (same number of outputs, shapes and dtypes).
- Weights: when ModelNew's state_dict has the same names and shapes as Model's, the reference's
  parameters and buffers are loaded into it; otherwise it is built with the same seed. Keep the
  reference's modules/parameters (e.g. self.linear = nn.Linear(...)) and pass their .weight / .bias
  to your kernels.
{policy}
- Inputs must stay unchanged (write into new output tensors). Do not change global state (thread
  counts, precision flags, patched functions): that is detected as tampering.
{precision}
- Correctness is checked on {config.correctness_trials} input draws (the task's own inputs, then new
  draws of them with the random values fresh, negated, scaled and centered; the structure the
  inputs are built with stays), so the kernel must be right for any values, not just one input. Every timed call's output is checked at the same tolerances: caching results, skipping work
  or computing differently when timed fails."""


def _speed_text(config: EvalConfig) -> str:
    names = {"eager": "PyTorch eager", "compile": "torch.compile"}
    baselines = ", ".join(names[b] for b in config.baselines) or "no baseline"
    return (f"Speed: the median time of the forward over up to {config.timing_reps} timed calls "
            f"({config.timing_input_sets} rotating input sets), compared with {baselines} on the same inputs."
            + (" A candidate more than 5% faster than a baseline is judged again in a second fresh process, and "
               "the slower of the two times stands." if config.confirm_faster and config.baselines else ""))


def _protocol(max_turns: int, reward_mode: str) -> str:
    reward = ("Every step is rewarded (reward_mode=per_step)." if reward_mode == "per_step" else
              "The reward comes at the end of the episode (reward_mode=final): the best result among the "
              "candidates you evaluated (eval / submit; check results count only if nothing was evaluated).")
    return f"""\
Each action is one message: an optional command line, then the candidate source. The command line is
the first non-blank line of the message:
  #! compile   build the candidate and import it; reports only whether it builds (compiler errors)
  #! check     build and check correctness on all input draws; no baselines, timing is one rough call
  #! eval      (the default when there is no command line) full evaluation: correctness, timing and
               speedups against the baselines
  #! submit    full evaluation as your final answer; ends the episode
The candidate is a Python file (or one ```python fenced block) that defines `class ModelNew`. You have
{max_turns} turns (messages); the episode ends after `#! submit` or after the last turn. {reward}
Reward (milestones): -1 if the candidate fails or is wrong, 1 if correct, 2 if more than 5% faster
than PyTorch eager, 3 if more than 5% faster than both eager and torch.compile."""


def task_prompt(task: Task, *, backend: str, hardware: str, config: EvalConfig, max_turns: int,
                reward_mode: str = "per_step", reward_name: str = "milestone", language: str = "cuda") -> str:
    """The observation returned by `reset()`: everything the agent needs to write a candidate in
    `language` ("cuda": the native forms; "triton": @triton.jit kernels; "cupy": CuPy RawKernel /
    RawModule sources, cuda backend only)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    if language == "cupy" and backend != "cuda":
        raise ValueError("language='cupy' needs backend='cuda': CuPy kernels run on a GPU only")
    kernel_language = language_name(backend, language)
    sizes = task.sizes_for(backend)
    size_note = ""
    if sizes:
        listed = ", ".join(f"{k} = {v!r}" for k, v in sorted(sizes.items()))
        size_note = (f"\nOn this backend the module constants are overridden before get_inputs() runs: {listed}.\n"
                     "Your kernels must handle these sizes (and should not hard-code them).\n")
    example = _CUDA_EXAMPLE if backend == "cuda" else _CPU_EXAMPLE
    protocol = _protocol(max_turns, reward_mode)
    if reward_name != "milestone":
        protocol = protocol.rsplit("\nReward (milestones)", 1)[0] + f"\nReward function: {reward_name}."
    description = f" - {task.description}" if task.description else ""
    native_format = _native_format(backend, language_name(backend), example)
    return f"""\
# Task {task.id} (level {task.level}){description}

Write a faster replacement for the PyTorch program below: a `class ModelNew(nn.Module)` whose forward
computes the same outputs with your own {kernel_language} kernels.

## Target
Backend: {backend}
Hardware: {hardware}

## Reference program
```python
{task.source.rstrip()}
```
{size_note}
## Rules
{_rules(backend, config, language)}
{_speed_text(config)}

## Candidate format
{_format(backend, language, native_format)}

## Actions
{protocol}
"""


def _format(backend: str, language: str, native_format: str) -> str:
    """The candidate-format section for kernels in `language`."""
    if language == "triton":
        return triton_format(backend)
    return cupy_format(backend) if language == "cupy" else native_format


def _native_format(backend: str, language: str, example: str) -> str:
    return f"""\
A Python source that defines `class ModelNew`. Recommended: write the kernels as plain {language} with
`extern "C"` entry points (raw pointers and sizes, no torch headers) and load them with
`cuda_gym.native.load_kernels`; a build then takes about a second. Supported parameter types: pointers
(tensors are passed as their data pointer; they must be contiguous and on the {backend} device), fixed-size
integers / float / double / bool{", and a trailing cudaStream_t that is filled in with the current stream" if backend == "cuda" else ""}.
Example ({backend}):
```python
{example}
```
KernelBench-style candidates that use torch.utils.cpp_extension.load_inline are accepted too. Their
builds take about 10 s when the CUDA source holds plain (non-template) kernels launched from C++
wrappers, about 30 s otherwise (templates, namespaces, #ifdef, __constant__ symbols used by the host)."""


# ------------------------------------------------------------------------------------- feedback

def _trials_text(result: EvalResult, limit: int = 8) -> list[str]:
    lines = []
    for index, trial in enumerate(result.trials[:limit]):
        status = "pass" if trial.passed else "FAIL"
        line = (f"  trial {index} ({trial.distribution} inputs): {status}; rel. error {_fmt_err(trial.rel_norm_error)}, "
                f"max abs error {_fmt_err(trial.max_abs_error)}")
        if trial.message and not trial.passed and trial.message not in result.message:
            line += f" - {trial.message}"
        lines.append(line)
    return lines


def _timing_lines(result: EvalResult, command: str) -> list[str]:
    lines = []
    cand = result.candidate_time
    if cand is not None:
        if command == "check":
            lines.append(f"Time: {_fmt_ms(cand.median_ms)} (a single call without warm-up: rough, use eval to measure speed)")
        else:
            lines.append(f"Time: {_fmt_ms(cand.median_ms)} median over {cand.reps} calls "
                         f"(min {_fmt_ms(cand.min_ms)}, IQR {_fmt_ms(cand.iqr_ms)}, {cand.method})")
    if command in ("eval", "submit"):
        # The cached baseline medians the speedups were computed from, so time / time matches.
        baseline = result.baseline_ms()
        for name, ms, speedup in (("PyTorch eager", baseline["eager"], result.speedup_vs_eager),
                                  ("torch.compile", baseline["compile"], result.speedup_vs_compile)):
            if ms is None:
                continue
            text = f"{name}: {_fmt_ms(ms)}"
            if speedup is not None:
                text += f" -> speedup x{speedup:.3g}" + (" (faster)" if speedup > 1.05 else
                                                        " (not faster)" if speedup < 0.95 else " (about equal)")
            lines.append(text)
    return lines


_VERDICT_HINTS = {
    ErrorCode.COMPILE_TIMEOUT: "Simplify the source, or use the load_kernels form (no torch headers).",
    ErrorCode.TIMEOUT: "Look for an infinite loop, a deadlock or a launch that never finishes.",
    ErrorCode.OUT_OF_MEMORY: "Allocate less: reuse buffers, avoid large temporaries.",
    ErrorCode.TASK_ERROR: "The reference program itself failed; this is not your candidate's fault.",
    ErrorCode.INTERNAL_ERROR: "The evaluator failed; this is not your candidate's fault.",
}


def feedback(result: EvalResult, *, command: str, turn: int, max_turns: int, reward: float | None,
             best: dict[str, Any] | None, candidate_form: str = "", policy: str = "strict",
             done: bool = False) -> str:
    """The observation after a step."""
    code = result.error_code
    out: list[str] = []
    build_only = command == "compile"
    if build_only and result.compiled:
        verdict = "COMPILED"
    else:
        verdict = code.value
    out.append(f"Turn {turn}/{max_turns} | command: {command} | verdict: {verdict}")

    if code is ErrorCode.INVALID_ACTION:
        out.append(result.message)
        out.append("Send a Python file (or one ```python block) that defines `class ModelNew(nn.Module)`, "
                   "optionally preceded by a command line: #! compile | #! check | #! eval | #! submit.")
    elif not result.compiled:
        if code is ErrorCode.COMPILE_ERROR:
            out.append("The native build failed. Compiler errors:")
            out.append(trim_compile_log(result.compile_log or result.message))
        elif code is ErrorCode.RUNTIME_ERROR:
            head = shorten_paths(result.message.splitlines()[0] if result.message else "the candidate failed")
            out.append(head)
            tail = tail_lines(result.compile_log or result.runtime_log, 10)
            tail = "\n".join(line for line in tail.splitlines() if line.strip() not in head)
            if tail:
                out.append(tail)
        else:
            out.append(shorten_paths(result.message))
        if code in _VERDICT_HINTS:
            out.append(_VERDICT_HINTS[code])
    elif build_only:
        out.append("The candidate builds and imports" + (" (build cached)" if result.build_cached else "") + ".")
        if candidate_form == "python" and policy == "strict":
            out.append("Note: it has no native code (no load_kernels / load_inline); under the strict policy "
                       "it will be FORBIDDEN.")
        out.append("compile reports only the build; use #! check for correctness or #! eval for speed.")
    else:
        if code is ErrorCode.OK:
            out.append("Correct." if not result.message.startswith("warning") else f"Correct ({result.message}).")
        else:
            out.append(shorten_paths(result.message))
        if code is ErrorCode.FORBIDDEN and result.forbidden_ops:
            out.append("PyTorch ops run by the forward: " + ", ".join(result.forbidden_ops))
        if code is ErrorCode.RUNTIME_ERROR and result.runtime_log:
            out.append(tail_lines(result.runtime_log, 10))
        if code in _VERDICT_HINTS:
            out.append(_VERDICT_HINTS[code])
        trials = _trials_text(result)
        if trials:
            out.append("Correctness:")
            out.extend(trials)
        out.extend(_timing_lines(result, command))
    shown_flags = [f for f in result.flags if not (build_only and f.startswith("baseline_"))]
    if shown_flags and not (build_only and result.compiled):
        out.append("Flags: " + ", ".join(shown_flags))
    if reward is not None:
        out.append(f"Reward: {reward:g}")
    if best and best.get("found"):
        extra = f", x{best['speedup_vs_eager']:.3g} vs eager" if best.get("speedup_vs_eager") is not None else ""
        out.append(f"Best correct candidate so far: turn {best['turn']} ({best['command']}), "
                   f"{_fmt_ms(best['time_ms'])}{extra}")
    left = max_turns - turn
    if done:
        out.append("The episode is over.")
    else:
        out.append(f"Turns left: {left}" + (" (the next one is the last)" if left == 1 else ""))
    return "\n".join(out)

