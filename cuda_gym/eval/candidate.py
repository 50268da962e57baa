"""Turning an action (text) into a `Candidate`: the Python source of a `ModelNew`.

Accepted: a bare Python file, or text that contains one fenced code block (```python ... ```), as
LLMs write it. Every candidate form is a Python source: the recommended fast form (kernels via
`cuda_gym.native.load_kernels`), KernelBench's form (`torch.utils.cpp_extension.load_inline`), and
CUDA Agent's multi-file layout (model_new.py + kernels/, `cuda_gym.extension`), which
`pack_workdir` packs into one source, so the evaluator judges and caches it like any other (its
hash covers every file).
"""
from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

MAX_CANDIDATE_CHARS = 200_000
# `import triton`, `import triton.language as tl`, `from triton import ...` at any indentation.
_IMPORTS_TRITON = re.compile(r"^\s*(?:import\s+triton\b|from\s+triton(?:\.[\w.]+)?\s+import\b)", re.M)
# `import cupy`, `import cupy as cp`, `from cupy import RawKernel`, `import cupyx` at any indentation.
_IMPORTS_CUPY = re.compile(r"^\s*(?:import\s+cupyx?\b|from\s+cupyx?(?:\.[\w.]+)?\s+import\b)", re.M)
# "cuda": the native forms (CUDA C++ on the GPU, C++ on the CPU backend); "triton": @triton.jit
# kernels; "cupy": CUDA C++ sources compiled by CuPy (NVRTC), on the GPU only.
LANGUAGES = ("cuda", "triton", "cupy")
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.S)


def uses_triton(source: str) -> bool:
    """Whether a candidate's source imports triton (its kernels are `@triton.jit` functions)."""
    return bool(_IMPORTS_TRITON.search(source))


def uses_cupy(source: str) -> bool:
    """Whether a candidate's source imports CuPy (its kernels are RawKernel / RawModule sources)."""
    return bool(_IMPORTS_CUPY.search(source))


class InvalidCandidate(ValueError):
    """The action is not a usable candidate; the message says how to fix it."""


@dataclass(frozen=True)
class Candidate:
    source: str

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:20]

    @property
    def language(self) -> str:
        """The kernel language: 'triton' where the source imports triton, 'cupy' where it imports CuPy,
        else 'cuda' (`LANGUAGES`)."""
        if uses_triton(self.source):
            return "triton"
        return "cupy" if uses_cupy(self.source) else "cuda"

    @property
    def form(self) -> str:
        """'multifile' (a packed workdir), 'triton' (@triton.jit kernels), 'native' (recommended fast
        form), 'load_inline' (KernelBench), 'cupy' (CuPy RawKernel / RawModule sources) or 'python'
        (no native code)."""
        if _PACKED_HEAD in self.source.partition("\n")[0]:
            return "multifile"
        if uses_triton(self.source):
            return "triton"
        if "load_kernels" in self.source:
            return "native"
        if "load_inline" in self.source or "cpp_extension" in self.source:
            return "load_inline"
        if uses_cupy(self.source):
            return "cupy"
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


# ------------------------------------------------------------------------------ multi-file
MODEL_FILE = "model_new.py"
_PACKED_HEAD = "from cuda_gym.extension import install_extension as _cuda_gym_install_extension; "
_PACKED_LINE = re.compile(r"^(.*?)" + re.escape(_PACKED_HEAD) + r"_cuda_gym_install_extension\((\{.*\})\); "
                          r"del _cuda_gym_install_extension$")


def pack_workdir(files: dict[str, str]) -> Candidate:
    """One candidate from a workdir's files: `model_new.py` plus `kernels/*` (see cuda_gym.extension).

    Without kernel files the candidate is model_new.py itself (the single-file forms; the same hash
    as sending it as text). With them, it is model_new.py preceded by ONE line that builds the
    kernels and installs `cuda_extension` (so model_new.py's line n is the candidate's line n + 1;
    `from __future__` imports are moved onto that line, their own lines left blank). Raises
    `InvalidCandidate` (no model_new.py, not Python, no ModelNew) or `cuda_gym.extension.ExtensionError`
    (a bad kernels/ layout), each with a message that says what to change.
    """
    from ..extension import check_files

    if MODEL_FILE not in files:
        raise InvalidCandidate(f"the workdir has no {MODEL_FILE}: write it (it defines class ModelNew)")
    model = files[MODEL_FILE]
    kernels = {name: text for name, text in files.items() if name.startswith("kernels/")}
    check = parse_candidate(model)  # syntax and ModelNew, with the same messages as a text action
    if check.source != model:
        raise InvalidCandidate(f"{MODEL_FILE} must be plain Python (no ``` fences)")
    if not kernels or set(kernels) == {"kernels/binding_registry.h"}:
        if re.search(r"^\s*(import|from)\s+cuda_extension\b", model, re.M):
            raise InvalidCandidate(f"{MODEL_FILE} imports cuda_extension, but kernels/ has no sources: write "
                                   "kernels/<name>.cu (cpu backend: .cpp) and kernels/<name>_binding.cpp")
        return check
    check_files(kernels)
    lines = model.splitlines(keepends=True)
    future = []
    for node in ast.parse(model).body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future.append("from __future__ import " + ", ".join(alias.name for alias in node.names) + "; ")
            for index in range(node.lineno - 1, node.end_lineno or node.lineno):
                lines[index] = "\n"
    packed = {name: kernels[name] for name in sorted(kernels)}
    head = "".join(future) + _PACKED_HEAD + f"_cuda_gym_install_extension({packed!r}); del _cuda_gym_install_extension\n"
    return Candidate(head + "".join(lines))


def unpack_files(candidate: Candidate | str) -> dict[str, str]:
    """The workdir files of a candidate: {"model_new.py": ..., "kernels/...": ...} for a packed
    workdir, {"model_new.py": source} for a single-file candidate. Inverse of `pack_workdir` up to
    the `from __future__` lines, which come back as a first line."""
    source = candidate.source if isinstance(candidate, Candidate) else candidate
    first, _, rest = source.partition("\n")
    match = _PACKED_LINE.match(first)
    if not match:
        return {MODEL_FILE: source}
    files = ast.literal_eval(match.group(2))
    future = match.group(1).replace("; ", "\n")
    return {MODEL_FILE: future + rest, **files}
