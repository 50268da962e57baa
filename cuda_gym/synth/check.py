"""The execution checks of one candidate task, run inside a synthesis worker (`worker.py`).

`check_task(job)` builds the task at the target backend's sizes and runs, in order:
load (the file executes, `Model(*get_init_inputs())` builds), eager (one forward), timing (the
median eager time must lie in the window; a task outside it is retried with its batch size
rescaled towards the target time, a power of two within the memory cap, up to
`calibration_rounds` times, since time is not linear in the batch once data leaves the caches), input mutation (the forward
must leave its inputs unchanged), magnitude (each floating output's RMS within `output_rms`, as
docs/task-format.md asks for O(0.1-100) outputs: near-zero results of cancellation are compared
mostly by rounding), determinism (two forwards give bitwise-equal outputs), and the
evaluator's own input draws (`cuda_gym.eval.draws.make_draw`: every draw's output finite,
and `degeneracy` finds the outputs distinguishable across draws). `compile_task(job)` runs the
task under `torch.compile` and compares it with eager at the fp32 tolerance of `EvalConfig`.

Both return a JSON-able dict: `ok`, `stage` (the first failed check, or "passed"), `message`,
`sizes` (the backend's sizes after calibration), `eager_ms`. Nothing raises out of them.
"""
from __future__ import annotations

import contextlib
import fcntl
import math
import statistics
import time
import traceback
from typing import Any

import torch

from ..eval.config import EvalConfig
from ..eval.correctness import degeneracy, flatten_outputs, judge_stats, output_stats
from ..eval.draws import make_draw
from ..eval.timed_inputs import changed_inputs, seed_check
from ..tasks.task import load_task_namespace

DEGENERACY_SAMPLE = 2**20  # elements per output compared across draws


class CheckFailed(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def _error_text(exc: BaseException, limit: int = 600) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _device(backend: str) -> torch.device:
    return torch.device("cuda", 0) if backend == "cuda" else torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(source: str, sizes: dict[str, Any], device: torch.device, seed: int, task_id: str):
    """The task's model (eval mode), inputs on `device` (seeded) and get_inputs()."""
    namespace = load_task_namespace(source, sizes, task_id)
    torch.manual_seed(seed)
    with torch.device(device):
        model = namespace["Model"](*namespace["get_init_inputs"]())
        inputs = list(namespace["get_inputs"]())
    model = model.to(device).eval()
    inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
    return model, inputs, namespace["get_inputs"]


def _outputs(value: Any) -> list[torch.Tensor]:
    outputs = flatten_outputs(value)
    for index, output in enumerate(outputs):
        if not isinstance(output, torch.Tensor):
            raise CheckFailed("eager", f"output {index} is a {type(output).__name__}, not a tensor")
    return outputs


def _nbytes(tensors: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


@contextlib.contextmanager
def _exclusive(lock_path: str | None):
    """Hold the timing lock (one worker times at a time) for the duration."""
    if not lock_path:
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def time_forward(model, inputs, device: torch.device, config: dict[str, Any], lock_path: str | None) -> float:
    """Median eager forward time in milliseconds (warm-ups first, then up to `timing_reps` within the budget)."""
    with torch.no_grad(), _exclusive(lock_path):
        for _ in range(int(config["warmup_reps"])):
            model(*inputs)
        _sync(device)
        times: list[float] = []
        started = time.perf_counter()
        while len(times) < int(config["timing_reps"]):
            if device.type == "cuda":
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                model(*inputs)
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end))
            else:
                begin_s = time.perf_counter()
                model(*inputs)
                times.append((time.perf_counter() - begin_s) * 1e3)
            if len(times) >= 3 and time.perf_counter() - started > float(config["timing_budget_s"]):
                break
    return statistics.median(times)


def _calibrated_batch(batch: int, eager_ms: float, config: dict[str, Any], item_bytes: float) -> int:
    """A power-of-two batch size aimed at the target time, within the memory cap."""
    wanted = batch * float(config["target_ms"]) / max(eager_ms, 1e-6)
    cap = float(config["max_tensor_bytes"]) / max(item_bytes, 1.0)
    value = max(1.0, min(wanted, cap))
    return 2 ** int(math.floor(math.log2(value)))


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
                                    for x, y in zip(a, b))


