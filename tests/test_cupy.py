"""CuPy candidates (CUDA C++ sources compiled by CuPy's NVRTC): on the CPU, the shipped CuPy solutions
compile with NVRTC for sm_90 (where CuPy and libnvrtc are installed), launches are counted and go on
torch's current stream, CuPy's library kernels are told from the candidate's, the CPU evaluator and
the environments say the form needs a GPU; on the GPU (`-m gpu`), every CuPy solution is judged OK."""
from __future__ import annotations

import importlib.util
import types
from collections import Counter

import pytest
import torch

from cuda_gym import native
from cuda_gym.envs.prompt import task_prompt
from cuda_gym.eval import Candidate, EvalConfig, ErrorCode, cupy_support
from cuda_gym.tasks import get_task, load_suite, solution_path

CUPY_SOLVED = [t for t in load_suite("builtin", levels=(1, 2)) if solution_path(t, "cuda", language="cupy")]
TORCH_MARKERS = ("at::", "c10::")


def _nvrtc_missing() -> str:
    """Why NVRTC compile checks cannot run here ('' when they can)."""
    if not cupy_support.available():
        return "cupy is not installed (pip install cupy-cuda13x)"
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - any failure to load libnvrtc means: no compile check here
        return f"libnvrtc cannot be loaded ({type(exc).__name__}: {exc}; pip install nvidia-cuda-nvrtc)"
    return ""


needs_nvrtc = pytest.mark.skipif(bool(_nvrtc_missing()), reason=_nvrtc_missing() or "nvrtc present")
needs_cupy = pytest.mark.skipif(not cupy_support.available(), reason="cupy is not installed (pip install cupy-cuda13x)")


def test_at_least_six_cupy_solutions_of_levels_1_and_2():
    assert len(CUPY_SOLVED) >= 6, [t.id for t in CUPY_SOLVED]
    for task in CUPY_SOLVED:
        candidate = Candidate(solution_path(task, "cuda", language="cupy").read_text())
        assert candidate.language == "cupy" and candidate.form == "cupy"
        assert solution_path(task, "cpu", language="cupy") is None  # CuPy kernels need a GPU


def test_language_of_a_candidate():
    assert Candidate("import cupy\nclass ModelNew: pass\n").language == "cupy"
    assert Candidate("import cupy as cp\nclass ModelNew: pass\n").language == "cupy"
    assert Candidate("from cupy import RawKernel\nclass ModelNew: pass\n").language == "cupy"
    assert Candidate("def f():\n    import cupyx\nclass ModelNew: pass\n").language == "cupy"
    assert Candidate("# cupy is mentioned, not imported\nclass ModelNew: pass\n").language == "cuda"
    assert Candidate("import cupyfoo\nclass ModelNew: pass\n").language == "cuda"
    mixed = "import cupy\nfrom cuda_gym.native import load_kernels\nclass ModelNew: pass\n"
    assert Candidate(mixed).form == "native"


def _kernels_of(path) -> list:
    """The RawKernel / RawModule objects a solution module defines (constructing them compiles nothing)."""
    import cupy

    module = types.ModuleType("cupy_solution")
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    found = [v for v in vars(module).values() if isinstance(v, (cupy.RawKernel, cupy.RawModule))]
    assert found, f"{path} defines no module-level cupy.RawKernel or cupy.RawModule"
    return found


def _nvrtc_compile(code: str, options: tuple, name_expressions: tuple, arch: str = "sm_90") -> bytes:
    """Compile as CuPy's NVRTC backend does (its include directory, the options, the name
    expressions), to PTX for `arch`; raises with the compiler log."""
    from cupy_backends.cuda.libs import nvrtc

    include = str(importlib.util.find_spec("cupy").submodule_search_locations[0]) + "/_core/include"
    program = nvrtc.createProgram(code, "candidate.cu", [], [])
    try:
        for name in name_expressions:
            nvrtc.addNameExpression(program, name)
        args = [f"--gpu-architecture={arch}", f"-I{include}", *options]
        try:
            nvrtc.compileProgram(program, args)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"NVRTC failed: {exc}\n{nvrtc.getProgramLog(program)}") from None
        for name in name_expressions:
            assert nvrtc.getLoweredName(program, name), name
        return nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)


