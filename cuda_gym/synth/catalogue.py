"""The seed operator catalogue: torch (and, when installed, transformers) operators with their shape
rules and init arguments.

A `SeedOp` turns the current tensor (its shape and layout) into a `Step`: the module it constructs in
`Model.__init__` (with init arguments written over the task's size constants), the expression it
applies in `forward`, and the output shape; or it declines (returns None) when it does not apply to
that shape. Shapes are tuples of `Dim`s, a Python expression over the size constants together with
its value on each backend, so one composition holds at the CUDA and at the CPU sizes at once.

Parameters (kernel sizes, dims, slopes) are picked through `OpContext.choose`, which draws from the
seeded RNG unless the caller (the LLM composer) names a value; a named value outside the options
raises `PlanError`. Nothing here imports torch: ops are data, checked by running them later.
"""
from __future__ import annotations

import importlib.util
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..tasks.task import BACKENDS

FLOAT_BYTES = 4
BATCH = "batch_size"

# (cuda, cpu) size pairs for new constants, by what they measure.
FEATURES = ((256, 64), (512, 128), (1024, 256), (2048, 256), (4096, 512))
HIDDEN = ((256, 64), (512, 128), (768, 128), (1024, 256))
SEQ_LEN = ((128, 32), (256, 64), (512, 64), (1024, 128))
CHANNELS = ((16, 8), (32, 16), (64, 16), (128, 32), (256, 32))
IMAGE_CHANNELS = ((3, 3), (16, 8), (32, 16), (64, 16), (128, 32))
SPATIAL = ((32, 16), (64, 32), (128, 32), (256, 64))
LENGTH = ((1024, 256), (4096, 512), (16384, 1024))
VOLUME_CHANNELS = ((3, 3), (8, 4), (16, 8), (32, 8))
DEPTH = ((16, 8), (32, 8))
VOLUME_SPATIAL = ((32, 16), (64, 16))

CHANNELS_FIRST = "channels_first"  # (batch, channels, *spatial): conv, pool, batch/group/instance norm
LAST = "last"  # (batch, ..., features): linear, layer/rms norm, attention, recurrent


class PlanError(ValueError):
    """A composition that cannot be built (an unknown op, a parameter outside its options, a shape
    the op does not accept). The message says which and what is allowed."""


@dataclass(frozen=True)
class Dim:
    """One tensor dimension: `expr` over the size constants (e.g. "height", "(height - 1) // 2 + 1")
    and its value at each backend's sizes. The batch dimension holds 1 per backend while composing;
    the batch size is chosen afterwards (`compose.size_batch`)."""

    expr: str
    cuda: int
    cpu: int

    def at(self, backend: str) -> int:
        return getattr(self, backend)

    @staticmethod
    def literal(value: int) -> "Dim":
        return Dim(str(value), value, value)


def _wrap(expr: str) -> str:
    return expr if re.fullmatch(r"[A-Za-z_]\w*|\d+", expr) else f"({expr})"


def _plus(expr: str, offset: int) -> str:
    if offset == 0:
        return expr
    return f"{expr} + {offset}" if offset > 0 else f"{expr} - {-offset}"


def derived(dim: Dim, fn: Callable[[int], int], expr: str) -> Dim:
    return Dim(expr, fn(dim.cuda), fn(dim.cpu))


