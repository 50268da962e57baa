"""The baseline jobs: the reference timed eagerly and under torch.compile with an eval worker's
process history and timed calls, its profiled forwards, its float64 error measurement and whether
the task is degenerate; and the prewarm job, torch.compile's untimed first call of a task."""
from __future__ import annotations

import random
import secrets
import statistics
import time
from typing import Any

import numpy as np
import torch

from ..tasks.task import load_task_namespace
from . import memory, output_digest
from .channel import Channel
from .config import device_time
from .correctness import degenerate_reason
from .native_calls import count_native_calls
from .output_report import describe_outputs, trial_sample_seed
from .phase_clock import PhaseClock
from .profiling import profile_forward
from .tamper import TamperCheck
from .task_setup import TaskSetup, clone, fresh_reference, reference_and_inputs, setup_or_error
from .timed_calls import Audit, can_look_first, first_look, reference_digests, stats_meta, time_model
from .timed_inputs import copy_into
from .timing import PAIRS, time_pairs
from .worker_device import sync


def run_baseline(channel: Channel, job: dict, device: str) -> None:
    """Eager and torch.compile times of the reference, timed under an eval worker's conditions:
    the same history up to the timing (the trials' reference outputs made, timing sets and
    checksums, memory scrubbed, the tamper check armed, a fresh instance of the model given the
    reference's weights, its first look at trial 0's draw) and the same timed calls (fresh rotated inputs, checksums, audits). Each
    of those steps moves a host-bound model's time in its process, so only the same history times
    the reference submitted as its own candidate at 1.00x (benchmarks/timing_parity.py)."""
    config = job["config"]
    clock = PhaseClock(device)
    setup = setup_or_error(channel, job, device)
    if setup is None:
        return
    clock.mark("setup")
    # The float64 measurement, where no earlier job made it, comes after the timings and is given
    # to every later job of the task: no timed worker, baseline or eval, runs it before its timing.
    measure_after = setup.known_reference_error is None
    samples: list[list[np.ndarray]] = []  # what an eval worker sends of each trial's reference outputs

    def describe(index: int, outputs: list[torch.Tensor]) -> None:
        samples.append(describe_outputs(outputs, trial_sample_seed(job, index))[0])

    setup.prepare_trials(describe, measure_error=not measure_after)
    setup.prepare_timing_sets()
    digest = output_digest.DigestMaker(secrets.randbits(62))
    variants, _ = reference_digests(setup, config, digest)
    memory.scrub_freed(device, setup.output_nbytes)
    model = fresh_reference(setup, job, device)
    clock.mark("reference_history")
    result: dict[str, Any] = {"memory": setup.plan.to_meta(), "phase_s": clock.phases}
    compiled = None
    if "compile" in config["baselines"]:
        # Compiled before the tamper check is armed: its tripwire denies the frame lookups that
        # inductor's first import makes (torch.jit.script_method), as it would a candidate's.
        try:
            compiled = torch.compile(model)
            with torch.no_grad():
                compiled(*[clone(v) for v in setup.timing_sets[0]])
        except Exception as exc:  # noqa: BLE001 - the eager time stands without it
            compiled = None
            result["errors"] = {"compile": f"torch.compile of the reference raised {type(exc).__name__}: "
                                           f"{str(exc)[:1200]}"}
        result["compile_warmup_s"] = clock.mark("compile_warmup")
        # Whether inductor found this model's compiled graph in its cache (Evaluator.prewarm).
        result["compile_cache"] = {name: count for name, count in torch._dynamo.utils.counters["inductor"].items()
                                   if name.startswith("fxgraph_cache")}
    count_native_calls()
    TamperCheck(device, "permissive")  # armed as for a candidate
    audit = Audit("permissive")
    if can_look_first(setup):  # the eval worker's untimed look at trial 0's draw
        output, _ = first_look(model, setup, device, audit)
        describe_outputs(output, trial_sample_seed(job, 0), setup.reference_outputs[0], setup.stats_config,
                         setup.tolerance_floors(0))
        del output
        memory.scrub_freed(device, setup.output_nbytes)
    if "eager" in config["baselines"]:
        stats, _, _ = time_model(model, setup, device, config, variants, digest, audit)
        result["eager"] = stats_meta(stats)
        clock.mark("eager_timing")
    if compiled is not None:
        stats, _, _ = time_model(compiled, setup, device, config, variants, digest)
        result["compile"] = stats_meta(stats)
        clock.mark("compile_timing")
        if job.get("pair_baselines") and "eager" in result:
            result["compile_pairing"] = _pair_baselines(compiled, model, setup, device, config, result)
            clock.mark("compile_pairing")
    if device == "cuda":
        result["memory"].update(clock.memory_meta())
    channel.send("baseline", result)  # the times first: a profiler that fails or hangs loses nothing
    if device == "cuda":
        # After both timings (the profiler slows later launches): one profiled forward of each, here
        # where torch.compile's code really runs (a compiled reference judged as a candidate runs
        # eagerly under the op recorder's dispatch mode: docs/evaluation-policy.md).
        profiles, errors = {}, {}
        for name, timed in (("eager", model if "eager" in config["baselines"] else None), ("compile", compiled)):
            if timed is None:
                continue
            try:
                profiles[name] = profile_forward(timed, setup)
            except Exception as exc:  # noqa: BLE001 - the times stand without a profile
                errors[name] = f"the profiled forward raised {type(exc).__name__}: {exc}"[:500]
        clock.mark("profile")
        channel.send("baseline_profiles", {"profiles": profiles, "errors": errors, "phase_s": clock.phases})
    if measure_after:
        model = compiled = timed = variants = None  # noqa: F841 - freed: the twin gets the room its plan gave it
        setup.measure_reference_error_after()
        channel.send("baseline_reference_error", setup.reference_error_meta())
    # Whether the task can tell a kernel from a constant, decided here once per task (no candidate
    # code has run in this process) from the same draws and tolerances an eval worker's judge sees.
    floors = [setup.tolerance_floors(index) for index in range(setup.trial_count)]
    channel.send("baseline_degenerate", {"reason": setup.seed_ignored or degenerate_reason(samples, floors,
                                                                                           setup.stats_config)})


