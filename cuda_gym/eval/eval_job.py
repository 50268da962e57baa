"""The eval job: the reference's outputs and timing digests sent out before any candidate code
runs, then the candidate loaded under the tamper check, a first look at trial 0's draw (a wrong
candidate ends there), its timing (digests of every timed output, audited calls, host pairing), its
correctness trials under the op recorder, and on CUDA the kernels one more forward runs."""
from __future__ import annotations

import importlib
import re
import secrets
import time
import traceback
from typing import Any

import numpy as np
import torch

from . import cupy_support, fastbuild, memory, output_digest, triton_support
from .candidate_load import load_candidate
from .channel import Channel, send_error
from .failures import candidate_failure, classify_load_error, is_cuda_error, reference_failed
from .native_calls import count_native_calls, native_call_total
from .op_policy import op_is_allowed
from .output_report import describe_outputs, stream_sample, trial_sample_seed
from .paired_reference import PairedReference, PairingTampered
from .phase_clock import PhaseClock
from .profiling import kernel_profile, profiled_device_events
from .recorder import OpRecorder
from .tamper import TamperCheck
from .task_setup import TaskSetup, clone, setup_or_error
from .timed_calls import Audit, can_look_first, first_look, reference_digests, stats_meta, time_model
from .timed_inputs import changed_inputs
from .timing import handles
from .worker_device import sync

_perf_counter = time.perf_counter

TIMED_INPUTS_ROTATED_FLAG = "timed_inputs_rotated"  # the task's draws cannot be repeated: timed_inputs
_COMPILE_WORDS = re.compile(r"torch\.compile|_dynamo|_inductor")


