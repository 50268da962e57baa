"""Host pairing (EvalConfig.host_pairing): a host-bound candidate timed call by call against a fresh
instance of the reference, made with every secret of the pairing before the candidate loads, and
not used (or FORBIDDEN) where the candidate changed what the reference's calls depend on."""
from __future__ import annotations

import os
import random
import secrets
from typing import Any

import numpy as np
import torch

from . import memory, output_digest, sandbox
from .config import device_time
from .task_setup import TaskSetup, clone, fresh_reference
from .timed_calls import Audit
from .timed_inputs import TimedLoader
from .timing import MAX_EXTRA_WARMUPS, PAIRS, ReferenceCallFailed, time_pairs


class PairingTampered(Exception):
    """The candidate changed what the paired reference's calls depend on while it was paired."""


class PairedReference:
    """EvalConfig.host_pairing: a fresh instance of the reference, made and given the weights before
    any candidate code exists in this process, against which a host-bound candidate is timed call
    by call (timing.time_pairs). Every secret of the pairing (each pair's input rotations, order
    and audit pick) is drawn here too, before the candidate loads. What the process looked like
    (its threads and live child processes, torch's global module hooks, the reference's modules,
    their hooks, their classes and the globals of those classes' functions) is kept: if the
    candidate changed any of it before the pairing, the pairing is not used (a thread, a process, a
    hook or a patched method could run inside the reference's calls only); if it changes during
    the pairing, or the live inputs' layout does, the verdict is FORBIDDEN."""

    def __init__(self, setup: TaskSetup, job: dict, device: str, variants: list):
        self.setup, self.device, self.error = setup, device, ""
        self.reference_device_time = bool(job.get("reference_device_time"))
        self.reference_ms = float(job.get("reference_ms") or 0.0)
        self.model = None
        if setup.pairing_unplanned:
            self.error = setup.pairing_unplanned
            return
        fresh = all(timed.seed is not None or any(timed.shifts) or not any(
            isinstance(v, torch.Tensor) and v.numel() > 1 for v in setup.timing_sets[timed.which]) for timed in variants)
        if not fresh:
            self.error = "rotated inputs break this task, so paired inputs would repeat"
            return
        chooser = random.SystemRandom()
        self.inputs = [setup.timed_inputs.secret(chooser, index) for index in range(MAX_EXTRA_WARMUPS + PAIRS[1])]
        self.plan = [(chooser.random() < 0.5, chooser.random() < 0.25) for _ in range(PAIRS[1])]
        self.digest = output_digest.DigestMaker(secrets.randbits(62))
        try:
            self.model = fresh_reference(setup, job, device)
            self.fingerprint = self._fingerprint()
        except BaseException as exc:  # noqa: BLE001 - no pairing; the unpaired speedups stand
            self.model, self.error = None, f"the paired reference could not be made: {type(exc).__name__}: {exc}"

    def _fingerprint(self) -> list:
        hooks = [len(value) for name, value in sorted(vars(torch.nn.modules.module).items())
                 if name.startswith("_global_") and isinstance(value, dict)]
        modules = [(name, type(module), tuple(sorted(vars(module))),
                    tuple(len(getattr(module, attr, None) or {}) for attr in _MODULE_HOOKS))
                   for name, module in self.model.named_modules()]
        # The classes the reference's modules run (the task's Model is reachable through
        # nn.Module.__subclasses__()), every attribute by identity, and the globals their functions
        # read at call time (the task's namespace, `F` in torch.nn.modules.conv, ...).
        classes = {c for m in self.model.modules() for c in type(m).__mro__ if c is not object}
        class_state = sorted((c.__module__, c.__qualname__, id(c), tuple(sorted((k, id(v)) for k, v in vars(c).items())))
                             for c in classes)
        namespaces = {id(f.__globals__): f.__globals__ for c in classes for f in vars(c).values()
                      if isinstance(getattr(f, "__globals__", None), dict)}
        global_state = sorted((key, tuple(sorted((k, id(v)) for k, v in list(names.items()))))
                              for key, names in namespaces.items())
        return [len(os.listdir("/proc/self/task")), _live_children(), hooks, modules, class_state, global_state]

    def _changed(self) -> list[str]:
        now = self._fingerprint()
        what = ["threads", "child processes", "torch's global module hooks", "the reference's modules or hooks",
                "the reference's classes", "the globals the reference's code reads"]
        return [w for w, a, b in zip(what, now, self.fingerprint) if a != b]

    def time(self, model: Any, stats: Any, audit: Audit, config: dict,
             switches_changed: Any) -> tuple[dict, list[np.ndarray]]:
        """(the pairing's report, the digests of its calls' outputs: the candidate's, then the
        reference's). `switches_changed()` (TamperCheck's) is read before the first call and
        after every call: a global switch the candidate changed never reaches a reference call."""
        if self.model is None:
            return {"skipped": self.error}, []
        if self.reference_device_time and device_time(stats.method, stats.detail):
            return {"skipped": "the candidate's and the reference's timings are device time (held, issued within "
                               "it): the pairing corrects host speed, and neither timing is host time"}, []
        if PAIRS[0] * (stats.median_ms + self.reference_ms) > 1000 * PAIR_TIME_LIMIT_S:
            return {"skipped": f"{PAIRS[0]} pairs would take more than {PAIR_TIME_LIMIT_S:g} s"}, []
        changed = self._changed()
        if changed:
            return {"skipped": f"the candidate changed {', '.join(changed)} after the paired reference was made"}, []
        setup = self.setup

        def after_call() -> None:
            memory.scrub_freed(self.device, keep_cache=True)
            sandbox.reset_malloc_perturb()
            switched = switches_changed()
            if switched:
                raise PairingTampered("global switches: " + ", ".join(switched))

        after_call()
        loader = TimedLoader([clone(v) for v in setup.timing_sets[0]], self.inputs, setup.timed_inputs.values)
        layout = [_layout(v) for v in loader.live]

        def load_input(index: int) -> None:
            if [_layout(v) for v in loader.live] != layout:
                raise PairingTampered("the layout of the input tensors (address, shape, strides)")
            loader.load(index)

        try:
            result = time_pairs(self.device, model, self.model, loader.live, load_input, loader.digest_then_verify(self.digest),
                                self.plan, after_call=after_call,
                                audit=audit if config["policy"] == "strict" else None,
                                warmup_reps=config["warmup_reps"], warmup_s=config.get("timing_warmup_s", 0.0))
        except ReferenceCallFailed as exc:
            result = {"skipped": f"the paired reference failed: {exc}"}
        changed = self._changed()
        if changed:
            raise PairingTampered(", ".join(changed))
        self.model = None
        memory.scrub_freed(self.device, setup.output_nbytes)
        candidate, reference = result.pop("candidate_digests", []), result.pop("reference_digests", [])
        meta = {**result, "candidate_inputs": [index for index, _ in candidate],
                "reference_inputs": [index for index, _ in reference], "audit": audit.meta()}
        return meta, [record for _, record in candidate] + [record for _, record in reference]


def _layout(value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return None
    return (value.data_ptr(), tuple(value.shape), value.stride(), value.storage_offset(), value.dtype)


PAIR_TIME_LIMIT_S = 20.0  # a task whose 40 pairs would take longer is not paired (the eval has 120 s)


def _live_children() -> int:
    """How many live (not zombie) processes have this one as their parent. The worker is a child
    subreaper (sandbox.contain_children), so orphaned descendants come back here too."""
    me, count = str(os.getpid()), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        count += fields[1].decode() == me and fields[0] != b"Z"
    return count


_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                 "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_state_dict_hooks")