@needs_nvrtc
@pytest.mark.parametrize("task", CUPY_SOLVED, ids=lambda t: t.id)
def test_cupy_solution_compiles_with_nvrtc(task):
    import cupy

    for kernel in _kernels_of(solution_path(task, "cuda", language="cupy")):
        names = tuple(kernel.name_expressions or ()) if isinstance(kernel, cupy.RawModule) else ()
        ptx = _nvrtc_compile(kernel.code, tuple(kernel.options), names)
        if isinstance(kernel, cupy.RawKernel):
            assert f".entry {kernel.name}(".encode() in ptx, f"{kernel.name} is not an extern \"C\" entry point"


@needs_nvrtc
def test_nvrtc_compile_check_reports_errors():
    with pytest.raises(AssertionError, match="NVRTC failed"):
        _nvrtc_compile('extern "C" __global__ void k(float* y) { y[0] = undefined_name; }', (), ())


def test_library_kernels_are_told_from_the_candidates():
    report = {"launches": 3, "kernels": ["gelu_kernel", "scale<float>"], "other_native_calls": 0}
    profiled = ["gelu_kernel", "void scale<float>(float const*, float*)", "cupy_multiply__float32_float32_float32",
                "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32", "void at::native::vectorized_elementwise_kernel<4>"]
    assert cupy_support.library_kernels(profiled, report, TORCH_MARKERS) == profiled[2:4]
    # With native code of another form in the forward, a cuBLAS kernel may be its own: only cupy_* is CuPy's.
    mixed = dict(report, other_native_calls=2)
    assert cupy_support.library_kernels(profiled, mixed, TORCH_MARKERS) == [profiled[2]]
    # A launched kernel's name never whitelists another that merely contains it.
    assert cupy_support.library_kernels(["void gelu_kernel_v2(float*)"], report, TORCH_MARKERS) == [
        "void gelu_kernel_v2(float*)"]
    # A malformed or missing report: only CuPy's own named kernels.
    assert cupy_support.library_kernels(profiled, None, TORCH_MARKERS) == [profiled[2]]
    assert cupy_support.library_kernels(profiled, {"launches": "x"}, TORCH_MARKERS) == [profiled[2]]


def test_worker_env_puts_the_kernel_cache_under_the_evaluators(tmp_path):
    env = cupy_support.worker_env(tmp_path, "cuda")
    assert env["CUPY_CACHE_DIR"] == str(tmp_path / "kernels" / "cupy")
    assert env["CUPY_ACCELERATORS"] == ""


def test_report_and_compile_seconds(monkeypatch):
    monkeypatch.setattr(native, "CALL_COUNTS", Counter({"cupy:gelu_kernel": 4, "scale_forward": 2}))
    monkeypatch.setattr(cupy_support, "_COMPILED", {"seconds": 0.25, "compiles": 1})
    report = cupy_support.report()
    assert report == {"launches": 4, "kernels": ["gelu_kernel"], "other_native_calls": 2, "compile_s": 0.25,
                      "compiles": 1}
    result = types.SimpleNamespace(compile_seconds=1.0)
    cupy_support.apply_report(result, report)
    assert result.compile_seconds == 1.25
    cupy_support.apply_report(result, {"compile_s": float("nan")})
    cupy_support.apply_report(result, {"compile_s": "soon"})
    assert result.compile_seconds == 1.25


def test_count_launches_only_for_cupy_candidates_on_cuda():
    assert not cupy_support.count_launches("cpu", "import cupy\n")
    assert not cupy_support.count_launches("cuda", "import torch\n")


