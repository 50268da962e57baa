"""What is kept of a timed call's outputs, and how two of them are compared at the policy's tolerances.

A timed call gets an input no other call gets (nothing can be cached), so its reference output is
computed before any candidate code exists in the worker, and it cannot be kept whole for every
call. Each call's outputs are reduced to a digest right after the call returns: per output,

- its dtype and element count;
- the float64 sum and squared L2 norm over every element;
- a sketch: every element multiplied by a secret random sign and added to bucket (position mod
  `SKETCH_BUCKETS`, a prime). The sketch is linear, so the difference of two outputs' sketches is the sketch
  of their difference, and the sum of its squared buckets estimates ||out - ref||^2 without bias
  whatever the error's pattern; its relative spread is about sqrt(2 / buckets) where the error is
  spread over the buckets, more where it sits in a few (each call's error is another, so one that
  a call's estimate misses shows in the next);
- the values at `SAMPLES` secret random positions (every element where there are no more), read
  inside the timed window (`probe`, before the clock stops): work that a call leaves to run after
  it returns (a signal handler, a finalizer, another thread) must land before this read, so it is
  either timed or seen as wrong values.

Signs and positions are drawn from a secret made in the worker before the candidate loads, the
positions fresh for each input (`DigestMaker(secret)(output, input_index)`): a candidate cannot aim
an error where the digest does not look. `mismatch` holds a candidate's digest to the trials'
standard: every sampled element within the elementwise bound, the sketched relative-norm error
within `SKETCH_MARGIN` times the relative-norm tolerance, the L2 norms within the tolerance (exact:
| ||out|| - ||ref|| | <= ||out - ref||), the sums within what that error allows (exact too: the sum of
the error is at most sqrt(n) times its norm). Where an
output has no more than `SAMPLES` elements, the samples are the whole output and it is compared
exactly as a trial's is. Integer and boolean outputs must be equal (samples, sums and sketch).

A CPU output's memory is checked first, before any of its values is read (host_memory): memory
that a page fault fills (PROT_NONE pages with a signal handler, userfaultfd, a shared or file
mapping) would do the call's work inside these reads, after the clock stopped. Such an output's
record fails `mismatch` ("output memory is not plain: ...").
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import host_memory
from .config import EvalConfig
from .correctness import ELEMENTWISE_ATOL_SCALE, ToleranceFloor, flatten_outputs, judge_stats, output_stats

if TYPE_CHECKING:
    import torch

SAMPLES = 4096
SKETCH_BUCKETS = 251  # prime: an error on a column of a matrix (a stride) spreads over every bucket
# The sketch's estimate of the relative-norm error is held to this multiple of the tolerance. Its
# ratio to the true error, measured over the fp32-vs-float64 errors of reference outputs
# (benchmarks/timed_check_margin.py; docs/evaluation-policy.md has the figures), stays far below it.
SKETCH_MARGIN = 1.5
HEADER = 4  # dtype code, element count, sum, squared L2 norm
# Elements per chunk of the full-output passes (a multiple of the bucket count): temporaries stay
# small on either device.
_CHUNK = {"cuda": SKETCH_BUCKETS << 16, "cpu": SKETCH_BUCKETS << 12}
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
NOT_A_PLAIN_TENSOR = -1.0  # dtype code of an output that is not a plain tensor (a subclass can defer work)
# Dtype code of a CPU output whose memory is not plain (host_memory: a page fault can compute it),
# its record [code, index into host_memory.REASONS, the offending mapping's permissions as bits
# (_PERMISSION_BITS; -1 where none), NaN].
NOT_PLAIN_MEMORY = -2.0
_PERMISSION_BITS = (("r", 1), ("w", 2), ("x", 4), ("s", 8))


def _dtype_code(name: str) -> float:
    return float(DTYPES.index(name)) if name in DTYPES else float(len(DTYPES))


def _permissions_code(perms: str) -> float:
    return float(sum(bit for letter, bit in _PERMISSION_BITS if letter in perms)) if perms else -1.0


def _permissions_text(code: float) -> str:
    if not 0 <= code < 16:
        return ""
    bits = int(code)
    return "".join(letter if bits & bit else "-" for letter, bit in _PERMISSION_BITS[:3]) + ("s" if bits & 8 else "p")


def _not_plain_memory(record: np.ndarray) -> str:
    reason = int(record[1]) if 0 <= record[1] < len(host_memory.REASONS) else None
    why = host_memory.REASONS[reason] if reason is not None else "an unknown reason"
    perms = _permissions_text(record[2])
    return why + (f" (mapping {perms})" if perms else "")


def _is_float_code(code: float) -> bool:
    return 0 <= code < 4


class DigestMaker:
    """Digests of a call's outputs (`__call__(output, input_index)`, `output` as the forward returned
    it: one float64 array for all its outputs, their records one after the other). Everything random comes from `secret`, drawn in
    the worker before the candidate loads."""

    def __init__(self, secret: int):
        self._secret = secret
        # Sampled positions per (input, output, element count, device), drawn where the reference's
        # digest is made (before any candidate code) and looked up by `probe` inside the timed window.
        self._positions: dict[tuple, "torch.Tensor"] = {}
        self._sizes: dict[int, tuple[int, Any]] = {}  # output index -> (element count, device) last seen
        # The sketch's signs per (output position, size, device) where the output is small enough to
        # keep them: drawn once, secret all the same; larger outputs draw theirs on every call.
        self._signs: dict[tuple, "torch.Tensor"] = {}

    def prepare(self, input_index: int) -> None:
        """Draw input `input_index`'s sampled positions for the output sizes seen so far, before the
        call (outside the timed window), so that `probe` only gathers."""
        for output_index, (numel, device) in list(self._sizes.items()):
            if numel > SAMPLES:
                self._positions_for(numel, device, input_index, output_index)

    def _generator(self, device: Any, input_index: int, output_index: int, stream: int = 0) -> "torch.Generator":
        """The random stream of one output's digest: 0 its sampled positions, 1 its sketch's signs."""
        import torch

        generator = torch.Generator(device=device)
        generator.manual_seed((self._secret + 1_000_003 * input_index + 7_919 * output_index + 104_729 * stream)
                              % (1 << 62))
        return generator

    def _positions_for(self, numel: int, device: Any, input_index: int, output_index: int) -> "torch.Tensor":
        import torch

        key = (input_index, output_index, numel, str(device))
        if key not in self._positions:
            generator = self._generator(device, input_index, output_index)
            self._positions[key] = torch.randint(0, numel, (SAMPLES,), generator=generator, device=device)
        return self._positions[key]

    def probe(self, output: Any, input_index: int) -> list[Any]:
        """The sampled values of each of a call's outputs, read now: the timers call this right after
        the call returns, before the clock stops (on a GPU the gather is queued before the end
        event). Positions are those the reference's digest of the same input drew, or `prepare`
        drew before the call; an output not a plain tensor gets None (the digest never reads it)."""
        import torch

        probes: list[Any] = []
        for position, value in enumerate(flatten_outputs(output)):
            if type(value) not in (torch.Tensor, torch.nn.Parameter):
                probes.append(None)
                continue
            numel = value.numel()
            self._sizes[position] = (numel, value.device)
            if numel <= SAMPLES:
                probes.append(value.detach().clone())
            else:  # drawn by `prepare` or the reference's digest; drawn here only for a size not seen before
                probes.append(_gather(value.detach(), self._positions_for(numel, value.device, input_index, position)))
        return probes

    def _signs_for(self, output_index: int, numel: int, start: int, count: int,
                   generator: "torch.Generator") -> "torch.Tensor":
        device = generator.device
        if numel > KEPT_SIGNS_MAX:
            return _random_signs(count, generator, device)
        key = (output_index, numel, str(device))
        if key not in self._signs:
            import torch

            kept = torch.Generator(device=device)
            kept.manual_seed((self._secret * 31 + output_index) % (1 << 62))
            self._signs[key] = _random_signs(numel, kept, device)
        return self._signs[key][start:start + count]

    def __call__(self, output: Any, input_index: int, probes: list[Any] | None = None) -> np.ndarray:
        """The digest of a call's outputs; `probes` (from `probe`, read inside the timed window)
        stand for the sampled values where given."""
        values = flatten_outputs(output)
        probes = probes or [None] * len(values)  # `probe` gives one entry per output
        records = [self._record(value, input_index, position, probe)
                   for position, (value, probe) in enumerate(zip(values, probes))]
        return np.concatenate(records) if records else np.zeros(0)

    def _record(self, value: Any, input_index: int, output_index: int, probe: Any = None) -> np.ndarray:
        import torch

        if type(value) in (bool, int, float):  # a Python number (flatten_outputs passes them through),
            value = torch.tensor(value)  # digested as the trials compare it (output_report.as_tensor)
        if type(value) not in (torch.Tensor, torch.nn.Parameter):  # a subclass or any other object: never read
            return np.array([NOT_A_PLAIN_TENSOR, 0.0, math.nan, math.nan])
        # Before anything reads the output: a read of a lazy page is what computes it.
        problem = host_memory.tensor_memory_problem(value)
        if problem is not None:
            reason, perms = problem
            return np.array([NOT_PLAIN_MEMORY, float(reason), _permissions_code(perms), math.nan])
        flat = value.detach().reshape(-1)
        numel = flat.numel()
        self._sizes[output_index] = (numel, flat.device)
        # The samples as the probe read them inside the timed window; without a probe (the
        # reference's digests, made before any candidate code), read now.
        if probe is not None:
            samples = probe.reshape(-1).double()
        elif numel <= SAMPLES:
            samples = flat.double()
        else:
            samples = flat[self._positions_for(numel, flat.device, input_index, output_index)].double()
        generator = self._generator(flat.device, input_index, output_index, stream=1)
        # Sums, norm and sketch stay on the output's device until one copy at the end: on a GPU a
        # chunk's reductions queue behind each other, with no wait for the device until then.
        sums = torch.zeros(2, dtype=torch.float64, device=flat.device)  # sum, squared L2 norm
        sketch = torch.zeros(SKETCH_BUCKETS, dtype=torch.float64, device=flat.device)
        chunk_size = _CHUNK["cuda" if flat.is_cuda else "cpu"]
        for start in range(0, numel, chunk_size):
            chunk = flat[start:start + chunk_size]
            if not chunk.is_floating_point():  # integers and booleans: exact in float64
                chunk = chunk.double()
            # Reductions accumulate in float64 without a float64 copy of the chunk; a sign flip is
            # exact in any dtype, so the signed chunk stays in the output's.
            sums[0] += chunk.sum(dtype=torch.float64)
            sums[1] += torch.linalg.vector_norm(chunk, dtype=torch.float64).square()
            signed = chunk * self._signs_for(output_index, numel, start, chunk.numel(), generator)
            whole = chunk.numel() - chunk.numel() % SKETCH_BUCKETS
            sketch += signed[:whole].view(-1, SKETCH_BUCKETS).sum(0, dtype=torch.float64)
            sketch[: chunk.numel() - whole] += signed[whole:].double()
        header = np.array([_dtype_code(str(value.dtype).replace("torch.", "")), float(numel)])
        return np.concatenate([header, torch.cat([sums, sketch, samples]).cpu().numpy()])


def _gather(value: "torch.Tensor", positions: "torch.Tensor") -> "torch.Tensor":
    """The elements of `value` at flat (row-major) `positions`, read in place: a non-contiguous
    output is not copied whole (that copy would be timed), its positions are turned into storage
    offsets instead."""
    import torch

    if value.is_contiguous():
        return value.view(-1)[positions]
    offsets = torch.zeros_like(positions)
    remaining = positions.clone()
    for size, stride in reversed(list(zip(value.shape, value.stride()))):
        offsets += (remaining % size) * stride
        remaining = remaining // size
    span = 1 + sum((size - 1) * stride for size, stride in zip(value.shape, value.stride()))
    return value.as_strided((span,), (1,))[offsets]


KEPT_SIGNS_MAX = 1 << 24  # outputs up to this many elements keep their sketch signs (int8: 16 MiB at most)


def _random_signs(count: int, generator: "torch.Generator", device: Any) -> "torch.Tensor":
    """`count` independent random signs (int8 +-1). On the CPU 64 come from each random 64-bit draw,
    the bits unpacked (drawing one number per sign cost 5x more there); a GPU draws one per sign."""
    import torch

    if torch.device(device).type == "cuda":
        bits = torch.randint(0, 2, (count,), generator=generator, device=device, dtype=torch.int8)
    else:
        words = torch.randint(-(1 << 63), (1 << 63) - 1, ((count + 63) // 64,), generator=generator, device=device)
        bits = words.unsqueeze(1).bitwise_right_shift(torch.arange(64, device=device)).bitwise_and_(1)
        bits = bits.view(-1)[:count].to(torch.int8)
    return bits.mul_(2).sub_(1)


def split(digest: np.ndarray) -> list[np.ndarray] | None:
    """The per-output records of a digest, or None where it is malformed."""
    records, offset = [], 0
    while offset < len(digest):
        if offset + HEADER > len(digest):
            return None
        code, numel = digest[offset], digest[offset + 1]
        if code in (NOT_A_PLAIN_TENSOR, NOT_PLAIN_MEMORY):
            size = HEADER
        elif math.isfinite(numel) and numel >= 0:
            size = HEADER + SKETCH_BUCKETS + int(min(numel, SAMPLES))
        else:
            return None
        records.append(digest[offset: offset + size])
        offset += size
    return records if offset == len(digest) else None


def mismatch(got: np.ndarray, want: np.ndarray, config: EvalConfig, floor: ToleranceFloor | None = None) -> str:
    """'' when the candidate's digest `got` passes against the reference's `want` for the same
    input (the module docstring's checks; `floor`: the widened tolerances where the reference is
    rounding noise), else what failed."""
    got_records, want_records = split(np.asarray(got, dtype=np.float64)), split(np.asarray(want, dtype=np.float64))
    if got_records is None or want_records is None:
        return "a malformed output digest"
    if len(got_records) != len(want_records):
        return f"{len(got_records)} outputs, the reference returns {len(want_records)}"
    for position, (out, ref) in enumerate(zip(got_records, want_records)):
        label = f"output {position}" if len(want_records) > 1 else "output"
        failure = _record_mismatch(out, ref, label, config, floor)
        if failure:
            return failure
    return ""


def _record_mismatch(out: np.ndarray, ref: np.ndarray, label: str, config: EvalConfig,
                     floor: ToleranceFloor | None) -> str:
    import torch

    if out[0] == NOT_A_PLAIN_TENSOR:
        return f"{label} is not a plain torch.Tensor"
    if out[0] == NOT_PLAIN_MEMORY:
        return f"{label}: output memory is not plain: {_not_plain_memory(out)}"
    if out[0] != ref[0]:
        got_name = DTYPES[int(out[0])] if 0 <= out[0] < len(DTYPES) else "another dtype"
        return f"{label} has dtype {got_name}, expected {DTYPES[int(ref[0])]} (a precision change is not allowed)"
    numel = int(ref[1])
    if out[1] != ref[1]:
        return f"{label} has {int(out[1])} elements, expected {numel}"
    if not np.isfinite(out).all():
        return f"{label} has NaN/inf elements (unwritten or overflowed output?)"
    (_, _, out_sum, out_l2sq), (_, _, ref_sum, ref_l2sq) = out[:HEADER], ref[:HEADER]
    out_sketch, ref_sketch = out[HEADER:HEADER + SKETCH_BUCKETS], ref[HEADER:HEADER + SKETCH_BUCKETS]
    out_samples, ref_samples = out[HEADER + SKETCH_BUCKETS:], ref[HEADER + SKETCH_BUCKETS:]
    if not _is_float_code(ref[0]):
        if not (np.array_equal(out_samples, ref_samples) and np.array_equal(out_sketch, ref_sketch)
                and out_sum == ref_sum and out_l2sq == ref_l2sq):
            return f"{label}: integer elements differ from the reference's"
        return ""
    if numel <= SAMPLES:  # the samples are the whole output: the trials' exact comparison
        stats = output_stats(torch.from_numpy(out_samples.copy()), torch.from_numpy(ref_samples.copy()), config, floor)
        return judge_stats(stats, label, numel, config, floor)
    tolerance = config.rel_norm_tolerance if floor is None else max(config.rel_norm_tolerance, floor.rel_norm)
    ref_norm = math.sqrt(ref_l2sq)
    atol = ELEMENTWISE_ATOL_SCALE * ref_norm / math.sqrt(max(numel, 1)) + 1e-7
    if floor is not None:
        atol = max(atol, floor.abs)
    excess = np.abs(out_samples - ref_samples) - (config.elementwise_rtol * np.abs(ref_samples) + atol)
    bad = int(np.count_nonzero(excess > 0))
    if bad:
        return (f"{label}: {bad} of {len(ref_samples)} sampled elements out of tolerance (max abs error "
                f"{float(np.max(np.abs(out_samples - ref_samples))):.3g})")
    error = math.sqrt(float(np.sum(np.square(out_sketch - ref_sketch))))
    relative = error / ref_norm if ref_norm > 0 else (0.0 if error == 0 else math.inf)
    if relative > SKETCH_MARGIN * tolerance:
        return (f"{label}: relative error about {relative:.3g} (sketched over every element) > {tolerance:g} "
                f"({config.precision} policy, estimate held to {SKETCH_MARGIN:g}x)")
    norm_gap = abs(math.sqrt(out_l2sq) - ref_norm)
    if norm_gap > tolerance * ref_norm:
        return f"{label}: its L2 norm differs from the reference's by {norm_gap / max(ref_norm, 1e-30):.3g} of it"
    if abs(out_sum - ref_sum) > tolerance * ref_norm * math.sqrt(numel):
        return f"{label}: sum {out_sum:.6g}, expected {ref_sum:.6g}"
    return ""