def run_eval(channel: Channel, job: dict, device: str) -> None:
    config = job["config"]
    policy = config["policy"]
    started = _perf_counter()
    clock = PhaseClock(device)
    setup = setup_or_error(channel, job, device)
    if setup is None:
        return
    plan = setup.plan
    clock.mark("setup")
    arrays: list[np.ndarray] = []
    specs: list[list[dict]] = []
    trusted_samples: list[list[np.ndarray]] = []  # the reference's own values, for a recomputed reference

    def describe(index: int, outputs: list[torch.Tensor]) -> None:
        draw_arrays, draw_specs = describe_outputs(outputs, trial_sample_seed(job, index))
        arrays.extend(draw_arrays)
        specs.append(draw_specs)
        trusted_samples.append(draw_arrays)

    try:
        setup.prepare_trials(describe)
        clock.mark("describe")
        setup.prepare_timing_sets()
        digest = output_digest.DigestMaker(secrets.randbits(62))
        variants, timing_digests = reference_digests(setup, config, digest)
    except BaseException as exc:  # noqa: BLE001
        reference_failed(channel, exc, device, plan)
        return
    clock.mark("checksums")
    memory.scrub_freed(device, setup.output_nbytes)  # no freed reference output reaches the candidate
    channel.send("reference", {"limits_not_applied": job.get("limits_not_applied", []),
                               "distributions": setup.distributions, "outputs": specs,
                               "timing_digests": len(timing_digests), "memory": plan.to_meta(),
                               "reference_error": setup.reference_error_meta(),
                               "seed_ignored": setup.seed_ignored,
                               "seconds": _perf_counter() - started,
                               "parts_s": clock.phases}, arrays + timing_digests)
    del arrays, specs, timing_digests

    fastbuild.install()
    if policy == "permissive" and _COMPILE_WORDS.search(job["candidate_source"]):
        # Done before the tamper check is armed, as the compile baseline does: inductor's first import
        # makes frame lookups the tripwire denies in code it did not know when armed, and dynamo's
        # first compile patches nn.Module.__init__/__setstate__, which the check would report.
        importlib.import_module("torch._inductor.compile_fx")
        torch._dynamo.mutation_guard.install_generation_tagging_init()
    count_native_calls()
    triton_support.count_launches(device, job["candidate_source"])
    cupy_support.count_launches(device, job["candidate_source"])
    paired = PairedReference(setup, job, device, variants) if job.get("pair_with_reference") else None
    tamper = TamperCheck(device, policy, setup.namespace)  # last thing before candidate code: arms the tripwire
    started = _perf_counter()
    try:
        module = load_candidate(job["candidate_source"])
        model_class = getattr(module, "ModelNew", None)
        if model_class is None:
            send_error(channel, "INVALID_ACTION", "the candidate module defines no ModelNew")
            return
        torch.manual_seed(job["seed"])
        with torch.device(device):
            model = model_class(*setup.init_inputs)
        if not isinstance(model, torch.nn.Module):
            send_error(channel, "INVALID_ACTION", "ModelNew(...) is not a torch.nn.Module")
            return
        flags = []
        try:
            model.load_state_dict(setup.model.state_dict())
        except (RuntimeError, KeyError, ValueError):
            flags.append("weights_not_shared")  # different parameter names: same seed instead
        model = model.to(device).eval()
    except BaseException as exc:  # noqa: BLE001
        changes = [] if is_cuda_error(exc) else tamper.changes()
        code = "FORBIDDEN" if changes else classify_load_error(exc)
        message = (memory.out_of_memory_message(device, plan, "the candidate (loading)") if code == "OUT_OF_MEMORY"
                   else f"{type(exc).__name__}: {exc}"
                   + (f" (the candidate changed the evaluation process: {', '.join(changes)})" if changes else ""))
        send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return
    looks_first = can_look_first(setup)
    channel.send("loaded", {"seconds": _perf_counter() - started, "first_look": looks_first})
    clock.mark("load")
    audit = Audit(policy)
    if looks_first:
        if not _first_look(channel, model, setup, job, device, tamper, audit):
            return
        clock.mark("first_look")

    # Timing comes before the correctness trials: the trials' op recorder runs a profiler session,
    # and after one the process's host overhead per op is no longer what a baseline worker's is.
    # The timed calls are checked by their output digests (made from the reference before any
    # candidate code ran) and a secret quarter of them by the op recorder's dispatch mode.
    try:
        stats, timing_flags, digests = time_model(model, setup, device, config, variants, digest, audit)
    except BaseException as exc:  # noqa: BLE001
        code, message = candidate_failure(exc, tamper, device, plan, "a timed call")
        send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return
    if setup.timed_inputs.rotated_why:  # the weaker scheme: rotations of resident sets (timed_inputs)
        timing_flags = [*timing_flags, TIMED_INPUTS_ROTATED_FLAG]
    timing_meta = {"stats": stats_meta(stats), "flags": timing_flags, "digest_inputs": [which for which, _ in digests],
                   "timed_inputs": setup.timed_inputs.rotated_why or "fresh draws",
                   "audit": audit.meta(), "tampered": tamper.changes()}
    channel.send("timing", timing_meta, [record for _, record in digests])
    clock.mark("timing")
    if paired is not None:
        try:
            pairing_meta, pairing_digests = paired.time(model, stats, audit, config, tamper.switches_changed)
            channel.send("pairing", {**pairing_meta, "tampered": tamper.changes()}, pairing_digests)
        except PairingTampered as exc:
            send_error(channel, "FORBIDDEN", f"the candidate changed {exc} while it was timed against the reference")
            return
        except BaseException as exc:  # noqa: BLE001
            code, message = candidate_failure(exc, tamper, device, plan, "a paired timing call")
            send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
            return
        del paired
        clock.mark("pairing")

    forbidden: dict[str, int] = {}
    native_calls = 0
    for index in range(setup.trial_count):
        draw = setup.draw(index)
        inputs = [clone(v) for v in draw.inputs]
        memory.scrub_freed(device, setup.output_nbytes)
        recorder = OpRecorder()
        calls_before = native_call_total()
        try:
            with torch.no_grad(), recorder:
                output = model(*handles(inputs))  # the judge's own objects stay out of the candidate's reach
                still_recording = recorder.is_active()
            early = stream_sample(output, trial_sample_seed(job, index)) if device == "cuda" else []
            sync(device)
        except BaseException as exc:  # noqa: BLE001
            code, message = candidate_failure(exc, tamper, device, plan, "forward")
            send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
            return
        native_calls += native_call_total() - calls_before
        for op, count in recorder.ops.items():
            if not op_is_allowed(op, policy):
                forbidden[op] = forbidden.get(op, 0) + count
        if early and not all(torch.equal(a, b) for a, b in zip(early, stream_sample(output, trial_sample_seed(job, index)))):
            send_error(channel, "INCORRECT", "the output was still being written when forward returned: an op on the "
                       "caller's current stream that read it right away saw other values than after a device-wide "
                       "synchronize. Work on another stream (a side stream, a non-blocking stream, a library handle "
                       "on its own stream) must be joined to the current stream (an event wait) before forward returns")
            return
        mutated = changed_inputs(draw.inputs, inputs)
        del inputs
        reference = setup.reference_outputs[index]
        try:
            if reference is None:  # not resident: the reference again, on the same draw
                switched = tamper.switches_changed()
                if switched:
                    send_error(channel, "FORBIDDEN", "the candidate changed global switches before the reference was "
                               "computed again: " + ", ".join(switched))
                    return
                reference = setup.reference_output(index, draw.inputs)
                again, _ = describe_outputs(reference, trial_sample_seed(job, index))
                if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(again, trusted_samples[index])):
                    send_error(channel, "FORBIDDEN", "the reference, recomputed after the candidate loaded, no longer "
                               "gives its own earlier output: the candidate changed how PyTorch computes")
                    return
            del draw
            arrays, specs = describe_outputs(output, trial_sample_seed(job, index), reference, setup.stats_config,
                                             setup.tolerance_floors(index))
        except TypeError as exc:
            send_error(channel, "INCORRECT", str(exc))
            return
        except BaseException as exc:  # noqa: BLE001
            code, message = candidate_failure(exc, tamper, device, plan, "checking the output")
            send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
            return
        channel.send("trial", {"index": index, "outputs": specs, "mutated_inputs": mutated,
                               "recording_intact": still_recording, "tampered": tamper.changes()}, arrays)
        del output, reference

    checks = {"forbidden_ops": forbidden, "native_calls": native_calls, "tampered": tamper.changes(), "flags": flags,
              "triton": triton_support.report(), "cupy": cupy_support.report()}
    channel.send("checks", checks)
    if device == "cuda":
        clock.mark("trials")
        setup.release_reference_outputs()
        channel.send("memory", clock.memory_meta())
    if device == "cuda":
        _send_kernels(channel, model, setup, policy, tamper)


