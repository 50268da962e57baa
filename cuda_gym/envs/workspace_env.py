"""`WorkspaceEnv`: CUDA Agent's workspace as a tool-calling Gymnasium environment (docs/workspace.md).

One episode = one task and its own workdir on disk, holding the reference `model.py`, the workflow
guide `GUIDE.md`, the fixed binding registry `kernels/binding_registry.h` and the files the agent
writes (`model_new.py`, `kernels/*.cu`, `kernels/*_binding.cpp`; on the cpu backend `kernels/*.cpp`).
An action is ONE tool call as JSON text, `{"name": ..., "arguments": {...}}` (arguments may also be
a JSON string, as OpenAI-compatible servers send them); the observation is the tool's result.

Tools (`tool_schemas` gives them as OpenAI function schemas): list_files, read_file(path),
write_file(path, content), edit_file(path, old, new), compile, verify, profile, submit. The four
judging tools pack the workdir into one candidate (`cuda_gym.eval.candidate.pack_workdir`) and ask
the environment's `Evaluator`, so a workdir is judged like any candidate (same policy, sandbox,
build cache):

| tool | evaluation (KernelEnv command) | reward (per_step mode) |
| compile | build + import, minimal check (compile) | 0 if it builds, else the failure reward |
| verify | build + every correctness draw (check) | reward(result) |
| profile | full evaluation (eval) + per-kernel device times | reward(result) |
| submit | full evaluation (submit); ends the episode | reward(result) |

A bad call never raises: malformed JSON, an unknown tool or wrong arguments get the verdict
INVALID_ACTION, a call that fails (a path outside the workdir, a missing file, a read-only file, a
size limit, an `old` text that is not in the file exactly once) gets TOOL_ERROR, each with a result
that says what to do instead; file tools that work get TOOL_OK. Every call is a turn.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

from ..eval.candidate import Candidate, InvalidCandidate, pack_workdir
from ..eval.config import EvalConfig
from ..eval.logs import trim_compile_log
from ..eval.result import ErrorCode, EvalResult, TimingStats
from ..extension import BINDING_REGISTRY_H, REGISTRY_HEADER, ExtensionError
from ..tasks.task import Task
from . import prompt as prompt_text
from .kernel_env import KernelEnv

# tool -> the KernelEnv command whose evaluation settings (and reward bookkeeping) it uses
JUDGING_TOOLS = {"compile": "compile", "verify": "check", "profile": "eval", "submit": "submit"}
FILE_TOOLS = ("list_files", "read_file", "write_file", "edit_file")
READ_ONLY_FILES = ("model.py", "GUIDE.md", REGISTRY_HEADER)
TOOL_OK, TOOL_ERROR = "TOOL_OK", "TOOL_ERROR"
_BUILD_DIR = re.compile(r"(?:/[^\s:'\"()<>]+)*/cg_ext_[0-9a-f]+/")
_CANDIDATE_LINE = re.compile(r'"candidate\.py", line (\d+)')


def _schema(name: str, description: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    properties = properties or {}
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(properties),
                       "additionalProperties": False}}}


_PATH = {"type": "string", "description": "A path relative to the workdir, e.g. 'model_new.py' or 'kernels/softmax.cu'."}
TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema("list_files", "List the workdir's files with their sizes; (read-only) marks the fixed ones."),
    _schema("read_file", "Return the text of one workdir file.", {"path": _PATH}),
    _schema("write_file", "Create or overwrite a workdir file with `content` (folders are created).",
            {"path": _PATH, "content": {"type": "string", "description": "The whole new text of the file."}}),
    _schema("edit_file", "Replace the text `old`, which must occur exactly once in the file, by `new`.",
            {"path": _PATH, "old": {"type": "string", "description": "The exact text to replace (unique in the file)."},
             "new": {"type": "string", "description": "The replacement text."}}),
    _schema("compile", "Build model_new.py and kernels/ and import ModelNew: reports compiler or import errors only."),
    _schema("verify", "Build, then check ModelNew against the reference on every input draw: the verdict and "
                      "each draw's errors, and one rough time."),
    _schema("profile", "Time the candidate against PyTorch eager and torch.compile (full evaluation) and report the "
                       "device time per kernel of the reference (eager and torch.compile) and of the candidate. "
                       "Without model_new.py it profiles the reference only. Per-kernel times need the CUDA backend."),
    _schema("submit", "Judge the workdir as your final answer (full evaluation) and end the episode."),
]

_GUIDE = """\
# Workflow guide

