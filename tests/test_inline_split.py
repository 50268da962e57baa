"""The split build of KernelBench-format candidates (cuda_gym/eval/inline_split.py, fastbuild.py):
what is split where, what is refused, the fall-through between build forms, and (where nvcc and
g++ are installed) that the split halves of the corpus in tests/inline_candidates compile."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cuda_gym.eval import fastbuild, inline_split
from cuda_gym.eval.inline_split import NotSplittable, split_cuda_source

CORPUS = sorted((Path(__file__).parent / "inline_candidates").glob("*.py"))


def load_inline_arguments(path: Path) -> dict:
    """The keyword arguments a candidate module passes to load_inline (run with a recording stub)."""
    from torch.utils import cpp_extension

    captured: dict = {}
    original = cpp_extension.load_inline
    cpp_extension.load_inline = lambda *args, **kwargs: captured.update(kwargs)
    try:
        exec(compile(path.read_text(), str(path), "exec"), {"__name__": "candidate"})
    finally:
        cpp_extension.load_inline = original
    return captured


def expected_form(path: Path) -> str:
    return re.search(r'^# EXPECTED_FORM = "(\w+)"', path.read_text(), re.M).group(1)


KERNEL = """
__global__ void scale_kernel(const float* x, float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s * x[i];
}
"""
WRAPPER = """
torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
    return y;
}
"""


def test_a_kernelbench_source_splits_into_a_torch_free_kernel_file_and_host_wrappers():
    split = split_cuda_source("#include <torch/extension.h>\n" + KERNEL + WRAPPER)
    assert split.kernels == ["scale_kernel"]
    assert "torch" not in split.kernel_source and "__global__ void scale_kernel" in split.kernel_source
    assert "scale(torch::Tensor" not in split.kernel_source
    assert "void scale_kernel(const float* x, float* y, float s, int n);" in split.host_source
    assert "__global__" not in split.host_source and "<<<" not in split.host_source
    assert ("(cuda_gym_push_launch((n + 255) / 256, 256) ? (void)0 : scale_kernel(x.data_ptr<float>(), "
            "y.data_ptr<float>(), (float)s, n))") in split.host_source
    assert "#include <torch/extension.h>" in split.host_source


def test_types_constants_and_macros_go_to_both_sides_device_code_to_the_kernel_file_only():
    source = """
#include <torch/extension.h>
#include <cuda_fp16.h>
#define TILE 32
constexpr int kThreads = 256;
struct Params { int n; float s; };
__device__ __forceinline__ float twice(float v) { return 2.f * v; }
__global__ void __launch_bounds__(kThreads) k(Params p, float* y) { y[threadIdx.x] = twice(p.s) * TILE; }
torch::Tensor run(torch::Tensor y) {
    Params p{(int)y.numel(), 1.f};
    k<<<1, kThreads>>>(p, y.data_ptr<float>());
    return y;
}
"""
    split = split_cuda_source(source)
    for shared in ("#define TILE 32", "constexpr int kThreads = 256;", "struct Params { int n; float s; };",
                   "#include <cuda_fp16.h>"):
        assert shared in split.kernel_source and shared in split.host_source, shared
    assert split.host_source.rstrip().endswith("#undef TILE")  # the bindings that follow do not see it
    assert "twice" in split.kernel_source and "twice" not in split.host_source
    assert "void k(Params p, float* y);" in split.host_source  # __launch_bounds__ dropped from the stub
    assert "#include <torch/extension.h>" not in split.kernel_source


def test_extern_c_kernels_keep_their_linkage_and_comments_and_strings_do_not_confuse_the_scan():
    source = """
