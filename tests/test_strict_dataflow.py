"""The strict policy by data flow (OpRecorder): PyTorch compute on constants (tensors the forward
made from literals or shapes, and what comes from them alone) is allowed; compute, copies, casts and
moves of the task's data (inputs, parameters, buffers and what comes from them) are FORBIDDEN, with a
key that names the op, the argument and where its task data came from.

Most tests run the recorder directly on small modules (no evaluator, milliseconds each); a few run
whole candidates through the CPU evaluator; one CUDA candidate is for the GPU (`-m gpu`)."""
from __future__ import annotations

import ctypes
import math
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes

from cuda_gym.eval import ErrorCode, native_calls
from cuda_gym.eval import recorder as recorder_module
from cuda_gym.eval.op_policy import op_is_allowed
from cuda_gym.eval.recorder import OpRecorder
from cuda_gym.native import load_kernels
from cuda_gym.tasks import get_task
from cuda_gym.tasks.task import task_from_file

CANDIDATES = Path(__file__).parent / "strict_candidates"
HOSTILE = Path(__file__).parent / "hostile"


class Forward(nn.Module):
    """A module whose forward is `fn(self, *inputs)`, with one Linear layer and a BatchNorm buffer."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.fn(self, x)


def record(fn, x=None) -> OpRecorder:
    """Runs `fn(module, x)` as a module's forward under the recorder, as the worker does."""
    model = Forward(fn)
    x = torch.randn(2, 4) if x is None else x
    recorder = OpRecorder()
    with torch.no_grad(), recorder:
        model(x)
    return recorder


def forbidden(recorder: OpRecorder) -> list[str]:
    return sorted(op for op in recorder.ops if not op_is_allowed(op, "strict"))


@pytest.fixture(scope="module")
def lib():
    """A tiny native library: `copy` (y = x) and `touch` (reads one element)."""
    return load_kernels(
        cpp=r"""
#include <cstdint>
extern "C" void copy(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }
extern "C" float touch(const float* x) { return x[0]; }
""",
        functions=["void copy(const float* x, float* y, int64_t n)", "float touch(const float* x)"],
    )


# ------------------------------------------------------------------------------ constants are allowed
def test_constants_made_moved_and_computed_on_are_allowed():
    def fn(self, x):
        l = torch.zeros(3, dtype=torch.float64).to(x.device).to(x.dtype)
        m = torch.full((3,), -math.inf).to(device=x.device, dtype=torch.float64)
        r = torch.arange(6).view(2, 3).float() * 0.5 + l
        t = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).t().contiguous().to(torch.float16)
        e = torch.empty(3)
        e.zero_()
        e = e.add_(1) + m.float() + torch.ones(3).sum()
        s = torch.as_tensor([1, 2, 3]).cumsum(0)
        z = torch.zeros_like(x).to(torch.float64) + x.new_ones(2, 4)  # shape-only of task data
        return r, t, e, s, z

    recorder = record(fn)
    assert forbidden(recorder) == []
    assert recorder.constant_ops["aten::_to_copy"] >= 5
    assert recorder.closed_by == ""
    assert not recorder.hidden_ops, "an allowed constant op seen by the mode is not hidden"


def test_device_move_of_constant_is_allowed_and_of_input_forbidden():
    """On the CPU, 'meta' is a second device: `.to('meta')` dispatches a real device move."""
    assert forbidden(record(lambda self, x: torch.zeros(3).to("meta"))) == []
    assert forbidden(record(lambda self, x: x.to("meta"))) == [
        "aten::_to_copy on input 0 (task data: forward input x)"]


def test_dtype_cast_of_weight_and_buffer_forbidden():
    assert forbidden(record(lambda self, x: self.linear.weight.half())) == [
        "aten::_to_copy on input 0 (task data: parameter linear.weight)"]
    assert forbidden(record(lambda self, x: self.norm.running_mean.to(torch.float64))) == [
        "aten::_to_copy on input 0 (task data: buffer norm.running_mean)"]


def test_views_of_task_data_are_task_data():
    keys = forbidden(record(lambda self, x: x.t()[0:2].unsqueeze(0).contiguous()))
    assert keys and all("task data: forward input x" in k for k in keys), keys


