"""The inputs of the timed calls: a fresh draw of the task's own inputs for every call.

Each timed call (the candidate's, a baseline's, a paired reference's) gets the task's
`get_inputs()` run again under its own secret seed (torch's, NumPy's and Python's global random
streams seeded for the draw and restored after it), made on the device right before the call and
copied into the live input tensors: values no call has seen, from the task's own distribution
and structure. A candidate cannot cache an output by address, by content, or by content up to a
rearrangement: a rotation of a few resident sets, the earlier scheme, let an elementwise
candidate find each call's shift and return a view of an output it had cached.

A task whose `get_inputs()` does not give the same values twice under one seed (it reads another
random source) cannot have its reference outputs made ahead for the same inputs. Its timed calls
fall back to secret rotations of the resident timing sets (`rotated_inputs`), and the verdict
says so: the weaker scheme.

After each checked call the live inputs are compared with the draw they were loaded from
(`TimedLoader.verify`): a forward that changes its inputs in a timed call is as wrong as one that
does so in a trial.
"""
from __future__ import annotations

import contextlib
import random
import secrets
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

_fork_rng, _manual_seed, _equal = torch.random.fork_rng, torch.manual_seed, torch.equal
_np_seed, _np_get_state, _np_set_state = np.random.seed, np.random.get_state, np.random.set_state


@dataclass(frozen=True)
class TimedInput:
    """One timed call's input: a fresh draw under `seed`, or (seed None) resident timing set
    `which` with each tensor rotated by its entry of `shifts`."""

    seed: int | None
    which: int = 0
    shifts: tuple[int, ...] = field(default_factory=tuple)


class InputsChanged(Exception):
    """The forward changed its inputs in a checked timed call."""


def fresh_draw(get_inputs: Callable[[], Any], seed: int, device: str,
               sources: contextlib.AbstractContextManager | None = None) -> list[Any]:
    """`get_inputs()` on `device` with the global random streams seeded from `seed`, then restored
    (the process's later random draws are what they would have been without this one); `sources`
    (draws.source_transform) is active around the call where given."""
    python_state, numpy_state = random.getstate(), _np_get_state()
    devices = [torch.cuda.current_device()] if device == "cuda" else []
    try:
        with _fork_rng(devices=devices), torch.device(device), sources or contextlib.nullcontext():
            _manual_seed(seed)
            random.seed(seed)
            _np_seed(seed % (1 << 32))
            return [v.to(device) if isinstance(v, torch.Tensor) else v for v in get_inputs()]
    finally:
        random.setstate(python_state)
        _np_set_state(numpy_state)


SEED_IGNORED = ("the task's get_inputs() gives the same values under every seed (it seeds itself), so no timed "
                "call gets inputs it has not seen: a cached output cannot be told from a kernel")


def seed_check(get_inputs: Callable[[], Any], device: str) -> tuple[str, str]:
    """(why two draws of `get_inputs()` under one secret seed differ, or '' when they agree; why
    the draws cannot tell a cache apart, or ''): a repeatable task's timed inputs and correctness
    draws are fresh draws, another's are made from its resident inputs (the weaker schemes); a task
    whose draws are the same under two seeds is degenerate (SEED_IGNORED)."""
    seed = secrets.randbits(62)
    try:
        first = fresh_draw(get_inputs, seed, device)
        if not same_inputs(first, fresh_draw(get_inputs, seed, device)):
            return "the task's get_inputs() gives other values under the same seed", ""
        other = fresh_draw(get_inputs, seed ^ (1 + secrets.randbits(61)), device)
        return "", SEED_IGNORED if same_inputs(first, other) else ""
    except Exception as exc:  # noqa: BLE001 - the weaker schemes stand
        return f"the task's get_inputs() raised {type(exc).__name__}: {exc}"[:300], ""


def on_private_globals(function: Callable[[], Any]) -> Callable[[], Any]:
    """`function` looking its globals up in a copy of its module's namespace made now (before any
    candidate code runs): a candidate that rebinds a name in the task's namespace (`torch` to a
    proxy that keeps each draw) changes nothing the timed draws run. The tamper check reports such
    a rebinding too (the task namespace is watched)."""
    if not isinstance(function, types.FunctionType):
        return function
    return types.FunctionType(function.__code__, dict(function.__globals__), function.__name__,
                              function.__defaults__, function.__closure__)


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN where the other has NaN (torch.equal alone calls NaN unequal to itself)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if _equal(a, b):
        return True
    return (a.is_floating_point() or a.is_complex()) and bool(((a == b) | (a.isnan() & b.isnan())).all())


def changed_inputs(loaded: list[Any], live: list[Any]) -> list[int]:
    """The indices of the tensors in `live` whose values differ from those in `loaded` (what a
    forward changed in its inputs: the trials, the first look and the timed calls all ask this)."""
    return [i for i, (now, was) in enumerate(zip(live, loaded))
            if isinstance(now, torch.Tensor) and not _same_tensor(now, was)]


