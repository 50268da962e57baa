"""The hostile-candidate catalogue (tests/hostile/): every attack or fault gets exactly the verdict
its file declares, and the next legitimate candidate (the task's reference solution) is still OK.

Each file's docstring declares, one per line:
    TASK: builtin/L1/gelu
    EXPECTED: FORBIDDEN          (an ErrorCode, or OK_NOT_FASTER: correct, but no faster than the
                                  honest reference solution: the trick gains nothing)
    FLAG: a | b                  (optional: the result must carry one of these flags, which says the
                                  defence fired rather than the trick failing on its own)
    MESSAGE: in a timed call     (optional: the verdict's message must contain this, which says which
                                  defence gave the verdict where several could)
    NEEDS: held_timing           (optional: the attack targets held timer repeats; skipped when the
                                  evaluator's are off)
    EVAL_TIMEOUT_S: 120          (optional: the evaluation's time limit, 20 s unless given; Triton
                                  candidates on the CPU run in Triton's interpreter, seconds a call)
    KNOWN_GAP: why it is not caught (optional: the test is then an expected failure, strict, so
               fixing the gap makes it fail until the file is updated)
`cpu_*` files run here on the CPU evaluator; `cuda_*` files need a GPU (`-m gpu`).
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
import socket
import threading
from pathlib import Path

import pytest

from cuda_gym.eval import ErrorCode, EvalResult, Evaluator, cupy_support, sandbox, triton_support
from cuda_gym.tasks import get_task, solution_path

from .leaks import leaked, snapshot

HOSTILE_DIR = Path(__file__).parent / "hostile"
PORT_PLACEHOLDER = "__CUDA_GYM_TEST_PORT__"
NOT_FASTER = "OK_NOT_FASTER"
# A trick "gains nothing" when its speedup is at most this much above the honest solution's
# (timings on a shared machine are noisy).
NOT_FASTER_SLACK = 1.5


def header(path: Path) -> dict[str, str]:
    text = path.read_text()
    doc = text.split('"""')[1] if text.startswith('"""') else ""
    fields = {key.lower(): value.strip() for key, value in re.findall(r"^([A-Z_]+): *(.+)$", doc, re.M)}
    assert "task" in fields and "expected" in fields, f"{path.name} declares no TASK/EXPECTED"
    assert fields["expected"] == NOT_FASTER or fields["expected"] in ErrorCode.__members__, fields["expected"]
    return fields


NO_TRITON = pytest.mark.skip(reason="triton is not installed (pip install cuda_gym[triton]); Triton candidates "
                                    "are judged through it (its interpreter on the CPU)")

NO_CUPY = pytest.mark.skip(reason="cupy is not installed (pip install cuda_gym[cuda]); CuPy candidates are judged "
                                  "through it")


def params(prefix: str) -> list:
    out = []
    for path in sorted(HOSTILE_DIR.glob(f"{prefix}_*.py")):
        gap = header(path).get("known_gap")
        marks = [pytest.mark.xfail(strict=True, reason=f"known gap: {gap}")] if gap else []
        if triton_support.uses_triton(path.read_text()) and not triton_support.available():
            marks.append(NO_TRITON)
        if cupy_support.uses_cupy(path.read_text()) and not cupy_support.available():
            marks.append(NO_CUPY)
        out.append(pytest.param(path, id=path.stem, marks=marks))
    return out


def short(result: EvalResult) -> str:
    return f"{result.error_code.value}: {result.message[:400]}\n{result.runtime_log[-1200:]}"


class _Listener:
    """A TCP server on 127.0.0.1 that records whether anyone connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def network_isolation_supported() -> bool:
    """Whether a process here may unshare its network namespace (what the workers do)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if sandbox.isolate_network() else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def escape_state(cache_dir: str) -> tuple:
    baselines = Path(cache_dir) / "baselines.json"
    return (sorted(glob.glob("/tmp/cuda_gym_escape_*")),
            baselines.read_bytes() if baselines.exists() else b"",
            sorted(p.name for p in (Path(cache_dir) / "builds").glob("*escape*")))


def judge_hostile(evaluator: Evaluator, path: Path, backend: str, cache_dir: str) -> None:
    fields = header(path)
    if fields.get("needs") == "held_timing" and not evaluator.held_timing:
        pytest.skip("held timer repeats are off in this evaluator (CUDA_GYM_TIMER_HOLD=0 or no hold kernel)")
    task = get_task(fields["task"])
    expected = fields["expected"]
    config = dataclasses.replace(evaluator.config, eval_timeout_s=float(fields.get("eval_timeout_s", 40.0)),
                                 compile_timeout_s=30.0)
    source = path.read_text()
    listener = _Listener() if PORT_PLACEHOLDER in source else None
    if listener:
        source = source.replace(PORT_PLACEHOLDER, str(listener.port))
    evaluator.baselines(task, backend=backend)  # written now, so that a later change is the candidate's
    before_escape = escape_state(cache_dir)
    before_processes = snapshot()
    try:
        result = evaluator.evaluate(task, source, backend=backend, config=config)
    finally:
        if listener:
            listener.close()
    after_escape = escape_state(cache_dir)
    honest = evaluator.evaluate(task, solution_path(task, backend).read_text(), backend=backend)
    assert honest.ok, f"the next (legitimate) candidate after {path.name} was not OK: {short(honest)}"

    if expected == NOT_FASTER:
        assert result.ok, f"{path.name}: expected a correct result that gains nothing, got {short(result)}"
        assert result.speedup_vs_eager <= NOT_FASTER_SLACK * honest.speedup_vs_eager, (
            f"{path.name}: the trick is faster than the honest solution "
            f"(x{result.speedup_vs_eager:.2f} vs x{honest.speedup_vs_eager:.2f})")
    else:
        assert result.error_code is ErrorCode(expected), f"{path.name}: expected {expected}, got {short(result)}"
        assert result.message, "every failure explains itself"
        assert not result.correct
    if "message" in fields:
        assert fields["message"] in result.message, f"{path.name}: expected {fields['message']!r} in {result.message!r}"
    if "flag" in fields:
        wanted = {flag.strip() for flag in fields["flag"].split("|")}
        assert wanted & set(result.flags), f"{path.name}: expected one of the flags {sorted(wanted)}, got {result.flags}"

    leftovers = leaked(before_processes, cache_dir)
    assert not leftovers, f"{path.name} left processes behind: {leftovers}"
    if listener and network_isolation_supported():
        assert listener.connections == 0, f"{path.name} reached a server on the host despite network isolation"
    if sandbox.landlock_abi() > 0:
        assert after_escape == before_escape, f"{path.name} wrote outside its sandbox"


@pytest.mark.slow
@pytest.mark.parametrize("path", params("cpu"))
def test_cpu_hostile_candidate(cpu_evaluator, cache_dir, path):
    judge_hostile(cpu_evaluator, path, "cpu", cache_dir)


@pytest.mark.gpu
@pytest.mark.parametrize("path", params("cuda"))
def test_cuda_hostile_candidate(cuda_evaluator, path):
    judge_hostile(cuda_evaluator, path, "cuda", cuda_evaluator.test_cache_dir)


@pytest.mark.gpu
@pytest.mark.parametrize("path", params("cpu_triton"))
def test_triton_hostile_candidate_on_cuda(cuda_evaluator, path):
    """The Triton hostile files launch the same kernels on the GPU: the same verdicts there."""
    judge_hostile(cuda_evaluator, path, "cuda", cuda_evaluator.test_cache_dir)


def test_catalogue_is_complete():
    """Every hostile file declares its verdict; the CPU catalogue covers at least 25 attacks."""
    files = sorted(HOSTILE_DIR.glob("*.py"))
    assert all(p.name.startswith(("cpu_", "cuda_")) for p in files), [p.name for p in files]
    for path in files:
        header(path)
    assert len([p for p in files if p.name.startswith("cpu_")]) >= 25
