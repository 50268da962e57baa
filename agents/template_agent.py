"""The non-LLM reference agent: torch.fx trace of a task's `Model` -> a plan of csrc/ template kernels
-> a candidate `ModelNew` in the recommended form (`cuda_gym.native.load_kernels`) -> tuned knobs.

    plan = plan_task(task, backend="cuda")          # raises Unsupported with the reason
    space = KnobSpace.for_plan(plan)                # the knobs that matter for this plan, and their masks
    source = render_candidate(plan, space.default())
    best = TemplateAgent(evaluator).solve(task, budget=8)   # default config, then random search

How a plan is made. The reference is traced with `torch.fx.symbolic_trace` and run on meta tensors
(no memory, no compute) for every intermediate's shape. Nodes become stages of five kinds, each a
template of csrc/templates/: `gemm` (nn.Linear, matmul, bmm; transposed operands by strides),
`conv` (nn.Conv1d/2d/3d through cuDNN or as implicit GEMM, nn.ConvTranspose*d through cuDNN or direct,
max/avg pooling), `reduce`
(sum, mean, max, min, prod, logsumexp, argmax, argmin over one run of adjacent dims), `norm` (softmax,
log-softmax, layer norm, group/instance norm, RMS norm) and `elementwise`. Pointwise ops (activations,
scalar and broadcast arithmetic, eval-mode batch norm, identity dropout) accumulate into an expression
and are fused into the epilogue of the stage that produced their input when the `fuse_epilogue` knob
says so; otherwise they become one fused elementwise kernel. Anything else raises `Unsupported`
naming the node, so a caller knows which tasks the agent covers and why the others are not.

The candidate subclasses the reference's own `Model` (its source is embedded), so it has the same
constructor and parameter names, and overrides `forward` with the template calls; shapes are fixed at
plan time and checked on every call.
"""
from __future__ import annotations

import math
import operator
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

TEMPLATE_DIR_ENV = "CUDA_GYM_CSRC"


class Unsupported(ValueError):
    """The task's reference uses something the templates do not cover (the message names it)."""


def template_dir() -> Path:
    """csrc/templates: $CUDA_GYM_CSRC/templates, the repository's csrc/ (source or editable install),
    or the copy installed as package data under cuda_gym/csrc."""
    import os

    candidates = []
    if os.environ.get(TEMPLATE_DIR_ENV):
        candidates.append(Path(os.environ[TEMPLATE_DIR_ENV]) / "templates")
    candidates.append(Path(__file__).resolve().parent.parent / "csrc" / "templates")
    try:
        import cuda_gym

        candidates.append(Path(cuda_gym.__file__).resolve().parent / "csrc" / "templates")
    except ImportError:  # pragma: no cover - cuda_gym is this project
        pass
    for path in candidates:
        if (path / "common.h").exists():
            return path
    raise FileNotFoundError(f"csrc/templates not found (looked in {', '.join(map(str, candidates))}); "
                            f"set ${TEMPLATE_DIR_ENV} to the csrc folder of a cuda_gym checkout")


def read_template(name: str) -> str:
    """A template file's text with its `#include "..."` of sibling templates removed (they are inlined)."""
    text = (template_dir() / name).read_text(encoding="utf-8")
    return re.sub(r'^\s*#include\s+"[^"]+"\s*$', "", text, flags=re.M).replace("#pragma once", "")


# ----------------------------------------------------------------------------------- expressions
# An expression is a tuple tree: ("v",) the producing stage's value; ("op", k) operand k; ("c", x) a
# constant; ("f", name, *args) a function of common.h or a C operator; names in _FUNCTIONS.
V = ("v",)

_FUNCTIONS: dict[str, str] = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})", "neg": "(-{0})",
    "relu": "cg_relu({0})", "sigmoid": "cg_sigmoid({0})", "tanh": "tanhf({0})", "gelu": "cg_gelu({0})",
    "gelu_tanh": "cg_gelu_tanh({0})", "silu": "cg_silu({0})", "mish": "cg_mish({0})",
    "softplus": "cg_softplus({0}, {1}, {2})", "elu": "cg_elu({0}, {1})", "selu": "cg_selu({0})",
    "leaky_relu": "cg_leaky_relu({0}, {1})", "hardsigmoid": "cg_hardsigmoid({0})",
    "hardswish": "cg_hardswish({0})", "clamp": "cg_clamp({0}, {1}, {2})", "softsign": "cg_softsign({0})",
    "abs": "fabsf({0})", "exp": "expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})", "rsqrt": "(1.f / sqrtf({0}))",
    "erf": "erff({0})", "sin": "sinf({0})", "cos": "cosf({0})", "reciprocal": "(1.f / {0})",
    "pow": "powf({0}, {1})", "square": "({0} * {0})", "maximum": "cg_max({0}, {1})", "minimum": "cg_min({0}, {1})",
    "log1p": "log1pf({0})", "expm1": "expm1f({0})", "floor": "floorf({0})", "ceil": "ceilf({0})",
    "sign": "(float)(({0} > 0.f) - ({0} < 0.f))", "logsigmoid": "(-cg_softplus(-({0}), 1.f, 20.f))",
    "smooth_l1": "(fabsf({0}) < {1} ? 0.5f * {0} * {0} / {1} : fabsf({0}) - 0.5f * {1})",
}


def _c_float(x: float) -> str:
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    return f"{float(x)!r}f"


def expr_to_c(expr: tuple, operand_names: Sequence[str], value_name: str = "v") -> str:
    kind = expr[0]
    if kind == "v":
        return value_name
    if kind == "op":
        return operand_names[expr[1]]
    if kind == "c":
        return _c_float(expr[1])
    args = [expr_to_c(a, operand_names, value_name) for a in expr[2:]]
    return _FUNCTIONS[expr[1]].format(*args)


def _shift(expr: tuple, offset: int) -> tuple:
    if expr[0] == "op":
        return ("op", expr[1] + offset)
    if expr[0] == "f":
        return ("f", expr[1], *(_shift(a, offset) for a in expr[2:]))
    return expr


def _replace_v(expr: tuple, replacement: tuple) -> tuple:
    if expr[0] == "v":
        return replacement
    if expr[0] == "f":
        return ("f", expr[1], *(_replace_v(a, replacement) for a in expr[2:]))
    return expr


def _uses_v(expr: tuple) -> bool:
    return expr[0] == "v" or (expr[0] == "f" and any(_uses_v(a) for a in expr[2:]))


# ------------------------------------------------------------------------------------ the plan
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


# ------------------------------------------------------------------------------------ the tracer
_UNARY = {
    "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "silu": "silu", "mish": "mish", "selu": "selu",
    "hardsigmoid": "hardsigmoid", "hardswish": "hardswish", "softsign": "softsign", "abs": "abs", "exp": "exp",
    "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "erf": "erf", "sin": "sin", "cos": "cos",
    "reciprocal": "reciprocal", "neg": "neg", "negative": "neg", "square": "square", "log1p": "log1p",
    "expm1": "expm1", "floor": "floor", "ceil": "ceil", "sign": "sign", "logsigmoid": "logsigmoid",
}
_BINARY = {"add": "add", "sub": "sub", "subtract": "sub", "mul": "mul", "multiply": "mul", "div": "div",
           "divide": "div", "true_divide": "div", "maximum": "maximum", "minimum": "minimum", "pow": "pow"}
_OPERATORS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
              operator.pow: "pow", operator.neg: "neg", operator.iadd: "add", operator.imul: "mul",
              operator.isub: "sub", operator.itruediv: "div"}
_REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "prod": "prod", "logsumexp": "logsumexp",
               "max": "max", "min": "min", "argmax": "argmax", "argmin": "argmin"}
_VIEWS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "contiguous", "view_as", "reshape_as"}


def _attr_ref(target: str) -> str:
    """The Python expression in ModelNew.forward for a submodule or tensor path: "net.0.weight" ->
    "self.net[0].weight" (Sequential / ModuleList items), other non-identifiers through getattr."""
    ref = "self"
    for part in target.split("."):
        if part.isdigit():
            ref += f"[{part}]"
        elif part.isidentifier():
            ref += f".{part}"
        else:
            ref = f"getattr({ref}, {part!r})"
    return ref


def _name_of(target: Any) -> str:
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", str(target)).lstrip("_")


