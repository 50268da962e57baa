"""Correctness: input draws (in the worker) and output comparison (in the evaluator).

Draws: the task's own `get_inputs()` once, then device-side shuffles of it (fresh values at every
position, same distribution) with sign, scale and offset transforms on floating-point inputs, so a
kernel that is only right on [0, 1) or that caches by address cannot pass. Integer and boolean
inputs are shuffled only, never cast. A draw whose reference output is not finite falls back to a
plain shuffle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .config import EvalConfig
from .result import TrialResult

DISTRIBUTIONS = ("task", "shuffled", "negated", "scaled_x3", "centered")


@dataclass
class Draw:
    distribution: str
    inputs: list[Any]


def _shuffle(value: Any, generator: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.numel() > 1:
        perm = torch.randperm(value.numel(), device=value.device, generator=generator)
        return value.reshape(-1)[perm].reshape(value.shape)
    return value


def _transform(value: Any, distribution: str) -> Any:
    import torch

    if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
        return value
    if distribution == "negated":
        return -value
    if distribution == "scaled_x3":
        return value * 3.0
    if distribution == "centered":
        return value - value.mean()
    return value


def make_draws(base_inputs: Sequence[Any], count: int, seed: int, device: str,
               distributions: Sequence[str] = DISTRIBUTIONS) -> list[Draw]:
    """`count` input draws; the first is the task's own inputs, the rest shuffled and transformed."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    draws = []
    for index in range(count):
        distribution = distributions[index % len(distributions)]
        if distribution == "task" and index == 0:
            inputs = list(base_inputs)
        else:
            inputs = [_transform(_shuffle(v, generator), distribution) for v in base_inputs]
            if distribution == "task":
                distribution = "shuffled"
        draws.append(Draw(distribution, inputs))
    return draws


def reshuffle(draw: Draw, base_inputs: Sequence[Any], seed: int, device: str) -> Draw:
    """The fallback for a draw whose reference output was not finite."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return Draw("shuffled", [_shuffle(v, generator) for v in base_inputs])


def flatten_outputs(output: Any) -> list[Any]:
    """A forward may return a tensor, a tuple/list of tensors, or a number."""
    if isinstance(output, (tuple, list)):
        return [o for item in output for o in flatten_outputs(item)]
    return [output]


def compare(candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray], *, cand_dtypes: Sequence[str],
            ref_dtypes: Sequence[str], config: EvalConfig, distribution: str) -> TrialResult:
    """Compare outputs: same count, shapes and dtypes; finite; relative-norm and elementwise bounds."""

    def fail(message: str, abs_err: float = float("inf"), rel_err: float = float("inf"),
             norm_err: float = float("inf")) -> TrialResult:
        return TrialResult(distribution, False, abs_err, rel_err, norm_err, message)

    if len(candidate) != len(reference):
        return fail(f"returned {len(candidate)} outputs, the reference returns {len(reference)}")
    max_abs = max_rel = max_norm = 0.0
    for index, (out, ref, cdt, rdt) in enumerate(zip(candidate, reference, cand_dtypes, ref_dtypes)):
        label = f"output {index}" if len(reference) > 1 else "output"
        if tuple(out.shape) != tuple(ref.shape):
            return fail(f"{label} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        if cdt != rdt:
            return fail(f"{label} has dtype {cdt}, expected {rdt} (a precision change is not allowed)")
        if ref.dtype.kind in "biu":
            mismatches = int(np.count_nonzero(out != ref))
            if mismatches:
                return fail(f"{label}: {mismatches} of {ref.size} integer elements differ", float(mismatches), 1.0, 1.0)
            continue
        out64 = out.astype(np.float64)
        ref64 = ref.astype(np.float64)
        if not np.all(np.isfinite(out64)):
            bad = int(np.count_nonzero(~np.isfinite(out64)))
            return fail(f"{label}: {bad} of {out.size} elements are NaN/inf (unwritten or overflowed output?)")
        diff = np.abs(out64 - ref64)
        ref_abs = np.abs(ref64)
        ref_norm = float(np.linalg.norm(ref64))
        norm_err = float(np.linalg.norm(out64 - ref64)) / max(ref_norm, 1e-30)
        abs_err = float(diff.max()) if diff.size else 0.0
        rel_err = float((diff / np.maximum(ref_abs, 1e-6)).max()) if diff.size else 0.0
        scale = ref_norm / max(np.sqrt(ref64.size), 1.0)
        atol = 1e-4 * scale + 1e-7
        bad_elements = int(np.count_nonzero(diff > atol + config.elementwise_rtol * ref_abs))
        max_abs, max_rel, max_norm = max(max_abs, abs_err), max(max_rel, rel_err), max(max_norm, norm_err)
        if norm_err > config.rel_norm_tolerance:
            return fail(f"{label}: relative error {norm_err:.3g} > {config.rel_norm_tolerance:g} "
                        f"({config.precision} policy); max abs error {abs_err:.3g}", abs_err, rel_err, norm_err)
        if bad_elements:
            worst = int(np.argmax(diff - config.elementwise_rtol * ref_abs))
            where = np.unravel_index(worst, ref.shape)
            return fail(f"{label}: {bad_elements} of {ref.size} elements out of tolerance; worst at "
                        f"{tuple(int(i) for i in where)}: got {out64[where]:.6g}, expected {ref64[where]:.6g}",
                        abs_err, rel_err, norm_err)
    return TrialResult(distribution, True, max_abs, max_rel, max_norm)


def degeneracy(draw_outputs: Sequence[Sequence[np.ndarray]]) -> str | None:
    """Why a task's output barely depends on its inputs (judged over all draws), or None."""
    first = draw_outputs[0]
    for index, ref in enumerate(first):
        a = ref.astype(np.float64)
        norm = float(np.linalg.norm(a))
        if norm < 1e-12:
            return f"reference output {index} is (near) zero"
        others = [draw[index].astype(np.float64) for draw in draw_outputs[1:] if draw[index].shape == a.shape]
        if others and all(float(np.linalg.norm(a - b)) / norm < 1e-3 for b in others):
            return f"reference output {index} is (nearly) the same for every input draw"
    return None