def same_inputs(first: list[Any], second: list[Any]) -> bool:
    """Whether two input lists hold the same values (tensors element for element, others equal)."""
    if len(first) != len(second):
        return False
    for a, b in zip(first, second):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _same_tensor(a, b)):
                return False
        elif a != b:
            return False
    return True


def secret_shifts(chooser: random.SystemRandom, inputs: list[Any]) -> tuple[int, ...]:
    """A random rotation for each tensor of `inputs` with more than one element (0 for the rest)."""
    return tuple(chooser.randrange(1, v.numel()) if isinstance(v, torch.Tensor) and v.numel() > 1 else 0
                 for v in inputs)


def rotated(inputs: list[Any], shifts: tuple[int, ...] | list[int]) -> list[Any]:
    """`inputs` with each tensor's elements rotated by its shift (same values, new positions)."""
    return [torch.roll(v.reshape(-1), s).reshape(v.shape) if isinstance(v, torch.Tensor) and s
            else (v.clone() if isinstance(v, torch.Tensor) else v)
            for v, s in zip(inputs, shifts)]


def copy_into(live: list[Any], values: list[Any]) -> None:
    """Copy `values` into the live input tensors in place (same addresses, new values); an input
    that is not a tensor (a Python number the task draws at random) is replaced in the list."""
    for index, (dst, src) in enumerate(zip(live, values)):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)
        else:
            live[index] = src


class TimedInputs:
    """Where one task's timed inputs come from: fresh draws of `get_inputs()` on `device`, or where
    two draws under one seed differ (`rotated_why` says why, from `seed_check`; '' when they
    agree), secret rotations of the resident `timing_sets` (the caller's list, read when an input
    is made)."""

    def __init__(self, get_inputs: Callable[[], Any], device: str, timing_sets: list[list[Any]], rotated_why: str):
        self.get_inputs, self.device, self.timing_sets = get_inputs, device, timing_sets
        self.rotated_why = rotated_why

    def _fresh(self, seed: int) -> list[Any]:
        return fresh_draw(self.get_inputs, seed, self.device)

    def secret(self, chooser: random.SystemRandom, index: int, plain: bool = False) -> TimedInput:
        """Timed call `index`'s input: a fresh draw under a secret seed, or (`rotated_why`) timing
        set index mod sets rotated by secret shifts (`plain`: not rotated, the fallback where the
        rotation breaks the task)."""
        if not self.rotated_why:
            return TimedInput(chooser.getrandbits(62))
        which = index % len(self.timing_sets)
        shifts = (0,) * len(self.timing_sets[which]) if plain else secret_shifts(chooser, self.timing_sets[which])
        return TimedInput(None, which, shifts)

    def values(self, timed: TimedInput) -> list[Any]:
        """The values of a timed input (a new list of new tensors)."""
        if timed.seed is not None:
            return self._fresh(timed.seed)
        return rotated(self.timing_sets[timed.which], timed.shifts)


class TimedLoader:
    """Loads timed input k into the live tensors (`load`) and checks them unchanged after a call
    (`verify`). `make(TimedInput)` makes an input's values; the last one made is kept (for the
    check, and for a second call on the same input, as a pair's two calls are)."""

    def __init__(self, live: list[Any], inputs: list[TimedInput], make: Callable[[TimedInput], list[Any]]):
        self.live, self.inputs, self.make = live, inputs, make
        self._made: tuple[int, list[Any]] | None = None

    def load(self, index: int) -> None:
        if self._made is None or self._made[0] != index:
            self._made = None  # freed before the next draw is made
            self._made = (index, self.make(self.inputs[index]))
        copy_into(self.live, self._made[1])

    def digest_then_verify(self, digest: Any) -> "CheckedDigest":
        """The timers' checksum: the call's output digested (first: nothing else reads the outputs
        before their digest), then the inputs checked unchanged. Where `digest` has a `probe`
        (output_digest.DigestMaker), the timers read it inside the timed window."""
        return CheckedDigest(digest, self.verify)

    def verify(self) -> None:
        """Raises InputsChanged where the live inputs differ from what was loaded last."""
        if self._made is None:
            return
        changed = changed_inputs(self._made[1], self.live)
        if changed:
            raise InputsChanged(f"the forward modified its input(s) {changed} in a timed call; inputs must stay "
                                "unchanged")


class CheckedDigest:
    """A timer's checksum: the digest, then the inputs' check. It passes on the digest's
    `prepare` and `probe` where it has them, and whatever the timer read with them
    (timing.ProbedChecksum decides whether there is a read)."""

    def __init__(self, digest: Any, verify: Callable[[], None]):
        self._digest, self._verify = digest, verify
        if hasattr(digest, "probe"):
            self.probe, self.prepare = digest.probe, digest.prepare

    def __call__(self, output: Any, index: int, *read: Any) -> Any:
        record = self._digest(output, index, *read)
        self._verify()
        return record