class _Tracer:
    """Turns one fx graph (with meta values on every node) into a Plan."""

    def __init__(self, task_id: str, backend: str, source: str, module: Any):
        self.task_id = task_id
        self.backend = backend
        self.source = source
        self.module = module
        self.stages: list[Stage] = []
        self.inputs: list[Buffer] = []
        self.input_names: list[str] = []
        self.values: dict[Any, Any] = {}
        self._temps = 0

    # ---- helpers
    def _temp(self, shape: Sequence[int], dtype: str = "float") -> Buffer:
        self._temps += 1
        return Buffer(f"t{self._temps}", tuple(int(s) for s in shape), dtype)

    def _stage(self, kind: str, out: Buffer, inputs: list[Buffer], **params: Any) -> Stage:
        stage = Stage(kind, f"s{len(self.stages)}", out, inputs, params)
        self.stages.append(stage)
        return stage

    def _leaf(self, buffer: Buffer, shape: Sequence[int] | None = None) -> _Value:
        shape = tuple(buffer.shape if shape is None else shape)
        return _Value(shape, ("op", 0), [Operand(buffer, shape)], buffer=buffer if shape == buffer.shape else None,
                      dtype=buffer.dtype)

    def _param(self, target: str) -> _Value:
        obj = self.module
        for part in target.split("."):
            obj = getattr(obj, part)
        import torch

        if not isinstance(obj, torch.Tensor):
            raise Unsupported(f"attribute {target} is not a tensor")
        if target.startswith("_tensor_constant"):
            # fx's name for a tensor the forward builds (`torch.tensor(self.value)`): the emitted ModelNew
            # has no such attribute, so a one-element constant is inlined and any other is not covered.
            if obj.numel() != 1 or obj.is_meta or not obj.is_floating_point():
                raise Unsupported(f"the forward builds a tensor constant ({tuple(obj.shape)}, {obj.dtype}) "
                                  "that is not a floating-point scalar")
            return _Value(tuple(obj.shape), ("c", float(obj.item())), [])
        if obj.dtype != torch.float32:
            raise Unsupported(f"parameter {target} is {obj.dtype}, the templates are fp32")
        return self._leaf(Buffer(_attr_ref(target), tuple(obj.shape), kind="param"))

    def materialise(self, value: _Value) -> Buffer:
        """The value as a contiguous buffer, adding an elementwise stage or finishing its producer's epilogue."""
        if value.buffer is not None and value.strides is None:
            return value.buffer
        if value.strides is not None:
            raise Unsupported("a transposed view is used by something other than a matrix product")
        producer = value.producer
        if producer is not None and producer.epilogue == V and not producer.operands and _uses_v(value.expr) \
                and producer.out.shape == value.shape and not producer.finished:
            if value.expr == V:
                producer.finished = True
                value.buffer = producer.out
                return producer.out
            producer.epilogue = value.expr
            producer.operands = list(value.operands)
            producer.finished = True
            value.buffer = producer.out
            return producer.out
        expr, operands = value.expr, list(value.operands)
        if producer is not None:
            raw = producer.out
            producer.finished = True
            if producer.epilogue != V:
                raise Unsupported("a stage's raw output is needed after its epilogue was fused (not supported)")
            expr = _replace_v(expr, ("op", len(operands)))
            operands.append(Operand(raw, raw.shape))
        if value.dtype != "float":
            raise Unsupported("pointwise ops on integer results are not supported")
        out = self._temp(value.shape)
        stage = self._stage("elementwise", out, [o.buffer for o in operands])
        stage.epilogue = expr
        stage.operands = operands
        value.buffer = out
        value.producer = None
        value.expr, value.operands = ("op", 0), [Operand(out, out.shape)]
        return out

    def pointwise(self, name: str, args: Sequence[Any], consts: Sequence[float] = ()) -> _Value:
        """Combine values/constants under function `name` (lazy: nothing is emitted yet)."""
        tensors = [a for a in args if isinstance(a, _Value)]
        if not tensors:
            raise Unsupported(f"{name} of constants only")
        shape: tuple[int, ...] = ()
        for t in tensors:
            shape = _broadcast_shape(shape, t.shape)
        for t in tensors:
            if t.dtype != "float":
                raise Unsupported(f"{name} on an integer tensor")
        # At most one producer can stay lazy: the first full-shape one; the others are materialised.
        keeper = next((t for t in tensors if t.producer is not None and t.shape == shape and t.buffer is None), None)
        shared = [t for t in tensors if keeper is not None and t.producer is keeper.producer and t.shape == shape
                  and t.buffer is None]
        operands: list[Operand] = []
        parts = []
        for a in args:
            if not isinstance(a, _Value):
                parts.append(("c", float(a)))
                continue
            inline = any(a is t for t in shared)
            if not inline and (a.producer is not None and a.buffer is None or a.strides is not None):
                self.materialise(a)
            if inline:
                parts.append(_shift(a.expr, len(operands)))
                operands.extend(a.operands)
            elif a.buffer is not None:
                parts.append(("op", len(operands)))
                operands.append(Operand(a.buffer, a.shape))
            else:
                # its operands keep their own shapes; broadcast_terms re-derives their index for `shape`
                parts.append(_shift(a.expr, len(operands)))
                operands.extend(a.operands)
        parts.extend(("c", float(c)) for c in consts)
        for o in operands:
            broadcast_terms(o.shape, shape)  # fail now rather than at render time
        return _Value(shape, ("f", name, *parts), operands, producer=keeper.producer if keeper else None)

    # ---- graph walk
    def run(self, graph: Any, meta: dict[Any, Any]) -> Plan:
        import torch

        outputs: list[Buffer] = []
        is_tuple = False
        for node in graph.nodes:
            value = meta.get(node)
            if node.op == "placeholder":
                if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
                    raise Unsupported(f"input {node.name} is not an fp32 tensor")
                buffer = Buffer(node.name, tuple(value.shape), kind="input")
                self.inputs.append(buffer)
                self.input_names.append(node.name)
                self.values[node] = self._leaf(buffer)
            elif node.op == "get_attr":
                self.values[node] = self._param(node.target)
            elif node.op == "output":
                result = node.args[0]
                is_tuple = isinstance(result, (tuple, list))
                for item in (result if is_tuple else [result]):
                    v = self.values.get(item)
                    if not isinstance(v, _Value):
                        raise Unsupported("the forward returns something other than tensors")
                    if v.buffer is not None and v.buffer.kind != "temp":
                        v = _Value(v.shape, ("op", 0), [Operand(v.buffer, v.shape)])  # outputs must be fresh: copy
                    buf = self.materialise(v)
                    outputs.append(Buffer(buf.ref, v.shape, buf.dtype))
            else:
                self.values[node] = self._node(node, value)
        # Drop stages nothing reads (e.g. the indices of torch.max(x, dim) when only values are used).
        needed = {b.ref for b in outputs}
        kept = []
        for stage in reversed(self.stages):
            if stage.out.ref in needed:
                kept.append(stage)
                needed.update(b.ref for b in stage.inputs)
                needed.update(o.buffer.ref for o in stage.operands)
        stages = kept[::-1]
        if not stages:
            raise Unsupported("the forward computes nothing the templates emit")
        return Plan(self.task_id, self.backend, self.source, self.input_names, self.inputs, stages, outputs,
                    is_tuple)

    def _arg(self, a: Any) -> Any:
        import torch.fx

        if isinstance(a, torch.fx.Node):
            if a not in self.values:
                raise Unsupported(f"node {a.name} has no value")
            return self.values[a]
        if isinstance(a, (tuple, list)):
            return type(a)(self._arg(x) for x in a)
        return a

    def _node(self, node: Any, meta_value: Any) -> Any:
        import torch

        args = [self._arg(a) for a in node.args]
        kwargs = {k: self._arg(v) for k, v in node.kwargs.items()}
        if isinstance(meta_value, (torch.Size, torch.device, torch.dtype)) or (isinstance(meta_value, (tuple, list)) and
                                                  all(isinstance(v, (int, float)) for v in meta_value)):
            return meta_value
        if not isinstance(meta_value, (torch.Tensor, tuple, list)):
            if isinstance(meta_value, (int, float, bool)) or meta_value is None or isinstance(meta_value, torch.Size):
                return meta_value  # sizes and Python scalars computed from shapes
            raise Unsupported(f"node {node.name} ({node.op} {_name_of(node.target)}) yields {type(meta_value).__name__}")
        if isinstance(meta_value, torch.Tensor) and meta_value.dtype not in (torch.float32, torch.int64):
            raise Unsupported(f"node {node.name} yields {meta_value.dtype}")
        out_shape = tuple(meta_value.shape) if isinstance(meta_value, torch.Tensor) else None
        if node.op == "call_module":
            module = self.module.get_submodule(node.target)
            return self._module(node, module, args, out_shape)
        name = _name_of(node.target)
        if node.op == "call_method":
            return self._function(node, name, args, kwargs, out_shape, method=True, meta_value=meta_value)
        if node.op == "call_function":
            if node.target in _OPERATORS:
                name = _OPERATORS[node.target]
            elif node.target is operator.getitem:
                return self._getitem(args, meta_value)
            elif node.target is getattr and isinstance(args[0], tuple) and args[1] in ("values", "indices"):
                return args[0][0 if args[1] == "values" else 1]
            elif node.target is getattr and args[1] in ("T", "mT"):
                return self._transpose(args[0], "t" if args[1] == "T" else "transpose", [-1, -2], out_shape)
            return self._function(node, name, args, kwargs, out_shape, method=False, meta_value=meta_value)
        raise Unsupported(f"node {node.name}: {node.op}")

    def _getitem(self, args: list, meta_value: Any) -> Any:
        container, index = args
        if isinstance(container, tuple) and isinstance(index, int):
            return container[index]
        raise Unsupported("indexing/slicing a tensor")

    # ---- modules
    def _module(self, node: Any, module: Any, args: list, out_shape: tuple | None) -> Any:
        import torch.nn as nn

        prefix = _attr_ref(node.target)
        x = args[0] if args else None
        if isinstance(module, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.Identity)):
            return x
        if isinstance(module, nn.Linear):
            w = Buffer(f"{prefix}.weight", tuple(module.weight.shape), kind="param")
            bias = Buffer(f"{prefix}.bias", tuple(module.bias.shape), kind="param") if module.bias is not None else None
            return self._linear(x, w, bias, out_shape)
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                               nn.ConvTranspose3d)):
            if getattr(module, "padding_mode", "zeros") != "zeros":
                raise Unsupported(f"{type(module).__name__} padding mode {module.padding_mode}")
            transposed = isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d))
            return self._conv(x, module, prefix, out_shape, transposed)
        if isinstance(module, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)):
            return self._pool_module(x, module, out_shape)
        if isinstance(module, (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)):
            size = module.output_size
            sizes = size if isinstance(size, (tuple, list)) else (size,)
            if any(s != 1 for s in sizes):
                raise Unsupported("adaptive pooling to a size other than 1")
            nd = len(x.shape) - 2
            return self._reduce(x, "mean", list(range(2, 2 + nd)), True, out_shape)
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            return self._batch_norm(x, module, prefix)
        if isinstance(module, nn.LayerNorm):
            nd = len(module.normalized_shape)
            return self._norm(x, "layer_norm", list(range(len(x.shape) - nd, len(x.shape))), module.eps,
                              f"{prefix}.weight" if module.weight is not None else None,
                              f"{prefix}.bias" if module.bias is not None else None, groups=1)
        if isinstance(module, nn.GroupNorm):
            return self._group_norm(x, module.num_groups, module.eps,
                                    f"{prefix}.weight" if module.affine else None,
                                    f"{prefix}.bias" if module.affine else None)
        if isinstance(module, (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)):
            if module.track_running_stats:
                raise Unsupported("InstanceNorm with running stats")
            return self._group_norm(x, x.shape[1], module.eps, f"{prefix}.weight" if module.affine else None,
                                    f"{prefix}.bias" if module.affine else None)
        if isinstance(module, nn.RMSNorm) if hasattr(nn, "RMSNorm") else False:
            nd = len(module.normalized_shape)
            if module.eps is None:
                raise Unsupported("RMSNorm without eps")
            return self._norm(x, "rms_norm", list(range(len(x.shape) - nd, len(x.shape))), module.eps,
                              f"{prefix}.weight" if module.weight is not None else None, None, groups=1)
        if isinstance(module, (nn.Softmax, nn.LogSoftmax)):
            return self._norm(x, "softmax" if isinstance(module, nn.Softmax) else "log_softmax",
                              [module.dim % len(x.shape)], 0.0, None, None, groups=1)
        simple = {nn.ReLU: ("relu", ()), nn.Sigmoid: ("sigmoid", ()), nn.Tanh: ("tanh", ()), nn.SiLU: ("silu", ()),
                  nn.Mish: ("mish", ()), nn.SELU: ("selu", ()), nn.Hardsigmoid: ("hardsigmoid", ()),
                  nn.Hardswish: ("hardswish", ()), nn.Softsign: ("softsign", ())}
        for cls, (fname, consts) in simple.items():
            if type(module) is cls:
                return self.pointwise(fname, [x], consts)
        if isinstance(module, nn.GELU):
            return self.pointwise("gelu_tanh" if module.approximate == "tanh" else "gelu", [x])
        if isinstance(module, nn.LeakyReLU):
            return self.pointwise("leaky_relu", [x], [module.negative_slope])
        if isinstance(module, nn.ELU):
            return self.pointwise("elu", [x], [module.alpha])
        if isinstance(module, nn.Softplus):
            return self.pointwise("softplus", [x], [module.beta, module.threshold])
        if isinstance(module, nn.Hardtanh):
            return self.pointwise("clamp", [x], [module.min_val, module.max_val])
        raise Unsupported(f"module {type(module).__name__} ({node.target})")

    def _linear(self, x: _Value, w: Buffer, bias: Buffer | None, out_shape: tuple) -> _Value:
        xb = self.materialise(x)
        K = xb.shape[-1]
        M = xb.numel // K
        N = w.shape[0]
        out = self._temp(out_shape)
        stage = self._stage("gemm", out, [xb, w], batch=1, M=M, N=N, K=K, a_strides=(0, K, 1),
                            b_strides=(0, 1, K))
        value = _Value(tuple(out_shape), V, [], producer=stage)
        if bias is not None:
            value = self.pointwise("add", [value, self._leaf(bias)])
        return value

    def _matmul(self, a: _Value, b: _Value, out_shape: tuple) -> _Value:
        def operand(v: _Value) -> tuple[Buffer, tuple[int, ...], tuple[int, ...]]:
            if v.strides is not None:
                return v.buffer, v.shape, v.strides
            buf = self.materialise(v)
            shape = v.shape
            strides = [1] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                strides[d] = strides[d + 1] * shape[d + 1]
            return buf, shape, tuple(strides)

        abuf, ashape, astr = operand(a)
        bbuf, bshape, bstr = operand(b)
        if len(ashape) == 1 or len(bshape) == 1:
            if len(bshape) == 1 and len(ashape) == 2:   # matrix-vector: B as a K x 1 matrix
                bshape, bstr = (bshape[0], 1), (bstr[0], 1)
            else:
                raise Unsupported("matmul with a 1-D left operand")
        if len(ashape) > 3 or len(bshape) > 3:
            # leading batch dims of contiguous operands flatten into one
            if len(ashape) > 3 and a.strides is None and len(bshape) == 2:
                ashape = (math.prod(ashape[:-1]), ashape[-1])
                astr = (ashape[1], 1)
            else:
                raise Unsupported("matmul with more than one batch dim")
        M, K = ashape[-2], ashape[-1]
        K2, N = bshape[-2], bshape[-1]
        if K != K2:
            raise Unsupported("matmul shapes")
        batch = max(ashape[0] if len(ashape) == 3 else 1, bshape[0] if len(bshape) == 3 else 1)
        sab = astr[0] if len(ashape) == 3 and ashape[0] > 1 else 0
        sbb = bstr[0] if len(bshape) == 3 and bshape[0] > 1 else 0
        out = self._temp(out_shape)
        stage = self._stage("gemm", out, [abuf, bbuf], batch=batch, M=M, N=N, K=K,
                            a_strides=(sab, astr[-2], astr[-1]), b_strides=(sbb, bstr[-2], bstr[-1]))
        return _Value(tuple(out_shape), V, [], producer=stage)

    def _conv(self, x: _Value, module: Any, prefix: str, out_shape: tuple, transposed: bool) -> _Value:
        xb = self.materialise(x)
        nd = len(xb.shape) - 2

        def three(v: Any, fill: int) -> tuple[int, ...]:
            v = tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd
            return (fill,) * (3 - nd) + tuple(int(t) for t in v)

        if isinstance(module.padding, str):
            if module.padding == "valid":
                padding = (0,) * nd
            else:
                raise Unsupported("padding='same'")
        else:
            padding = module.padding
        spatial_in = (1,) * (3 - nd) + tuple(xb.shape[2:])
        spatial_out = (1,) * (3 - nd) + tuple(out_shape[2:])
        shape = dict(n=xb.shape[0], c=xb.shape[1], oc=out_shape[1], groups=module.groups,
                     d=spatial_in[0], h=spatial_in[1], w=spatial_in[2],
                     od=spatial_out[0], oh=spatial_out[1], ow=spatial_out[2])
        k = three(module.kernel_size, 1)
        s = three(module.stride, 1)
        p = three(padding, 0)
        dl = three(module.dilation, 1)
        shape.update(kd=k[0], kh=k[1], kw=k[2], sd=s[0], sh=s[1], sw=s[2], pd=p[0], ph=p[1], pw=p[2],
                     dd=dl[0], dh=dl[1], dw=dl[2])
        w = Buffer(f"{prefix}.weight", tuple(module.weight.shape), kind="param")
        out = self._temp(out_shape)
        # A GEMM tile is as wide as 32+ out channels: with fewer per group (depthwise) go direct.
        kind = "conv_transpose" if transposed else ("conv_direct" if out_shape[1] // module.groups < 8 else "conv")
        stage = self._stage(kind, out, [xb, w], shape=shape)
        value = _Value(tuple(out_shape), V, [], producer=stage)
        if module.bias is not None:
            bias = Buffer(f"{prefix}.bias", tuple(module.bias.shape), kind="param")
            value = self.pointwise("add", [value, self._leaf(bias, (module.bias.shape[0],) + (1,) * nd)])
        return value

    def _pool(self, x: _Value, is_max: bool, kernel: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool, count_include_pad: bool, out_shape: tuple) -> _Value:
        if ceil_mode:
            raise Unsupported("pooling with ceil_mode=True")
        xb = self.materialise(x)
        nd = len(xb.shape) - 2

        def three(v: Any, fill: int) -> tuple[int, ...]:
            v = tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd
            return (fill,) * (3 - nd) + tuple(int(t) for t in v)

        stride = kernel if stride is None or stride == [] or stride == () else stride
        spatial_in = (1,) * (3 - nd) + tuple(xb.shape[2:])
        spatial_out = (1,) * (3 - nd) + tuple(out_shape[2:])
        k, s, p, dl = three(kernel, 1), three(stride, 1), three(padding, 0), three(dilation, 1)
        shape = dict(n=xb.shape[0], c=xb.shape[1], oc=xb.shape[1], groups=1, d=spatial_in[0], h=spatial_in[1],
                     w=spatial_in[2], od=spatial_out[0], oh=spatial_out[1], ow=spatial_out[2], kd=k[0], kh=k[1],
                     kw=k[2], sd=s[0], sh=s[1], sw=s[2], pd=p[0], ph=p[1], pw=p[2], dd=dl[0], dh=dl[1], dw=dl[2])
        if max(math.prod(spatial_in), math.prod(spatial_out)) >= 2 ** 31:
            raise Unsupported("a pooling plane past 32-bit indexing")
        out = self._temp(out_shape)
        stage = self._stage("pool", out, [xb], shape=shape, is_max=is_max, count_include_pad=count_include_pad)
        return _Value(tuple(out_shape), V, [], producer=stage)

    def _pool_module(self, x: _Value, module: Any, out_shape: tuple) -> _Value:
        import torch.nn as nn

        if isinstance(module, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)):
            if module.return_indices:
                raise Unsupported("max pooling with return_indices")
            return self._pool(x, True, module.kernel_size, module.stride, module.padding, module.dilation,
                              module.ceil_mode, False, out_shape)
        if getattr(module, "divisor_override", None):
            raise Unsupported("avg pooling with divisor_override")
        return self._pool(x, False, module.kernel_size, module.stride, module.padding, 1, module.ceil_mode,
                          module.count_include_pad, out_shape)

    def _batch_norm(self, x: _Value, module: Any, prefix: str) -> _Value:
        if module.running_mean is None:
            raise Unsupported("BatchNorm without running stats (batch statistics in eval mode)")
        c = module.num_features
        bshape = (c,) + (1,) * (len(x.shape) - 2)
        mean = self._leaf(Buffer(f"{prefix}.running_mean", (c,), kind="param"), bshape)
        var = self._leaf(Buffer(f"{prefix}.running_var", (c,), kind="param"), bshape)
        y = self.pointwise("div", [self.pointwise("sub", [x, mean]),
                                   self.pointwise("sqrt", [self.pointwise("add", [var, module.eps])])])
        if module.affine:
            y = self.pointwise("add", [self.pointwise("mul", [y, self._leaf(Buffer(f"{prefix}.weight", (c,),
                                                                                   kind="param"), bshape)]),
                                       self._leaf(Buffer(f"{prefix}.bias", (c,), kind="param"), bshape)])
        return y

    def _dims(self, dim: Any, rank: int) -> list[int]:
        if dim is None:
            return list(range(rank))
        dims = sorted({int(d) % rank for d in (dim if isinstance(dim, (tuple, list)) else [dim])})
        if dims != list(range(dims[0], dims[-1] + 1)):
            raise Unsupported(f"reduction over non-adjacent dims {dims}")
        return dims

    def _view3(self, shape: Sequence[int], dims: list[int]) -> tuple[int, int, int]:
        return (math.prod(shape[:dims[0]]), math.prod(shape[dims[0]:dims[-1] + 1]), math.prod(shape[dims[-1] + 1:]))

    def _reduction_input(self, x: _Value) -> tuple[Buffer, tuple, list[Operand]]:
        """What a reduction or norm reads for `x`: (the tensor walked, read as `v`; the prologue, a pointwise
        expression fused into the load; its other operands). A pointwise expression over stored tensors
        is the prologue (x ** 2 before a mean, a loss before its mean), so it is never stored; otherwise x
        is materialised and the prologue is the identity (x stored already, pending on a stage's output,
        whose epilogue takes it, or without a full-shape operand to walk)."""
        pending = x.buffer is None and x.producer is None and x.strides is None and x.dtype == "float"
        full = [k for k, o in enumerate(x.operands)
                if broadcast_terms(o.shape, x.shape) == [(1, math.prod(x.shape), 1)]] if pending else []
        if not full:
            return self.materialise(x), V, []
        primary = x.operands[full[0]].buffer
        as_v = {k for k in full if x.operands[k].buffer.ref == primary.ref}
        kept = [k for k in range(len(x.operands)) if k not in as_v]

        def substitute(expr: tuple) -> tuple:
            if expr[0] == "op":
                return V if expr[1] in as_v else ("op", kept.index(expr[1]))
            if expr[0] == "f":
                return ("f", expr[1], *(substitute(a) for a in expr[2:]))
            return expr

        return primary, substitute(x.expr), [x.operands[k] for k in kept]

    def _reduce(self, x: _Value, op: str, dims: list[int], keepdim: bool, out_shape: tuple) -> _Value:
        outer, R, inner = self._view3(x.shape, dims)
        if op in ("argmax", "argmin"):
            xb = self.materialise(x)
            out = self._temp(out_shape, "int64")
            self._stage("argreduce", out, [xb], outer=outer, R=R, inner=inner, is_max=op == "argmax")
            return _Value(tuple(out_shape), ("op", 0), [Operand(out, out.shape)], buffer=out, dtype="int64")
        xb, prologue, prologue_operands = self._reduction_input(x)
        out = self._temp(out_shape)
        stage = self._stage("reduce", out, [xb] + [o.buffer for o in prologue_operands],
                            op="sum" if op == "mean" else op, outer=outer, R=R, inner=inner, in_shape=tuple(x.shape),
                            prologue=prologue, prologue_operands=prologue_operands)
        value = _Value(tuple(out_shape), V, [], producer=stage)
        if op == "mean":
            value = self.pointwise("mul", [value], consts=[1.0 / R])
        return value

    def _norm(self, x: _Value, kind: str, dims: list[int], eps: float, weight: str | None, bias: str | None,
              groups: int, div: int = 1, group_size: int = 0, prologue: tuple | None = None) -> _Value:
        """`prologue` (the expression and its operands over x's elements, from `_reduction_input`) is given
        by `_group_norm`, whose x is a row view of the tensor the prologue reads; otherwise it is found here."""
        if prologue is None:
            xb, *prologue = self._reduction_input(x)
        else:
            xb = x.buffer
        outer, R, inner = self._view3(x.shape, dims)
        if kind in ("layer_norm", "rms_norm") and inner != 1:
            raise Unsupported(f"{kind} over non-trailing dims")
        out = self._temp(xb.shape)
        inputs = [xb]
        refs = {}
        for label, ref in (("weight", weight), ("bias", bias)):
            if ref is not None:
                refs[label] = Buffer(ref, (0,), kind="param")
                inputs.append(refs[label])
        stage = self._stage("norm", out, inputs + [o.buffer for o in prologue[1]], op=kind, outer=outer, R=R,
                            inner=inner, eps=float(eps), weight=refs.get("weight"), bias=refs.get("bias"),
                            aff_groups=groups, aff_group_size=group_size, aff_div=div, in_shape=tuple(x.shape),
                            prologue=prologue[0], prologue_operands=prologue[1])
        return _Value(tuple(xb.shape), V, [], producer=stage)

    def _group_norm(self, x: _Value, groups: int, eps: float, weight: str | None, bias: str | None) -> _Value:
        shape = x.shape
        c = shape[1]
        spatial = math.prod(shape[2:])
        if c % groups:
            raise Unsupported("group norm channels not divisible by groups")
        # rows (n, g) of length (C/G) * spatial; the affine index is g * (C/G) + r / spatial
        xb, *prologue = self._reduction_input(x)
        rows = (shape[0] * groups, (c // groups) * spatial)
        view = _Value(rows, ("op", 0), [], buffer=Buffer(xb.ref, rows, xb.dtype, xb.kind))
        value = self._norm(view, "layer_norm", [1], eps, weight, bias, groups=groups, div=spatial,
                           group_size=c // groups, prologue=prologue)
        stage = value.producer
        stage.out.shape = tuple(shape)
        value.shape = tuple(shape)
        return value

    # ---- functions and methods
    def _function(self, node: Any, name: str, args: list, kwargs: dict, out_shape: tuple | None,
                  method: bool, meta_value: Any = None) -> Any:
        x = args[0] if args else None
        if name in _VIEWS or name in ("flatten",):
            return self._view(x, out_shape)
        if name in ("clone", "detach"):
            return x  # values are immutable here; an output that is an input is copied anyway
        if name == "norm":
            p = kwargs.get("p", args[1] if len(args) > 1 else "fro")
            dim = kwargs.get("dim", args[2] if len(args) > 2 else None)
            keepdim = kwargs.get("keepdim", args[3] if len(args) > 3 else False)
            if p not in ("fro", 2, 2.0, None) or kwargs.get("dtype") is not None:
                raise Unsupported(f"norm with p={p}")
            squares = self.pointwise("square", [x])
            total = self._reduce(squares, "sum", self._dims(dim, len(x.shape)), keepdim, out_shape)
            return self.pointwise("sqrt", [total])
        if name in ("t", "transpose", "permute") or (name == "T"):
            return self._transpose(x, name, args[1:], out_shape)
        if name in ("size", "dim", "numel"):
            raise Unsupported(f"{name} used as a tensor")
        if name in ("matmul", "mm", "bmm", "mv"):
            return self._matmul(args[0], args[1], out_shape)
        if name == "linear":
            w = self.materialise(args[1])
            bias = kwargs.get("bias", args[2] if len(args) > 2 else None)
            return self._linear(x, w, self.materialise(bias) if bias is not None else None, out_shape)
        if name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout", "alpha_dropout"):
            training = kwargs.get("training", args[2] if len(args) > 2 else (not method))
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            if training and p > 0:
                raise Unsupported("dropout in training mode")
            return x
        if name in ("softmax", "log_softmax"):
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if dim is None:
                raise Unsupported(f"{name} without dim")
            return self._norm(x, name, [int(dim) % len(x.shape)], 0.0, None, None, groups=1)
        if name == "layer_norm":
            normalized = args[1] if len(args) > 1 else kwargs["normalized_shape"]
            weight = kwargs.get("weight", args[2] if len(args) > 2 else None)
            bias = kwargs.get("bias", args[3] if len(args) > 3 else None)
            eps = kwargs.get("eps", args[4] if len(args) > 4 else 1e-5)
            nd = len(normalized) if isinstance(normalized, (tuple, list)) else 1
            wref = self.materialise(weight).ref if isinstance(weight, _Value) else None
            bref = self.materialise(bias).ref if isinstance(bias, _Value) else None
            return self._norm(x, "layer_norm", list(range(len(x.shape) - nd, len(x.shape))), eps, wref, bref, 1)
        if name in _REDUCTIONS and (name not in ("max", "min") or len(args) < 2 or not isinstance(args[1], _Value)):
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            if name in ("max", "min") and dim is not None:
                # torch.max(x, dim) returns (values, indices)
                values = self._reduce(x, name, self._dims(dim, len(x.shape)), keepdim, tuple(meta_value[0].shape))
                indices = self._reduce(x, "arg" + name, self._dims(dim, len(x.shape)), keepdim, values.shape)
                return (values, indices)
            if kwargs.get("dtype") is not None:
                raise Unsupported(f"{name} with dtype")
            return self._reduce(x, _REDUCTIONS[name], self._dims(dim, len(x.shape)), keepdim, out_shape)
        if name in ("max", "min"):  # binary max/min
            return self.pointwise("maximum" if name == "max" else "minimum", args[:2])
        if name in _UNARY:
            return self.pointwise(_UNARY[name], [x])
        if name in _BINARY or name in ("add", "sub", "mul", "div", "pow", "rsub"):
            a, b = args[0], args[1] if len(args) > 1 else kwargs.get("other", kwargs.get("exponent"))
            alpha = kwargs.get("alpha", 1)
            if kwargs.get("rounding_mode") is not None:
                raise Unsupported("div with rounding_mode")
            if name == "pow" and not isinstance(b, _Value) and float(b) == 2.0:
                return self.pointwise("square", [a])
            if name == "rsub":
                a, b = b, a
                return self.pointwise("sub", [a, b])
            if alpha != 1:
                b = self.pointwise("mul", [b], [alpha]) if isinstance(b, _Value) else b * alpha
            return self.pointwise(_BINARY.get(name, name), [a, b])
        if name == "gelu":
            approx = kwargs.get("approximate", "none")
            return self.pointwise("gelu_tanh" if approx == "tanh" else "gelu", [x])
        if name in ("relu6",):
            return self.pointwise("clamp", [x], [0.0, 6.0])
        if name in ("leaky_relu",):
            return self.pointwise("leaky_relu", [x], [kwargs.get("negative_slope", args[1] if len(args) > 1 else 0.01)])
        if name == "elu":
            return self.pointwise("elu", [x], [kwargs.get("alpha", args[1] if len(args) > 1 else 1.0)])
        if name == "softplus":
            return self.pointwise("softplus", [x], [kwargs.get("beta", args[1] if len(args) > 1 else 1.0),
                                                    kwargs.get("threshold", args[2] if len(args) > 2 else 20.0)])
        if name in ("hardtanh",):
            return self.pointwise("clamp", [x], [kwargs.get("min_val", args[1] if len(args) > 1 else -1.0),
                                                 kwargs.get("max_val", args[2] if len(args) > 2 else 1.0)])
        if name in ("clamp", "clip", "clamp_min", "clamp_max"):
            lo = kwargs.get("min", args[1] if len(args) > 1 and name != "clamp_max" else None)
            hi = kwargs.get("max", args[2] if len(args) > 2 else (args[1] if name == "clamp_max" and len(args) > 1
                                                                   else None))
            if isinstance(lo, _Value) or isinstance(hi, _Value):
                raise Unsupported("clamp with tensor bounds")
            return self.pointwise("clamp", [x], [-math.inf if lo is None else lo, math.inf if hi is None else hi])
        if name in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d"):
            is_max = name.startswith("max")
            kernel = kwargs.get("kernel_size", args[1] if len(args) > 1 else None)
            stride = kwargs.get("stride", args[2] if len(args) > 2 else None)
            padding = kwargs.get("padding", args[3] if len(args) > 3 else 0)
            if is_max:
                dilation = kwargs.get("dilation", args[4] if len(args) > 4 else 1)
                ceil = kwargs.get("ceil_mode", args[5] if len(args) > 5 else False)
                if kwargs.get("return_indices"):
                    raise Unsupported("return_indices")
                return self._pool(x, True, kernel, stride, padding, dilation, ceil, False, out_shape)
            ceil = kwargs.get("ceil_mode", args[4] if len(args) > 4 else False)
            include = kwargs.get("count_include_pad", args[5] if len(args) > 5 else True)
            if kwargs.get("divisor_override"):
                raise Unsupported("divisor_override")
            return self._pool(x, False, kernel, stride, padding, 1, ceil, include, out_shape)
        if name in ("adaptive_avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool3d"):
            size = args[1] if len(args) > 1 else kwargs["output_size"]
            sizes = size if isinstance(size, (tuple, list)) else (size,)
            if any(s != 1 for s in sizes):
                raise Unsupported("adaptive pooling to a size other than 1")
            return self._reduce(x, "mean", list(range(2, len(x.shape))), True, out_shape)
        if name == "smooth_l1_loss" or name == "mse_loss" or name == "l1_loss":
            reduction = kwargs.get("reduction", "mean")
            if reduction not in ("mean", "sum"):
                raise Unsupported(f"{name} with reduction={reduction}")
            diff = self.pointwise("sub", [args[0], args[1]])
            if name == "mse_loss":
                elem = self.pointwise("square", [diff])
            elif name == "l1_loss":
                elem = self.pointwise("abs", [diff])
            else:
                elem = self.pointwise("smooth_l1", [diff], [float(kwargs.get("beta", 1.0))])
            return self._reduce(elem, reduction, list(range(len(elem.shape))), False, out_shape)
        target = f"{'method ' if method else ''}{name}"
        raise Unsupported(f"{target} (node {node.name})")

    def _view(self, x: _Value, out_shape: tuple) -> _Value:
        if x.strides is not None:
            raise Unsupported("view of a transposed tensor")
        buf = self.materialise(x)
        if math.prod(out_shape) != buf.numel:
            raise Unsupported("view changes the element count")
        view = Buffer(buf.ref, tuple(out_shape), buf.dtype, buf.kind)
        return _Value(tuple(out_shape), ("op", 0), [Operand(view, tuple(out_shape))], buffer=view, dtype=buf.dtype)

    def _transpose(self, x: _Value, name: str, dims: Sequence[Any], out_shape: tuple) -> _Value:
        buf = self.materialise(x)
        rank = len(buf.shape)
        strides = [1] * rank
        for d in range(rank - 2, -1, -1):
            strides[d] = strides[d + 1] * buf.shape[d + 1]
        perm = list(range(rank))
        if name == "t" or name == "T":
            perm = perm[::-1]
        elif name == "transpose":
            a, b = (int(d) % rank for d in dims[:2])
            perm[a], perm[b] = perm[b], perm[a]
        else:
            perm = [int(d) % rank for d in (dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims)]
        if perm[:-2] != list(range(rank - 2)):
            raise Unsupported("permutation of batch dims")
        value = _Value(tuple(out_shape), ("op", 0), [], buffer=buf, strides=tuple(strides[p] for p in perm))
        return value


def trace_task(task: Any, backend: str) -> tuple[Any, Any, dict[Any, Any]]:
    """(module on meta, fx graph, {node: meta value}) for the task's Model at the backend's sizes."""
    import torch
    import torch.fx

    namespace = task.namespace(backend)
    with torch.device("meta"):
        init = namespace["get_init_inputs"]()
        model = namespace["Model"](*init)
        inputs = namespace["get_inputs"]()
    model = model.eval()
    try:
        graph_module = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 - any tracing failure means "not covered"
        raise Unsupported(f"torch.fx cannot trace the model: {type(exc).__name__}: {str(exc)[:200]}") from None
    meta: dict[Any, Any] = {}

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n):  # noqa: D401 - fx hook
            result = super().run_node(n)
            meta[n] = result
            return result

    if any(not isinstance(t, torch.Tensor) for t in inputs):
        raise Unsupported("get_inputs() returns something other than tensors")
    try:
        with torch.no_grad():
            _Recorder(graph_module).run(*inputs)
    except Exception as exc:  # noqa: BLE001
        raise Unsupported(f"the traced graph does not run on meta tensors: {type(exc).__name__}: "
                          f"{str(exc)[:200]}") from None
    return graph_module, graph_module.graph, meta


def plan_task(task: Any, backend: str) -> Plan:
    """The template plan for `task` on `backend` ("cuda" or "cpu"); raises Unsupported with the reason."""
    if backend not in ("cuda", "cpu"):
        raise ValueError(f"backend must be 'cuda' or 'cpu', got {backend!r}")
    module, graph, meta = trace_task(task, backend)
    return _Tracer(task.id, backend, task.source, module).run(graph, meta)


# ------------------------------------------------------------------------------------ knobs
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


# ------------------------------------------------------------------------------------ rendering
def _operand_code(operands: list[Operand], out_shape: tuple[int, ...], index: str) -> tuple[list[str], list[str],
                                                                                            list[str]]:
    """(functor fields, per-element load lines, operand value names) for an expression's operands."""
    fields, loads, names = [], [], []
    for k, op in enumerate(operands):
        fields.append(f"const float* p{k};")
        names.append(f"a{k}")
        loads.append(f"const float a{k} = p{k}[{_index_code(op.shape, out_shape, index)}];")
    return fields, loads, names


def _epilogue_functor(name: str, expr: tuple, operands: list[Operand], out_shape: tuple[int, ...]) -> str:
    if expr == V and not operands:
        return f"typedef CgIdentity {name};\n"
    fields, loads, names = _operand_code(operands, out_shape, "i")
    body = "\n        ".join(loads)
    return (f"struct {name} {{\n    {' '.join(fields)}\n"
            f"    CG_FN float operator()(float v, int64_t i) const {{\n        {body}\n"
            f"        return {expr_to_c(expr, names)};\n    }}\n}};\n")


def _elementwise_functor(name: str, expr: tuple, operands: list[Operand], out_shape: tuple[int, ...]) -> str:
    fields = [f"const float* p{k};" for k in range(len(operands))]
    vector_loads, per_element = [], []
    names = []
    total = math.prod(out_shape)
    for k, op in enumerate(operands):
        names.append(f"a{k}")
        if broadcast_terms(op.shape, out_shape) == [(1, total, 1)]:
            vector_loads.append(f"float f{k}[V]; cg_load<V>(p{k} + i, f{k});")
            per_element.append(f"const float a{k} = f{k}[j];")
        else:
            per_element.append(f"const float a{k} = p{k}[{_index_code(op.shape, out_shape, '(i + j)')}];")
    return (f"struct {name} {{\n    {' '.join(fields)}\n"
            f"    template <int V> CG_FN void run(int64_t i, float (&out)[V]) const {{\n"
            f"        {' '.join(vector_loads)}\n"
            f"#pragma unroll\n        for (int j = 0; j < V; ++j) {{\n            {' '.join(per_element)}\n"
            f"            out[j] = {expr_to_c(expr, names)};\n        }}\n    }}\n}};\n")


def _full_operands(operands: list[Operand], out_shape: tuple[int, ...]) -> list[int]:
    total = math.prod(out_shape)
    return [k for k, o in enumerate(operands) if broadcast_terms(o.shape, out_shape) == [(1, total, 1)]]


@dataclass
class _Launch:
    function: str               # extern "C" name
    prototype: str              # for load_kernels
    args: list[str]             # Python expressions passed in forward
    code: str                   # C++ of the functor(s) and the launcher


def _split_epilogue(stage: Stage, fuse: bool) -> tuple[Stage, Stage | None]:
    """With fusion off, a producer keeps the identity epilogue and an elementwise stage applies the tail."""
    if fuse or stage.kind == "elementwise" or (stage.epilogue == V and not stage.operands):
        return stage, None
    raw = Buffer(stage.out.ref + "_raw", stage.out.shape, stage.out.dtype)
    head = Stage(stage.kind, stage.name, raw, stage.inputs, stage.params)
    operands = list(stage.operands) + [Operand(raw, raw.shape)]
    tail = Stage("elementwise", stage.name + "e", stage.out, [o.buffer for o in operands], {},
                 _replace_v(stage.epilogue, ("op", len(stage.operands))), operands)
    return head, tail


_POOL_GEOMETRY = ("d", "h", "w", "od", "oh", "ow", "kd", "kh", "kw", "sd", "sh", "sw", "pd", "ph", "pw", "dd", "dh", "dw")


def _conv_shape_init(shape: dict[str, int]) -> str:
    order = ["n", "c", "oc", "groups", *_POOL_GEOMETRY]  # CgConvShape's field order
    return "{" + ", ".join(f"{int(shape[k])}LL" for k in order) + "}"


def _prologue_parts(stage: Stage) -> tuple[str, str, list[str], str]:
    """A reduction's or norm's prologue as rendered: (its functor's code, the launcher's extra
    parameters, their arguments in forward, the line that builds `pro`)."""
    p = stage.params
    operands = p["prologue_operands"]
    code = _epilogue_functor(f"Pro_{stage.name}", p["prologue"], operands, p["in_shape"])
    params = "".join(f", const float* q{k}" for k in range(len(operands)))
    build = f"Pro_{stage.name} pro{{{', '.join(f'q{k}' for k in range(len(operands)))}}};"
    return code, params, [o.buffer.ref for o in operands], build


def _render_stage(stage: Stage, knobs: dict[str, Any], backend: str) -> _Launch:
    cuda = backend == "cuda"
    stream_param = ", cudaStream_t stream" if cuda else ""
    stream_arg = ", stream" if cuda else ""
    name = stage.name
    out = stage.out
    epi_name = f"Epi_{name}"
    operands = stage.operands
    op_params = "".join(f", const float* e{k}" for k in range(len(operands)))
    op_init = ", ".join(f"e{k}" for k in range(len(operands)))
    op_args = [o.buffer.ref for o in operands]
    functor = f"{epi_name} epi{{{op_init}}};" if (stage.epilogue != V or operands) else f"{epi_name} epi{{}};"

    if stage.kind == "elementwise":
        code = _elementwise_functor(f"Ew_{name}", stage.epilogue, operands, out.shape)
        full = _full_operands(operands, out.shape)
        if cuda:
            vec = knobs["ew_vec"]
            aligned = "cg_aligned({" + ", ".join(["y"] + [f"e{k}" for k in full]) + f"}}, {4 * vec})"
            call = (f"return cg_elementwise<{knobs['ew_block']}, {knobs['ew_items']}, {vec}>(y, {out.numel}LL, f, "
                    f"{aligned}, stream);")
        else:
            call = f"return cg_elementwise<{knobs['ew_grain']}, {knobs['ew_vec']}>(y, {out.numel}LL, f);"
        code += (f'extern "C" int {name}(float* y{op_params}{stream_param}) {{\n'
                 f"    Ew_{name} f{{{op_init}}};\n    {call}\n}}\n")
        proto = f"int {name}(float* y{op_params}{stream_param})"
        return _Launch(name, proto, [out.ref] + op_args, code)

    code = _epilogue_functor(epi_name, stage.epilogue, operands, out.shape)
    p = stage.params
    if stage.kind == "gemm":
        (sab, sam, sak), (sbb, sbk, sbn) = p["a_strides"], p["b_strides"]
        dims = f"{p['batch']}LL, {p['M']}LL, {p['N']}LL, {p['K']}LL, {sab}LL, {sam}LL, {sak}LL, {sbb}LL, {sbk}LL, {sbn}LL"
        if cuda and knobs["gemm_impl"] == "cublas":
            identity = "true" if stage.epilogue == V and not operands else "false"
            call = f"cg_gemm_cublas<256, {identity}>(a, b, y, {dims}, epi, stream)"
        elif cuda:
            call = (f"cg_gemm<{knobs['tile_m']}, {knobs['tile_n']}, {knobs['tile_k']}, {knobs['thread_m']}, "
                    f"{knobs['thread_n']}>(a, b, y, {dims}, epi, stream)")
        else:
            call = f"cg_gemm<{knobs['gemm_mc']}, {knobs['gemm_nc']}, {knobs['gemm_kc']}>(a, b, y, {dims}, epi)"
        sig = f"const float* a, const float* b, float* y{op_params}{stream_param}"
        args = [stage.inputs[0].ref, stage.inputs[1].ref, out.ref]
    elif stage.kind in ("conv", "conv_direct", "conv_transpose", "pool"):
        shape = f"const CgConvShape shape = {_conv_shape_init(p['shape'])};"
        if stage.kind == "conv":
            tmpl = (f"<{knobs['tile_m']}, {knobs['tile_n']}, {knobs['tile_k']}, {knobs['thread_m']}, "
                    f"{knobs['thread_n']}>" if cuda else "")
            call = f"cg_conv{tmpl}(x, w, y, shape, epi{stream_arg})"
        elif stage.kind == "conv_direct":  # the CPU's cg_conv is direct already
            call = (f"cg_conv_direct<{knobs['direct_block']}>(x, w, y, shape, epi, stream)" if cuda
                    else "cg_conv(x, w, y, shape, epi)")
        elif stage.kind == "conv_transpose":
            tmpl = f"<{knobs['direct_block']}>" if cuda else ""
            call = f"cg_conv_transpose{tmpl}(x, w, y, shape, epi{stream_arg})"
        else:
            is_max = "true" if p["is_max"] else "false"
            if cuda:  # the plane's geometry as compile-time constants (conv.cuh, cg_pool)
                fields = ", ".join(f"{k} = {int(p['shape'][k])}" for k in _POOL_GEOMETRY)
                code += f"struct Pool_{name} {{ static constexpr int {fields}; }};\n"
            tmpl = f"<{knobs['direct_block']}, {is_max}, Pool_{name}>" if cuda else f"<{is_max}>"
            include = "true" if p["count_include_pad"] else "false"
            call = f"cg_pool{tmpl}(x, y, shape, {include}, epi{stream_arg})"
        if cuda and stage.kind in CUDNN_KINDS and knobs.get("conv_impl") == "cudnn":
            # cuDNN first; the template kernel above where cuDNN refuses the shape
            identity = "true" if stage.epilogue == V and not operands else "false"
            library = "cg_conv_transpose_cudnn" if stage.kind == "conv_transpose" else "cg_conv_cudnn"
            call = (f"cg_cudnn_or({library}<256, {identity}>(x, w, y, shape, epi, stream), "
                    f"[&] {{ return {call}; }})")
        if stage.kind == "pool":
            sig = f"const float* x, float* y{op_params}{stream_param}"
            args = [stage.inputs[0].ref, out.ref]
        else:
            sig = f"const float* x, const float* w, float* y{op_params}{stream_param}"
            args = [stage.inputs[0].ref, stage.inputs[1].ref, out.ref]
        functor = shape + "\n    " + functor
    elif stage.kind == "reduce":
        kind = {"sum": "CG_SUM", "max": "CG_MAX", "min": "CG_MIN", "prod": "CG_PROD", "logsumexp": "CG_LOGSUMEXP"}[p["op"]]
        tmpl = f"<{knobs['red_block']}, {knobs['red_vec']}, {kind}>" if cuda else f"<{knobs['red_rows']}, {kind}>"
        pro_code, pro_params, pro_args, pro_build = _prologue_parts(stage)
        code += pro_code
        call = f"cg_reduce{tmpl}(x, y, {p['outer']}LL, {p['R']}LL, {p['inner']}LL, pro, epi{stream_arg})"
        sig = f"const float* x, float* y{pro_params}{op_params}{stream_param}"
        args = [stage.inputs[0].ref, out.ref] + pro_args
        functor = pro_build + "\n    " + functor
    elif stage.kind == "argreduce":
        is_max = "true" if p["is_max"] else "false"
        tmpl = f"<{knobs['red_block']}, {is_max}>" if cuda else f"<{knobs['red_rows']}, {is_max}>"
        call = f"cg_argreduce{tmpl}(x, y, {p['outer']}LL, {p['R']}LL, {p['inner']}LL{stream_arg})"
        sig = f"const float* x, int64_t* y{stream_param}"
        args = [stage.inputs[0].ref, out.ref]
        code, functor = "", ""
    elif stage.kind == "norm":
        kind = {"softmax": "CG_SOFTMAX", "log_softmax": "CG_LOG_SOFTMAX", "layer_norm": "CG_LAYER_NORM",
                "rms_norm": "CG_RMS_NORM"}[p["op"]]
        tmpl = f"<{knobs['red_block']}, {knobs['red_vec']}, {kind}>" if cuda else f"<{knobs['red_rows']}, {kind}>"
        g = "g" if p["weight"] is not None else "nullptr"
        b = "bt" if p["bias"] is not None else "nullptr"
        aff = f"CgAffine aff{{{g}, {b}, {p['aff_groups']}LL, {p['aff_group_size']}LL, {p['aff_div']}LL}};"
        pro_code, pro_params, pro_args, pro_build = _prologue_parts(stage)
        code += pro_code
        call = (f"cg_normalize{tmpl}(x, y, {p['outer']}LL, {p['R']}LL, {p['inner']}LL, {p['eps']!r}f, aff, "
                f"pro, epi{stream_arg})")
        sig = ("const float* x, float* y, const float* g, const float* bt"
               f"{pro_params}{op_params}{stream_param}")
        args = [stage.inputs[0].ref, out.ref, p["weight"].ref if p["weight"] is not None else "None",
                p["bias"].ref if p["bias"] is not None else "None"] + pro_args
        functor = aff + "\n    " + pro_build + "\n    " + functor
    else:  # pragma: no cover - the tracer makes no other kind
        raise AssertionError(stage.kind)
    code += f'extern "C" int {name}({sig}) {{\n    {functor}\n    return {call};\n}}\n'
    return _Launch(name, f"int {name}({sig})", args + op_args, code)


_CUDA_HEADERS = ["common.h", "elementwise.cuh", "reduce.cuh", "gemm.cuh", "conv.cuh"]
_CPU_HEADERS = ["common.h", "elementwise.hpp", "reduce.hpp", "gemm.hpp", "conv.hpp"]


def render_kernels(plan: Plan, knobs: dict[str, Any]) -> tuple[str, list[_Launch], bool, list[Stage]]:
    """(kernel source, launches, needs cuBLAS, stages as launched) for the plan under `knobs` (name -> value)."""
    fuse = bool(knobs.get("fuse_epilogue", 1))
    stages: list[Stage] = []
    for stage in plan.stages:
        head, tail = _split_epilogue(stage, fuse)
        stages.append(head)
        if tail is not None:
            stages.append(tail)
    launches = [_render_stage(s, knobs, plan.backend) for s in stages]
    cuda = plan.backend == "cuda"
    cublas = cuda and knobs.get("gemm_impl") == "cublas" and any(s.kind == "gemm" for s in stages)
    headers = list(_CUDA_HEADERS if cuda else _CPU_HEADERS)
    if cublas:
        headers.append("gemm_cublas.cuh")
    if cuda and knobs.get("conv_impl") == "cudnn" and any(s.kind in CUDNN_KINDS for s in stages):
        headers.append("conv_cudnn.cuh")
    parts = [f"// generated by agents/template_agent.py for {plan.task_id} from csrc/templates"]
    if cuda:
        parts.append("#include <cuda_runtime.h>")
    parts += [f"// ---- {h}\n" + read_template(h) for h in headers]
    parts += [launch.code for launch in launches]
    return "\n".join(parts), launches, cublas, stages


def render_candidate(plan: Plan, knobs: dict[str, Any]) -> str:
    """The full candidate source: the reference's source, the kernels, and `class ModelNew(Model)`."""
    source, launches, cublas, stages = render_kernels(plan, knobs)
    cuda = plan.backend == "cuda"
    kwargs = []
    if cuda:
        kwargs.append("cuda=_CG_SOURCE")
        if cublas:
            kwargs.append('extra_ldflags=["-lcublas"]')
    else:
        kwargs.append("cpp=_CG_SOURCE")
        kwargs.append('extra_cflags=["-fopenmp", "-march=native"]')
        kwargs.append('extra_ldflags=["-fopenmp"]')
    protos = ",\n    ".join(repr(l.prototype) for l in launches)
    temps: dict[str, Buffer] = {}
    for stage in stages:
        if stage.out.ref not in temps:
            temps[stage.out.ref] = stage.out
    lines = [f"    def forward(self, {', '.join(plan.input_names)}):"]
    for buf in plan.inputs:
        lines.append(f"        if tuple({buf.ref}.shape) != {tuple(buf.shape)!r} or not {buf.ref}.is_contiguous():")
        lines.append(f"            raise ValueError('template candidate for {plan.task_id} expects a contiguous "
                     f"{buf.ref} of shape {tuple(buf.shape)}, got ' + str(tuple({buf.ref}.shape)))")
    device = plan.inputs[0].ref + ".device" if plan.inputs else "'cuda' if torch.cuda.is_available() else 'cpu'"
    allocated: set[str] = set()
    for launch, stage in zip(launches, stages):
        for ref, buf in temps.items():
            if ref in allocated or ref not in launch.args:
                continue
            dtype = "torch.int64" if buf.dtype == "int64" else "torch.float32"
            lines.append(f"        {ref} = torch.empty({tuple(buf.shape)!r}, device={device}, dtype={dtype})")
            allocated.add(ref)
        args = ", ".join(launch.args)
        lines.append(f"        _cg_check(_cg_lib.{launch.function}({args}), {launch.function!r})")
    returns = [f"{b.ref}.view({tuple(b.shape)!r})" for b in plan.outputs]
    ret = ", ".join(returns) + ("," if plan.output_is_tuple and len(returns) == 1 else "")
    lines.append(f"        return {'(' + ret + ')' if plan.output_is_tuple else ret}")
    header = (f"# Template candidate for {plan.task_id} ({plan.backend}), generated by agents/template_agent.py.\n"
              f"# Knobs: {knobs}\n# Stages: {', '.join(f'{s.name}:{s.kind}' for s in stages)}\n")
    return (header + plan.source.rstrip() + "\n\n\n# ---- template candidate ----\nimport torch as _cg_torch\n"
            "from cuda_gym.native import load_kernels as _cg_load_kernels\n\n"
            f"_CG_SOURCE = {source!r}\n\n"
            f"_cg_lib = _cg_load_kernels(\n    {', '.join(kwargs)},\n    functions=[\n    {protos}\n    ],\n)\n\n\n"
            "def _cg_check(err, name):\n    if err:\n        raise RuntimeError(f'template kernel {name} failed: "
            "error {err} (>= 20000: cuDNN status + 20000; >= 10000: cuBLAS status + 10000)')\n\n\n"
            "class ModelNew(Model):\n" + "\n".join(lines).replace("torch.", "_cg_torch.") + "\n")


# ------------------------------------------------------------------------------------ the agent
@dataclass
class Trial:
    """One evaluated configuration."""
    action: tuple[int, ...]
    knobs: dict[str, Any]
    result: Any                 # EvalResult


@dataclass
class TaskSolution:
    """What the agent found for one task: the best trial (correct first, then faster), all trials, or why none."""
    task_id: str
    level: int
    plan_error: str | None = None
    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    best_source: str | None = None


def _rank(result: Any) -> tuple:
    speed = result.speedup_vs_compile or result.speedup_vs_eager or 0.0
    return (bool(result.correct), speed)


@dataclass
class PendingSolution:
    """Configurations of one task handed to the evaluator (`TemplateAgent.submit`); `finish` collects them."""
    solution: TaskSolution
    plan: Plan | None = None
    space: KnobSpace | None = None
    futures: list[tuple[tuple[int, ...], dict[str, Any], str, Any]] = field(default_factory=list)


PolicyFactory = Callable[[Plan, Any, KnobSpace], Callable[[], Sequence[int]]]


class TemplateAgent:
    """Plans each task onto the templates and tunes its knobs: the default configuration first, then
    random configurations, or a trained SB3 policy's choices (`policy=`: a factory that, given the plan,
    task and knob space, returns a callable proposing one action), up to `budget` evaluations per task.
    Evaluations go through the given Evaluator (its build and baseline caches apply); `submit` queues a
    task's configurations without waiting, so many tasks' builds overlap."""

    def __init__(self, evaluator: Any, backend: str, *, seed: int = 0, eval_config: Any = None):
        if backend not in ("cuda", "cpu"):
            raise ValueError(f"backend must be 'cuda' or 'cpu', got {backend!r}")
        self.evaluator = evaluator
        self.backend = backend
        self.rng = random.Random(seed)
        self.eval_config = eval_config

    def configurations(self, space: KnobSpace, budget: int, propose: Callable[[], Sequence[int]] | None = None,
                       exclude: Sequence[tuple[int, ...]] = ()) -> list[tuple[int, ...]]:
        """Up to `budget` distinct valid actions not in `exclude`: the default first, then proposals
        (random ones without `propose`)."""
        seen = set(exclude)
        chosen: list[tuple[int, ...]] = []
        if space.default() not in seen:
            chosen.append(space.default())
            seen.add(space.default())
        limit = min(budget, space.size() - len(set(exclude)))
        attempts = 0
        while len(chosen) < limit and attempts < 50 * max(budget, 1):
            attempts += 1
            action = space.canonical(propose()) if propose is not None else space.sample(self.rng)
            if action not in seen:
                seen.add(action)
                chosen.append(action)
        return chosen

    def submit(self, task: Any, budget: int = 1, policy: PolicyFactory | None = None,
               previous: TaskSolution | None = None) -> PendingSolution:
        """Plan `task` and queue `budget` new configurations (beyond those `previous` already judged)."""
        solution = previous or TaskSolution(task.id, task.level)
        pending = PendingSolution(solution)
        if solution.plan_error is not None:
            return pending
        try:
            plan = plan_task(task, self.backend)
        except Unsupported as exc:
            solution.plan_error = str(exc)
            return pending
        except Exception as exc:  # noqa: BLE001 - a reference that fails to build or trace is not covered
            solution.plan_error = f"planning failed: {type(exc).__name__}: {str(exc)[:300]}"
            return pending
        space = KnobSpace.for_plan(plan)
        pending.plan, pending.space = plan, space
        propose = policy(plan, task, space) if policy is not None else None
        for action in self.configurations(space, budget, propose, exclude=[t.action for t in solution.trials]):
            knobs = space.values(action)
            source = render_candidate(plan, knobs)
            future = self.evaluator.submit(task, source, backend=self.backend, config=self.eval_config)
            pending.futures.append((action, knobs, source, future))
        return pending

    @staticmethod
    def finish(pending: PendingSolution) -> TaskSolution:
        """Wait for the queued configurations; keep the best (correct first, then fastest)."""
        solution = pending.solution
        for action, knobs, source, future in pending.futures:
            trial = Trial(action, knobs, future.result())
            solution.trials.append(trial)
            if solution.best is None or _rank(trial.result) > _rank(solution.best.result):
                solution.best, solution.best_source = trial, source
        pending.futures = []
        return solution

    def solve(self, task: Any, budget: int = 1, policy: PolicyFactory | None = None) -> TaskSolution:
        return self.finish(self.submit(task, budget, policy))


def sb3_policy(model_path: str, deterministic: bool = False) -> PolicyFactory:
    """A policy factory from a saved SB3 PPO / MaskablePPO model (agents/schedule_ppo.py trains them)."""
    from cuda_gym.envs.schedule_env import plan_features

    try:
        from sb3_contrib import MaskablePPO

        model = MaskablePPO.load(model_path, device="cpu")
        masked = True
    except Exception:  # noqa: BLE001 - not a MaskablePPO file: try plain PPO
        from stable_baselines3 import PPO

        model = PPO.load(model_path, device="cpu")
        masked = False

    trained_nvec = [int(n) for n in getattr(model.action_space, "nvec", [])]

    def check_space(space: KnobSpace) -> None:
        """Raises ValueError when the model was trained on another knob space than `space`."""
        if trained_nvec != list(space.nvec):
            raise ValueError(f"the SB3 model {model_path} acts on {len(trained_nvec)} knobs {trained_nvec}, but the "
                             f"knob space has {len(space.nvec)} {list(space.nvec)} "
                             f"({', '.join(k.name for k in space.knobs)}); it was trained on another knob space: "
                             "train a new one with agents/schedule_ppo.py")

    def factory(plan: Plan, task: Any, space: KnobSpace) -> Callable[[], Sequence[int]]:
        import numpy as np

        check_space(space)
        observation = plan_features(plan, task.level)
        mask = np.asarray(space.flat_mask(), dtype=bool)

        def propose() -> Sequence[int]:
            if masked:
                action, _ = model.predict(observation, deterministic=deterministic, action_masks=mask)
            else:
                action, _ = model.predict(observation, deterministic=deterministic)
            return [int(a) for a in action]

        return propose

    factory.trained_nvec = trained_nvec
    factory.check_space = check_space
    return factory
