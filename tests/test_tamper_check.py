"""tamper._make_checker in this process (no tripwire armed): what its object and registry checks
report. The hostile catalogue (test_hostile.py) covers the same through whole evaluations."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
import types

import pytest
import torch

from cuda_gym.eval import tamper
from cuda_gym.eval.recorder import OpRecorder
from cuda_gym.eval.switches import Switches


def _checker(monkeypatch, objects):
    monkeypatch.setattr(tamper, "WATCHED_OBJECTS", objects)
    return tamper._make_checker("cpu", types.SimpleNamespace(events=lambda: []), Switches("cpu"))


def test_a_watched_object_replaced_is_reported_and_a_missing_one_is_not(monkeypatch):
    # torch versions differ in what they have: an attribute missing at the snapshot is not watched.
    changes = _checker(monkeypatch, (("json", "_default_encoder"), ("json", "no_such_attribute_here")))
    assert changes() == []
    monkeypatch.setattr(json, "_default_encoder", json.JSONEncoder())
    assert changes() == ["json._default_encoder"]


def test_tensor_as_a_pytree_node_and_a_dispatch_rule_for_a_cuda_gym_class_are_reported(monkeypatch):
    import torch.utils._pytree as pytree
    from torch._library.simple_registry import singleton

    changes = _checker(monkeypatch, ())
    assert changes() == []
    monkeypatch.setitem(pytree.SUPPORTED_NODES, torch.Tensor, object())
    assert changes() == ["torch.utils._pytree.SUPPORTED_NODES[Tensor]"]
    monkeypatch.delitem(pytree.SUPPORTED_NODES, torch.Tensor)
    rules = singleton.find("aten::gelu").torch_dispatch_rules
    monkeypatch.setitem(vars(rules)["_data"], OpRecorder, lambda *args: None)
    assert changes() == ["a torch dispatch rule for OpRecorder on aten::gelu"]


# cuda_gym modules a worker process imports whose dicts TamperCheck leaves alone: packages, the task
# readers, and code that runs only before the snapshot (the fork server's preload, fastbuild, candidate
# parsing) or for the reward.
UNWATCHED_WORKER_MODULES = {
    "cuda_gym", "cuda_gym.buildlock", "cuda_gym.envs", "cuda_gym.envs.registration", "cuda_gym.eval",
    "cuda_gym.eval.candidate", "cuda_gym.eval.fastbuild", "cuda_gym.eval.inline_split", "cuda_gym.eval.preload",
    "cuda_gym.eval.reward", "cuda_gym.eval.interface",  # the Evaluator protocol: nothing a check calls
    "cuda_gym.tasks", "cuda_gym.tasks.kernelbench", "cuda_gym.tasks.ops6k", "cuda_gym.tasks.suites",
    "cuda_gym.tasks.synth", "cuda_gym.tasks.task",
}


def test_every_cuda_gym_module_a_worker_imports_is_watched_or_named_as_unwatched():
    # A module split off a watched one must be watched too: `_make_checker` skips a listed module
    # that is not imported and watches nothing of a module that is not listed.
    code = ("import sys, cuda_gym.eval.worker, cuda_gym.eval.preload\n"
            "print('\\n'.join(sorted(n for n in sys.modules if n.startswith('cuda_gym'))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())
    watched = {name for name in tamper.WATCHED_MODULES if name.startswith("cuda_gym")}
    assert watched <= loaded, f"watched but never imported by a worker: {sorted(watched - loaded)}"
    assert loaded - watched == UNWATCHED_WORKER_MODULES, (
        f"add to tamper.WATCHED_MODULES (or, if nothing the checks call lives there, to UNWATCHED_WORKER_MODULES): "
        f"{sorted(loaded - watched - UNWATCHED_WORKER_MODULES)}; no longer imported: "
        f"{sorted(UNWATCHED_WORKER_MODULES - loaded)}")


def test_every_watched_cuda_gym_class_exists():
    import importlib

    for module_name, class_name in tamper.WATCHED_CLASSES:
        if module_name.startswith("cuda_gym"):
            assert isinstance(getattr(importlib.import_module(module_name), class_name, None), type), (
                f"{module_name}.{class_name} is watched but does not exist: the watch skips it")

# One flip per class of global switch (switches.py finds them; none is listed by hand). Each runs in
# a forked child: torch refuses to read some flags again once its legacy and new precision APIs
# were both used, so a flip could not be undone in this process.
SWITCH_CLASSES = {
    "backend enabled (cuDNN)": lambda: setattr(torch.backends.cudnn, "enabled", False),
    "backend enabled (oneDNN)": lambda: setattr(torch.backends.mkldnn, "enabled", False),
    "SDP toggle (flash)": lambda: torch.backends.cuda.enable_flash_sdp(False),
    "SDP toggle (memory-efficient)": lambda: torch.backends.cuda.enable_mem_efficient_sdp(False),
    "SDP toggle (math)": lambda: torch.backends.cuda.enable_math_sdp(False),
    "SDP priority order": lambda: torch._C._set_sdp_priority_order([0, 1, 2, 3, 4]),
    "cuDNN benchmark": lambda: setattr(torch.backends.cudnn, "benchmark", True),
    "TF32 matmul (legacy API)": lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
    "reduced-precision reduction": lambda: setattr(torch.backends.cuda.matmul,
                                                   "allow_fp16_reduced_precision_reduction", False),
    "float32 matmul precision": lambda: torch.set_float32_matmul_precision("medium"),
    "fp32_precision (cuDNN conv)": lambda: setattr(torch.backends.cudnn.conv, "fp32_precision", "ieee"),
    "deterministic algorithms": lambda: torch.use_deterministic_algorithms(True, warn_only=True),
    "anomaly mode": lambda: torch.autograd.set_detect_anomaly(True),
    "MHA fast path": lambda: torch.backends.mha.set_fastpath_enabled(False),
}
# Settable only where torch was built with CUDA.
CUDA_SWITCH_CLASSES = {
    "BLAS library": lambda: torch.backends.cuda.preferred_blas_library("cublaslt"),
    "linalg library": lambda: torch.backends.cuda.preferred_linalg_library("cusolver"),
}


def _in_child(check) -> bool:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            check()
            os._exit(0)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("name", [*sorted(SWITCH_CLASSES)] + [
    pytest.param(name, marks=pytest.mark.gpu) for name in sorted(CUDA_SWITCH_CLASSES)])
def test_every_class_of_global_switch_is_watched(name, monkeypatch):
    flip = SWITCH_CLASSES.get(name) or CUDA_SWITCH_CLASSES[name]

    def check():
        switches = Switches("cpu")
        changes = _checker(monkeypatch, ())
        assert switches.changed() == [] and changes() == []
        flip()
        seen = switches.changed()
        assert seen, f"{name}: not seen"
        assert set(seen) <= set(changes()), f"{name}: not in the tamper check"

    assert _in_child(check), f"{name}: see the child's traceback above"


def test_the_judges_own_context_is_not_a_switch():
    switches = Switches("cpu")
    with torch.no_grad():
        assert switches.changed() == []
    with torch.inference_mode():
        torch.ones(3) * 2
    assert switches.changed() == []


def test_tritons_llvm_handlers_are_not_a_change_and_a_candidates_handler_is(tmp_path, monkeypatch):
    # Triton's first compile installs LLVM's signal handlers from libtriton.so: an honest Triton
    # candidate's first launch does that after the check is armed. Compiling for a CUDA target needs
    # no GPU (LLVM and ptxas run on the host), so this is the GPU's case on the CPU.
    triton = pytest.importorskip("triton")
    import ctypes
    import signal

    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def double(x, y, n: tl.constexpr):
        i = tl.arange(0, n)
        tl.store(y + i, tl.load(x + i) * 2)

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # a cached kernel would not run LLVM

    def check():
        read = tamper._native_signal_reader([signal.SIGHUP, signal.SIGTERM, signal.SIGSEGV, signal.SIGUSR2])
        before = read()
        changes = tamper._make_checker("cpu", types.SimpleNamespace(events=lambda: []), Switches("cpu"))
        source = triton.compiler.ASTSource(fn=double, signature={"x": "*fp32", "y": "*fp32", "n": "constexpr"},
                                           constexprs={"n": 16})
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
        assert read() != before, "the compile installed no handler: this test no longer shows the case"
        assert not any("signal" in change for change in changes()), changes()
        # A handler of the candidate's own (here libc's abort, a function outside libtriton) is a change.
        libc = ctypes.CDLL(None)
        libc.signal.argtypes, libc.signal.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
        libc.signal(signal.SIGUSR2, ctypes.cast(libc.abort, ctypes.c_void_p))
        assert any("native signal disposition" in change for change in changes()), changes()

    assert _in_child(check), "see the child's traceback above"


NVRTC_CHECK = r"""
import ctypes, signal, types
from cupy_backends.cuda.libs import nvrtc
from cuda_gym.eval import tamper
from cuda_gym.eval.switches import Switches