def test_compute_mixing_constant_and_task_data_names_the_tainted_argument():
    assert forbidden(record(lambda self, x: torch.ones(2, 4) * x)) == [
        "aten::mul on input 1 (task data: forward input x)"]
    assert forbidden(record(lambda self, x: F.gelu(x))) == ["aten::gelu on input 0 (task data: forward input x)"]


# ------------------------------------------------------------------------- writes into a constant
def test_copy_into_zeros_buffer_then_torch_ops_forbidden():
    def fn(self, x):
        buf = torch.zeros(2, 4)
        buf.copy_(x)
        return F.gelu(buf)

    assert forbidden(record(fn)) == ["aten::copy_ on input 1 (task data: forward input x)",
                                     "aten::gelu on input 0 (task data: forward input x)"]


@pytest.mark.parametrize("write", ["add_", "fill_", "out", "index_put_", "view"])
def test_writes_of_task_data_into_a_constant_make_it_task_data(write):
    def fn(self, x):
        c = torch.zeros(2, 4)
        if write == "add_":
            c.add_(x)
        elif write == "fill_":
            c.fill_(x[0, 0])  # fill_ is a creation op, but the value is task data
        elif write == "out":
            torch.add(torch.ones(2, 4), x, out=c)
        elif write == "index_put_":
            c[torch.tensor([0])] = x[:1]
        else:
            c.view(-1)[:4].copy_(x[0])  # a write through a view reaches the whole storage
        return c.to(torch.float64)

    keys = forbidden(record(fn))
    assert "aten::_to_copy on input 0 (task data: forward input x)" in keys, keys


def test_uninitialised_memory_is_not_a_constant_until_overwritten():
    assert forbidden(record(lambda self, x: torch.empty(3) * 2)) == [
        "aten::mul on input 0 (task data: uninitialised memory (aten::empty))"]
    assert forbidden(record(lambda self, x: torch.empty_like(x).to(torch.float64))) == [
        "aten::_to_copy on input 0 (task data: uninitialised memory (aten::empty_like))"]

    def half_filled(self, x):
        e = torch.empty(4)
        e[:2].fill_(1.0)  # the other half still holds whatever was there
        return e * 2

    assert forbidden(record(half_filled)) == ["aten::mul on input 0 (task data: uninitialised memory (aten::empty))"]

    def filled(self, x):
        e = torch.empty(4)
        e.fill_(1.0)
        return e * 2

    assert forbidden(record(filled)) == []


# ----------------------------------------------------------------------------- reads to the host
@pytest.mark.parametrize("read", ["item", "float", "tolist", "numpy", "from_numpy", "data_ptr", "print"])
def test_task_data_read_to_the_host_and_rebuilt_is_task_data(read):
    def fn(self, x):
        if read == "item":
            rebuilt = torch.tensor([[x[i, j].item() for j in range(4)] for i in range(2)])
        elif read == "float":
            rebuilt = torch.full((2, 4), float(x[0, 0]))
        elif read == "tolist":
            rebuilt = torch.tensor(x.tolist())
        elif read == "numpy":
            rebuilt = torch.tensor(x.numpy().copy())
        elif read == "from_numpy":
            rebuilt = torch.from_numpy(np.asarray(x))
        elif read == "data_ptr":
            values = (ctypes.c_float * 8).from_address(x.data_ptr())
            rebuilt = torch.tensor(list(values)).view(2, 4)
        else:
            rebuilt = torch.tensor(eval(repr(x).replace("tensor", "")))  # noqa: S307 - test input
        return F.gelu(rebuilt)

    recorder = record(fn)
    keys = forbidden(recorder)
    assert any(k.startswith("aten::gelu on input 0 (task data: ") for k in keys), keys
    if read != "print":  # printing also runs PyTorch ops the mode cannot see (torch's formatter hides them)
        assert all("(task data: " in k for k in keys), keys
    assert recorder.closed_by


def test_reading_a_constant_to_the_host_keeps_later_constants():
    def fn(self, x):
        n = int(torch.ones(3).sum().item())
        return torch.tensor(torch.arange(3).tolist()).float().to(torch.float64) + n

    assert forbidden(record(fn)) == []


