"""On a GPU: the CUDA reference solutions pass, and KernelBench's load_inline format is accepted.

Run with `python -m pytest -m gpu` on a machine with an NVIDIA GPU; skipped elsewhere.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuda_gym.eval import ErrorCode
from cuda_gym.tasks import get_task, load_suite, solution_path

KERNELBENCH_CANDIDATE = Path(__file__).resolve().parents[1] / "benchmarks" / "candidates" / "kernelbench_gelu_cuda.py"
INLINE_CORPUS = sorted((Path(__file__).parent / "inline_candidates").glob("*.py"))


@pytest.mark.gpu
def test_every_cuda_reference_solution_passes(cuda_evaluator):
    tasks = [t for t in load_suite("builtin") if solution_path(t, "cuda")]
    assert len(tasks) >= 18
    futures = {t.id: cuda_evaluator.submit(t, solution_path(t, "cuda").read_text()) for t in tasks}
    failures = {}
    for task_id, future in futures.items():
        result = future.result()
        if not result.ok:
            failures[task_id] = f"{result.error_code.value}: {result.message[:300]}"
            continue
        assert result.kernels, "the profiler saw the candidate's kernels"
        assert result.candidate_time.method in ("cuda_event_held", "cuda_event", "wall+device_sync")
        assert "work_outside_current_stream" not in result.flags
        # The float64 measurement: made by the task's first baseline worker after its timings (the
        # tripwire and tamper check armed there), and given to this eval worker, which made none.
        if "skipped" not in result.reference_error:
            assert result.reference_error["seconds"] == 0.0, (task_id, result.reference_error)
    assert not failures, failures


@pytest.mark.gpu
def test_kernelbench_load_inline_candidate_is_accepted_on_cuda(cuda_evaluator):
    result = cuda_evaluator.evaluate(get_task("builtin/L1/gelu"), KERNELBENCH_CANDIDATE.read_text())
    assert result.error_code is ErrorCode.OK, (result.message, result.compile_log[-2000:])
    assert result.compiled and result.correct
    assert any("gelu_kernel" in k for k in result.kernels)
    # Evaluating it again must load the cached build, not rebuild it in the GPU worker.
    built = {p: p.stat().st_mtime_ns for p in (cuda_evaluator.cache_dir / "inline").rglob("*.so")}
    again = cuda_evaluator.evaluate(get_task("builtin/L1/gelu"), KERNELBENCH_CANDIDATE.read_text())
    assert again.ok and again.build_cached
    assert {p: p.stat().st_mtime_ns for p in built} == built, "the eval worker rebuilt the extension"
    print(f"load_inline again: stages {again.stage_seconds}")
    print(f"load_inline candidate: compile {result.compile_seconds:.1f} s, eval {result.eval_seconds:.2f} s, "
          f"{result.candidate_time.median_ms:.4f} ms, x{result.speedup_vs_eager:.2f} vs eager")


@pytest.mark.gpu
def test_the_load_inline_corpus_passes_in_its_expected_build_form(cuda_evaluator):
    """Each KernelBench-style candidate is correct when built split (kernels without torch headers,
    host wrappers in the C++ file) or, where the split refuses it, as one CUDA file."""
    futures = {}
    for path in INLINE_CORPUS:
        text = path.read_text()
        task = re.search(r'^# TASK = "(.+)"', text, re.M).group(1)
        futures[path.stem] = (re.search(r'^# EXPECTED_FORM = "(\w+)"', text, re.M).group(1),
                              cuda_evaluator.submit(get_task(task), text))
    problems = {}
    for name, (form, future) in futures.items():
        result = future.result()
        built_as = {k: v for k, v in result.inline_build_forms.items() if "." not in k}  # not the reasons
        print(f"{name}: {result.error_code.value}, built {result.inline_build_forms}, compile "
              f"{result.compile_seconds:.1f} s, x{result.speedup_vs_eager or 0:.2f} vs eager")
        if not result.ok:
            problems[name] = f"{result.error_code.value}: {result.message[:600]}"
        elif list(built_as.values()) != [form]:
            problems[name] = f"built as {result.inline_build_forms}, expected {form}"
    assert not problems, problems
