"""A plan: the buffers and template stages a task's reference becomes, and broadcasting between them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from .expressions import V
from .templates import Unsupported


@dataclass
class Buffer:
    """A contiguous fp32 (or int64) tensor in the candidate's forward: an input, a parameter or a stage output."""
    ref: str                    # Python expression in forward: "x", "self.linear.weight", "t3"
    shape: tuple[int, ...]
    dtype: str = "float"        # "float" or "int64"
    kind: str = "temp"          # "input", "param" or "temp"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Operand:
    """A tensor read by an expression at output index i as buffer[(i // div) % mod]."""
    buffer: Buffer
    shape: tuple[int, ...]      # the operand's shape as the expression sees it (broadcast to the output)


@dataclass
class Stage:
    """One template launch. `params` are the kind's sizes; `epilogue`/`operands` the fused pointwise tail."""
    kind: str                   # "elementwise", "gemm", "conv", "conv_direct", "conv_transpose", "pool", "reduce",
                                # "argreduce", "norm"
    name: str
    out: Buffer
    inputs: list[Buffer]
    params: dict[str, Any]
    epilogue: tuple = V
    operands: list[Operand] = field(default_factory=list)
    finished: bool = False      # its epilogue is fixed (its output was read as it stands)


@dataclass
class Plan:
    """What the candidate computes: stages in order, the forward's inputs and returned buffers."""
    task_id: str
    backend: str
    source: str                 # the reference source (embedded in the candidate)
    input_names: list[str]
    inputs: list[Buffer]
    stages: list[Stage]
    outputs: list[Buffer]
    output_is_tuple: bool = False

    @property
    def stage_kinds(self) -> list[str]:
        return [s.kind for s in self.stages]


@dataclass
class _Value:
    """A node's value during translation: an expression over operands and maybe a producing stage."""
    shape: tuple[int, ...]
    expr: tuple
    operands: list[Operand]
    producer: Stage | None = None
    dtype: str = "float"
    buffer: Buffer | None = None        # set once materialised
    strides: tuple[int, ...] | None = None  # a transposed view of `buffer` (only GEMM reads these)


def _broadcast_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise Unsupported(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def broadcast_terms(operand_shape: Sequence[int], out_shape: Sequence[int]) -> list[tuple[int, int, int]]:
    """[(div, mod, mult)]: the operand's element for output linear index i is at sum((i // div) % mod * mult).

    One term per run of adjacent dims in which the (contiguous) operand is not broadcast; a full
    tensor, a row or per-channel vector is one term, a scalar none.
    """
    rank = len(out_shape)
    if len(operand_shape) > rank:
        raise Unsupported(f"operand of shape {tuple(operand_shape)} is larger than the output {tuple(out_shape)}")
    shape = (1,) * (rank - len(operand_shape)) + tuple(operand_shape)
    for d in range(rank):
        if shape[d] != 1 and shape[d] != out_shape[d]:
            raise Unsupported(f"operand of shape {tuple(operand_shape)} does not broadcast to {tuple(out_shape)}")
    terms = []
    d = 0
    while d < rank:
        if shape[d] == 1 or out_shape[d] == 1:
            d += 1
            continue
        lo = d
        while d < rank and (shape[d] != 1 or out_shape[d] == 1):
            d += 1
        terms.append((math.prod(out_shape[d:]), math.prod(out_shape[lo:d]), math.prod(shape[d:])))
    return terms


def _index_code(operand_shape: Sequence[int], out_shape: Sequence[int], index: str) -> str:
    """C expression of the operand's element index for output index `index`."""
    total = math.prod(out_shape)
    parts = []
    for div, mod, mult in broadcast_terms(operand_shape, out_shape):
        term = index if div == 1 else f"({index} / {div}LL)"
        if div * mod != total:
            term = f"({term} % {mod}LL)"
        parts.append(term if mult == 1 else f"{term} * {mult}LL")
    return " + ".join(parts) if parts else "0"