def test_tensor_from_an_array_is_not_vouched_for():
    keys = forbidden(record(lambda self, x: torch.tensor(np.ones(3, dtype=np.float32)) * 2))
    assert "aten::mul on input 0 (task data: data that aten::lift_fresh got from something other than Python " \
           "numbers (an array, a buffer))" in keys, keys
    assert forbidden(record(lambda self, x: torch.tensor([1.0, 2, True]) * 2)) == []
    assert forbidden(record(lambda self, x: torch.tensor(x.shape).to(torch.float64))) == []


def test_constants_after_turning_torch_function_off_are_task_data():
    def fn(self, x):
        with torch._C.DisableTorchFunction():
            c = torch.zeros(3)
        return c.to(torch.float64)

    recorder = record(fn)
    assert forbidden(recorder) == ["aten::_to_copy on input 0 (task data: made after torch-function handling "
                                   "was turned off (the host-read watch was blind))"]


# ------------------------------------------------------------------------------------ native code
def test_native_call_makes_earlier_constants_task_data(lib):
    def fn(self, x):
        buf = torch.zeros(2, 4)
        lib.copy(x, buf, 8)
        return F.gelu(buf)

    keys = forbidden(record(fn))
    assert len(keys) == 1 and keys[0].startswith("aten::gelu on input 0 (task data: a constant made before"), keys


def test_python_values_after_a_native_call_are_task_data(lib):
    def fn(self, x):
        host = (ctypes.c_float * 8)()
        lib.copy(x, ctypes.addressof(host), 8)  # task data in host memory, no tensor involved
        return F.gelu(torch.tensor(list(host)))

    keys = forbidden(record(fn))
    assert len(keys) == 1 and keys[0].startswith("aten::gelu on input 0 (task data: made after"), keys

    def value(self, x):
        return torch.full((3,), lib.touch(x)) * 2

    assert len(forbidden(record(value))) == 1


def test_constants_made_and_moved_before_the_kernel_pass(lib):
    def fn(self, x):
        scratch = torch.zeros(8, dtype=torch.float64).to(x.device).to(torch.float32)
        scratch += torch.full((8,), -math.inf).to(torch.float64).to(torch.float32)
        out = torch.empty_like(x)
        lib.copy(x, out, x.numel())
        lib.copy(out, scratch, 8)
        return out

    recorder = record(fn)
    assert forbidden(recorder) == []
    assert recorder.constant_ops["aten::_to_copy"] == 3


def test_constants_made_and_moved_inside_an_extension_call_pass():
    """KernelBench's load_inline form makes and moves constants in the extension's C++ (torch::zeros,
    .to(device)) during the call: a stand-in module whose function does the same through the same
    dispatcher, wrapped as the worker wraps load_inline modules."""
    def forward_in_cpp(x):
        l = torch.zeros(2, dtype=torch.float64).to(x.device).to(torch.float32)  # as the C++ would
        m = torch.full((2,), -math.inf).to(torch.float64)
        return torch.empty_like(x), l, m

    extension = native_calls._CountingModule(type("Extension", (), {"forward": staticmethod(forward_in_cpp)}))

    def fn(self, x):
        early = torch.ones(2)
        out, l, m = extension.forward(x)
        return out, l.to(torch.float64), early.to(torch.float64)  # back in Python: nothing is a constant

    recorder = record(fn)
    assert recorder.constant_ops["aten::_to_copy"] == 2  # the two inside the call (.to(x.device) is a no-op here)
    assert forbidden(recorder) == [
        "aten::_to_copy on input 0 (task data: a constant made before a call into native code returned)",  # l
        "aten::_to_copy on input 0 (task data: a constant made before a call into native code)",  # early
    ], forbidden(recorder)
    assert native_calls.inside_extension == [0]


def scripted(source: str):
    """A fresh TorchScript function from `source` (its ops are dispatched by the JIT's C++, with no
    torch function on the way, as an extension's C++ dispatches them); fresh, so that the JIT has
    not folded its constants away."""
    unit = torch.jit.CompilationUnit(source)
    return unit.forward


