"""Composition: 1-5 seed operators chained into one task plan, shape-aware, seeded, deterministic.

`RuleComposer(catalogue, seed).compose(index)` depends only on (seed, index, catalogue, config): the
same arguments give the same plan in any process. `build_plan` is the shared mechanism (the LLM
composer calls it with the operators and parameters the model named). A plan's batch size per
backend comes from a rough cost model (`SizingConfig`) aimed at the timing window; the execution
filter measures and may rescale it on the target backend.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ..tasks.task import BACKENDS
from .catalogue import (BATCH, CHANNELS, CHANNELS_FIRST, DEPTH, FEATURES, FLOAT_BYTES, HEAVY_FAMILIES, HIDDEN,
                        IMAGE_CHANNELS, LAST, LENGTH, SEQ_LEN, SPATIAL, VOLUME_CHANNELS, VOLUME_SPATIAL, Dim,
                        OpContext, PlanError, SeedOp, Step, numel)

INPUT_KINDS = ("features", "sequence", "image", "signal", "volume")


@dataclass(frozen=True)
class SizingConfig:
    """The cost model that picks a plan's batch size per backend (rough on purpose: the filter measures).

    flops_per_s / bytes_per_s / launch_s: effective fp32 throughput, memory bandwidth and per-op
    overhead (cuda: an H200 without TF32; cpu: two cores). target_ms: the eager time aimed at.
    max_tensor_bytes: the largest activation allowed; max_param_bytes: all weights together.
    """

    flops_per_s: dict[str, float] = field(default_factory=lambda: {"cuda": 25e12, "cpu": 15e9})
    bytes_per_s: dict[str, float] = field(default_factory=lambda: {"cuda": 3.0e12, "cpu": 3e9})
    launch_s: dict[str, float] = field(default_factory=lambda: {"cuda": 5e-6, "cpu": 5e-6})
    target_ms: dict[str, float] = field(default_factory=lambda: {"cuda": 4.0, "cpu": 4.0})
    max_tensor_bytes: dict[str, int] = field(default_factory=lambda: {"cuda": 2**30, "cpu": 128 * 2**20})
    max_param_bytes: dict[str, int] = field(default_factory=lambda: {"cuda": 2**30, "cpu": 256 * 2**20})
    max_batch: int = 2**20


@dataclass(frozen=True)
class ComposerConfig:
    """How the rule composer draws a chain. op_count_weights: relative odds of 1..5 operators.
    heavy_first: odds that the first op is a GEMM / conv / attention / recurrent op (as in
    KernelBench's level 2); max_heavy: at most this many of those in one chain."""

    min_ops: int = 1
    max_ops: int = 5
    op_count_weights: tuple[float, ...] = (0.15, 0.25, 0.25, 0.2, 0.15)
    input_kind_weights: dict[str, float] = field(default_factory=lambda: {
        "features": 0.2, "sequence": 0.25, "image": 0.35, "signal": 0.12, "volume": 0.08})
    heavy_first: float = 0.6
    max_heavy: int = 3
    attempts: int = 50
    sizing: SizingConfig = field(default_factory=SizingConfig)

    def __post_init__(self) -> None:
        if not 1 <= self.min_ops <= self.max_ops <= len(self.op_count_weights):
            raise ValueError(f"need 1 <= min_ops <= max_ops <= {len(self.op_count_weights)}, "
                             f"got min_ops={self.min_ops} max_ops={self.max_ops}")


@dataclass(frozen=True)
class TaskPlan:
    """A composed task: input shape, steps, size constants (name -> (cuda, cpu), batch_size first).
    `name` and `level` (the number of seed operators) identify its file."""

    index: int
    input_kind: str
    input_shape: tuple[Dim, ...]
    steps: tuple[Step, ...]
    constants: dict[str, tuple[int, int]]
    composer: str = "rule"
    seed: int = 0

    @property
    def ops(self) -> list[str]:
        return [s.op for s in self.steps]

    @property
    def level(self) -> int:
        return len(self.steps)

    @property
    def name(self) -> str:
        return f"{self.index:05d}_{'_'.join(self.ops)}"[:100]

    def sizes(self, backend: str) -> dict[str, int]:
        column = BACKENDS.index(backend)
        return {name: values[column] for name, values in self.constants.items()}

    def with_sizes(self, backend: str, sizes: dict[str, int]) -> "TaskPlan":
        """The plan with some constants changed on one backend (the filter's calibrated batch size)."""
        column = BACKENDS.index(backend)
        constants = {}
        for name, values in self.constants.items():
            values = list(values)
            if name in sizes:
                values[column] = int(sizes[name])
            constants[name] = tuple(values)
        return replace(self, constants=constants)

    def summary(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "ops": self.ops, "input": self.input_kind,
                "composer": self.composer, "sources": [s.source for s in self.steps],
                "sizes": {b: self.sizes(b) for b in BACKENDS}}


def make_input(kind: str, ctx: OpContext) -> tuple[tuple[Dim, ...], str]:
    """The input tensor of a chain (batch dim first, holding 1 until the batch is sized) and its layout."""
    batch = Dim(BATCH, 1, 1)
    if kind == "features":
        return (batch, ctx.new_dim("in_features", FEATURES)), LAST
    if kind == "sequence":
        return (batch, ctx.new_dim("seq_len", SEQ_LEN), ctx.new_dim("hidden", HIDDEN)), LAST
    if kind == "image":
        channels = ctx.new_dim("channels", IMAGE_CHANNELS)
        height = ctx.new_dim("height", SPATIAL)
        width = ctx.new_dim("width", SPATIAL) if ctx.rng.random() < 0.3 else ctx.constant("width", height.cuda,
                                                                                            height.cpu)
        return (batch, channels, height, width), CHANNELS_FIRST
    if kind == "signal":
        return (batch, ctx.new_dim("channels", CHANNELS), ctx.new_dim("length", LENGTH)), CHANNELS_FIRST
    if kind == "volume":
        return (batch, ctx.new_dim("channels", VOLUME_CHANNELS), ctx.new_dim("depth", DEPTH),
                ctx.new_dim("height", VOLUME_SPATIAL), ctx.new_dim("width", VOLUME_SPATIAL)), CHANNELS_FIRST
    raise PlanError(f"unknown input kind {kind!r}; choose one of {', '.join(INPUT_KINDS)}")


def size_batch(steps: Sequence[Step], input_shape: tuple[Dim, ...], sizing: SizingConfig) -> tuple[int, int]:
    """(cuda, cpu) batch sizes, powers of two, aimed at `sizing.target_ms` and within the memory caps.
    Raises PlanError when even a batch of 1 is over a cap."""
    batches = []
    for backend in BACKENDS:
        flops_rate, byte_rate = sizing.flops_per_s[backend], sizing.bytes_per_s[backend]
        per_item = fixed = 0.0
        shapes = [input_shape]
        params = 0
        for step in steps:
            moved = (numel(shapes[-1][1:], backend) + numel(step.out_shape[1:], backend)) * FLOAT_BYTES
            per_item += max(step.flops.get(backend, 0.0) / flops_rate, moved / byte_rate)
            weights = step.param_count.get(backend, 0) * FLOAT_BYTES
            fixed += weights / byte_rate + sizing.launch_s[backend]
            params += weights
            shapes.append(step.out_shape)
        if params > sizing.max_param_bytes[backend]:
            raise PlanError(f"weights take {params / 2**20:.0f} MiB on {backend}, over the cap "
                            f"{sizing.max_param_bytes[backend] / 2**20:.0f} MiB")
        largest = max(numel(s[1:], backend) for s in shapes) * FLOAT_BYTES
        memory_cap = sizing.max_tensor_bytes[backend] // max(largest, 1)
        if memory_cap < 1:
            raise PlanError(f"one item's activation takes {largest / 2**20:.0f} MiB on {backend}, over the cap")
        wanted = (sizing.target_ms[backend] / 1e3 - fixed) / max(per_item, 1e-15)
        batch = min(max(1, int(wanted)), memory_cap, sizing.max_batch)
        batches.append(2 ** int(math.log2(batch)))
    return batches[0], batches[1]


def build_plan(catalogue: dict[str, SeedOp], ops: Sequence[tuple[str, dict[str, Any]]], *, input_kind: str,
               rng: random.Random, index: int, seed: int, sizing: SizingConfig, composer: str,
               input_params: dict[str, Any] | None = None) -> TaskPlan:
    """A plan from named operators (each with the parameters to fix; the rest drawn from `rng`).
    Raises PlanError naming the first op that does not fit."""
    constants: dict[str, tuple[int, int]] = {BATCH: (1, 1)}
    input_shape, layout = make_input(input_kind, OpContext(rng, constants, input_params))
    shape = input_shape
    steps = []
    for position, (name, params) in enumerate(ops):
        op = catalogue.get(name)
        if op is None:
            raise PlanError(f"unknown operator {name!r} (see the seed catalogue: cuda-gym synth --list-ops)")
        if op.raw_input_only and position != 0:
            raise PlanError(f"{name} is discontinuous: it can only be the first operator (on the raw input)")
        trial = dict(constants)
        ctx = OpContext(rng, trial, params)
        step = op.apply(ctx, shape, layout)
        if step is None:
            raise PlanError(f"{name} does not apply to a {layout} tensor of shape "
                            f"({', '.join(d.expr for d in shape)}) (operator {position + 1})")
        unknown = set(params) - ctx.used
        if unknown:
            raise PlanError(f"{name} has no parameter(s) {sorted(unknown)} here; it takes {list(op.params)}")
        constants = trial
        steps.append(step)
        shape, layout = step.out_shape, step.layout
    if not steps:
        raise PlanError("a plan needs at least one operator")
    constants[BATCH] = size_batch(steps, input_shape, sizing)
    return TaskPlan(index=index, input_kind=input_kind, input_shape=input_shape, steps=tuple(steps),
                    constants=constants, composer=composer, seed=seed)


class RuleComposer:
    """Draws chains of seed operators: the op count from `op_count_weights`, the input kind, then
    each op among those that accept the current shape (weighted, no op twice in a row,
    discontinuous ones first). `compose(index)` is deterministic in (seed, index)."""

    name = "rule"

    def __init__(self, catalogue: dict[str, SeedOp], seed: int = 0, config: ComposerConfig | None = None):
        self.catalogue = catalogue
        self.seed = seed
        self.config = config or ComposerConfig()

    def rng(self, index: int) -> random.Random:
        return random.Random(f"cuda_gym.synth:{self.seed}:{index}")

    def compose(self, index: int) -> TaskPlan:
        """The plan of candidate `index`; raises PlanError if no valid chain was found in `attempts` draws."""
        config = self.config
        rng = self.rng(index)
        counts = list(range(config.min_ops, config.max_ops + 1))
        count_weights = [config.op_count_weights[c - 1] for c in counts]
        kinds = list(config.input_kind_weights)
        last_error = "no attempt"
        for _ in range(config.attempts):
            count = rng.choices(counts, count_weights)[0]
            kind = rng.choices(kinds, [config.input_kind_weights[k] for k in kinds])[0]
            try:
                input_shape, steps, constants = self._draw_chain(rng, kind, count)
                constants[BATCH] = size_batch(steps, input_shape, config.sizing)
            except PlanError as exc:
                last_error = str(exc)
                continue
            return TaskPlan(index=index, input_kind=kind, input_shape=input_shape, steps=tuple(steps),
                            constants=constants, composer=self.name, seed=self.seed)
        raise PlanError(f"candidate {index}: no valid chain in {config.attempts} draws (last: {last_error})")

    def _draw_chain(self, rng: random.Random, kind: str, count: int
                    ) -> tuple[tuple[Dim, ...], list[Step], dict[str, tuple[int, int]]]:
        """Up to `count` steps whose shapes chain (fewer when no op fits the shape reached)."""
        constants: dict[str, tuple[int, int]] = {BATCH: (1, 1)}
        input_shape, layout = make_input(kind, OpContext(rng, constants))
        shape = input_shape
        chosen: list[str] = []
        steps: list[Step] = []
        heavy = 0
        for position in range(count):
            pool = [op for op in self.catalogue.values()
                    if (not chosen or op.name != chosen[-1]) and (position == 0 or not op.raw_input_only)
                    and (op.family not in HEAVY_FAMILIES or heavy < self.config.max_heavy)]
            if position == 0 and rng.random() < self.config.heavy_first:
                pool = [op for op in pool if op.family in HEAVY_FAMILIES] or pool
            step = None
            while pool and step is None:
                op = rng.choices(pool, [o.weight for o in pool])[0]
                pool.remove(op)
                trial = dict(constants)
                step = op.apply(OpContext(rng, trial), shape, layout)
                if step is not None:
                    constants = trial
                    chosen.append(op.name)
                    steps.append(step)
                    heavy += op.family in HEAVY_FAMILIES
                    shape, layout = step.out_shape, step.layout
            if step is None:
                break
        if not steps:
            raise PlanError(f"no operator applies to a {kind} input")
        return input_shape, steps, constants
