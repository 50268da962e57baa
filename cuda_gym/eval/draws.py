"""The correctness draws of a task's inputs, made in the worker.

Draw 0 is the task's own `get_inputs()` (the base inputs). Where the task's `get_inputs()` gives
the same values twice under one seed (`timed_inputs.seed_check`), every other draw is
`get_inputs()` run again under the draw's own seed with the values of its random sources
transformed where they are made (`source_transform`): fresh (as drawn), negated, scaled by 3,
centred (each generated tensor minus its own mean). The structure the task's code builds from
those values (a triangular, symmetric or positive-definite matrix, labels of +-1 made from
`randint`, a softmax) is kept, so a kernel that relies on what the task's inputs are is judged on
inputs that are that; a kernel right only on [0, 1), or only for small or positive values, still
meets other values. The random sources transformed are torch's float generators (`randn`, `rand`,
their `_like` forms, `normal`, `Tensor.normal_` and `Tensor.uniform_`); integer generators and
NumPy's or Python's streams give fresh values, untransformed.

Where `get_inputs()` is not repeatable, a draw is the base inputs rearranged on the device (each
tensor circularly shifted by a random amount: fresh values at every position, one memory copy)
with the same transforms applied to the floating-point values: the weaker scheme, which can break
the inputs' structure (the verdict's `timed_inputs_rotated` flag names such a task).

Each draw is made from (`seed`, `index`), so any draw can be made again, in any order, with the same
values: the worker keeps only as many draws on the device as its memory plan allows. A draw whose
reference output is not finite, or on which the reference raises, is replaced once by a plain one
(`fallback_draw`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.overrides import TorchFunctionMode

from .timed_inputs import fresh_draw

FRESH_DISTRIBUTIONS = ("task", "fresh", "negated", "scaled_x3", "centered")
REARRANGED_DISTRIBUTIONS = ("task", "shuffled", "negated", "scaled_x3", "centered")

_GENERATORS = frozenset({torch.randn, torch.rand, torch.randn_like, torch.rand_like, torch.normal,
                         torch.Tensor.normal_, torch.Tensor.uniform_})


@dataclass
class Draw:
    distribution: str
    inputs: list[Any]


def draw_label(index: int, fresh: bool = True) -> str:
    """The distribution name of draw `index` (what `make_draw` labels it), without making it."""
    names = FRESH_DISTRIBUTIONS if fresh else REARRANGED_DISTRIBUTIONS
    position = index % len(names)
    return names[position] if position or not index else names[1]


def make_draw(base_inputs: Sequence[Any], index: int, seed: int, device: str,
              get_inputs: Callable[[], Any] | None = None) -> Draw:
    """Input draw `index`: draw 0 is the task's own inputs (the same objects: give a model a
    clone); every other one is `get_inputs()` again with its sources transformed where it is given
    (a repeatable task's), else `base_inputs` rearranged and transformed."""
    if index == 0:
        return Draw("task", list(base_inputs))
    label = draw_label(index, fresh=get_inputs is not None)
    if get_inputs is not None:
        return Draw(label, fresh_draw(get_inputs, seed * 1_000_003 + index, device, source_transform(label)))
    generator = torch.Generator(device=device)
    generator.manual_seed(seed * 1_000_003 + index)
    return Draw(label, [_transform(_shuffle(v, generator), label) for v in base_inputs])


def fallback_draw(base_inputs: Sequence[Any], seed: int, device: str,
                  get_inputs: Callable[[], Any] | None = None) -> Draw:
    """The plain draw that replaces one whose reference output was not finite or raised: a fresh
    draw, or (not repeatable) a plain shift of the base inputs."""
    if get_inputs is not None:
        return Draw("fresh", fresh_draw(get_inputs, seed, device))
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return Draw("shuffled", [_shuffle(v, generator) for v in base_inputs])


def source_transform(distribution: str) -> contextlib.AbstractContextManager:
    """While active, every floating-point (or complex) tensor a random generator of torch makes is
    transformed by `distribution` where it is made; a no-op for the plain distributions."""
    if distribution in ("negated", "scaled_x3", "centered"):
        return _SourceTransform(distribution)
    return contextlib.nullcontext()


class _SourceTransform(TorchFunctionMode):
    def __init__(self, distribution: str):
        super().__init__()
        self.distribution = distribution

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in _GENERATORS and isinstance(out, torch.Tensor) and (out.is_floating_point() or out.is_complex()):
            with torch.no_grad():  # in place, so that `Tensor.normal_`'s own tensor changes, a leaf's too
                _transform_in_place(out, self.distribution)
        return out


def _transform_in_place(value: torch.Tensor, distribution: str) -> None:
    if distribution == "negated":
        value.neg_()
    elif distribution == "scaled_x3":
        value.mul_(3.0)
    elif distribution == "centered" and value.numel():
        value.sub_(value.mean())


def _shuffle(value: Any, generator: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() > 1:
        shift = int(torch.randint(1, value.numel(), (1,), generator=generator, device=generator.device))
        return value.reshape(-1).roll(shift).reshape(value.shape)
    return value


def _transform(value: Any, distribution: str) -> Any:
    if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
        return value
    if distribution == "negated":
        return -value
    if distribution == "scaled_x3":
        return value * 3.0
    if distribution == "centered":
        return value - value.mean()
    return value

