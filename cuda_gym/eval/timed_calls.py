"""How a job times a model: the secret inputs of its timed calls and the reference's digest of each
call's outputs (made before any candidate code runs), the op-recorder audits of a secret part of
the calls, and Timer.run over them."""
from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import numpy as np
import torch

from . import output_digest
from .native_calls import native_call_total
from .op_policy import op_is_allowed
from .recorder import OpRecorder
from .task_setup import TaskSetup, clone
from .timed_inputs import TimedLoader, changed_inputs
from .timing import Timer, handles
from .worker_device import sync

_perf_counter = time.perf_counter


def reference_digests(setup: TaskSetup, config: dict, digest: output_digest.DigestMaker) -> tuple[list, list]:
    """Run the reference here, before any candidate code exists in this process, on the inputs the
    candidate's timed calls will get: a fresh draw of the task's inputs per call under a secret
    seed (timed_inputs; secret rotations of the timing sets where the task's draws cannot be made
    again). Returns the TimedInputs for the candidate's timer (as many timed calls as the reference
    made within the timing budget, then the warm-up inputs) and the digest of the reference's
    outputs for each timed call (output_digest: what the candidate's call k is compared with). (The
    reference is not timed here: its times come from the baseline workers.)"""
    chooser = random.SystemRandom()
    warmup = config["warmup_reps"]
    variants = [setup.timed_inputs.secret(chooser, index) for index in range(warmup + config["timing_reps"])]
    digests: list[np.ndarray] = []
    started = _perf_counter()
    with torch.no_grad():
        for rep in range(config["timing_reps"]):
            record = digest(setup.model(*setup.timed_inputs.values(variants[rep])), rep)
            for _ in range(3):  # a draw whose reference output is not finite is replaced
                if np.isfinite(record).all():
                    break
                variants[rep] = setup.timed_inputs.secret(chooser, rep, plain=True)
                record = digest(setup.model(*setup.timed_inputs.values(variants[rep])), rep)
            digests.append(record)
            if rep + 1 >= config["timing_min_reps"] and _perf_counter() - started > config["timing_budget_s"]:
                break
    return variants[: len(digests)] + variants[len(variants) - warmup:], digests


def can_look_first(setup: TaskSetup) -> bool:
    """Whether trial 0's reference output is resident, so that `first_look` can be judged before
    the timing (a trial whose reference is not resident makes it again after candidate code ran:
    only the trials do that)."""
    return bool(setup.reference_outputs) and setup.reference_outputs[0] is not None


def first_look(model: Any, setup: TaskSetup, device: str, audit: "Audit") -> tuple[Any, list[int]]:
    """One untimed forward of `model` on trial 0's draw, right before its timing and audited as
    the timer's first warm-up calls are, its outputs synchronized: in the eval worker the judge
    holds them to trial 0's standard at once (a candidate wrong there ends without its timed
    calls), and the baseline worker makes the same call, so both time after the same history.
    Returns the outputs and the indices of the inputs the forward changed (as a trial reports
    them). Made where `can_look_first`."""
    draw = setup.draw(0).inputs
    inputs = [clone(v) for v in draw]
    with torch.no_grad(), audit():
        output = model(*handles(inputs))  # the judge's own objects stay out of the candidate's reach
    sync(device)
    return output, changed_inputs(draw, inputs)


class Audit:
    """The op recorder (its dispatch mode, without the profiler cross-check) around the calls
    that Timer.run audits; what they dispatched."""

    def __init__(self, policy: str):
        self.policy = policy
        self.calls = 0
        self.without_native = 0
        self.intact = True
        self.forbidden: dict[str, int] = {}

    @contextlib.contextmanager
    def __call__(self) -> Any:
        recorder = OpRecorder(cross_check=False)  # no profiler session in the timed process
        before = native_call_total()
        with recorder:
            yield
            self.intact = self.intact and recorder.is_active()
        self.calls += 1
        self.without_native += native_call_total() == before
        for op, count in recorder.ops.items():
            if not op_is_allowed(op, self.policy):
                self.forbidden[op] = self.forbidden.get(op, 0) + count

    def meta(self) -> dict:
        return {"calls": self.calls, "without_native": self.without_native, "intact": self.intact,
                "forbidden_ops": self.forbidden}


def time_model(model: Any, setup: TaskSetup, device: str, config: dict, variants: list,
               digest: output_digest.DigestMaker, audit: Audit | None = None) -> tuple[Any, list[str], list]:
    """Timer.run over the secret `variants` (a fresh input per call; the candidate's calls partly
    audited), each call's outputs digested (output_digest) right after it, then its inputs
    checked unchanged (timed_inputs.InputsChanged)."""
    timer = Timer(device, warmup_reps=config["warmup_reps"], reps=len(variants) - config["warmup_reps"],
                  min_reps=config["timing_min_reps"], budget_s=config["timing_budget_s"],
                  l2_flush=config["l2_flush"], warmup_s=config.get("timing_warmup_s", 0.0))
    loader = TimedLoader([clone(v) for v in setup.timing_sets[0]], variants, setup.timed_inputs.values)

    return timer.run(model, loader.live, loader.load, len(variants), loader.digest_then_verify(digest), audit=audit,
                     cover_sets=False)


def stats_meta(stats: Any) -> dict:
    return dict(stats.__dict__)
