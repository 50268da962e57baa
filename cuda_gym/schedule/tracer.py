"""The tracer: torch.fx trace of a task's `Model` -> a `Plan` of csrc/ template stages (`plan_task`).

The reference is traced with `torch.fx.symbolic_trace` and run on meta tensors
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
"""
from __future__ import annotations

import math
import operator
from typing import Any, Sequence

from .expressions import V, _replace_v, _shift, _uses_v
from .plan import Buffer, Operand, Plan, Stage, broadcast_terms, _Value, _broadcast_shape
from .templates import Unsupported


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