You work in a workdir through tool calls (one per turn). Files:
  model.py                      the reference program (read-only)
  GUIDE.md                      this guide (read-only)
  kernels/binding_registry.h    the fixed binding registry (read-only)
  model_new.py                  you write it: class ModelNew, same constructor arguments as Model
  kernels/<name>{kernel_suffix}
  kernels/<name>_binding.cpp    the entry points model_new.py calls, registered with REGISTER_BINDING
  kernels/*.h / *.cuh / *.hpp   headers your sources include (optional)

## Steps
1. Read model.py. Call `profile` before writing anything: it shows which of the reference's kernels
   take the time (on the CUDA backend) and the eager / torch.compile times to beat.
2. Write the kernels, their bindings and model_new.py (layout below), then `compile` until it builds.
3. `verify` until the verdict is OK on every input draw. A fast but wrong kernel is worth nothing.
4. `profile` to see your time and your kernels' device times against the reference; make it faster
   (fuse operations, tile for shared memory / cache, vectorize, avoid extra passes over memory) and
   verify + profile again.
5. `submit` your best version. It ends the episode.

## Layout
Every entry point model_new.py calls is an extern "C" function over raw pointers and sizes, defined
with the registry's macro in a kernels/<name>_binding.cpp:

{binding_example}

model_new.py imports the built module and calls it (tensors pass as their data pointer: make them
contiguous; allocate outputs with torch.empty / empty_like):

{model_example}

All kernels/*.cu and kernels/*.cpp files are compiled into one library ({flags}); the entry
points' parameter types: pointers, fixed-size integers, float, double, bool{stream_note}.
A single-file model_new.py in the cuda_gym.native.load_kernels form (no kernels/ files) is accepted too.

## Rules
{rules}
{speed}
"""

_CUDA_BINDING = '''```cpp
// kernels/scale.cu
#include <cuda_runtime.h>
#include <cstdint>
__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float alpha, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}
void scale_launch(const float* x, float* y, float alpha, int64_t n, cudaStream_t stream) {
    scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, alpha, n);
}

// kernels/scale_binding.cpp
#include "binding_registry.h"
void scale_launch(const float* x, float* y, float alpha, int64_t n, cudaStream_t stream);
REGISTER_BINDING(int, scale_forward, (const float* x, float* y, float alpha, int64_t n, cudaStream_t stream)) {
    scale_launch(x, y, alpha, n, stream);
    return (int)cudaGetLastError();
}
```'''
_CPU_BINDING = '''```cpp
// kernels/scale.cpp
#include <cstdint>
void scale_launch(const float* x, float* y, float alpha, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

// kernels/scale_binding.cpp
#include "binding_registry.h"
void scale_launch(const float* x, float* y, float alpha, int64_t n);
REGISTER_BINDING(void, scale_forward, (const float* x, float* y, float alpha, int64_t n)) {
    scale_launch(x, y, alpha, n);
}
```'''
_MODEL_EXAMPLE = '''```python
import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        y = torch.empty_like(x)
        {call}
        return y
```'''


_TRITON_GUIDE = """\
# Workflow guide

You work in a workdir through tool calls (one per turn). Files:
  model.py        the reference program (read-only)
  GUIDE.md        this guide (read-only)
  model_new.py    you write it: class ModelNew, same constructor arguments as Model, whose forward
                  launches your {kernels} (no kernels/ files are needed)

## Steps
1. Read model.py. Call `profile` before writing anything: it shows the eager / torch.compile times to beat.
2. Write model_new.py, then `compile` until it imports.
3. `verify` until the verdict is OK on every input draw. A fast but wrong kernel is worth nothing.
4. `profile`, make it faster (fuse operations, pick block sizes{tuning}), verify + profile again.
5. `submit` your best version. It ends the episode.

## Format
{triton_format}

## Rules
{rules}
{speed}
"""


def workspace_guide(backend: str, config: EvalConfig, language: str = "cuda") -> str:
    """GUIDE.md of a workdir on `backend` under `config` for kernels in `language` (the layout, the
    steps, the rules)."""
    from ..extension import CPU_CFLAGS, CUDA_NVCC_FLAGS

    if language in ("triton", "cupy"):
        triton = language == "triton"
        return _TRITON_GUIDE.format(
            kernels="@triton.jit kernels" if triton else "CuPy RawKernel / RawModule kernels",
            tuning=", triton.autotune" if triton else "",
            triton_format=prompt_text.triton_format(backend) if triton else prompt_text.cupy_format(backend),
            rules=prompt_text._rules(backend, config, language), speed=prompt_text._speed_text(config))

    cuda = backend == "cuda"
    call = ("err = cuda_extension.scale_forward(x, y, self.alpha, x.numel())  # the stream is added\n"
            "        if err:\n            raise RuntimeError(f\"CUDA error {err}\")" if cuda else
            "cuda_extension.scale_forward(x, y, self.alpha, x.numel())")
    return _GUIDE.format(
        kernel_suffix=".cu                CUDA kernels and their launchers (no torch headers)" if cuda else
        ".cpp               C++ kernels (the cpu backend has no CUDA: no .cu files)",
        binding_example=_CUDA_BINDING if cuda else _CPU_BINDING,
        model_example=_MODEL_EXAMPLE.format(call=call),
        flags=("nvcc " + " ".join(CUDA_NVCC_FLAGS)) if cuda else ("g++ " + " ".join(CPU_CFLAGS)),
        stream_note=", and a trailing cudaStream_t that the caller may omit (the current stream is passed)" if cuda
        else "", rules=prompt_text._rules(backend, config), speed=prompt_text._speed_text(config))


class _ToolError(Exception):
    """A well-formed call that failed; its text is the tool result."""


class _BadCall(Exception):
    """A call that is not a valid tool call (INVALID_ACTION); its text is the tool result."""


class WorkspaceEnv(KernelEnv):
    """Optimize a task's `Model` by tool calls in a per-episode workdir (see the module docstring).

    Constructor arguments are KernelEnv's (suite, levels, backend, reward, reward_mode, max_turns,
    evaluator, ...; docs/environment.md) plus: `workdir_root` (where episode workdirs are made,
    default the system temp folder), `keep_workdirs` (leave them on disk after the episode; by
    default a workdir is removed at the next reset and at close), `max_file_chars` (per file) and
    `max_files` (per workdir). The defaults of the registered IDs: reward "milestone" in
    reward_mode "final" (the best judged result of the episode, as CUDA Agent scores it; per-step
    rewards would pay every repeated verify), max_turns 40 (every tool call is a turn).

    `tool_schemas`: the tools as OpenAI function schemas. `workdir`: this episode's folder.
    `info` of every step: task_id, level, backend, turn, tool, command (the KernelEnv command a
    judging tool ran, else None), verdict (TOOL_OK / TOOL_ERROR / INVALID_ACTION / COMPILED / an
    ErrorCode value), tool_error, compiled, correct, best (as KernelEnv's), workdir; a judged step
    adds result (the compact EvalResult) and candidate (the packed source that was judged).
    """

    def __init__(self, suite: str = "builtin", levels: int | Iterable[int] | None = None,
                 task_filter: Callable[[Task], bool] | Iterable[str] | str | None = None, backend: str = "auto",
                 reward: str | Callable[..., float] = "milestone", reward_mode: str = "final", max_turns: int = 40,
                 *, workdir_root: str | os.PathLike | None = None, keep_workdirs: bool = False,
                 max_file_chars: int = 100_000, max_files: int = 64, max_action_chars: int = 200_000,
                 **kwargs: Any) -> None:
        super().__init__(suite=suite, levels=levels, task_filter=task_filter, backend=backend, reward=reward,
                         reward_mode=reward_mode, max_turns=max_turns, max_action_chars=max_action_chars, **kwargs)
        self.workdir_root = Path(workdir_root) if workdir_root is not None else Path(tempfile.gettempdir())
        self.keep_workdirs = bool(keep_workdirs)
        self.max_file_chars = int(max_file_chars)
        self.max_files = int(max_files)
        self.workdir: Path | None = None
        self.tool_schemas: list[dict[str, Any]] = json.loads(json.dumps(TOOL_SCHEMAS))
        self._judged_candidate: Candidate | None = None

    # ------------------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        _, info = super().reset(seed=seed, options=options)
        task = self.task
        assert task is not None
        self._remove_workdir()
        self.workdir_root.mkdir(parents=True, exist_ok=True)
        self.workdir = Path(tempfile.mkdtemp(prefix="cuda_gym_workspace_", dir=self.workdir_root))
        backend, hardware = self._target_backend()
        guide = workspace_guide(backend, self.config, self.language)
        (self.workdir / "kernels").mkdir()
        (self.workdir / "model.py").write_text(self._reference_file(task, backend))
        (self.workdir / "GUIDE.md").write_text(guide)
        (self.workdir / REGISTRY_HEADER).write_text(BINDING_REGISTRY_H)
        text = self._start_text(task, backend, hardware)
        observation = prompt_text.to_observation(text, self.max_observation_chars)
        self._last_observation = observation
        return observation, {**info, "workdir": str(self.workdir)}

    @staticmethod
    def _reference_file(task: Task, backend: str) -> str:
        sizes = task.sizes_for(backend)
        note = ""
        if sizes:
            listed = "\n".join(f"#   {k} = {v!r}" for k, v in sorted(sizes.items()))
            note = ("\n\n# On this backend the evaluator overrides these module constants before get_inputs():\n"
                    f"{listed}\n")
        return task.source.rstrip() + "\n" + note

    def _start_text(self, task: Task, backend: str, hardware: str) -> str:
        description = f" - {task.description}" if task.description else ""
        language = prompt_text.language_name(backend, self.language)
        names = ", ".join(s["function"]["name"] for s in TOOL_SCHEMAS)
        return (f"# Task {task.id} (level {task.level}){description}\n\n"
                f"Write a faster replacement for the PyTorch program in model.py: model_new.py with a class ModelNew "
                f"whose forward computes the same outputs with your own {language} kernels.\n\n"
                f"Backend: {backend}\nHardware: {hardware}\n\n"
                f"## model.py\n```python\n{self._reference_file(task, backend).rstrip()}\n```\n\n"
                f"## Tools\nAct with one tool call per turn ({names}). You have {self.max_turns} turns; `submit` "
                f"ends the episode. Read GUIDE.md first: the file layout, the binding registry, the steps and "
                f"the rules.\n")

    def _remove_workdir(self) -> None:
        if self.workdir is not None and not self.keep_workdirs:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = None

    def close(self) -> None:
        self._remove_workdir()
        super().close()

    # --------------------------------------------------------------------------------- step
    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None or self.workdir is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over (submitted or out of turns); call reset()")
        self._turn += 1
        self._judged_candidate = None
        name, result, text, verdict = "", None, "", TOOL_OK
        try:
            name, arguments = self._parse_call(action)
            if name in FILE_TOOLS:
                text = getattr(self, f"_tool_{name}")(**arguments)
            else:
                result, text = self._judge(name)
                verdict = result.error_code.value if result is not None else TOOL_OK
        except _BadCall as exc:
            verdict, text = ErrorCode.INVALID_ACTION.value, f"error: {exc}"
        except _ToolError as exc:
            verdict, text = TOOL_ERROR, f"error: {exc}"
        except OSError as exc:  # the workdir's disk: still a result, never an exception
            verdict, text = TOOL_ERROR, f"error: {type(exc).__name__}: {exc}"
        command = JUDGING_TOOLS.get(name) if result is not None else None
        terminated = command == "submit" and result.error_code is not ErrorCode.INVALID_ACTION
        truncated = not terminated and self._turn >= self.max_turns
        self._done = terminated or truncated
        reward = self._step_reward(command, result)
        if command == "compile" and result is not None and result.compiled:
            verdict = "COMPILED"
        lines = [f"[turn {self._turn}/{self.max_turns}] {name or 'tool call'}: {verdict}", text.rstrip()]
        if self.reward_mode == "per_step" or self._done:
            lines.append(f"Reward: {reward:g}")
        lines.append("The episode is over." if self._done else f"Turns left: {self.max_turns - self._turn}")
        observation = prompt_text.to_observation("\n".join(line for line in lines if line), self.max_observation_chars)
        self._last_observation = observation
        task = self.task
        info: dict[str, Any] = {
            "task_id": task.id, "level": task.level, "backend": self._target_backend()[0], "turn": self._turn,
            "tool": name, "command": command, "verdict": verdict, "tool_error": verdict in (TOOL_ERROR, "INVALID_ACTION"),
            "compiled": bool(result and result.compiled), "correct": bool(result and result.correct),
            "best": self._best_info(), "workdir": str(self.workdir),
        }
        if result is not None:
            info["result"] = result.to_dict()
            if self._judged_candidate is not None:
                info["candidate"] = self._judged_candidate.source
        return observation, reward, terminated, truncated, info

    def _step_reward(self, command: str | None, result: EvalResult | None) -> float:
        if self.reward_mode == "final":
            return self._final_reward() if self._done else 0.0
        if result is None:
            return 0.0  # file tools and a profile of the reference alone judge nothing
        if command == "compile" and result.compiled:
            return 0.0
        return float(self.reward_fn(result, [r for _, r in self._steps[:-1]]))

    def _parse_call(self, action: Any) -> tuple[str, dict[str, Any]]:
        if isinstance(action, bytes):
            action = action.decode("utf-8", errors="replace")
        if not isinstance(action, str):
            raise _BadCall(f"the action must be JSON text {{\"name\": ..., \"arguments\": {{...}}}}, got "
                           f"{type(action).__name__}")
        if len(action) > self.max_action_chars:
            raise _BadCall(f"the call is {len(action)} characters; the limit is {self.max_action_chars}")
        try:
            call = json.loads(action)
        except json.JSONDecodeError as exc:
            raise _BadCall(f"the action is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); send "
                           "one tool call as {\"name\": \"read_file\", \"arguments\": {\"path\": \"model.py\"}}") from None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise _BadCall("the call must be a JSON object with a string \"name\" and an object \"arguments\"")
        name = call["name"]
        known = [s["function"]["name"] for s in TOOL_SCHEMAS]
        if name not in known:
            raise _BadCall(f"unknown tool {name!r}; the tools are: {', '.join(known)}")
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise _BadCall(f"the arguments of {name} are not valid JSON ({exc.msg})") from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise _BadCall(f"the arguments of {name} must be a JSON object")
        schema = next(s["function"]["parameters"] for s in TOOL_SCHEMAS if s["function"]["name"] == name)
        expected = schema["properties"]
        unknown = sorted(set(arguments) - set(expected))
        missing = sorted(set(expected) - set(arguments))
        if unknown or missing:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unknown {', '.join(unknown)}"] if unknown else [])
            wanted = ", ".join(expected) or "no arguments"
            raise _BadCall(f"{name} takes {wanted}: {'; '.join(parts)}")
        for key, value in arguments.items():
            if not isinstance(value, str):
                raise _BadCall(f"{name}: argument {key!r} must be a string, got {type(value).__name__}")
        return name, arguments

    # ---------------------------------------------------------------------------- file tools
    def _path(self, path: str) -> tuple[str, Path]:
        """(normalized relative path, absolute path) of a workdir file; _ToolError for paths that
        leave the workdir, absolute paths and odd names."""
        assert self.workdir is not None
        if not path or "\0" in path or "\\" in path or len(path) > 200:
            raise _ToolError(f"{path!r} is not a usable path: give a relative path such as 'kernels/softmax.cu'")
        if path.startswith(("/", "~")):
            raise _ToolError(f"{path!r}: paths are relative to the workdir (absolute paths cannot be used)")
        relative = posixpath.normpath(path)
        if relative == ".." or relative.startswith("../") or relative == "." or any(
                part in ("..", "") for part in relative.split("/")):
            raise _ToolError(f"{path!r} leaves the workdir: give a path inside it, e.g. 'model_new.py'")
        absolute = (self.workdir / relative).resolve()
        root = self.workdir.resolve()
        if root not in absolute.parents:
            raise _ToolError(f"{path!r} leaves the workdir: give a path inside it, e.g. 'model_new.py'")
        return relative, absolute

    def _files(self) -> dict[str, Path]:
        assert self.workdir is not None
        return {p.relative_to(self.workdir).as_posix(): p for p in sorted(self.workdir.rglob("*")) if p.is_file()}

    def _tool_list_files(self) -> str:
        lines = []
        for relative, path in self._files().items():
            marker = " (read-only)" if relative in READ_ONLY_FILES else ""
            lines.append(f"{relative}  {path.stat().st_size} bytes{marker}")
        return "\n".join(lines)

    def _read(self, path: str) -> tuple[str, Path, str]:
        relative, absolute = self._path(path)
        if not absolute.is_file():
            raise _ToolError(f"{relative} does not exist; list_files shows the workdir's files")
        try:
            return relative, absolute, absolute.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise _ToolError(f"{relative} is not UTF-8 text") from None

    def _tool_read_file(self, path: str) -> str:
        _, _, text = self._read(path)
        return text

    def _write(self, path: str, content: str) -> str:
        relative, absolute = self._path(path)
        if relative in READ_ONLY_FILES:
            raise _ToolError(f"{relative} is read-only (the reference, the guide and the binding registry are fixed)")
        if len(content) > self.max_file_chars:
            raise _ToolError(f"the content is {len(content)} characters; a file may hold at most {self.max_file_chars}")
        if absolute.is_dir():
            raise _ToolError(f"{relative} is a folder")
        if not absolute.exists() and len(self._files()) >= self.max_files:
            raise _ToolError(f"the workdir holds {self.max_files} files, the limit; overwrite or edit an existing one")
        if len(relative.split("/")) > 3:
            raise _ToolError(f"{relative}: at most two folder levels")
        absolute.parent.mkdir(parents=True, exist_ok=True)
        existed = absolute.exists()
        absolute.write_text(content, encoding="utf-8")
        return f"{'overwrote' if existed else 'created'} {relative} ({len(content)} characters, {content.count(chr(10)) + 1} lines)"

    def _tool_write_file(self, path: str, content: str) -> str:
        return self._write(path, content)

    def _tool_edit_file(self, path: str, old: str, new: str) -> str:
        relative, _, text = self._read(path)
        if relative in READ_ONLY_FILES:
            raise _ToolError(f"{relative} is read-only (the reference, the guide and the binding registry are fixed)")
        if not old:
            raise _ToolError("old is empty: give the exact text to replace")
        count = text.count(old)
        if count != 1:
            raise _ToolError(f"old occurs {count} times in {relative}; it must occur exactly once (read_file shows the "
                             "text; include more surrounding lines to make it unique)" if count else
                             f"old does not occur in {relative}; read_file shows its current text")
        self._write(relative, text.replace(old, new, 1))
        return f"edited {relative}: replaced {old.count(chr(10)) + 1} line(s) with {new.count(chr(10)) + 1}"

    # ------------------------------------------------------------------------- judging tools
    def _candidate(self) -> tuple[Candidate, list[str]]:
        """The workdir as one candidate, and notes for the agent; _ToolError / InvalidCandidate."""
        files = self._files()
        notes = []
        backend = self._target_backend()[0]
        chosen: dict[str, str] = {}
        for relative, path in files.items():
            if relative == "model_new.py" or relative.startswith("kernels/"):
                # kernels/<name>.cpp is the C++ twin of kernels/<name>.cu: each backend builds its own.
                if backend == "cpu" and relative.endswith(".cu"):
                    notes.append(f"note: {relative} is left out: the cpu backend builds kernels/*.cpp only")
                    continue
                if backend == "cuda" and relative.endswith(".cpp") and relative[:-4] + ".cu" in files:
                    notes.append(f"note: {relative} is left out: it is the cpu twin of {relative[:-4]}.cu")
                    continue
                chosen[relative] = path.read_text(encoding="utf-8", errors="replace")
        try:
            return pack_workdir(chosen), notes
        except ExtensionError as exc:
            raise InvalidCandidate(str(exc)) from None

    def _judge(self, tool: str) -> tuple[EvalResult | None, str]:
        task = self.task
        assert task is not None
        command = JUDGING_TOOLS[tool]
        backend = self._target_backend()[0]
        if tool == "profile" and not (self._files().get("model_new.py")):
            return None, self._profile_text(None, self.reference_profile())
        notes: list[str] = []
        candidate: Candidate | None = None
        try:
            candidate, notes = self._candidate()
        except InvalidCandidate as exc:
            result = EvalResult(task_id=task.id, backend=backend, error_code=ErrorCode.INVALID_ACTION, message=str(exc),
                                precision=self.config.precision, policy=self.config.policy)
        else:
            self._judged_candidate = candidate
            result = self._judge_once(task, command, candidate)
        self._update_best(command, candidate, result)
        self._steps.append((command, result))
        packed = candidate is not None and candidate.form == "multifile"
        text = "\n".join(notes + [self._verdict_text(tool, result, packed)])
        if tool == "profile":
            text += "\n" + self._profile_text(result, self.reference_profile())
        return result, text

    @staticmethod
    def _readable(text: str, packed: bool) -> str:
        """Build-cache paths cut to workdir paths; candidate.py line numbers as model_new.py's (a
        packed workdir has one line before model_new.py, see pack_workdir)."""
        text = _BUILD_DIR.sub("", text)
        shift = 1 if packed else 0
        return _CANDIDATE_LINE.sub(lambda m: f'"model_new.py", line {max(1, int(m.group(1)) - shift)}', text)

    def _verdict_text(self, tool: str, result: EvalResult, packed: bool) -> str:
        code = result.error_code
        out: list[str] = []

        def readable(text: str) -> str:
            return self._readable(text, packed)

        if code is ErrorCode.INVALID_ACTION:
            out.append(result.message)
        elif not result.compiled:
            if code is ErrorCode.COMPILE_ERROR:
                out.append("The build failed:")
                out.append(trim_compile_log(readable(result.compile_log or result.message)))
            else:
                out.append(readable(result.message))
                tail = prompt_text.tail_lines(readable(result.compile_log or result.runtime_log), 10)
                if tail:
                    out.append(tail)
        elif tool == "compile":
            out.append("It builds and imports" + (" (build cached)" if result.build_cached else "") +
                       ". compile checks only the build: verify checks correctness, profile measures speed.")
        else:
            out.append("Correct on every input draw." if code is ErrorCode.OK else readable(result.message))
            if code is ErrorCode.FORBIDDEN and result.forbidden_ops:
                out.append("PyTorch ops run by the forward: " + ", ".join(result.forbidden_ops))
            if code is ErrorCode.RUNTIME_ERROR and result.runtime_log:
                out.append(prompt_text.tail_lines(readable(result.runtime_log), 10))
            trials = prompt_text._trials_text(result)
            if trials:
                out.append("Correctness:")
                out.extend(trials)
            out.extend(prompt_text._timing_lines(result, JUDGING_TOOLS[tool]))
        if result.flags and not (tool == "compile" and result.compiled):
            out.append("Flags: " + ", ".join(result.flags))
        return "\n".join(out)

    # --------------------------------------------------------------------------------- profile
    def reference_profile(self) -> dict[str, dict[str, Any]]:
        """The reference under PyTorch eager and torch.compile, from the evaluator's baseline workers
        (cached with the baseline times): {name: {"kernel_profile": one profiled forward's kernels
        (`EvalResult.kernel_profile`'s format) or None, "stats": the baseline's TimingStats or None,
        "why": why there is no table}}; {} on the cpu backend (no per-kernel times there)."""
        task = self.task
        assert task is not None
        if self._target_backend()[0] != "cuda":
            return {}
        try:
            baselines = self.evaluator.baselines(task, backend="cuda", config=self.config)
        except Exception as exc:  # noqa: BLE001 - a profile without reference tables, never a crashed step
            why = f"the baselines could not be measured: {type(exc).__name__}: {exc}"[:400]
            return {name: {"kernel_profile": None, "stats": None, "why": why} for name in ("eager", "compile")}
        out = {}
        for name in ("eager", "compile"):
            stats, table = baselines.get(name), baselines.get("profiles", {}).get(name)
            why = baselines.get("errors", {}).get(name) or (table if isinstance(table, str) else "")
            if name not in self.config.baselines:
                why = f"this configuration has no {name} baseline"
            out[name] = {"kernel_profile": table if isinstance(table, list) else None, "stats": stats, "why": why}
        return out

    def _profile_text(self, result: EvalResult | None, reference: dict[str, dict[str, Any]]) -> str:
        backend = self._target_backend()[0]
        out = []
        if backend != "cuda":
            baselines = self.evaluator.baselines(self.task, config=self.config) if result is None else None
            if baselines is not None:
                for name, label in (("eager", "PyTorch eager"), ("compile", "torch.compile")):
                    stats = baselines.get(name)
                    if stats is not None:
                        out.append(f"{label}: {stats.median_ms:.4g} ms median over {stats.reps} calls")
            out.append("Per-kernel device times need the CUDA backend (the CUDA profiler); on the cpu backend "
                       "profile reports the timed medians only.")
            return "\n".join(out)
        out.append("Per-kernel device time, one profiled forward after the timing (CUDA profiler):")
        for name, label in (("eager", "reference (PyTorch eager)"), ("compile", "reference (torch.compile)")):
            entry = reference.get(name) or {}
            out.extend(profile_lines(label, entry.get("kernel_profile"), entry.get("stats"),
                                     entry.get("why") or "not profiled"))
        if result is not None:
            why = (f"{result.error_code.value}: {result.message.splitlines()[0][:300]}" if result.message
                   else "no kernel profile in the result")
            out.extend(profile_lines("your candidate", result.kernel_profile or None, result.candidate_time, why))
        return "\n".join(out)


def profile_agreement(kernel_profile: list[dict[str, Any]], median_ms: float | None,
                      detail: dict[str, float] | None) -> dict[str, Any]:
    """How one profiled forward's kernels add up against the timed median: `kernel_sum_ms`; when a
    median exists, `ratio` (sum / median); where the timed calls were held, `ratio_to_held_device`
    (sum / the held calls' device time) and `host_bound` (issuing a call took longer than its device
    work, so the held median is host time)."""
    total_ms = sum(float(k["total_us"]) for k in kernel_profile) / 1000
    numbers: dict[str, Any] = {"kernel_sum_ms": total_ms}
    if median_ms:
        numbers["ratio"] = total_ms / median_ms
        device_ms, issue_ms = (detail or {}).get("held_device_ms"), (detail or {}).get("held_issue_ms")
        if device_ms:
            numbers.update(ratio_to_held_device=total_ms / device_ms, held_device_ms=device_ms,
                           held_issue_ms=issue_ms, host_bound=bool((issue_ms or 0) > device_ms))
    return numbers


def profile_lines(label: str, kernel_profile: list[dict[str, Any]] | None, stats: TimingStats | None,
                  why: str, top: int = 10) -> list[str]:
    """The per-kernel table of one profiled forward: each kernel's share, total device time and
    launches, and the summed device time against the timed median; `why` when there is no table.
    Where the timed calls were held (CUDA) and the host took longer to issue a call than its
    device work ran, the median is host time: the line says so."""
    if not kernel_profile:
        return [f"{label}: no per-kernel times ({why})"]
    total_us = sum(float(k["total_us"]) for k in kernel_profile)
    ratio = ""
    if stats is not None and stats.median_ms:
        numbers = profile_agreement(kernel_profile, stats.median_ms, stats.detail)
        ratio = f", {100 * numbers['ratio']:.0f}% of the timed median {stats.median_ms:.4g} ms"
        if numbers.get("host_bound"):
            ratio += (f" (host-bound: issuing a call took {numbers['held_issue_ms']:.4g} ms of host time, its device "
                      f"work {numbers['held_device_ms']:.4g} ms; kernels are "
                      f"{100 * numbers['ratio_to_held_device']:.0f}% of that device time)")
    lines = [f"{label}: {total_us / 1000:.4g} ms device time in {len(kernel_profile)} kernel(s){ratio}",
             "   share   total_us  count  kernel"]
    for entry in kernel_profile[:top]:
        share = 100 * float(entry["total_us"]) / total_us if total_us else 0.0
        name = str(entry["name"])
        name = name if len(name) <= 100 else name[:97] + "..."
        lines.append(f"  {share:5.1f}% {float(entry['total_us']):10.1f} {int(entry['count']):6d}  {name}")
    if len(kernel_profile) > top:
        lines.append(f"  ... {len(kernel_profile) - top} more kernel(s)")
    return lines
