"""Turning an action (text) into a `Candidate`: the Python source of a `ModelNew`.

Accepted: a bare Python file, or text that contains one fenced code block (```python ... ```), as
LLMs write it. Both candidate forms are Python sources: the recommended fast form (kernels via
`cuda_gym.native.load_kernels`) and KernelBench's form (`torch.utils.cpp_extension.load_inline`).
"""
from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

MAX_CANDIDATE_CHARS = 200_000
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.S)


class InvalidCandidate(ValueError):
    """The action is not a usable candidate; the message says how to fix it."""


@dataclass(frozen=True)
class Candidate:
    source: str

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:20]

    @property
    def form(self) -> str:
        """'native' (recommended fast form), 'load_inline' (KernelBench) or 'python' (no native code)."""
        if "load_kernels" in self.source:
            return "native"
        if "load_inline" in self.source or "cpp_extension" in self.source:
            return "load_inline"
        return "python"


def parse_candidate(action: object) -> Candidate:
    """Extract and syntax-check a candidate; raises `InvalidCandidate` with an actionable message."""
    if isinstance(action, Candidate):
        return action
    if isinstance(action, bytes):
        action = action.decode("utf-8", errors="replace")
    if not isinstance(action, str):
        raise InvalidCandidate(f"the action must be a string of Python source, got {type(action).__name__}")
    if len(action) > MAX_CANDIDATE_CHARS:
        raise InvalidCandidate(f"the candidate is {len(action)} characters; the limit is {MAX_CANDIDATE_CHARS}")
    text = action
    blocks = _FENCE.findall(action)
    if blocks:
        with_model = [b for b in blocks if "class ModelNew" in b]
        text = (with_model or blocks)[-1]
    if not text.strip():
        raise InvalidCandidate("the candidate is empty: send the Python source of a `class ModelNew(nn.Module)`")
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise InvalidCandidate(f"the candidate is not valid Python: line {exc.lineno}: {exc.msg}") from None
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        raise InvalidCandidate(
            "the candidate defines no top-level `class ModelNew(nn.Module)`; define it with the same "
            "constructor arguments as the reference `Model`"
        )
    return Candidate(text)