def _sample(output: torch.Tensor) -> Any:
    flat = output.detach().reshape(-1)
    if flat.numel() > DEGENERACY_SAMPLE:
        flat = flat[:: flat.numel() // DEGENERACY_SAMPLE + 1]
    return flat.to(torch.float64).cpu().numpy()


def _checks(model, inputs, get_inputs, device: torch.device, config: dict[str, Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        before = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
        first = _outputs(model(*inputs))
        changed = changed_inputs(before, inputs)
        if changed:
            raise CheckFailed("mutates_inputs", f"the forward modified its input(s) {changed}")
        del before
        for index, output in enumerate(first):
            if output.is_floating_point() and output.numel():
                sample = _sample(output)  # a strided sample: no float64 copy of a GiB-sized output
                rms = float((sample * sample).mean()) ** 0.5
                low, high = config["output_rms"]
                if math.isfinite(rms) and not low <= rms <= high:
                    raise CheckFailed("magnitude", f"output {index} has RMS {rms:.3g}, outside {low:g}-{high:g}: "
                                                   "values this small or large are compared mostly by rounding")
        second = _outputs(model(*inputs))
        if not _same(first, second):
            raise CheckFailed("nondeterministic", "two forwards on the same inputs gave different outputs")
        del second
        samples = []
        unrepeatable, seed_ignored = seed_check(get_inputs, device.type)
        if seed_ignored:
            raise CheckFailed("degenerate", seed_ignored)
        if unrepeatable:
            get_inputs = None  # the evaluator rearranges the task's own inputs then
        for draw_index in range(int(config["draws"])):  # the evaluator's own draws of a candidate's inputs
            draw = make_draw(inputs, draw_index, int(config["seed"]), device.type, get_inputs)
            outputs = first if draw.distribution == "task" else _outputs(model(*draw.inputs))
            for index, output in enumerate(outputs):
                if output.is_floating_point() and not bool(torch.isfinite(output).all()):
                    raise CheckFailed("nonfinite", f"output {index} has NaN/inf on the {draw.distribution!r} "
                                                   "input draw")
            samples.append([_sample(o) for o in outputs])
            del draw
        reason = degeneracy(samples)
        if reason:
            raise CheckFailed("degenerate", reason)
    return first


def check_task(job: dict[str, Any]) -> dict[str, Any]:
    """Run the execution checks of one task (see the module docstring)."""
    backend, config = job["backend"], job["config"]
    device = _device(backend)
    sizes = dict(job["sizes"])
    task_id = job.get("task_id", "<synth>")
    low, high = config["window_ms"]
    result: dict[str, Any] = {"ok": False, "stage": "load", "message": "", "sizes": sizes, "eager_ms": None,
                              "calibrated": False}
    model = inputs = None
    try:
        stage = "load"
        model, inputs, get_inputs = build(job["source"], sizes, device, int(config["seed"]), task_id)
        stage = "eager"
        with torch.no_grad():
            outputs = _outputs(model(*inputs))
        item_bytes = max([_nbytes([t]) for t in inputs + outputs] or [0]) / max(int(sizes.get("batch_size", 1)), 1)
        del outputs
        stage = "timing"
        eager_ms = time_forward(model, inputs, device, config, job.get("timing_lock"))
        batch_name = config.get("batch_name", "batch_size")
        for _ in range(int(config["calibration_rounds"]) if batch_name in sizes else 0):
            if low <= eager_ms <= high:
                break
            batch = _calibrated_batch(int(sizes[batch_name]), eager_ms, config, item_bytes)
            if batch == int(sizes[batch_name]):
                break
            del model, inputs
            model = inputs = None
            _free(device)
            sizes[batch_name] = batch
            result["calibrated"] = True
            stage = "load"
            model, inputs, get_inputs = build(job["source"], sizes, device, int(config["seed"]), task_id)
            stage = "timing"
            eager_ms = time_forward(model, inputs, device, config, job.get("timing_lock"))
        result["eager_ms"] = round(eager_ms, 4)
        if not low <= eager_ms <= high:
            raise CheckFailed("timing", f"eager time {eager_ms:.3g} ms is outside the window {low:g}-{high:g} ms"
                              + (" after rescaling the batch" if result["calibrated"] else ""))
        stage = "checks"
        outputs = _checks(model, inputs, get_inputs, device, config)
        result["outputs"] = [{"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")} for o in outputs]
        result.update(ok=True, stage="passed")
    except CheckFailed as exc:
        result.update(stage=exc.stage, message=str(exc))
    except torch.cuda.OutOfMemoryError as exc:
        result.update(stage="out_of_memory", message=_error_text(exc))
    except Exception as exc:  # the task's own failure: its stage says where
        result.update(stage=stage if stage != "checks" else "eager", message=_error_text(exc))
        result["restart"] = backend == "cuda" and "CUDA error" in str(exc)
    finally:
        del model, inputs
        _free(device)
    return result


def compile_task(job: dict[str, Any]) -> dict[str, Any]:
    """The task under torch.compile: it must run and match eager at the fp32 tolerance."""
    backend, config = job["backend"], job["config"]
    device = _device(backend)
    result: dict[str, Any] = {"ok": False, "stage": "compile", "message": "", "sizes": dict(job["sizes"])}
    model = inputs = None
    try:
        torch._dynamo.reset()
        model, inputs, _ = build(job["source"], job["sizes"], device, int(config["seed"]), job.get("task_id", "<synth>"))
        with torch.no_grad():
            expected = _outputs(model(*inputs))
            started = time.perf_counter()
            compiled = torch.compile(model)
            actual = _outputs(compiled(*inputs))
            _sync(device)
            result["compile_s"] = round(time.perf_counter() - started, 3)
        if len(actual) != len(expected):
            raise CheckFailed("compile_mismatch", f"compiled model returns {len(actual)} outputs, eager {len(expected)}")
        tolerance = EvalConfig()
        for index, (out, ref) in enumerate(zip(actual, expected)):
            if out.shape != ref.shape or out.dtype != ref.dtype:
                raise CheckFailed("compile_mismatch", f"output {index}: compiled {tuple(out.shape)} {out.dtype}, "
                                                      f"eager {tuple(ref.shape)} {ref.dtype}")
            message = judge_stats(output_stats(out, ref, tolerance), f"output {index}", out.numel(), tolerance)
            if message:
                raise CheckFailed("compile_mismatch", f"torch.compile differs from eager: {message}")
        result.update(ok=True, stage="passed")
    except CheckFailed as exc:
        result.update(stage=exc.stage, message=str(exc))
    except Exception as exc:
        result.update(stage="compile", message=_error_text(exc))
        result["restart"] = backend == "cuda" and "CUDA error" in str(exc)
    finally:
        del model, inputs
        torch._dynamo.reset()
        _free(device)
    return result


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