def conv_out(dim: Dim, kernel: int, stride: int, padding: int) -> Dim:
    """Output length of a convolution or pooling window (dilation 1, floor mode)."""
    offset = 2 * padding - kernel
    if stride == 1:
        return derived(dim, lambda v: v + offset + 1, _plus(dim.expr, offset + 1))
    return derived(dim, lambda v: (v + offset) // stride + 1, f"({_plus(dim.expr, offset)}) // {stride} + 1")


def transpose_out(dim: Dim, kernel: int, stride: int, padding: int) -> Dim:
    """Output length of a transposed convolution (dilation 1, no output padding)."""
    offset = kernel - 2 * padding
    if stride == 1:
        return derived(dim, lambda v: v - 1 + offset, _plus(dim.expr, offset - 1))
    return derived(dim, lambda v: (v - 1) * stride + offset, _plus(f"({_plus(dim.expr, -1)}) * {stride}", offset))


def scaled(dim: Dim, factor: int) -> Dim:
    return derived(dim, lambda v: v * factor, f"{_wrap(dim.expr)} * {factor}")


def divided(dim: Dim, divisor: int) -> Dim:
    return derived(dim, lambda v: v // divisor, f"{_wrap(dim.expr)} // {divisor}")


def numel(shape: Sequence[Dim], backend: str) -> int:
    return math.prod(d.at(backend) for d in shape)


@dataclass(frozen=True)
class Step:
    """One operator applied in `forward`.

    forward: the expression computing the new tensor; "{x}" is the input, "{m}" this step's module
        (or parameter) attribute. module: the constructor assigned to that attribute in `__init__`,
        its arguments written over size constants; None for functional forms. init: statements
        run right after the constructor ("{m}" is the module), e.g. non-trivial norm statistics.
    flops: per batch item, per backend. param_count: per backend.
    """

    op: str
    forward: str
    out_shape: tuple[Dim, ...]
    layout: str
    module: str | None = None
    init: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()
    flops: dict[str, float] = field(default_factory=dict)
    param_count: dict[str, int] = field(default_factory=dict)
    source: str = ""  # where the seed operator comes from, e.g. "torch.nn.Conv2d"


class OpContext:
    """What an op may ask for while it builds its step: parameter choices and new size constants."""

    def __init__(self, rng: random.Random, constants: dict[str, tuple[int, int]],
                 params: dict[str, Any] | None = None):
        self.rng = rng
        self.constants = constants
        self.params = dict(params or {})
        self.used: set[str] = set()

    def choose(self, key: str, options: Sequence[Any]) -> Any:
        """The caller's value for `key` if it named one (it must be among `options`), else a seeded draw."""
        options = list(options)
        if not options:
            raise PlanError(f"no valid value for {key!r} at this shape")
        if key in self.params:
            value = self.params[key]
            self.used.add(key)
            matches = [o for o in options if o == value or (isinstance(o, tuple) and list(o) == value)]
            if not matches:
                raise PlanError(f"{key}={value!r} is not allowed here; choose one of {options}")
            return matches[0]
        return self.rng.choice(options)

    def new_dim(self, key: str, pairs: Sequence[tuple[int, int]]) -> Dim:
        """A new size constant named after `key` (unique in the task), with (cuda, cpu) values from `pairs`;
        a caller's value for `key` picks the pair by its CUDA size."""
        if key in self.params:
            self.used.add(key)
            wanted = self.params[key]
            found = [p for p in pairs if p[0] == wanted]
            if not found:
                raise PlanError(f"{key}={wanted!r} is not allowed; choose one of {[p[0] for p in pairs]}")
            cuda, cpu = found[0]
        else:
            cuda, cpu = self.rng.choice(list(pairs))
        return self.constant(key, cuda, cpu)

    def constant(self, key: str, cuda: int, cpu: int) -> Dim:
        name = key
        suffix = 1
        while name in self.constants:
            suffix += 1
            name = f"{key}_{suffix}"
        self.constants[name] = (cuda, cpu)
        return Dim(name, cuda, cpu)


Apply = Callable[[OpContext, tuple[Dim, ...], str], "Step | None"]


@dataclass(frozen=True)
class SeedOp:
    """A seed operator: `apply(ctx, shape, layout)` gives its Step, or None when the shape does not fit.
    `params` names what a composer may set (documentation for the LLM composer)."""

    name: str
    family: str
    source: str
    apply: Apply
    params: tuple[str, ...] = ()
    raw_input_only: bool = False  # discontinuous: rounding upstream could flip its output, so it comes first
    weight: float = 1.0


HEAVY_FAMILIES = ("gemm", "conv", "attention", "recurrent")


def _per_backend(fn: Callable[[str], float]) -> dict[str, float]:
    return {b: float(fn(b)) for b in BACKENDS}


def _elementwise_flops(shape: tuple[Dim, ...], per_element: float) -> dict[str, float]:
    return _per_backend(lambda b: numel(shape[1:], b) * per_element)


# ----------------------------------------------------------------------------------- elementwise
def _activation(name: str, module: str, functional: str, params: dict[str, Sequence[Any]] | None = None,
                cost: float = 4.0, source: str = "", raw_input_only: bool = False) -> SeedOp:
    params = params or {}
    origin = source or f"torch.nn.{module.split('(')[0].split('.')[-1]}"

    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step:
        values = {key: ctx.choose(key, options) for key, options in params.items()}
        form = ctx.choose("form", ("module", "functional"))
        flops = _elementwise_flops(shape, cost)
        if form == "module":
            return Step(name, "{m}({x})", shape, layout, module=module.format(**values), flops=flops, source=origin)
        return Step(name, functional.format(x="{x}", **values), shape, layout, flops=flops, source=origin)

    return SeedOp(name, "activation", origin, apply, params=("form", *params), raw_input_only=raw_input_only,
                  weight=0.6)


def _math(name: str, expr: str, params: dict[str, Sequence[Any]] | None = None, cost: float = 2.0,
          source: str = "") -> SeedOp:
    params = params or {}
    origin = source or f"torch.{name}"

    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step:
        values = {key: ctx.choose(key, options) for key, options in params.items()}
        return Step(name, expr.format(x="{x}", **values), shape, layout, flops=_elementwise_flops(shape, cost),
                    source=origin)

    return SeedOp(name, "elementwise", origin, apply, params=tuple(params), weight=0.5)


def _parameter_shape(shape: tuple[Dim, ...], layout: str) -> tuple[str, tuple[Dim, ...]]:
    """A per-channel (channels-first) or per-feature parameter shape that broadcasts against `shape`."""
    if layout == CHANNELS_FIRST and len(shape) >= 3:
        return ", ".join([shape[1].expr] + ["1"] * (len(shape) - 2)), (shape[1],)
    return shape[-1].expr, (shape[-1],)


def _bias_like(name: str, operator: str, init: str) -> SeedOp:
    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if len(shape) < 2:
            return None
        dims, counted = _parameter_shape(shape, layout)
        return Step(name, f"{{x}} {operator} {{m}}", shape, layout, module=f"nn.Parameter({init.format(dims)})",
                    flops=_elementwise_flops(shape, 1),
                    param_count=_per_backend(lambda b: numel(counted, b)), source="torch.nn.Parameter")

    return SeedOp(name, "elementwise", "torch.nn.Parameter", apply, weight=0.8)


# ---------------------------------------------------------------------------------- normalization
def _uniform(attr: str, low: float, high: float) -> str:
    return f"nn.init.uniform_({{m}}.{attr}, {low}, {high})"


AFFINE_INIT = (_uniform("weight", 0.5, 1.5), _uniform("bias", -0.5, 0.5))
RUNNING_INIT = (_uniform("running_mean", -0.5, 0.5), _uniform("running_var", 0.5, 1.5))


def _layer_norm(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if len(shape) < 2 or min(shape[-1].cuda, shape[-1].cpu) < 8:
        return None
    return Step("layer_norm", "{m}({x})", shape, layout, module=f"nn.LayerNorm({shape[-1].expr})", init=AFFINE_INIT,
                flops=_elementwise_flops(shape, 8), param_count=_per_backend(lambda b: 2 * shape[-1].at(b)),
                source="torch.nn.LayerNorm")


def _rms_norm(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if len(shape) < 2 or min(shape[-1].cuda, shape[-1].cpu) < 8:
        return None
    eps = ctx.choose("eps", (1e-6, 1e-5))
    return Step("rms_norm", "{m}({x})", shape, layout, module=f"nn.RMSNorm({shape[-1].expr}, eps={eps})",
                init=(_uniform("weight", 0.5, 1.5),), flops=_elementwise_flops(shape, 5),
                param_count=_per_backend(lambda b: shape[-1].at(b)), source="torch.nn.RMSNorm")


def _batch_norm(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    rank = len(shape)
    if rank == 2:
        module = "BatchNorm1d"
    elif layout == CHANNELS_FIRST and rank in (3, 4, 5):
        module = {3: "BatchNorm1d", 4: "BatchNorm2d", 5: "BatchNorm3d"}[rank]
    else:
        return None
    return Step("batch_norm", "{m}({x})", shape, layout, module=f"nn.{module}({shape[1].expr})",
                init=AFFINE_INIT + RUNNING_INIT, flops=_elementwise_flops(shape, 2),
                param_count=_per_backend(lambda b: 4 * shape[1].at(b)), source=f"torch.nn.{module}")


def _group_norm(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if layout != CHANNELS_FIRST or len(shape) < 3:
        return None
    channels = shape[1]
    groups = [g for g in (2, 4, 8, 16, 32) if channels.cuda % g == 0 and channels.cpu % g == 0
              and channels.cpu // g >= 1 and g < channels.cpu]
    if not groups:
        return None
    group_count = ctx.choose("num_groups", groups)
    return Step("group_norm", "{m}({x})", shape, layout, module=f"nn.GroupNorm({group_count}, {channels.expr})",
                init=AFFINE_INIT, flops=_elementwise_flops(shape, 8),
                param_count=_per_backend(lambda b: 2 * channels.at(b)), source="torch.nn.GroupNorm")


def _instance_norm(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    rank = len(shape)
    if layout != CHANNELS_FIRST or rank not in (3, 4, 5) or min(numel(shape[2:], b) for b in BACKENDS) < 16:
        return None
    module = f"InstanceNorm{rank - 2}d"
    return Step("instance_norm", "{m}({x})", shape, layout, module=f"nn.{module}({shape[1].expr}, affine=True)",
                init=AFFINE_INIT, flops=_elementwise_flops(shape, 8),
                param_count=_per_backend(lambda b: 2 * shape[1].at(b)), source=f"torch.nn.{module}")


def _normalize(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if len(shape) < 2:
        return None
    dim = ctx.choose("dim", (1, -1) if len(shape) > 2 else (1,))
    return Step("normalize", f"F.normalize({{x}}, dim={dim})", shape, layout, flops=_elementwise_flops(shape, 4),
                source="torch.nn.functional.normalize")


# ---------------------------------------------------------------------------------------- softmax
def _softmax_like(name: str, module: str, functional: str) -> SeedOp:
    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if len(shape) < 2:
            return None
        dims = [d for d in (1, -1) if d == 1 or len(shape) > 2]
        dim = ctx.choose("dim", dims)
        if min(shape[dim].cuda, shape[dim].cpu) < 4:
            return None
        form = ctx.choose("form", ("module", "functional"))
        flops = _elementwise_flops(shape, 10)
        if form == "module":
            return Step(name, "{m}({x})", shape, layout, module=f"nn.{module}(dim={dim})", flops=flops,
                        source=f"torch.nn.{module}")
        return Step(name, f"{functional}({{x}}, dim={dim})", shape, layout, flops=flops,
                    source=f"torch.nn.{module}")

    return SeedOp(name, "softmax", f"torch.nn.{module}", apply, params=("dim", "form"))


# ------------------------------------------------------------------------------------------- gemm
def _linear(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if layout != LAST or len(shape) < 2:
        return None
    features = shape[-1]
    out = ctx.new_dim("out_features", FEATURES)
    bias = ctx.choose("bias", (True, False))
    rows = shape[1:-1]
    return Step("linear", "{m}({x})", shape[:-1] + (out,), layout,
                module=f"nn.Linear({features.expr}, {out.expr}, bias={bias})",
                flops=_per_backend(lambda b: 2 * numel(rows, b) * features.at(b) * out.at(b)),
                param_count=_per_backend(lambda b: features.at(b) * out.at(b) + out.at(b) * bias),
                source="torch.nn.Linear")


def _matmul_weight(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if layout != LAST or len(shape) < 2:
        return None
    features = shape[-1]
    out = ctx.new_dim("out_features", FEATURES)
    form = ctx.choose("form", ("matmul", "operator"))
    forward = "torch.matmul({x}, {m})" if form == "matmul" else "{x} @ {m}"
    rows = shape[1:-1]
    return Step("matmul", forward, shape[:-1] + (out,), layout,
                module=f"nn.Parameter(torch.randn({features.expr}, {out.expr}) / {_wrap(features.expr)} ** 0.5)",
                flops=_per_backend(lambda b: 2 * numel(rows, b) * features.at(b) * out.at(b)),
                param_count=_per_backend(lambda b: features.at(b) * out.at(b)), source="torch.matmul")


def _gram(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    """x @ x^T over the last two dims (a batched matmul of the tensor with itself)."""
    if layout != LAST or len(shape) != 3 or max(shape[1].cuda, shape[1].cpu) > 4096:
        return None
    rows, cols = shape[1], shape[2]
    form = ctx.choose("form", ("bmm", "matmul"))
    forward = "torch.bmm({x}, {x}.transpose(1, 2))" if form == "bmm" else "torch.matmul({x}, {x}.transpose(-2, -1))"
    return Step("bmm", forward, (shape[0], rows, rows), layout,
                flops=_per_backend(lambda b: 2 * rows.at(b) ** 2 * cols.at(b)), source="torch.bmm")


# ------------------------------------------------------------------------------------------- conv
def _spatial_ok(dims: Sequence[Dim], minimum: int = 2) -> bool:
    return all(min(d.cuda, d.cpu) >= minimum for d in dims)


def _conv(n: int, transposed: bool = False, depthwise: bool = False) -> SeedOp:
    base = f"ConvTranspose{n}d" if transposed else f"Conv{n}d"
    name = f"conv_transpose{n}d" if transposed else (f"depthwise_conv{n}d" if depthwise else f"conv{n}d")

    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if layout != CHANNELS_FIRST or len(shape) != n + 2:
            return None
        channels, spatial = shape[1], shape[2:]
        if transposed:
            kernel = ctx.choose("kernel_size", (2, 3, 4) if n < 3 else (2, 3))
            stride = ctx.choose("stride", (1, 2))
            padding = ctx.choose("padding", sorted({0, (kernel - 1) // 2}))
            out_spatial = tuple(transpose_out(d, kernel, stride, padding) for d in spatial)
        else:
            kernel = ctx.choose("kernel_size", (1, 3, 5) if n < 3 else (1, 3))
            stride = ctx.choose("stride", (1, 2))
            padding = ctx.choose("padding", sorted({0, kernel // 2}))
            out_spatial = tuple(conv_out(d, kernel, stride, padding) for d in spatial)
        if not _spatial_ok(out_spatial, 2):
            return None
        if depthwise:
            out, groups = channels, channels.expr
            per_output = kernel ** n
        else:
            out, groups = ctx.new_dim("out_channels", CHANNELS), None
            per_output = None
        bias = ctx.choose("bias", (True, False))
        args = [channels.expr, out.expr, str(kernel)]
        if stride != 1:
            args.append(f"stride={stride}")
        if padding:
            args.append(f"padding={padding}")
        if groups:
            args.append(f"groups={groups}")
        if not bias:
            args.append("bias=False")
        out_shape = (shape[0], out) + out_spatial
        grid = spatial if transposed else out_spatial

        def flops(b: str) -> float:
            taps = per_output if per_output is not None else channels.at(b) * kernel ** n
            return 2 * taps * out.at(b) * numel(grid, b)

        def params(b: str) -> float:
            taps = kernel ** n if depthwise else channels.at(b) * kernel ** n
            return taps * out.at(b) + (out.at(b) if bias else 0)

        return Step(name, "{m}({x})", out_shape, layout, module=f"nn.{base}({', '.join(args)})",
                    flops=_per_backend(flops), param_count={b: int(params(b)) for b in BACKENDS},
                    source=f"torch.nn.{base}")

    return SeedOp(name, "conv", f"torch.nn.{base}", apply, params=("kernel_size", "stride", "padding", "bias"))


# ------------------------------------------------------------------------------------------- pool
def _pool(kind: str, n: int) -> SeedOp:
    module = f"{kind.capitalize()}Pool{n}d"
    name = f"{kind}_pool{n}d"

    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if layout != CHANNELS_FIRST or len(shape) != n + 2:
            return None
        kernel = ctx.choose("kernel_size", (2, 3))
        stride = ctx.choose("stride", (kernel, 1, 2) if kernel != 2 else (2, 1))
        padding = ctx.choose("padding", (0, 1) if kernel == 3 else (0,))
        out_spatial = tuple(conv_out(d, kernel, stride, padding) for d in shape[2:])
        if not _spatial_ok(out_spatial, 2):
            return None
        form = ctx.choose("form", ("module", "functional"))
        args = f"{kernel}, stride={stride}" + (f", padding={padding}" if padding else "")
        out_shape = shape[:2] + out_spatial
        flops = _per_backend(lambda b: numel(out_shape[1:], b) * kernel ** n)
        if form == "module":
            return Step(name, "{m}({x})", out_shape, layout, module=f"nn.{module}({args})", flops=flops,
                        source=f"torch.nn.{module}")
        return Step(name, f"F.{name}({{x}}, {args})", out_shape, layout, flops=flops, source=f"torch.nn.{module}")

    return SeedOp(name, "pool", f"torch.nn.{module}", apply, params=("kernel_size", "stride", "padding", "form"),
                  weight=0.8)


def _adaptive_pool(kind: str, n: int) -> SeedOp:
    module = f"Adaptive{kind.capitalize()}Pool{n}d"
    name = f"adaptive_{kind}_pool{n}d"

    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if layout != CHANNELS_FIRST or len(shape) != n + 2:
            return None
        size = ctx.choose("output_size", (1, 2, 4, 7) if n < 3 else (1, 2))
        if not all(min(d.cuda, d.cpu) >= 2 * size for d in shape[2:]):
            return None
        out_shape = shape[:2] + tuple(Dim.literal(size) for _ in range(n))
        return Step(name, "{m}({x})", out_shape, layout, module=f"nn.{module}({size})",
                    flops=_elementwise_flops(shape, 1), source=f"torch.nn.{module}")

    return SeedOp(name, "pool", f"torch.nn.{module}", apply, params=("output_size",), weight=0.6)


def _interpolate(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    rank = len(shape)
    if layout != CHANNELS_FIRST or rank not in (3, 4, 5) or numel(shape, "cuda") * 2 ** (rank - 2) > 2 ** 28:
        return None
    mode = ctx.choose("mode", ("nearest", {3: "linear", 4: "bilinear", 5: "trilinear"}[rank]))
    form = ctx.choose("form", ("module", "functional"))
    out_shape = shape[:2] + tuple(scaled(d, 2) for d in shape[2:])
    extra = "" if mode == "nearest" else ", align_corners=False"
    flops = _elementwise_flops(out_shape, 4)
    if form == "module":
        return Step("interpolate", "{m}({x})", out_shape, layout,
                    module=f"nn.Upsample(scale_factor=2, mode={mode!r}{extra})", flops=flops, source="torch.nn.Upsample")
    return Step("interpolate", f"F.interpolate({{x}}, scale_factor=2, mode={mode!r}{extra})", out_shape, layout,
                flops=flops, source="torch.nn.functional.interpolate")


def _pixel_shuffle(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if layout != CHANNELS_FIRST or len(shape) != 4:
        return None
    channels = shape[1]
    if channels.cuda % 4 or channels.cpu % 4:
        return None
    out_shape = (shape[0], divided(channels, 4), scaled(shape[2], 2), scaled(shape[3], 2))
    return Step("pixel_shuffle", "{m}({x})", out_shape, layout, module="nn.PixelShuffle(2)",
                flops=_elementwise_flops(shape, 1), source="torch.nn.PixelShuffle")


# ------------------------------------------------------------------------------------- reductions
def _reduction(name: str, expr: str, keepdim_allowed: bool = True, cost: float = 2.0, source: str = "") -> SeedOp:
    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if len(shape) < 2:
            return None
        dim = ctx.choose("dim", tuple(range(1, len(shape))) + (-1,) if len(shape) > 2 else (1,))
        index = dim if dim >= 0 else len(shape) + dim
        if min(shape[index].cuda, shape[index].cpu) < 4:
            return None
        keepdim = ctx.choose("keepdim", (False, True)) if keepdim_allowed else False
        out_shape = shape[:index] + ((Dim.literal(1),) if keepdim else ()) + shape[index + 1:]
        out_layout = layout if len(out_shape) > 2 and (keepdim or index != 1) else LAST
        text = expr.format(x="{x}", dim=dim, keep=f", keepdim={keepdim}" if keepdim else "")
        return Step(name, text, out_shape, out_layout, flops=_elementwise_flops(shape, cost),
                    source=source or f"torch.{name}")

    return SeedOp(name, "reduction", source or f"torch.{name}", apply, params=("dim", "keepdim"),
                  weight=0.6)


def _scan(name: str, expr: str) -> SeedOp:
    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if len(shape) < 2:
            return None
        dim = ctx.choose("dim", tuple(range(1, len(shape))))
        if min(shape[dim].cuda, shape[dim].cpu) < 4:
            return None
        return Step(name, expr.format(x="{x}", dim=dim), shape, layout, flops=_elementwise_flops(shape, 1),
                    source=f"torch.{name}")

    return SeedOp(name, "reduction", f"torch.{name}", apply, params=("dim",), weight=0.4)


def _spatial_mean(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    """A global average over all spatial dims (channels-first), keeping or dropping them."""
    if layout != CHANNELS_FIRST or len(shape) < 3:
        return None
    dims = tuple(range(2, len(shape)))
    keepdim = ctx.choose("keepdim", (False, True))
    out_shape = shape[:2] + ((Dim.literal(1),) * len(dims) if keepdim else ())
    text = f"torch.mean({{x}}, dim={dims}" + (", keepdim=True)" if keepdim else ")")
    return Step("mean", text, out_shape, layout if keepdim else LAST, flops=_elementwise_flops(shape, 1),
                source="torch.mean")


# ------------------------------------------------------------------------------ sequence models
def _heads(dim: Dim) -> list[int]:
    return [h for h in (1, 2, 4, 8) if dim.cuda % h == 0 and dim.cpu % h == 0 and dim.cpu // h >= 8]


def _recurrent(name: str, module: str, gates: int) -> SeedOp:
    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if layout != LAST or len(shape) != 3 or max(shape[1].cuda, shape[1].cpu) > 512:
            return None
        features, steps = shape[2], shape[1]
        hidden = ctx.new_dim("hidden_size", HIDDEN)
        bidirectional = ctx.choose("bidirectional", (False, True))
        directions = 2 if bidirectional else 1
        out = scaled(hidden, 2) if bidirectional else hidden
        extra = ", bidirectional=True" if bidirectional else ""
        return Step(name, "{m}({x})[0]", (shape[0], steps, out), layout,
                    module=f"nn.{module}({features.expr}, {hidden.expr}, batch_first=True{extra})",
                    flops=_per_backend(lambda b: 2 * gates * directions * steps.at(b) * hidden.at(b)
                                       * (features.at(b) + hidden.at(b))),
                    param_count={b: gates * directions * hidden.at(b) * (features.at(b) + hidden.at(b) + 2)
                                 for b in BACKENDS},
                    source=f"torch.nn.{module}")

    return SeedOp(name, "recurrent", f"torch.nn.{module}", apply, params=("hidden_size", "bidirectional"), weight=0.5)


def _attention_flops(steps: Dim, dim: Dim) -> dict[str, float]:
    return _per_backend(lambda b: 4 * steps.at(b) ** 2 * dim.at(b))


def _multihead_attention(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if layout != LAST or len(shape) != 3 or not _heads(shape[2]):
        return None
    steps, dim = shape[1], shape[2]
    heads = ctx.choose("num_heads", _heads(dim))
    attention = _attention_flops(steps, dim)
    return Step("multihead_attention", "{m}({x}, {x}, {x}, need_weights=False)[0]", shape, layout,
                module=f"nn.MultiheadAttention({dim.expr}, {heads}, batch_first=True)",
                flops={b: attention[b] + 8 * steps.at(b) * dim.at(b) ** 2 for b in BACKENDS},
                param_count={b: 4 * dim.at(b) ** 2 + 4 * dim.at(b) for b in BACKENDS},
                source="torch.nn.MultiheadAttention")


def _sdpa(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if layout != LAST or len(shape) != 3 or min(shape[2].cuda, shape[2].cpu) < 16:
        return None
    causal = ctx.choose("is_causal", (False, True))
    text = "F.scaled_dot_product_attention({x}, {x}, {x}" + (", is_causal=True)" if causal else ")")
    return Step("scaled_dot_product_attention", text, shape, layout, flops=_attention_flops(shape[1], shape[2]),
                source="torch.nn.functional.scaled_dot_product_attention")


def _encoder_layer(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    if layout != LAST or len(shape) != 3 or not _heads(shape[2]):
        return None
    steps, dim = shape[1], shape[2]
    heads = ctx.choose("num_heads", _heads(dim))
    activation = ctx.choose("activation", ("relu", "gelu"))
    attention = _attention_flops(steps, dim)
    return Step("transformer_encoder_layer", "{m}({x})", shape, layout,
                module=(f"nn.TransformerEncoderLayer({dim.expr}, {heads}, dim_feedforward=2 * {_wrap(dim.expr)}, "
                        f"dropout=0.0, activation={activation!r}, batch_first=True)"),
                flops={b: attention[b] + 16 * steps.at(b) * dim.at(b) ** 2 for b in BACKENDS},
                param_count={b: 8 * dim.at(b) ** 2 for b in BACKENDS}, source="torch.nn.TransformerEncoderLayer")


# --------------------------------------------------------------------------------- transformers
def _transformers_module(name: str, path: str, constructor: Callable[[OpContext, tuple[Dim, ...]], str | None],
                         family: str, params: int = 0, cost: float = 6.0) -> SeedOp:
    module_path, _, class_name = path.rpartition(".")

    def apply(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
        if layout != LAST and family != "activation":
            return None
        text = constructor(ctx, shape)
        if text is None:
            return None
        return Step(name, "{m}({x})", shape, layout, module=f"{module_path}.{class_name}({text})",
                    imports=(f"import {module_path}",), flops=_elementwise_flops(shape, cost),
                    param_count={b: params * shape[-1].at(b) for b in BACKENDS}, source=path)

    return SeedOp(name, family, path, apply, weight=0.4)


def _hf_conv1d(ctx: OpContext, shape: tuple[Dim, ...], layout: str) -> Step | None:
    """transformers' Conv1D(nf, nx): a linear layer with transposed weights (GPT-2)."""
    if layout != LAST or len(shape) < 2:
        return None
    features = shape[-1]
    out = ctx.new_dim("out_features", FEATURES)
    rows = shape[1:-1]
    return Step("hf_conv1d", "{m}({x})", shape[:-1] + (out,), layout,
                module=f"transformers.pytorch_utils.Conv1D({out.expr}, {features.expr})",
                init=("nn.init.normal_({m}.weight, std=0.02)", "nn.init.uniform_({m}.bias, -0.5, 0.5)"),
                imports=("import transformers.pytorch_utils",),
                flops=_per_backend(lambda b: 2 * numel(rows, b) * features.at(b) * out.at(b)),
                param_count=_per_backend(lambda b: features.at(b) * out.at(b) + out.at(b)),
                source="transformers.pytorch_utils.Conv1D")


def transformers_ops() -> list[SeedOp]:
    """Seed operators from transformers (activations, GPT-2's Conv1D, RMS norms), those importable."""
    plain = lambda ctx, shape: ""  # noqa: E731
    hidden = lambda ctx, shape: shape[-1].expr if len(shape) >= 2 and min(shape[-1].cuda, shape[-1].cpu) >= 8 else None  # noqa: E731
    clipped = lambda ctx, shape: f"{ctx.choose('min', (-5.0, -10.0))}, {ctx.choose('max', (5.0, 10.0))}"  # noqa: E731
    candidates = [
        _transformers_module("hf_gelu", "transformers.activations.GELUActivation", plain, "activation"),
        _transformers_module("hf_new_gelu", "transformers.activations.NewGELUActivation", plain, "activation"),
        _transformers_module("hf_fast_gelu", "transformers.activations.FastGELUActivation", plain, "activation"),
        _transformers_module("hf_quick_gelu", "transformers.activations.QuickGELUActivation", plain, "activation"),
        _transformers_module("hf_accurate_gelu", "transformers.activations.AccurateGELUActivation", plain,
                             "activation"),
        _transformers_module("hf_clipped_gelu", "transformers.activations.ClippedGELUActivation", clipped,
                             "activation"),
        _transformers_module("hf_relu_squared", "transformers.activations.ReLUSquaredActivation", plain,
                             "activation"),
        _transformers_module("hf_laplace", "transformers.activations.LaplaceActivation", plain, "activation"),
        _transformers_module("hf_llama_rms_norm", "transformers.models.llama.modeling_llama.LlamaRMSNorm", hidden,
                             "norm", params=1),
        _transformers_module("hf_t5_layer_norm", "transformers.models.t5.modeling_t5.T5LayerNorm", hidden, "norm",
                             params=1),
        SeedOp("hf_conv1d", "gemm", "transformers.pytorch_utils.Conv1D", _hf_conv1d, weight=0.4),
    ]
    usable = []
    for op in candidates:
        module_path, _, class_name = op.source.rpartition(".")
        try:
            module = importlib.import_module(module_path)
        except Exception:  # an old or broken transformers: leave its ops out
            continue
        if hasattr(module, class_name):
            usable.append(op)
    return usable


# ------------------------------------------------------------------------------------- catalogue
def torch_ops() -> list[SeedOp]:
    clamp_low, clamp_high = (-1.0, -0.5, -2.0), (0.5, 1.0, 2.0)
    ops = [
        _activation("relu", "nn.ReLU()", "torch.relu({x})"),
        _activation("relu6", "nn.ReLU6()", "F.relu6({x})"),
        _activation("leaky_relu", "nn.LeakyReLU({negative_slope})", "F.leaky_relu({x}, {negative_slope})",
                    {"negative_slope": (0.01, 0.05, 0.1, 0.2)}),
        _activation("elu", "nn.ELU(alpha={alpha})", "F.elu({x}, alpha={alpha})", {"alpha": (0.5, 1.0, 1.5)}, 8),
        _activation("selu", "nn.SELU()", "torch.selu({x})", cost=8),
        _activation("celu", "nn.CELU(alpha={alpha})", "F.celu({x}, alpha={alpha})", {"alpha": (0.5, 1.0, 2.0)}, 8),
        _activation("gelu", "nn.GELU(approximate={approximate!r})", "F.gelu({x}, approximate={approximate!r})",
                    {"approximate": ("none", "tanh")}, 10),
        _activation("silu", "nn.SiLU()", "F.silu({x})", cost=8),
        _activation("mish", "nn.Mish()", "F.mish({x})", cost=12),
        _activation("sigmoid", "nn.Sigmoid()", "torch.sigmoid({x})", cost=8),
        _activation("tanh", "nn.Tanh()", "torch.tanh({x})", cost=8),
        _activation("hardtanh", "nn.Hardtanh({min_val}, {max_val})", "F.hardtanh({x}, {min_val}, {max_val})",
                    {"min_val": clamp_low, "max_val": clamp_high}),
        _activation("hardswish", "nn.Hardswish()", "F.hardswish({x})"),
        _activation("hardsigmoid", "nn.Hardsigmoid()", "F.hardsigmoid({x})"),
        _activation("softplus", "nn.Softplus(beta={beta})", "F.softplus({x}, beta={beta})",
                    {"beta": (0.5, 1.0, 2.0)}, 10),
        _activation("softsign", "nn.Softsign()", "F.softsign({x})"),
        _activation("logsigmoid", "nn.LogSigmoid()", "F.logsigmoid({x})", cost=10),
        _activation("tanhshrink", "nn.Tanhshrink()", "F.tanhshrink({x})", cost=8),
        _activation("softshrink", "nn.Softshrink({lambd})", "F.softshrink({x}, {lambd})", {"lambd": (0.1, 0.5)}),
        # Hardshrink jumps at +-lambda: after any rounding (a GELU computed another way) a correct kernel
        # can land on the other side, so it only takes the raw input (measured: gelu -> hardshrink failed
        # torch.compile's own comparison with eager).
        _activation("hardshrink", "nn.Hardshrink({lambd})", "F.hardshrink({x}, {lambd})", {"lambd": (0.1, 0.5)},
                    raw_input_only=True),
        _math("abs", "torch.abs({x})"),
        _math("square", "torch.square({x})"),
        _math("sin", "torch.sin({x})", cost=8),
        _math("erf", "torch.erf({x})", cost=8),
        _math("clamp", "torch.clamp({x}, min={low}, max={high})", {"low": clamp_low, "high": clamp_high}),
        _math("mul", "{x} * {factor}", {"factor": (0.5, 2.0, 1.5, -1.0)}, source="torch.mul"),
        _math("add", "{x} + {value}", {"value": (0.5, 1.0, -0.5)}, source="torch.add"),
        _math("div", "{x} / {value}", {"value": (2.0, 3.0, 0.5)}, source="torch.div"),
        _bias_like("bias_add", "+", "torch.randn({}) * 0.5"),
        _bias_like("channel_scale", "*", "torch.rand({}) + 0.5"),
        SeedOp("layer_norm", "norm", "torch.nn.LayerNorm", _layer_norm, weight=1.2),
        SeedOp("rms_norm", "norm", "torch.nn.RMSNorm", _rms_norm, params=("eps",), weight=1.0),
        SeedOp("batch_norm", "norm", "torch.nn.BatchNorm2d", _batch_norm, weight=1.2),
        SeedOp("group_norm", "norm", "torch.nn.GroupNorm", _group_norm, params=("num_groups",), weight=1.0),
        SeedOp("instance_norm", "norm", "torch.nn.InstanceNorm2d", _instance_norm, weight=0.8),
        SeedOp("normalize", "norm", "torch.nn.functional.normalize", _normalize, params=("dim",), weight=0.5),
        _softmax_like("softmax", "Softmax", "torch.softmax"),
        _softmax_like("log_softmax", "LogSoftmax", "F.log_softmax"),
        _softmax_like("softmin", "Softmin", "F.softmin"),
        SeedOp("linear", "gemm", "torch.nn.Linear", _linear, params=("out_features", "bias"), weight=2.0),
        SeedOp("matmul", "gemm", "torch.matmul", _matmul_weight, params=("out_features", "form"), weight=1.0),
        SeedOp("bmm", "gemm", "torch.bmm", _gram, params=("form",), weight=0.6),
        _conv(1), _conv(2), _conv(3), _conv(2, depthwise=True),
        _conv(1, transposed=True), _conv(2, transposed=True), _conv(3, transposed=True),
        _pool("max", 1), _pool("max", 2), _pool("max", 3), _pool("avg", 1), _pool("avg", 2), _pool("avg", 3),
        _adaptive_pool("avg", 1), _adaptive_pool("avg", 2), _adaptive_pool("avg", 3), _adaptive_pool("max", 2),
        SeedOp("interpolate", "resample", "torch.nn.functional.interpolate", _interpolate, params=("mode", "form"),
               weight=0.6),
        SeedOp("pixel_shuffle", "resample", "torch.nn.PixelShuffle", _pixel_shuffle, weight=0.4),
        _reduction("sum", "torch.sum({x}, dim={dim}{keep})"),
        _reduction("mean", "torch.mean({x}, dim={dim}{keep})"),
        _reduction("amax", "torch.amax({x}, dim={dim}{keep})"),
        _reduction("amin", "torch.amin({x}, dim={dim}{keep})"),
        _reduction("max", "torch.max({x}, dim={dim}{keep})[0]"),
        _reduction("logsumexp", "torch.logsumexp({x}, dim={dim}{keep})", cost=10),
        _reduction("var", "torch.var({x}, dim={dim}{keep})", cost=4),
        _reduction("std", "torch.std({x}, dim={dim}{keep})", cost=4),
        _reduction("norm", "torch.linalg.vector_norm({x}, dim={dim}{keep})", source="torch.linalg.vector_norm"),
        SeedOp("spatial_mean", "reduction", "torch.mean", _spatial_mean, params=("keepdim",), weight=0.6),
        _scan("cumsum", "torch.cumsum({x}, dim={dim})"),
        _scan("cummax", "torch.cummax({x}, dim={dim})[0]"),
        _recurrent("lstm", "LSTM", 4),
        _recurrent("gru", "GRU", 3),
        _recurrent("rnn", "RNN", 1),
        SeedOp("multihead_attention", "attention", "torch.nn.MultiheadAttention", _multihead_attention,
               params=("num_heads",), weight=0.6),
        SeedOp("scaled_dot_product_attention", "attention", "torch.nn.functional.scaled_dot_product_attention",
               _sdpa, params=("is_causal",), weight=0.6),
        SeedOp("transformer_encoder_layer", "attention", "torch.nn.TransformerEncoderLayer", _encoder_layer,
               params=("num_heads", "activation"), weight=0.4),
    ]
    return ops


def transformers_available() -> bool:
    return importlib.util.find_spec("transformers") is not None


def seed_catalogue(include_transformers: bool | None = None) -> dict[str, SeedOp]:
    """The seed operators by name: torch's, plus transformers' when `include_transformers` (default:
    when transformers is installed)."""
    if include_transformers is None:
        include_transformers = transformers_available()
    ops = torch_ops() + (transformers_ops() if include_transformers else [])
    catalogue: dict[str, SeedOp] = {}
    for op in ops:
        if op.name in catalogue:
            raise ValueError(f"two seed operators are named {op.name!r}")
        catalogue[op.name] = op
    return catalogue


def describe_catalogue(catalogue: dict[str, SeedOp]) -> str:
    """One line per op (name, family, source, settable parameters), for prompts and `--list-ops`."""
    lines = []
    for op in catalogue.values():
        params = f" params: {', '.join(op.params)}" if op.params else ""
        first = " (first op only)" if op.raw_input_only else ""
        lines.append(f"{op.name:<30} {op.family:<11} {op.source}{params}{first}")
    return "\n".join(lines)