def run_prewarm(channel: Channel, job: dict, device: str) -> None:
    """torch.compile's first call of the task's reference, untimed, so that the task's baseline
    workers later find its compiled code in the shared inductor cache (Evaluator.prewarm). The same
    model, input shapes and precision flags as the baseline worker's compile, so the same cache key."""
    started = time.perf_counter()
    import torch._inductor.config as inductor_config

    # Prewarms run side by side on one device, so Triton's autotuning of the compiled kernels would
    # pick configs from contended timings; its local cache would hand them to the baseline workers.
    # Off here, which the generated code keeps (the setting is not part of the graph's cache key):
    # each baseline worker then tunes its kernels itself, alone on the device, before its timing.
    inductor_config.autotune_local_cache = False
    inductor_config.compile_threads = max(1, int(job.get("compile_threads") or 1))  # not in the cache key
    namespace = load_task_namespace(job["task_source"], job["sizes"], job["task_id"])
    _, model, inputs = reference_and_inputs(namespace, job["seed"], device)
    with torch.no_grad():
        torch.compile(model)(*inputs)
    sync(device)
    channel.send("prewarm", {"seconds": round(time.perf_counter() - started, 3)})


def _pair_baselines(compiled: Any, model: Any, setup: TaskSetup, device: str, config: dict,
                    result: dict) -> dict[str, Any]:
    """EvalConfig.host_pairing for the baselines: torch.compile's model and the eager one timed call
    by call in this worker (timing.time_pairs; no candidate code here, so no checks), unless both
    timings are device time (config.device_time). {"eager_over_compile": the median per-pair ratio, "pairs"}, or
    {"skipped": why}: a candidate's paired ratio against eager, divided by this, is its speedup
    over torch.compile under the same host speed."""
    if all(device_time(result[name]["method"], result[name].get("detail")) for name in ("eager", "compile")):
        return {"skipped": "both baselines' timings are device time (held, issued within it)"}
    live = [clone(v) for v in setup.timing_sets[0]]

    def load_input(index: int) -> None:
        copy_into(live, setup.timing_sets[index % len(setup.timing_sets)])

    chooser = random.SystemRandom()
    plan = [(chooser.random() < 0.5, False) for _ in range(PAIRS[1])]
    try:
        paired = time_pairs(device, compiled, model, live, load_input, lambda out, index: None, plan, after_call=lambda: None,
                            warmup_reps=config["warmup_reps"], warmup_s=config.get("timing_warmup_s", 0.0))
    except Exception as exc:  # noqa: BLE001 - the unpaired compile speedup stands
        return {"skipped": f"the paired timing raised {type(exc).__name__}: {exc}"[:300]}
    ratios = [eager_ms / compile_ms for _, compile_ms, eager_ms in paired["pairs"] if compile_ms > 0]
    return {"eager_over_compile": statistics.median(ratios), "pairs": len(ratios)}