def test_constants_made_and_moved_by_cpp_inside_an_extension_call_pass():
    """The real thing the stand-in above imitates: ops dispatched by C++ during an extension call
    (KernelBench's flash-attention example makes l and m with torch::zeros / torch::full and moves
    them with .to(device)) reach the recorder without a torch function; they are judged by their
    tensor arguments, not taken for code that turned torch-function handling off."""
    cpp = scripted("""
def forward(x: Tensor):
    l = torch.zeros(x.shape, dtype=torch.float64).to(torch.float32)
    m = torch.full([x.shape[0]], -1e30).to(torch.float64)
    return l, m
""")
    extension = native_calls._CountingModule(type("Extension", (), {"forward": staticmethod(cpp)}))
    recorder = record(lambda self, x: extension.forward(x))
    assert forbidden(recorder) == []
    assert recorder.constant_ops["aten::_to_copy"] == 2
    assert recorder.closed_by == ""


def test_cpp_inside_an_extension_call_still_may_not_compute_on_task_data():
    cpp = scripted("""
def forward(x: Tensor, w: Tensor):
    return x.to(torch.float64), torch.nn.functional.gelu(w)
""")
    extension = native_calls._CountingModule(type("Extension", (), {"forward": staticmethod(cpp)}))
    assert forbidden(record(lambda self, x: extension.forward(x, self.linear.weight))) == [
        "aten::_to_copy on input 0 (task data: forward input x)",
        "aten::gelu on input 0 (task data: parameter linear.weight)"]


def test_cpp_dispatch_outside_an_extension_call_ends_constants():
    """TorchScript reached from Python (not an extension call): the watch does not see its host
    reads (`tolist`), so nothing made after it is a constant."""
    cpp = scripted("""
def forward(x: Tensor):
    return torch.zeros(x.shape, dtype=torch.float64).to(torch.float32)
""")
    recorder = record(lambda self, x: cpp(x))
    assert forbidden(recorder) == ["aten::_to_copy on input 0 (task data: made after an op dispatched from C++ "
                                   "outside the candidate's extension calls (the host-read watch does not see "
                                   "that code))"]


# ----------------------------------------------------------------- the profiler cross-check
def test_hidden_op_is_reported_even_when_the_same_op_ran_on_a_constant():
    def fn(self, x):
        torch.zeros(3) + 1  # allowed, seen by the mode
        with _disable_current_modes():
            y = x + 1  # hidden from the mode: judged by the profiler, without taint information
        return y

    recorder = record(fn)
    assert recorder.hidden_ops["aten::add"] == 1
    assert "aten::add" in forbidden(recorder)


def test_op_on_another_thread_is_hidden():
    def fn(self, x):
        worker = threading.Thread(target=lambda: torch.sigmoid(x))
        worker.start()
        worker.join()
        return x

    assert "aten::sigmoid" in forbidden(record(fn))