def _first_look(channel: Channel, model: Any, setup: TaskSetup, job: dict, device: str, tamper: TamperCheck,
                audit: Audit) -> bool:
    """Trial 0's draw, once, before the timing (timed_calls.first_look), its outputs described
    against the reference and sent as "first_look": the judge ends a candidate whose outputs are
    wrong there INCORRECT without its timed calls, most of an RL stream's verdicts. Only a failure
    decides; the trials after the timing judge this draw again under the op recorder. False after
    sending the error of a forward that raised."""
    try:
        output, mutated = first_look(model, setup, device, audit)
    except BaseException as exc:  # noqa: BLE001
        code, message = candidate_failure(exc, tamper, device, setup.plan, "forward")
        send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return False
    try:
        arrays, specs = describe_outputs(output, trial_sample_seed(job, 0), setup.reference_outputs[0],
                                         setup.stats_config, setup.tolerance_floors(0))
    except TypeError as exc:
        send_error(channel, "INCORRECT", str(exc))
        return False
    except BaseException as exc:  # noqa: BLE001
        code, message = candidate_failure(exc, tamper, device, setup.plan, "checking the output")
        send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return False
    del output
    memory.scrub_freed(device, setup.output_nbytes)  # as after any call the judge compares
    channel.send("first_look", {"outputs": specs, "mutated_inputs": mutated, "tampered": tamper.changes()}, arrays)
    return True


def _send_kernels(channel: Channel, model: Any, setup: TaskSetup, policy: str, tamper: Any) -> None:
    """The GPU kernels one more forward runs, seen by the CUDA profiler. Only after the timing:
    once the profiler (CUPTI) has run in a process, kernel launches cost more host time there, and
    the baselines are timed in workers where it never ran."""
    audit = Audit(policy)
    try:
        device_events = profiled_device_events(model, setup, audit())
    except BaseException as exc:  # noqa: BLE001
        code, message = candidate_failure(exc, tamper, "cuda", setup.plan, "the profiled forward")
        send_error(channel, code, message, traceback=traceback.format_exc(limit=8))
        return
    kernels = sorted({e.name for e in device_events if not e.name.startswith(("Memcpy", "Memset"))})
    channel.send("kernels", {"kernels": kernels, "profile": kernel_profile(device_events),
                             "audit": audit.meta(), "tampered": tamper.changes()})