signal.signal(signal.SIGINT, lambda *_: None)  # a Python handler, installed with SA_ONSTACK
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # as the sandbox leaves it
read = tamper._native_signal_reader([signal.SIGINT, signal.SIGXFSZ, signal.SIGUSR2])
before = read()
changes = tamper._make_checker("cpu", types.SimpleNamespace(events=lambda: []), Switches("cpu"))
program = nvrtc.createProgram('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', "k.cu", [], [])
nvrtc.compileProgram(program, ["--gpu-architecture=compute_90"])
after = read()
assert after != before, "the compile changed no disposition: this test no longer shows the case"
assert all(after[sig][0] == before[sig][0] for sig in before), (before, after)
assert not any("signal" in change for change in changes()), changes()
# Other flags on the same handler (SA_RESETHAND | SA_NODEFER: the handler runs once, nested) are a
# change, and so is another handler.
libc = ctypes.CDLL(None)

class SigAction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]

action = SigAction()
libc.sigaction(signal.SIGINT, None, ctypes.byref(action))
action.flags |= 0x80000000 | 0x40000000
assert libc.sigaction(signal.SIGINT, ctypes.byref(action), None) == 0
assert any("native signal disposition 2 " in change for change in changes()), changes()
libc.signal.argtypes, libc.signal.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
libc.signal(signal.SIGUSR2, ctypes.cast(libc.abort, ctypes.c_void_p))
assert any(f"native signal disposition {int(signal.SIGUSR2)} " in change for change in changes()), changes()
"""


def test_nvrtcs_reinstalled_handlers_are_not_a_change_and_new_flags_on_a_handler_are():
    # NVRTC (a CuPy candidate's first launch compiles with it) puts the handlers it saved back with
    # glibc's signal(), which changes their flags to BSD ones (SA_RESTART, no SA_ONSTACK): the same
    # handler, so no change. NVRTC compiles without a GPU, so this is the GPU's case on the CPU. It
    # runs in a fresh process: NVRTC does this in a process's first compile only (a fork of a process
    # that compiled before would show nothing).
    pytest.importorskip("cupy")
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - libnvrtc missing: pip install nvidia-cuda-nvrtc
        pytest.skip(f"NVRTC is not loadable here: {exc}")
    proc = subprocess.run([sys.executable, "-c", NVRTC_CHECK], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
