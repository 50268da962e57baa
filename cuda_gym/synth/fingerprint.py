"""What a task program is, independent of how it is written: AST tokens, operator signature, hash.

- `model_tokens(source)`: the `Model` class as a sequence of AST node labels, with user-chosen names
  (locals, arguments, `self.<attr>`) renamed in order of first use and literal values reduced to
  their type: the input to AST similarity (`ast_similarity`).
- `operator_signature(source)`: the torch operators `Model.forward` applies, in evaluation order,
  each under one canonical name whatever its spelling (`nn.ReLU()` in `__init__`, `F.relu`,
  `torch.relu`, `x.relu()` are all "relu"; `torch.bmm`, `@`, `torch.matmul` are "matmul"); layout
  and view calls (view, reshape, transpose, ...) are left out.
- `normalized_hash(source)`: a hash of `Model`, `get_inputs` and `get_init_inputs` with names
  renamed and docstrings dropped but literal values kept; the size constants' values and the
  CUDA_GYM metadata are left out, so two tasks that differ only in sizes or naming hash the same.

Both KernelBench programs and synthesized tasks go through these same functions, so a match means
the same thing on both sides.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import re
from difflib import SequenceMatcher
from typing import Iterator, Sequence

API_ROOTS = frozenset({"torch", "nn", "F", "math", "transformers", "np", "numpy"})
LAYOUT_CALLS = frozenset({
    "view", "reshape", "flatten", "unflatten", "size", "contiguous", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "expand", "expand_as", "to", "float", "double", "half", "type", "dim", "numel", "chunk", "split",
    "unbind", "clone", "detach", "cpu", "cuda", "item", "tolist", "view_as", "reshape_as", "movedim",
    "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "arange", "tensor",
    "new_zeros", "new_ones", "new_empty", "new_full", "identity", "parameter", "sequential", "module_list",
    "module_dict",
})
ACRONYMS = (("PReLU", "Prelu"), ("RReLU", "Rrelu"), ("ReLU", "Relu"), ("SELU", "Selu"), ("CELU", "Celu"),
            ("GELU", "Gelu"), ("SiLU", "Silu"), ("ELU", "Elu"), ("GLU", "Glu"), ("RMS", "Rms"), ("LSTM", "Lstm"),
            ("GRU", "Gru"), ("RNN", "Rnn"), ("MSE", "Mse"), ("KL", "Kl"), ("NLL", "Nll"), ("BCE", "Bce"),
            ("CTC", "Ctc"), ("LP", "Lp"))
ALIASES = {"bmm": "matmul", "mm": "matmul", "amax": "max", "amin": "min", "upsample": "interpolate",
           "upsample_nearest2d": "interpolate", "upsample_bilinear2d": "interpolate", "clip": "clamp",
           "multiply": "mul", "divide": "div", "true_divide": "div", "subtract": "sub", "negative": "neg",
           "log_sigmoid": "logsigmoid", "vector_norm": "norm", "matrix_norm": "norm", "linalg_norm": "norm",
           "absolute": "abs"}
BINARY_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul",
              ast.Pow: "pow"}
_BUILTINS = frozenset(dir(builtins))


def canonical_op(name: str) -> str | None:
    """The canonical operator name of a module class or function name; None for layout calls."""
    for acronym, word in ACRONYMS:
        name = name.replace(acronym, word)
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().strip("_")
    snake = re.sub(r"_+", "_", snake)
    if snake.endswith("_") or name.endswith("_"):
        snake = snake.rstrip("_")  # in-place variants: relu_ is relu
    snake = re.sub(r"^(batch_norm|instance_norm)[123]d$", r"\1", snake)
    if snake.endswith("_loss"):
        snake = snake[: -len("_loss")]
    snake = ALIASES.get(snake, snake)
    return None if snake in LAYOUT_CALLS or not snake else snake


def _parse(source: str) -> ast.Module:
    return ast.parse(source)


def _model_class(tree: ast.Module) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return node
    return None


def _strip_docstrings(node: ast.AST) -> None:
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if (isinstance(child, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            child.body = body[1:] or [ast.Pass()]


class _Labeller:
    """AST node labels in pre-order, user names renamed in order of first use."""

    def __init__(self, keep_values: bool):
        self.keep_values = keep_values
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        if name in API_ROOTS or name in _BUILTINS or name == "self":
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def labels(self, node: ast.AST) -> Iterator[str]:
        if isinstance(node, (ast.expr_context, ast.Load, ast.Store, ast.Del)):
            return
        kind = type(node).__name__
        if isinstance(node, ast.Name):
            yield f"Name:{self._name(node.id)}"
            return
        if isinstance(node, ast.arg):
            yield f"arg:{self._name(node.arg)}"
            return
        if isinstance(node, ast.Constant):
            yield f"Const:{node.value!r}" if self.keep_values else f"Const:{type(node.value).__name__}"
            return
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                yield f"Attr:self.{self._name('self.' + node.attr)}"
                return
            yield f"Attr:{node.attr}"
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            yield f"{kind}:{node.name if node.name in ('__init__', 'forward', 'Model') else self._name(node.name)}"
        else:
            yield kind
        for child in ast.iter_child_nodes(node):
            yield from self.labels(child)


def model_tokens(source: str) -> list[str]:
    """The `Model` class as normalized AST labels (literal values as types); [] if there is no Model."""
    tree = _parse(source)
    model = _model_class(tree)
    if model is None:
        return []
    _strip_docstrings(model)
    return list(_Labeller(keep_values=False).labels(model))


def normalized_hash(source: str) -> str:
    """A hash of the program (Model, get_inputs, get_init_inputs) that ignores names, docstrings,
    comments, formatting, the size constants' values and the CUDA_GYM metadata."""
    tree = _parse(source)
    _strip_docstrings(tree)
    kept = [node for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))]
    labeller = _Labeller(keep_values=True)
    text = " ".join(label for node in kept for label in labeller.labels(node))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# -------------------------------------------------------------------------------------- signature