// a comment with scale_kernel<<<1, 1>>>(x) and a brace {
static const char* kNote = "} <<< __global__ ;";
extern "C" __global__ void scale_kernel(const float* x, float* y) { /* } */ y[0] = x[0]; }
void run(const float* x, float* y) { scale_kernel<<<1, 1>>>(x, y); }
"""
    split = split_cuda_source(source)
    assert 'extern "C" void scale_kernel(const float* x, float* y);' in split.host_source
    assert split.host_source.count("cuda_gym_push_launch(1, 1)") == 1


def test_a_source_without_kernels_is_all_host_code():
    # A cuBLAS-only wrapper splits (all host code), so nvcc sees only the CUDA headers instead of
    # building it as one slow .cu file.
    source = ("#include <torch/extension.h>\n#include <cublas_v2.h>\n"
              "torch::Tensor mm(torch::Tensor a) { auto c = torch::empty_like(a); return c; }\n")
    split = split_cuda_source(source)
    assert split.kernels == []
    assert "torch" not in split.kernel_source and "#include <cublas_v2.h>" in split.kernel_source
    assert "torch::Tensor mm(torch::Tensor a)" in split.host_source and "<<<" not in split.host_source
    with pytest.raises(NotSplittable, match="launch"):  # a launch of no kernel of this source
        split_cuda_source("void other(float*);\nvoid run(float* y) { other<<<1, 1>>>(y); }")


@pytest.mark.parametrize("source, reason", [
    ("template <typename T> __global__ void k(T* y) {}\nvoid run(float* y) { k<float><<<1, 1>>>(y); }",
     "template"),
    ("namespace mine {\n__global__ void k(float* y) {}\n}\nvoid run(float* y) { mine::k<<<1, 1>>>(y); }",
     "namespace"),
    ("#ifdef FAST\n__global__ void k(float* y) {}\n#endif\nvoid run(float* y) { k<<<1, 1>>>(y); }",
     "conditional"),
    ("__global__ void k(float* y) {}\nvoid run(float* y) {\n#if 1\n k<<<1, 1>>>(y);\n#endif\n}", "conditional"),
    ("__constant__ float c[4];\n__global__ void k(float* y) { y[0] = c[0]; }\n"
     "void run(float* y, float* h) { cudaMemcpyToSymbol(c, h, 16); k<<<1, 1>>>(y); }", "device symbols"),
    ("#define LAUNCH(k, y) k<<<1, 1>>>(y)\n__global__ void k(float* y) {}\nvoid run(float* y) { LAUNCH(k, y); }",
     "macro"),
    ("__global__ void k(at::Half* y) {}\nvoid run(at::Half* y) { k<<<1, 1>>>(y); }", "torch"),
    ("__global__ void k(float* y) {}\n__global__ void k(double* y) {}\nvoid run(float* y) { k<<<1, 1>>>(y); }",
     "overloaded"),
    ("static __global__ void k(float* y) {}\nvoid run(float* y) { k<<<1, 1>>>(y); }", "static"),
    ("__global__ void k(float* y) {}\nvoid other(float*);\nvoid run(float* y) { other<<<1, 1>>>(y); }", "launch"),
    ("extern \"C\" {\n__global__ void k(float* y) {}\n}", "extern block"),
    # Found in review: each of these split and compiled, but meant something else.
    ("__global__ void k(float* y, char mode = 'x') { y[0] = mode; }\nconstexpr int kThreads = 32;\n"
     "void run(float* y) { k<<<1, kThreads>>>(y); }", "default arguments"),
    ("#define SCALE 2.0f\n// note \\\n/*\n#undef SCALE\n#define SCALE 3.0f\n// */\n"
     "__global__ void k(float* y) { y[0] = SCALE; }\nvoid run(float* y) { k<<<1, 1>>>(y); }", "line splice"),
    ('static const char* t = u8R"x(" /* )x";\n__global__ void k(float* y) {}\nvoid run(float* y) { k<<<1, 1>>>(y); }',
     "prefixed"),
    ("struct W { int v; operator int() const { return v; } };\n"
     "__host__ __device__ inline W operator+(W a, W b) { return W{a.v * 2 + b.v}; }\n"
     "__global__ void k(float* y) {}\nint run(float* y) { W a{1}, b{2}; k<<<1, 1>>>(y); return a + b; }", "operator"),
    ("#include <cuda_fp16.h>\n__global__ void k(__half* y) {}\nvoid run(__half* y) { __half s = 2.5f; k<<<1, 1>>>(y); }",
     "half"),
    ("#pragma pack(1)\n__global__ void k(float* y) {}\nvoid run(float* y) { k<<<1, 1>>>(y); }", "pragma"),
])
def test_what_cannot_be_split_with_certainty_is_refused(source, reason):
    with pytest.raises(NotSplittable, match=reason):
        split_cuda_source(source)


def test_flags_that_could_change_host_code_are_refused():
    inline_split.check_flags(["-O3", "--use_fast_math", "-arch=sm_90", "-Xptxas", "-v", ""], ["-O3", ""])
    for cuda_flags, cxx_flags in ((["-DBLOCK=128"], []), (["--default-stream", "per-thread"], []),
                                  (["-std=c++17"], []), ([], ["-std=c++17"]),
                                  (["-Xcompiler", "-fopenmp"], []), ([], ["-fopenmp"]), ([], ["-DX=1"]),
                                  ([], ["-ffast-math"])):
        with pytest.raises(NotSplittable):
            inline_split.check_flags(cuda_flags, cxx_flags)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_the_corpus_gets_its_expected_first_build_form(path):
    forms = [form for form, _ in fastbuild.build_forms(load_inline_arguments(path))]
    assert forms[0] == expected_form(path)
    assert forms[-1] == "as_written"


def test_sources_that_use_the_extension_name_are_built_as_written_only():
    """The fast forms build under their own names, which TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) would see."""
    arguments = dict(name="ops", cpp_sources="TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {}",
                     cuda_sources="#include <torch/extension.h>\n" + KERNEL + WRAPPER)
    assert [form for form, _ in fastbuild.build_forms(arguments)] == ["as_written"]
    arguments["cpp_sources"] = "torch::Tensor scale(torch::Tensor x, double s);"
    assert [form for form, _ in fastbuild.build_forms(arguments)][0] == "split"
    arguments["cpp_sources"] = "int pick(int v) { return v; }"  # definitions would share the host file
    assert [form for form, _ in fastbuild.build_forms(arguments)][0] == "stripped"


def test_a_failed_form_falls_through_and_the_build_directory_remembers_what_worked(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    calls: list[str] = []
    names: list[str] = []

    def fake_load_inline(**kwargs):
        form = "split" if kwargs.get("no_implicit_headers") else (
            "stripped" if "torch/extension.h" not in kwargs["cuda_sources"][0] else "as_written")
        calls.append(form)
        names.append(kwargs["name"])
        if form == "split":
            raise RuntimeError("Error building extension")  # e.g. the host file did not compile
        return form

    def no_implicit_headers_too(name, cpp_sources, cuda_sources=None, no_implicit_headers=False, **kwargs):
        return fake_load_inline(name=name, cpp_sources=cpp_sources, cuda_sources=cuda_sources,
                                no_implicit_headers=no_implicit_headers, **kwargs)

    monkeypatch.setattr(cpp_extension, "load_inline", no_implicit_headers_too)
    for attribute in ("_check_and_build_extension_h_precompiler_headers", "remove_extension_h_precompiler_headers"):
        monkeypatch.setattr(cpp_extension, attribute, getattr(cpp_extension, attribute))
    fastbuild.install()
    arguments = dict(name="scale", cpp_sources="torch::Tensor scale(torch::Tensor x, double s);",
                     cuda_sources="#include <torch/extension.h>\n" + KERNEL + WRAPPER, functions=["scale"],
                     build_directory=str(tmp_path))
    assert cpp_extension.load_inline(**arguments) == "stripped"
    assert calls == ["split", "stripped"]
    # Each form builds under its own name, so torch never numbers a second build of one name
    # (scale_v1) in the build worker that the eval worker, trying one form, would not.
    assert names == ["scale_split", "scale_stripped"]
    assert (tmp_path / fastbuild.FORM_FILE).read_text() == "stripped"
    assert fastbuild.BUILD_FORMS["scale"] == "stripped"
    calls.clear()
    names.clear()
    assert cpp_extension.load_inline(**arguments) == "stripped"  # e.g. the eval worker: straight to the build
    assert calls == ["stripped"] and names == ["scale_stripped"]


def _torch_include_flags() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_path('include')}"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("g++") is None, reason="needs nvcc and g++")
@pytest.mark.parametrize("path", [p for p in CORPUS if expected_form(p) == "split"],
                         ids=lambda p: p.stem)
def test_the_split_halves_of_the_corpus_compile(path, tmp_path):
    arguments = fastbuild.split_arguments(load_inline_arguments(path))
    kernel_file = tmp_path / "kernels.cu"
    kernel_file.write_text(arguments["cuda_sources"][0])
    nvcc = subprocess.run(["nvcc", "-c", "-arch=sm_90", "-Xcompiler", "-fPIC", str(kernel_file), "-o",
                           str(tmp_path / "kernels.o")], capture_output=True, text=True)
    _skip_if_this_machine_lacks_a_header(nvcc)
    assert nvcc.returncode == 0, nvcc.stderr[-3000:]
    host_file = tmp_path / "main.cpp"
    host_file.write_text("\n".join(arguments["cpp_sources"]))
    cuda_include = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    gxx = subprocess.run(["g++", "-fsyntax-only", "-std=c++20", "-DTORCH_API_INCLUDE_EXTENSION_H",
                          *_torch_include_flags(), f"-isystem{cuda_include}", str(host_file)],
                         capture_output=True, text=True)
    _skip_if_this_machine_lacks_a_header(gxx)
    assert gxx.returncode == 0, gxx.stderr[-3000:]


def _skip_if_this_machine_lacks_a_header(compiled: subprocess.CompletedProcess) -> None:
    missing = re.search(r"fatal error: (\S+): No such file", compiled.stderr)
    if compiled.returncode and missing and sys.platform == "linux":
        pytest.skip(f"this machine lacks {missing.group(1)} (CPU-only torch or a partial CUDA toolkit)")


def test_the_kernel_api_prelude_is_added_only_when_host_code_calls_those_functions():
    plain = split_cuda_source(KERNEL + WRAPPER)
    assert inline_split.KERNEL_API_PRELUDE not in plain.host_source
    with_attribute = split_cuda_source(KERNEL + WRAPPER.replace(
        "auto y", "cudaFuncSetAttribute(scale_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0);\n    auto y"))
    assert inline_split.KERNEL_API_PRELUDE in with_attribute.host_source


CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
KERNEL_API_USE = """
extern "C" void k1(const float* x, float* y);
void k2(int n);
int use() {
    cudaFuncAttributes attributes; int blocks; void* args[1] = {nullptr};
    cudaFuncGetAttributes(&attributes, k1);
    cudaFuncSetCacheConfig(k2, cudaFuncCachePreferL1);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k1, 256, 0);
    cudaLaunchKernel(k2, dim3(1), dim3(1), args);
    cudaFuncSetAttribute((const void*)k1, cudaFuncAttributePreferredSharedMemoryCarveout, 0);
    (cuda_gym_push_launch(dim3(1), dim3(32), 0, 0) ? (void)0 : k2(3));
    return cudaFuncSetAttribute(k1, cudaFuncAttributePreferredSharedMemoryCarveout, 0);
}
"""
# What cuda_runtime.h declares under nvcc; a header that also declared it for g++ must not clash.
RUNTIME_TEMPLATE = """
template <class T> static inline cudaError_t cudaFuncSetAttribute(T* f, cudaFuncAttribute a, int v) {
    return cudaFuncSetAttribute((const void*)f, a, v);
}
"""


@pytest.mark.skipif(shutil.which("g++") is None or not (CUDA_INCLUDE / "cuda_runtime.h").exists(),
                    reason="needs g++ and the CUDA headers")
@pytest.mark.parametrize("declared_by_header", [False, True])
def test_the_host_prelude_gives_g_plus_plus_the_kernel_taking_runtime_calls(tmp_path, declared_by_header):
    """cudaFuncSetAttribute(kernel, ...) and friends take a kernel directly only under nvcc; the
    prelude gives the host file the same calls, and
    does not clash where a header declares them too."""
    source = tmp_path / "host.cpp"
    source.write_text(inline_split.HOST_PRELUDE + (RUNTIME_TEMPLATE if declared_by_header else "")
                      + inline_split.KERNEL_API_PRELUDE + KERNEL_API_USE)
    gxx = subprocess.run(["g++", "-Wall", "-Werror", "-fsyntax-only", f"-isystem{CUDA_INCLUDE}", str(source)],
                         capture_output=True, text=True)
    assert gxx.returncode == 0, gxx.stderr[-2000:]


def test_the_precompiled_header_directory_is_on_the_include_path_whether_or_not_it_is_built(monkeypatch, tmp_path):
    """Build and eval workers must pass identical flags (or the eval worker rebuilds), even when the
    headers are finished between the two."""
    monkeypatch.setenv(fastbuild.PCH_ENV, str(tmp_path / "not-built-yet"))
    root = str(fastbuild.precompiled_header_root(tmp_path / "not-built-yet"))
    assert root.startswith(str(tmp_path / "not-built-yet" / "torch-"))
    arguments = dict(name="scale", cpp_sources="", cuda_sources="#include <torch/extension.h>\n" + KERNEL + WRAPPER)
    assert fastbuild.split_arguments(arguments)["extra_include_paths"] == [root]
    assert fastbuild.stripped_arguments(arguments)["extra_include_paths"] == [root]


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_a_header_included_twice_or_without_a_usable_variant_goes_on_to_torchs_own(tmp_path):
    """g++ looks for the header itself beside a precompiled-header directory it found but cannot use
    (for a second #include, or flags no variant matches) and stops there if it is missing: every
    split host file that includes torch/extension.h would fail that way. The forwarding
    header beside the variants sends g++ on to the real header. (A small header stands in for
    torch's here.)"""
    real = tmp_path / "include" / "torch" / "extension.h"
    real.parent.mkdir(parents=True)
    real.write_text("#pragma once\nstruct Tensor { int value; };\ninline int twice(int x) { return 2 * x; }\n")
    root = tmp_path / "pch"
    (root / "torch" / "extension.h.gch").mkdir(parents=True)
    made = subprocess.run(["c++", "-std=c++17", "-fPIC", "-x", "c++-header", str(real), "-o",
                           str(root / "torch" / "extension.h.gch" / "plain.gch")], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    source = tmp_path / "main.cpp"
    source.write_text("#include <torch/extension.h>\nint f();\n#include <torch/extension.h>\n"
                      "int f() { return twice(Tensor{3}.value); }\n")

    def compile_(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(["c++", "-std=c++17", "-fPIC", *flags, f"-I{root}", f"-isystem{tmp_path / 'include'}",
                               "-fsyntax-only", str(source)], capture_output=True, text=True)

    assert "No such file" in compile_().stderr  # what g++ says without the forwarding header
    fastbuild._write_forwarding_header(root / "torch" / "extension.h")
    for flags in ([], ["-O2"]):  # the variant used for the first include; no variant at all
        result = compile_(*flags)
        assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_precompiled_header_variants_serve_builds_with_and_without_optimisation(tmp_path):
    """Both variants are built with torch's extension flags, and g++ takes the one that matches:
    `-H` marks a used precompiled header with '!'."""
    import torch

    try:
        built = fastbuild.build_precompiled_headers(tmp_path / "pch")
        assert sorted(built) == sorted(fastbuild.PCH_VARIANTS)
        assert fastbuild.build_precompiled_headers(tmp_path / "pch") == []  # ready: nothing to do
        root = fastbuild.precompiled_header_root(tmp_path / "pch")
        assert (root / "torch" / "extension.h").read_text() == fastbuild.FORWARDING_HEADER
        source = tmp_path / "main.cpp"
        source.write_text("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n"
                          "#include <torch/extension.h>\n")  # a second include goes through the forwarding header
        include = Path(torch.__file__).parent / "include"
        flags = [f"-I{fastbuild.precompiled_header_root(tmp_path / 'pch')}", "-DTORCH_API_INCLUDE_EXTENSION_H",
                 f"-isystem{include}", f"-isystem{include / 'torch' / 'csrc' / 'api' / 'include'}",
                 f"-isystem{sysconfig.get_path('include')}", "-fPIC", "-std=c++20"]
        for optimisation, variant in (([], "plain"), (["-O3"], "optimized")):
            gxx = subprocess.run(["c++", *flags, *optimisation, "-H", "-fsyntax-only", str(source)],
                                 capture_output=True, text=True)
            assert gxx.returncode == 0, gxx.stderr[-2000:]
            used = [line for line in gxx.stderr.splitlines() if line.startswith("!")]
            assert used and used[0].endswith(f"{variant}.gch"), gxx.stderr[:500]
    finally:
        shutil.rmtree(tmp_path / "pch", ignore_errors=True)  # about 1.5 GB
