"""The knobs of each backend's templates, and the knob space (with per-plan masks) of one plan."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

from .expressions import V
from .plan import Plan, Stage


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[Any, ...]
    applies_to: tuple[str, ...]   # stage kinds that read it
    default: int = 0              # index of the recommended value


CUDNN_KINDS = ("conv", "conv_direct", "conv_transpose")  # the stage kinds conv_impl="cudnn" runs through cuDNN
CUDA_KNOBS: tuple[Knob, ...] = (
    Knob("ew_block", (128, 256, 512, 1024), ("elementwise",), 1),
    Knob("ew_items", (1, 2, 4, 8), ("elementwise",), 1),
    Knob("ew_vec", (1, 2, 4), ("elementwise",), 2),
    Knob("red_block", (64, 128, 256, 512, 1024), ("reduce", "argreduce", "norm"), 2),
    Knob("red_vec", (1, 2, 4), ("reduce", "norm"), 2),
    Knob("gemm_impl", ("tiled", "cublas"), ("gemm",), 1),
    Knob("conv_impl", ("template", "cudnn"), CUDNN_KINDS, 1),
    Knob("tile_m", (32, 64, 128), ("gemm", "conv"), 1),
    Knob("tile_n", (32, 64, 128), ("gemm", "conv"), 1),
    Knob("tile_k", (8, 16, 32), ("gemm", "conv"), 1),
    Knob("thread_m", (4, 8), ("gemm", "conv"), 0),
    Knob("thread_n", (4, 8), ("gemm", "conv"), 0),
    Knob("direct_block", (64, 128, 256, 512), ("conv_direct", "conv_transpose", "pool"), 2),
    Knob("fuse_epilogue", (1, 0), ("gemm", "conv", "conv_direct", "conv_transpose", "pool", "reduce", "norm"), 0),
)
CPU_KNOBS: tuple[Knob, ...] = (
    Knob("ew_grain", (1024, 4096, 16384, 65536), ("elementwise",), 2),
    Knob("ew_vec", (1, 4, 8, 16), ("elementwise",), 2),
    Knob("red_rows", (1, 4, 16, 64), ("reduce", "argreduce", "norm"), 0),
    Knob("gemm_mc", (8, 16, 32, 64), ("gemm",), 1),
    Knob("gemm_nc", (64, 128, 256, 512), ("gemm",), 2),
    Knob("gemm_kc", (64, 128, 256, 512), ("gemm",), 2),
    Knob("fuse_epilogue", (1, 0), ("gemm", "conv", "conv_direct", "conv_transpose", "pool", "reduce", "norm"), 0),
)


def knobs_for(backend: str) -> tuple[Knob, ...]:
    return CUDA_KNOBS if backend == "cuda" else CPU_KNOBS


def _cublas_ok(stage: Stage) -> bool:
    p = stage.params
    (sab, sam, sak), (sbb, sbk, sbn) = p["a_strides"], p["b_strides"]
    a_ok = (sak == 1 and sam >= max(p["K"], 1)) or (sam == 1 and sak >= max(p["M"], 1))
    b_ok = (sbn == 1 and sbk >= max(p["N"], 1)) or (sbk == 1 and sbn >= max(p["K"], 1))
    return a_ok and b_ok and p["M"] < 2 ** 31 and p["N"] < 2 ** 31 and p["K"] < 2 ** 31


@dataclass
class KnobSpace:
    """The knobs of one backend, with per-value masks for one plan (a knob no stage reads keeps only its default)."""
    knobs: tuple[Knob, ...]
    masks: list[list[bool]]

    @classmethod
    def for_plan(cls, plan: Plan | None, backend: str | None = None) -> "KnobSpace":
        knobs = knobs_for(plan.backend if plan is not None else backend)
        kinds = set(plan.stage_kinds) if plan is not None else set()
        if plan is not None and any(s.epilogue != V for s in plan.stages if s.kind != "elementwise"):
            kinds.add("elementwise")  # with fuse_epilogue=0 the epilogues run as elementwise passes
        masks = []
        for knob in knobs:
            if not kinds.intersection(knob.applies_to):
                mask = [i == knob.default for i in range(len(knob.values))]
            else:
                mask = [True] * len(knob.values)
                if knob.name == "gemm_impl" and not all(_cublas_ok(s) for s in plan.stages if s.kind == "gemm"):
                    mask = [v == "tiled" for v in knob.values]
                if knob.name == "fuse_epilogue" and not any(s.epilogue != V for s in plan.stages
                                                             if s.kind != "elementwise"):
                    mask = [i == knob.default for i in range(len(knob.values))]
            masks.append(mask)
        return cls(knobs, masks)

    @property
    def nvec(self) -> list[int]:
        return [len(k.values) for k in self.knobs]

    def free_names(self) -> set[str]:
        """The knobs this plan can change (more than one allowed value)."""
        return {k.name for k, mask in zip(self.knobs, self.masks) if sum(mask) > 1}

    def flat_mask(self) -> list[bool]:
        return [m for mask in self.masks for m in mask]

    def default(self) -> tuple[int, ...]:
        """The recommended configuration (each knob's default, or its first allowed value)."""
        return tuple(k.default if mask[k.default] else mask.index(True) for k, mask in zip(self.knobs, self.masks))

    def valid(self, action: Sequence[int]) -> bool:
        return len(action) == len(self.knobs) and all(0 <= int(a) < len(m) and m[int(a)]
                                                      for a, m in zip(action, self.masks))

    def canonical(self, action: Sequence[int]) -> tuple[int, ...]:
        """`action` with every value outside the mask replaced by its knob's default (same length required)."""
        if len(action) != len(self.knobs):
            raise ValueError(f"action must have {len(self.knobs)} entries (one per knob: "
                             f"{', '.join(k.name for k in self.knobs)}), got {len(action)}")
        default = self.default()
        return tuple(int(a) if 0 <= int(a) < len(m) and m[int(a)] else d
                     for a, m, d in zip(action, self.masks, default))

    def sample(self, rng: random.Random) -> tuple[int, ...]:
        return tuple(rng.choice([i for i, ok in enumerate(m) if ok]) for m in self.masks)

    def size(self) -> int:
        return math.prod(sum(m) for m in self.masks)

    def values(self, action: Sequence[int]) -> dict[str, Any]:
        if not self.valid(action):
            raise ValueError(f"action {list(map(int, action))} is not valid for this plan; allowed per knob: "
                             + ", ".join(f"{k.name}={[v for v, ok in zip(k.values, m) if ok]}"
                                         for k, m in zip(self.knobs, self.masks)))
        return {k.name: k.values[int(a)] for k, a in zip(self.knobs, action)}