def _dotted(node: ast.AST) -> list[str] | None:
    """`torch.nn.functional.relu` as ["torch", "nn", "functional", "relu"]; None if not a plain chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _constructor_ops(call: ast.AST, lists: dict[str, list[str]]) -> list[str]:
    """The operators a module constructor in `__init__` stands for (nn.Sequential: its members,
    `nn.Sequential(*layers)`: what was appended to the local list `layers`)."""
    if isinstance(call, ast.Starred) and isinstance(call.value, ast.Name):
        return list(lists.get(call.value.id, []))
    if not isinstance(call, ast.Call):
        return []
    chain = _dotted(call.func)
    if chain is None:
        return []
    if chain[-1] in ("Sequential", "ModuleList"):
        members = []
        for arg in call.args:
            items = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
            for item in items:
                members.extend(_constructor_ops(item, lists))
        return members
    if chain[-1] == "Parameter" or not chain[-1][:1].isupper():
        return []
    op = canonical_op(chain[-1])
    return [op] if op else []


def _module_attrs(model: ast.ClassDef) -> dict[str, list[str]]:
    attrs: dict[str, list[str]] = {}
    for function in model.body:
        if not (isinstance(function, ast.FunctionDef) and function.name == "__init__"):
            continue
        nodes = sorted((n for n in ast.walk(function) if hasattr(n, "lineno")),
                       key=lambda n: (n.lineno, n.col_offset))
        lists: dict[str, list[str]] = {}
        for node in nodes:
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                    and isinstance(node.func.value, ast.Name) and node.args):
                lists.setdefault(node.func.value.id, []).extend(_constructor_ops(node.args[0], lists))
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        ops = _constructor_ops(node.value, lists)
                        if ops:
                            attrs[target.attr] = ops
    return attrs


def _is_shape_arithmetic(node: ast.AST) -> bool:
    """Integer bookkeeping such as `x.size(0) * 2` or `2 ** 0.5`: not a tensor operator."""
    for child in ast.walk(node):
        if isinstance(child, ast.Attribute) and child.attr in ("shape", "size", "ndim"):
            return True
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "len":
            return True
    return False


class _ForwardOps:
    """The operators of a forward body in evaluation order (arguments before the call)."""

    def __init__(self, modules: dict[str, list[str]]):
        self.modules = modules
        self.ops: list[str] = []

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.BinOp):
            self.visit(node.left)
            self.visit(node.right)
            op = BINARY_OPS.get(type(node.op))
            both_literal = isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant)
            if op and not both_literal and not _is_shape_arithmetic(node):
                self.ops.append(op)
        elif isinstance(node, ast.AugAssign):
            self.visit(node.value)
            op = BINARY_OPS.get(type(node.op))
            if op and not _is_shape_arithmetic(node):
                self.ops.append(op)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            self.visit(node.operand)
            if not isinstance(node.operand, ast.Constant):
                self.ops.append("neg")
        elif isinstance(node, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
            return
        else:
            for child in ast.iter_child_nodes(node):
                self.visit(child)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id == "self"):
            chain = _dotted(func)
            if chain is None or chain[0] not in API_ROOTS:
                self.visit(func.value)  # a method call: its receiver is computed first
        elif not isinstance(func, (ast.Name, ast.Attribute)):
            self.visit(func)
        for arg in node.args:
            self.visit(arg)
        for keyword in node.keywords:
            self.visit(keyword.value)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            self.ops.extend(self.modules.get(func.attr, []))
            return
        if isinstance(func, ast.Attribute):
            name = func.attr
        elif isinstance(func, ast.Name):
            if func.id in _BUILTINS:
                return
            name = func.id
        elif isinstance(func, ast.Call):  # nn.ReLU()(x): the constructor's op was recorded by visit(func)
            return
        else:
            return
        op = canonical_op(name)  # a function, a method, or a module built in forward (nn.ReLU())
        if op:
            self.ops.append(op)


def operator_signature(source: str) -> tuple[str, ...]:
    """The canonical torch operators of `Model.forward`, in evaluation order; () without a Model."""
    model = _model_class(_parse(source))
    if model is None:
        return ()
    walker = _ForwardOps(_module_attrs(model))
    for function in model.body:
        if isinstance(function, ast.FunctionDef) and function.name == "forward":
            for statement in function.body:
                walker.visit(statement)
    return tuple(walker.ops)


def sequence_similarity(a: Sequence[str], b: Sequence[str], threshold: float) -> float | None:
    """difflib's ratio of two label sequences if it reaches `threshold` (cheap upper bounds first), else None."""
    if not a or not b:
        return None
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    if matcher.real_quick_ratio() < threshold or matcher.quick_ratio() < threshold:
        return None
    ratio = matcher.ratio()
    return ratio if ratio >= threshold else None
