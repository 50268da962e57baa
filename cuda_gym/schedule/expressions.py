"""Pointwise expressions as tuple trees, and their C code.

An expression is a tuple tree: ("v",) the producing stage's value; ("op", k) operand k; ("c", x) a
constant; ("f", name, *args) a function of common.h or a C operator; names in _FUNCTIONS.
"""
from __future__ import annotations

import math
from typing import Sequence

V = ("v",)  # the producing stage's value

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
