"""A plan and its knob values -> the kernels' source and a candidate `ModelNew` that launches them."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .expressions import V, expr_to_c, _replace_v
from .knobs import CUDNN_KINDS
from .plan import Buffer, Operand, Plan, Stage, broadcast_terms, _index_code
from .templates import read_template


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
    parts = [f"// generated by cuda_gym/schedule/render.py for {plan.task_id} from csrc/templates"]
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
    header = (f"# Template candidate for {plan.task_id} ({plan.backend}), generated by cuda_gym/schedule/render.py.\n"
              f"# Knobs: {knobs}\n# Stages: {', '.join(f'{s.name}:{s.kind}' for s in stages)}\n")
    return (header + plan.source.rstrip() + "\n\n\n# ---- template candidate ----\nimport torch as _cg_torch\n"
            "from cuda_gym.native import load_kernels as _cg_load_kernels\n\n"
            f"_CG_SOURCE = {source!r}\n\n"
            f"_cg_lib = _cg_load_kernels(\n    {', '.join(kwargs)},\n    functions=[\n    {protos}\n    ],\n)\n\n\n"
            "def _cg_check(err, name):\n    if err:\n        raise RuntimeError(f'template kernel {name} failed: "
            "error {err} (>= 20000: cuDNN status + 20000; >= 10000: cuBLAS status + 10000)')\n\n\n"
            "class ModelNew(Model):\n" + "\n".join(lines).replace("torch.", "_cg_torch.") + "\n")