def test_pytorch_compute_inside_the_candidates_own_op_is_hidden():
    @torch.library.custom_op("cuda_gym_strict_test::relu_by_torch", mutates_args=())
    def relu_by_torch(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    recorder = record(lambda self, x: relu_by_torch(x))
    assert {"aten::relu", "aten::clamp_min"} & set(forbidden(recorder)), forbidden(recorder)
    assert recorder.ops["cuda_gym_strict_test::relu_by_torch"] == 1  # the op itself is the candidate's


@pytest.mark.parametrize("tamper", [None, "ops", "profiler", "method", "marks", "watch", "popped"])
def test_is_active_reports_a_rebound_recorder(tamper):
    """What candidate code that got hold of the recorder could rebind (its tallies, its profiler
    handle, a method on the instance, its marks, its watch) makes `is_active()` false, and the
    worker reports the recording as not intact."""
    from collections import Counter

    recorder = OpRecorder()
    x = torch.randn(2, 4)
    with torch.no_grad(), recorder:
        Forward(lambda self, x: x)(x)
        if tamper == "ops":
            recorder.ops = Counter()
        elif tamper == "profiler":
            recorder._profiler = None
        elif tamper == "method":
            recorder._judge = lambda *args: (None, [])
        elif tamper == "marks":
            recorder._marks._marks = {}
        elif tamper == "watch":
            recorder._watch.recorder = OpRecorder()
        active = recorder.is_active()
        if tamper == "popped":
            with _disable_current_modes():
                active = recorder.is_active()
    assert active is (tamper is None)


def test_forward_hook_is_gone_before_the_forward_runs():
    """The recorder's global forward pre-hook (a bound method: it leads to the recorder) runs first
    and removes itself, so hooks of the candidate's and its forward never see it."""
    from torch.nn.modules import module as module_module

    seen = []

    def candidate_hook(module, args):
        seen.append([getattr(h, "__self__", None) for h in module_module._global_forward_pre_hooks.values()])

    handle = torch.nn.modules.module.register_module_forward_pre_hook(candidate_hook)
    try:
        recorder = record(lambda self, x: candidate_hook(self, x) or x)
    finally:
        handle.remove()
    assert len(seen) == 2 and all(recorder not in entry for entry in seen), seen  # as a hook, and in the forward
    assert recorder._labelled


# ------------------------------------------------------------------------------------ op_is_allowed
def test_op_is_allowed_judges_recorder_keys():
    assert op_is_allowed("aten::zeros", "strict")
    assert op_is_allowed("mylib::kernel", "strict")
    assert op_is_allowed("profiler::_record_function_enter_new", "strict")
    assert not op_is_allowed("aten::mm", "strict")
    assert not op_is_allowed("aten::_to_copy on input 0 (task data: forward input x)", "strict")
    assert not op_is_allowed("quantized::linear_dynamic", "strict"), "PyTorch's own namespaces"
    assert op_is_allowed("aten::mm on input 0 (task data: forward input x)", "permissive")


def test_storage_marks_hold_only_while_the_storage_lives():
    marks = recorder_module._StorageMarks()
    tensor = torch.zeros(4)
    storage = tensor.untyped_storage()
    marks.set(storage, recorder_module._CONSTANT)
    assert marks.get(tensor[1:].untyped_storage()) == recorder_module._CONSTANT  # views share the mark
    key = storage._cdata
    del tensor, storage
    assert marks._marks[key][0]() is None  # dead: a new storage at this address gets no mark
    assert marks.get(torch.ones(4).untyped_storage()) is None
    kept = [torch.zeros(1) for _ in range(10)]
    for t in kept:
        marks.set(t.untyped_storage(), "forward input x")
    for _ in range(5000):  # short-lived storages: their entries are purged, the live ones kept
        marks.set(torch.zeros(1).untyped_storage(), recorder_module._CONSTANT)
    assert len(marks._marks) < 2100
    assert all(marks.get(t.untyped_storage()) == "forward input x" for t in kept)


def test_marks_cannot_be_reached_from_a_storage():
    """No weakref callback (whose closure would hold the marks) hangs on a marked storage."""
    def fn(self, x):
        with torch._C.DisableTorchFunction():
            storage = torch._C.TensorBase.untyped_storage(x)
        assert [ref.__callback__ for ref in weakref.getweakrefs(storage)] == [None]
        return x

    record(fn)


def test_a_constant_mark_after_closing_is_task_data():
    """Closing turns every constant into task data; a constant mark found afterwards was set by
    someone other than the recorder, and does not make compute on it allowed."""
    def fn(self, x):
        n = float(x[0, 0])  # task data read to the host: closes
        recorder._marks.set(torch.Tensor.untyped_storage(x), recorder_module._CONSTANT)  # as a tamperer would
        return F.gelu(x) + n

    recorder = OpRecorder()
    with torch.no_grad(), recorder:
        Forward(fn)(torch.randn(2, 4))
    keys = forbidden(recorder)
    assert any(k.startswith("aten::gelu on input 0 (task data: a constant mark set after") for k in keys), keys


# ------------------------------------------------------------------------------ end to end (CPU)
def attention_task():
    return task_from_file(CANDIDATES / "attention_reference.py", suite="test", level=3)


def test_evaluator_accepts_kernel_with_constant_moves(cpu_evaluator):
    result = cpu_evaluator.evaluate(attention_task(), (CANDIDATES / "cpu_attention_constants.py").read_text(),
                                    backend="cpu")
    assert result.error_code is ErrorCode.OK, f"{result.error_code}: {result.message}"
    assert result.forbidden_ops == []


@pytest.mark.slow
def test_evaluator_accepts_load_inline_kernel_with_constants_made_in_cpp(cpu_evaluator):
    """KernelBench's flash-attention shape on the CPU: torch::zeros / torch::full and `.to(...)` in
    the extension's C++ must be OK: ATen ops that C++ dispatches are judged by their tensor arguments."""
    result = cpu_evaluator.evaluate(attention_task(), (CANDIDATES / "cpu_attention_load_inline.py").read_text(),
                                    backend="cpu")
    assert result.error_code is ErrorCode.OK, f"{result.error_code}: {result.message}"
    assert result.forbidden_ops == []


def test_evaluator_names_op_and_argument_for_a_weight_cast(cpu_evaluator):
    path = HOSTILE / "cpu_launder_weight_cast.py"
    task = get_task(guard_header_task(path))
    result = cpu_evaluator.evaluate(task, path.read_text(), backend="cpu")
    assert result.error_code is ErrorCode.FORBIDDEN, result.message
    assert "aten::_to_copy on input 0 (task data: parameter norm.weight)" in result.message, result.message


def guard_header_task(path: Path) -> str:
    return next(line.split(":", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("TASK:"))


def emulate_attention_kernel(q, k, v, o, l, m, rows_per_head, rows, d, scale):
    """`attention_kernel` of cuda_attention_constants.py on the CPU, as its threads run it: thread
    `row` (every row below `rows`, the launch's bound) reads q, k, v, l, m through flat pointers
    (head = row / rows_per_head), runs the online softmax over the head's keys in order, and writes
    its row of o, l and m. Rows the launch does not cover stay as they were."""
    q2, k2, v2, o2 = (t.view(-1, d) for t in (q, k, v, o))  # the kernel's pointer arithmetic
    l1, m1 = l.view(-1), m.view(-1)
    row = torch.arange(rows)
    head = row // rows_per_head
    qr = q2[row] * scale
    acc = torch.zeros(rows, d)
    run_max, run_sum = m1[row].clone(), l1[row].clone()
    for j in range(rows_per_head):
        key = head * rows_per_head + j
        s = (qr * k2[key]).sum(-1)
        new_max = torch.maximum(s, run_max)
        keep, p = torch.exp(run_max - new_max), torch.exp(s - new_max)
        run_sum = run_sum * keep + p
        acc = acc * keep[:, None] + p[:, None] * v2[key]
        run_max = new_max
    o2[row] = acc / run_sum[:, None]
    l1[row], m1[row] = run_sum, run_max
    return 0


def test_cuda_attention_candidate_launch_and_math_on_the_cpu(monkeypatch):
    """No GPU here: the CUDA candidate's forward runs on the CPU with its kernel emulated (the same
    launch arguments, pointer arithmetic and online softmax), against the reference. With too small a
    launch bound (batch*heads rows instead of batch*heads*seq) most rows would stay zero."""
    import cuda_gym.native

    class EmulatedLibrary:
        attention_forward = staticmethod(emulate_attention_kernel)

    monkeypatch.setattr(cuda_gym.native, "load_kernels", lambda **kwargs: EmulatedLibrary())
    task = attention_task()
    namespace: dict = {}
    exec(compile(task.source, "attention_reference", "exec"), namespace)  # noqa: S102 - test file
    sizes = task.sizes["cpu"]
    torch.manual_seed(0)
    shape = (sizes["batch_size"], sizes["heads"], sizes["seq_len"], sizes["head_dim"])
    q, k, v = (torch.randn(shape) for _ in range(3))
    expected = namespace["Model"]()(q, k, v)
    source = (CANDIDATES / "cuda_attention_constants.py").read_text()

    def relative_error(candidate_source: str) -> float:
        module: dict = {}
        exec(compile(candidate_source, "cuda_attention_constants", "exec"), module)  # noqa: S102
        out = module["ModelNew"]()(q, k, v)
        return float((out - expected).norm() / expected.norm())

    assert relative_error(source) < 1e-5
    launch = "seq, batch * heads * seq, d,"
    assert launch in source
    assert relative_error(source.replace(launch, "seq, batch * heads, d,")) > 0.9


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda_attention_constants", "cuda_attention_load_inline"])
def test_cuda_kernel_with_constant_device_moves_is_accepted(cuda_evaluator, name):
    """Native form (constants made and moved in Python) and load_inline form (made and moved in the
    extension's C++, as in KernelBench's few-shot flash-attention example)."""
    result = cuda_evaluator.evaluate(attention_task(), (CANDIDATES / f"{name}.py").read_text(), backend="cuda")
    assert result.error_code is ErrorCode.OK, f"{result.error_code}: {result.message}"
    assert result.forbidden_ops == []