@needs_nvrtc
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the launch path up to the device, where none is")
def test_launches_are_counted_and_go_on_torchs_stream(monkeypatch):
    """RawKernel and RawModule launches made after count_launches are counted, enter torch's current
    stream, and are timed as compiles on their first launch; without a GPU the launch itself then
    fails in CuPy (its compile queries the device)."""
    import cupy
    import cupy._core
    import cupy._core.raw

    for module in (cupy, cupy._core, cupy._core.raw):
        for name in ("RawKernel", "RawModule"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, getattr(module, name))  # restored after the test
    monkeypatch.setattr(native, "CALL_COUNTS", Counter())
    monkeypatch.setattr(cupy_support, "_COMPILED", {"seconds": 0.0, "compiles": 0})
    entered = []

    class Stream:
        def __enter__(self):
            entered.append("torch's current stream")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(cupy_support, "_torch_stream", lambda cupy_module: Stream())
    assert cupy_support.count_launches("cuda", "import cupy\n")
    assert cupy_support.count_launches("cuda", "import cupy\n")  # once per process: the classes stay
    kernel = cupy.RawKernel('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }', "k")
    with pytest.raises(Exception, match="cuda|CUDA|driver"):
        kernel((1,), (1,), (0,))
    module = cupy.RawModule(code="template <typename T> __global__ void t(T* y) { y[0] = T(1); }",
                            name_expressions=("t<float>",))
    with pytest.raises(Exception, match="cuda|CUDA|driver"):
        module.get_function("t<float>")((1,), (1,), (0,))
    assert native.CALL_COUNTS == Counter({"cupy:k": 1})  # get_function failed before a launch
    assert entered == ["torch's current stream"]
    assert cupy_support._COMPILED["compiles"] == 1


def test_cpu_evaluator_rejects_a_cupy_candidate(cpu_evaluator):
    source = solution_path(get_task("builtin/L1/gelu"), "cuda", language="cupy").read_text()
    result = cpu_evaluator.evaluate(get_task("builtin/L1/gelu"), source)
    assert result.error_code is ErrorCode.INVALID_ACTION and "GPU" in result.message, result.message
    assert result.language == "cupy"


def test_prompt_offers_the_cupy_form():
    task = get_task("builtin/L1/gelu")
    text = task_prompt(task, backend="cuda", hardware="H100", config=EvalConfig(), max_turns=4, language="cupy")
    assert "cupy.RawKernel" in text and "cupy.asarray(t)" in text
    assert "launch your own CuPy RawKernel / RawModule kernels" in text
    assert "cuBLAS / cuDNN (or any library) from your own C++ is allowed" not in text
    with pytest.raises(ValueError, match="cupy"):
        task_prompt(task, backend="cpu", hardware="cpu", config=EvalConfig(), max_turns=4, language="cupy")


def test_kernel_env_refuses_cupy_on_the_cpu_backend():
    from cuda_gym.envs.kernel_env import KernelEnv

    with pytest.raises(ValueError, match="cupy"):
        KernelEnv(backend="cpu", language="cupy")


@pytest.mark.gpu
def test_every_cupy_solution_is_ok_on_cuda(cuda_evaluator):
    assert CUPY_SOLVED
    futures = {t.id: cuda_evaluator.submit(t, solution_path(t, "cuda", language="cupy").read_text())
               for t in CUPY_SOLVED}
    failures = []
    for task_id, future in futures.items():
        result = future.result()
        if not result.ok or result.language != "cupy" or result.compile_seconds <= 0:
            failures.append(f"{task_id}: {result.error_code.value} {result.message[:300]} "
                            f"(language {result.language}, compile {result.compile_seconds} s)")
    assert not failures, "\n".join(failures)


def test_gpu_benchmark_plans_every_form_in_a_dry_run(tmp_path):
    """benchmarks/cupy_gpu.py --dry-run: every CuPy-solved task has a native solution, the plan names
    each file that exists, and the JSON is written (no GPU, no CuPy needed)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "cupy_gpu.py"), "--backend", "cpu", "--dry-run",
                           "--repeats", "2", "--inline-repeats", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads(out.read_text())["plan"]
    assert not plan["missing"]
    assert [row["task_id"] for row in plan["tasks"]] == [t.id for t in CUPY_SOLVED]
    assert all("cupy" in row and "native" in row for row in plan["tasks"])
    inline = sum("load_inline" in row for row in plan["tasks"])
    assert inline >= 1 and plan["cold_runs"] == 2 * 2 * len(CUPY_SOLVED) + inline
    refused = subprocess.run([sys.executable, str(root / "benchmarks" / "cupy_gpu.py"), "--backend", "cpu",
                              "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "GPU only" in refused.stderr
