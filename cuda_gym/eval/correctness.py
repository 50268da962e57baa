"""Correctness: output comparison (in the evaluator; the worker's statistics of large outputs).
The input draws the outputs come from are `draws.py`'s."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .config import EvalConfig
from .result import TrialResult

if TYPE_CHECKING:
    import torch

_tuple_iter, _list_iter = tuple.__iter__, list.__iter__


def _plain_container(output: Any) -> bool:
    """A tuple or list whose iteration is the builtin's: exactly tuple or list, or one of torch's own
    named tuples (`torch.return_types.max`, ...). A subclass's `__iter__` is the candidate's code
    and could do the work when the judge reads the outputs, after the clock stopped."""
    kind = type(output)
    return kind in (tuple, list) or (issubclass(kind, tuple) and kind.__module__ == "torch.return_types")


def flatten_outputs(output: Any) -> list[Any]:
    """A forward may return a tensor, a tuple/list of tensors, or a number. Any other container is
    returned as one output, which the checks then reject as not a tensor. A complex tensor is
    returned as its real view (a last dimension of 2: real, imaginary), so that both parts are
    compared and digested at the float tolerances."""
    import torch

    if type(output) is torch.Tensor and torch.Tensor.is_complex(output):
        return [torch.view_as_real(output.resolve_conj())]
    if not _plain_container(output):
        return [output]
    items = _tuple_iter(output) if isinstance(output, tuple) else _list_iter(output)
    return [o for item in items for o in flatten_outputs(item)]


ELEMENTWISE_ATOL_SCALE = 1e-4  # absolute tolerance, relative to the reference's RMS


STATS_CHUNK_ELEMENTS = 1 << 24  # outputs are compared in chunks: temporaries stay at 64 MB (fp32), not 5x the output


@dataclass(frozen=True)
class ToleranceFloor:
    """Widened tolerances for one output of one draw whose fp32 reference is itself further from
    its float64 twin than the policy's tolerances (`tolerance_floor`). The policy's tolerances
    stand where they are wider."""

    rel_norm: float  # the least relative-norm tolerance, ||out - ref|| / ||ref||
    abs: float  # the least absolute tolerance of every element


def tolerance_floor(reference_error: dict[str, float] | None, config: EvalConfig) -> ToleranceFloor | None:
    """The tolerances a candidate is held to on one output, from the fp32 reference's own error on
    it (`output_stats` of its float64 twin against it: 'norm' relative to the fp32 reference's
    norm, as a candidate's is measured, 'abs' the largest difference, 'bad' the elements beyond
    the policy's elementwise bound). None, so the policy's tolerances stand unchanged, where the
    reference is within them; else `config.reference_noise_multiple` times its own error."""
    if not reference_error or (reference_error["norm"] <= config.rel_norm_tolerance and not reference_error["bad"]):
        return None
    multiple = config.reference_noise_multiple
    return ToleranceFloor(rel_norm=multiple * reference_error["norm"], abs=multiple * reference_error["abs"])


def output_stats(out: "torch.Tensor", ref: "torch.Tensor", config: EvalConfig,
                 floor: ToleranceFloor | None = None) -> dict[str, float]:
    """Error statistics of one output against its reference, in float64 on their device; 'bad'
    counts the elements beyond the elementwise bound (its absolute part at least `floor.abs`).
    The same function runs in the evaluator (CPU tensors) and, for large outputs, in the worker,
    chunk by chunk, so that comparing a 6 GiB output does not allocate several more."""
    import torch

    out, ref = out.reshape(-1), ref.reshape(-1)
    chunks = range(0, ref.numel(), STATS_CHUNK_ELEMENTS)
    if not ref.is_floating_point():
        mismatches = sum(int(torch.count_nonzero(out[i:i + STATS_CHUNK_ELEMENTS] != ref[i:i + STATS_CHUNK_ELEMENTS]))
                         for i in chunks)
        return {"nonfinite": 0.0, "abs": float(mismatches), "rel": float(mismatches > 0),
                "norm": float(mismatches > 0), "bad": float(mismatches), "worst": -1.0}
    nonfinite = sum(int(torch.count_nonzero(~torch.isfinite(out[i:i + STATS_CHUNK_ELEMENTS]))) for i in chunks)
    if nonfinite:
        return {"nonfinite": float(nonfinite), "abs": float("inf"), "rel": float("inf"), "norm": float("inf"),
                "bad": float(nonfinite), "worst": -1.0}
    ref_norm = sum(float(torch.linalg.vector_norm(ref[i:i + STATS_CHUNK_ELEMENTS], dtype=torch.float64)) ** 2
                   for i in chunks) ** 0.5
    scale = ref_norm / max(ref.numel(), 1) ** 0.5
    atol = ELEMENTWISE_ATOL_SCALE * scale + 1e-7
    if floor is not None:
        atol = max(atol, floor.abs)
    max_abs, max_rel, diff_sq, bad, worst, worst_excess = 0.0, 0.0, 0.0, 0, -1, float("-inf")
    for i in chunks:
        o, r = out[i:i + STATS_CHUNK_ELEMENTS], ref[i:i + STATS_CHUNK_ELEMENTS]
        # Differences of two fp32 values are exact to fp32 rounding; norms accumulate in float64.
        diff = (o - r).abs_()
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / r.abs().clamp_min_(1e-6)).max()))
        diff_sq += float(torch.linalg.vector_norm(diff, dtype=torch.float64)) ** 2
        excess = diff - r.abs().mul_(config.elementwise_rtol).add_(atol)
        chunk_bad = int(torch.count_nonzero(excess > 0))
        if chunk_bad:
            bad += chunk_bad
            position = int(torch.argmax(excess))
            if float(excess[position]) > worst_excess:
                worst_excess, worst = float(excess[position]), i + position
    return {
        "nonfinite": 0.0,
        "abs": max_abs,
        "rel": max_rel,
        "norm": diff_sq ** 0.5 / max(ref_norm, 1e-30),
        "bad": float(bad),
        "worst": float(worst),
    }


def judge_stats(stats: dict[str, float], label: str, size: int, config: EvalConfig,
                floor: ToleranceFloor | None = None) -> str:
    """'' when the statistics pass, else what failed. `floor`: the output's widened tolerances
    (its 'bad' count must have been made with the same floor)."""
    if stats["nonfinite"]:
        return f"{label}: {int(stats['nonfinite'])} of {size} elements are NaN/inf (unwritten or overflowed output?)"
    tolerance = config.rel_norm_tolerance if floor is None else max(config.rel_norm_tolerance, floor.rel_norm)
    widened = ("" if tolerance == config.rel_norm_tolerance else
               f", widened from {config.rel_norm_tolerance:g} to {config.reference_noise_multiple:g} times the fp32 "
               "reference's own distance from float64")
    if stats["norm"] > tolerance:
        return (f"{label}: relative error {stats['norm']:.3g} > {tolerance:g} "
                f"({config.precision} policy{widened}); max abs error {stats['abs']:.3g}")
    if stats["bad"]:
        atol = "" if floor is None else f", absolute tolerance at least {floor.abs:.3g}"
        return (f"{label}: {int(stats['bad'])} of {size} elements out of tolerance (max abs error {stats['abs']:.3g}"
                f"{atol})")
    return ""


def compare(candidate: Sequence[Any], reference: Sequence[Any], *, cand_dtypes: Sequence[str],
            ref_dtypes: Sequence[str], config: EvalConfig, distribution: str,
            floors: Sequence[ToleranceFloor | None] = ()) -> TrialResult:
    """Compare outputs (numpy arrays or tensors; whole outputs or samples at the same positions):
    same count, shapes and dtypes; finite; relative-norm and elementwise bounds (`floors`: per
    output, its widened tolerances or None)."""
    import torch

    if len(candidate) != len(reference):
        return TrialResult(distribution, False, float("inf"), float("inf"), float("inf"),
                           f"returned {len(candidate)} outputs, the reference returns {len(reference)}")
    worst = {"abs": 0.0, "rel": 0.0, "norm": 0.0}
    for index, (out, ref, cdt, rdt) in enumerate(zip(candidate, reference, cand_dtypes, ref_dtypes)):
        label = f"output {index}" if len(reference) > 1 else "output"
        out_t = torch.from_numpy(np.array(out)) if isinstance(out, np.ndarray) else out
        ref_t = torch.from_numpy(np.array(ref)) if isinstance(ref, np.ndarray) else ref
        if tuple(out_t.shape) != tuple(ref_t.shape):
            message = f"{label} has shape {tuple(out_t.shape)}, expected {tuple(ref_t.shape)}"
        elif cdt != rdt:
            message = f"{label} has dtype {cdt}, expected {rdt} (a precision change is not allowed)"
        else:
            floor = floors[index] if index < len(floors) else None
            stats = output_stats(out_t, ref_t, config, floor)
            for key in worst:
                worst[key] = max(worst[key], stats[key])
            message = judge_stats(stats, label, out_t.numel(), config, floor)
        if message:
            return TrialResult(distribution, False, worst["abs"] or float("inf"), worst["rel"] or float("inf"),
                               worst["norm"] or float("inf"), message)
    return TrialResult(distribution, True, worst["abs"], worst["rel"], worst["norm"])


def widest_floor(floors: Sequence[Sequence[ToleranceFloor | None]]) -> ToleranceFloor | None:
    """The widest widened tolerances of any trial's output (`floors`: per trial, per output), or
    None where none is widened."""
    widened = [floor for draw in floors for floor in draw if floor]
    if not widened:
        return None
    return ToleranceFloor(rel_norm=max(f.rel_norm for f in widened), abs=max(f.abs for f in widened))


def degenerate_reason(draw_outputs: Sequence[Sequence[np.ndarray]],
                      floors: Sequence[Sequence[ToleranceFloor | None]], config: EvalConfig) -> str:
    """Why a task cannot tell a kernel from a constant, judged from its reference outputs on the trial
    draws (samples, as the worker sends them) and the widened tolerances of their outputs
    (`floors`); '' where it can. A reference that is rounding noise (a relative-norm tolerance
    widened to 1, so a zero output would pass) is as degenerate as a constant one."""
    reason = degeneracy(draw_outputs)
    floor = widest_floor(floors)
    widest = config.rel_norm_tolerance if floor is None else max(config.rel_norm_tolerance, floor.rel_norm)
    if not reason and widest >= 1.0:
        reason = "the fp32 reference output is rounding noise: a zero output is within its widened tolerance"
    return reason or ""


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
