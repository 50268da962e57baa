"""TEMPORARY device test harness (to be deleted): correctness + timing of the CUDA solutions vs the tasks."""
import importlib.util
import math
import os
import sys
import time
import traceback

import types

try:
    import gymnasium  # noqa: F401
except ImportError:  # the GPU machine has no gymnasium; cuda_gym/__init__ only registers env IDs with it
    _g = types.ModuleType("gymnasium")
    _ge = types.ModuleType("gymnasium.envs")
    _gr = types.ModuleType("gymnasium.envs.registration")
    _gr.register = lambda *a, **k: None
    _gr.registry = {}
    sys.modules.update({"gymnasium": _g, "gymnasium.envs": _ge, "gymnasium.envs.registration": _gr})

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = os.path.dirname(os.path.abspath(__file__))
TASKS = os.path.abspath(os.path.join(ROOT, "..", ".."))  # cuda_gym/tasks/builtin
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

LIST = {
    1: ["matmul", "softmax", "layer_norm", "sum_dim", "gelu", "cumsum"],
    2: ["linear_gelu", "bias_scale_sigmoid", "residual_layer_norm", "matmul_row_sum", "conv2d_bias_relu", "rms_norm_silu"],
    3: ["mlp", "gru_cell", "attention", "cnn_block", "ffn_residual", "rnn_tanh"],
}
ODD = {
    "matmul": [dict(M=130, N=200, K=77), dict(M=256, N=128, K=4)],
    "softmax": [dict(batch_size=5, dim=1001), dict(batch_size=3, dim=40000), dict(batch_size=4, dim=3)],
    "layer_norm": [dict(batch_size=5, dim=1001), dict(batch_size=3, dim=40000)],
    "sum_dim": [dict(batch_size=9, dim=1001), dict(batch_size=5, dim=5000), dict(batch_size=5, dim=4097), dict(batch_size=3, dim=100)],
    "gelu": [dict(batch_size=3, dim=1001)],
    "cumsum": [dict(batch_size=5, dim=1001), dict(batch_size=3, dim=5000), dict(batch_size=4, dim=3), dict(batch_size=2, dim=100003)],
    "linear_gelu": [dict(batch_size=33, in_features=77, out_features=130)],
    "bias_scale_sigmoid": [dict(batch_size=7, dim=1001)],
    "residual_layer_norm": [dict(batch_size=5, dim=1001), dict(batch_size=3, dim=40000)],
    "matmul_row_sum": [dict(batch_size=33, in_features=77, out_features=130), dict(batch_size=9, in_features=5000, out_features=9)],
    "conv2d_bias_relu": [dict(batch_size=2, in_channels=11, out_channels=70, height=13, width=37)],
    "rms_norm_silu": [dict(batch_size=5, dim=1001), dict(batch_size=3, dim=40000)],
    "mlp": [dict(batch_size=33, input_size=77, hidden_size=130, output_size=9)],
    "gru_cell": [dict(batch_size=33, input_size=77, hidden_size=130), dict(batch_size=33, input_size=64, hidden_size=132)],
    "attention": [dict(batch_size=2, seq_len=130, dim=64), dict(batch_size=2, seq_len=100, dim=50)],
    "cnn_block": [dict(batch_size=2, in_channels=11, out_channels=70, height=13, width=37)],
    "ffn_residual": [dict(num_tokens=33, dim=77, hidden_dim=130)],
    "rnn_tanh": [dict(batch_size=5, seq_len=3, input_size=77, hidden_size=130)],
}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


def rel_l2(a, b):
    a = a.double()
    b = b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def n_bad(a, b):
    a = a.double()
    b = b.double()
    scale = b.norm().item() / max(b.numel(), 1) ** 0.5
    excess = (a - b).abs() - (1e-4 * scale + 1e-7 + 1e-3 * b.abs())
    return int((excess > 0).sum().item())


def transforms(inputs, gen):
    out = {"orig": inputs, "neg": [-t for t in inputs], "x3": [3 * t for t in inputs], "shift": [t + 1.0 for t in inputs],
           "center": [t - t.mean() for t in inputs]}
    sh = []
    for t in inputs:
        perm = torch.randperm(t.numel(), generator=gen, device="cpu").to(t.device)
        sh.append(t.reshape(-1)[perm].reshape(t.shape))
    out["shuf"] = sh
    return out


def time_fn(fn, inputs, reps):
    for _ in range(2):
        fn(*inputs)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*inputs)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def check(level, name, overrides=None, timing=True):
    task = load(os.path.join(TASKS, f"level{level}", f"{name}.py"), f"task_{name}")
    if overrides:
        for k, v in overrides.items():
            assert hasattr(task, k), (name, k)
            setattr(task, k, v)
    sol = load(os.path.join(ROOT, f"L{level}", f"{name}.py"), f"sol_{name}")
    torch.manual_seed(0)
    init = task.get_init_inputs()
    ref = task.Model(*init).cuda()
    new = sol.ModelNew(*init).cuda()
    new.load_state_dict(ref.state_dict(), strict=True)
    torch.manual_seed(1)
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in task.get_inputs()]
    gen = torch.Generator().manual_seed(2)
    worst = 0.0
    msgs = []
    with torch.no_grad():
        for tag, inp in transforms(inputs, gen).items():
            clones = [t.clone() for t in inp]
            r = ref(*inp)
            log = OpLog()
            with log:
                y = new(*inp)
            torch.cuda.synchronize()
            for a, b in zip(inp, clones):
                if not torch.equal(a, b):
                    msgs.append(f"{tag}: INPUT MUTATED")
            if y.shape != r.shape:
                msgs.append(f"{tag}: shape {tuple(y.shape)} vs {tuple(r.shape)}")
                continue
            if not torch.isfinite(y).all():
                msgs.append(f"{tag}: non-finite output")
            e = rel_l2(y, r)
            worst = max(worst, e)
            if e > 5e-5:
                msgs.append(f"{tag}: rel_l2 {e:.2e}")
            nb = n_bad(y, r)
            if nb:
                msgs.append(f"{tag}: {nb} elements out of elementwise tolerance")
        # determinism / fresh output
        y2 = new(*inputs)
        y3 = new(*inputs)
        if y2.data_ptr() == y3.data_ptr():
            pass
        if not torch.equal(y2, y3):
            msgs.append("nondeterministic")
    ops = sorted(o for o in log.ops if not any(k in o for k in ("empty", "view", "detach", "alias")))
    line = f"L{level} {name:22s} {str(overrides or ''):70s} worst_rel_l2={worst:.2e}"
    if ops:
        line += f" OPS={ops}"
    if timing:
        with torch.no_grad():
            tr = time_fn(ref, inputs, 10)
            tn = time_fn(new, inputs, 10)
        line += f" ref={tr:.3f}ms new={tn:.3f}ms speedup={tr / tn:.2f}"
    print(line + ("  !! " + "; ".join(msgs) if msgs else ""), flush=True)
    del ref, new, inputs
    torch.cuda.empty_cache()


def main():
    sel = sys.argv[1:]
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    t0 = time.time()
    for level, names in LIST.items():
        for name in names:
            if sel and name not in sel and f"L{level}" not in sel:
                continue
            for ov in [None] + ODD.get(name, []):
                try:
                    check(level, name, ov, timing=ov is None)
                except Exception:
                    print(f"L{level} {name} {ov} EXCEPTION:\n{traceback.format_exc()}", flush=True)
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
