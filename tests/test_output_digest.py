"""Timed calls are held to the trials' tolerances through their output digests (output_digest):
the checks catch per-element and spread errors that sums average away, and pass what the trials pass."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cuda_gym.eval import EvalConfig, output_digest
from cuda_gym.eval.correctness import ToleranceFloor

FP32 = EvalConfig()
SIZE = 1 << 20  # more than output_digest.SAMPLES: the sampled and sketched path


def _reference(size: int = SIZE, seed: int = 0) -> torch.Tensor:
    return torch.randn(size, generator=torch.Generator().manual_seed(seed))


def _mismatch(out: torch.Tensor, ref: torch.Tensor, index: int = 3, floor: ToleranceFloor | None = None) -> str:
    digest = output_digest.DigestMaker(12345)
    return output_digest.mismatch(digest([out], index), digest([ref], index), FP32, floor)


def test_sums_over_cpu_chunks_match_one_pass():
    value = torch.randn((1 << 20) * 3 + 5, generator=torch.Generator().manual_seed(1))
    record = output_digest.DigestMaker(1)([value], 0)
    exact = value.double()
    assert record[2] == pytest.approx(float(exact.sum()), rel=1e-12, abs=1e-9)
    assert record[3] == pytest.approx(float(exact.square().sum()), rel=1e-12)


def test_the_same_output_passes_and_rounding_noise_passes():
    ref = _reference()
    assert _mismatch(ref.clone(), ref) == ""
    noise = 1e-6 * torch.randn(SIZE, generator=torch.Generator().manual_seed(2))
    assert _mismatch(ref * (1 + noise), ref) == ""


def test_a_small_error_on_every_element_fails_though_the_sums_agree():
    # 0.3% off on every element, signs alternating: the sum moves by far less than the old checksum
    # tolerance (5e-4 of the L1 norm), every element is 3x beyond the elementwise bound.
    ref = _reference()
    signs = torch.ones(SIZE)
    signs[1::2] = -1
    out = ref * (1 + 0.003 * signs)
    assert abs(float(out.double().sum() - ref.double().sum())) < 5e-4 * float(ref.double().abs().sum())
    assert "sampled elements out of tolerance" in _mismatch(out, ref)


def test_a_spread_error_within_the_elementwise_bound_fails_on_the_norm():
    # A TF32-like error: 2e-4 relative per element (within the 1e-3 elementwise bound nearly
    # everywhere), relative-norm error 2e-4, four times the fp32 tolerance.
    ref = _reference()
    out = ref * (1 + 2e-4 * torch.randn(SIZE, generator=torch.Generator().manual_seed(3)).clamp(-4, 4))
    message = _mismatch(out, ref)
    assert "relative error about" in message


def test_an_error_on_a_few_elements_that_sampling_misses_fails_on_the_sketch():
    ref = _reference()
    out = ref.clone()
    out[::100_000] += 10.0  # 11 elements: a 4096-element sample holds one with probability 4%
    assert "relative error about" in _mismatch(out, ref) or "sampled elements" in _mismatch(out, ref)


def test_integer_outputs_must_be_equal():
    ref = torch.randint(0, 1000, (SIZE,), generator=torch.Generator().manual_seed(4))
    assert _mismatch(ref.clone(), ref) == ""
    out = ref.clone()
    out[SIZE // 3] += 1
    assert "integer elements differ" in _mismatch(out, ref)


def test_small_outputs_are_compared_whole():
    ref = _reference(1000)
    out = ref.clone()
    out[17] += 1.0
    assert "elements out of tolerance" in _mismatch(out, ref) or "relative error" in _mismatch(out, ref)


def test_dtype_shape_and_count_changes_fail():
    ref = _reference()
    assert "dtype float16" in _mismatch(ref.half(), ref)
    assert "elements, expected" in _mismatch(ref[:-1], ref)
    digest = output_digest.DigestMaker(1)
    assert "2 outputs" in output_digest.mismatch(digest([ref, ref], 0), digest([ref], 0), FP32)
    nan = ref.clone()
    nan[5] = float("nan")
    assert "NaN/inf" in _mismatch(nan, ref)


def test_a_widened_tolerance_is_applied():
    ref = _reference()
    out = ref * (1 + 2e-4 * torch.randn(SIZE, generator=torch.Generator().manual_seed(3)).clamp(-4, 4))
    assert _mismatch(out, ref, floor=ToleranceFloor(rel_norm=1e-3, abs=1e-3)) == ""


def test_the_digest_looks_elsewhere_for_each_input():
    ref = _reference()
    digest = output_digest.DigestMaker(99)
    first, second = digest([ref], 0), digest([ref], 1)
    header = output_digest.HEADER + output_digest.SKETCH_BUCKETS
    assert not np.array_equal(first[header:], second[header:])  # other secret positions
    assert np.array_equal(first[:output_digest.HEADER], second[:output_digest.HEADER])  # the same sums


@pytest.mark.parametrize("pattern", ["spread", "blocks", "heavy_tailed", "one_column"])
def test_the_sketch_passes_an_error_just_under_the_tolerance(pattern):
    # The estimate's spread is what SKETCH_MARGIN must cover: an error at 0.8x the tolerance passes
    # under 40 secrets, whatever its pattern.
    generator = torch.Generator().manual_seed(5)
    ref = torch.randn(SIZE, generator=generator)
    if pattern == "spread":
        error = torch.randn(SIZE, generator=generator)
    elif pattern == "blocks":
        error = torch.zeros(SIZE)
        error[: SIZE // 64] = torch.randn(SIZE // 64, generator=generator)
    elif pattern == "heavy_tailed":
        error = torch.randn(SIZE, generator=generator) ** 5
    else:  # one column of a 1024-column matrix
        error = torch.zeros(SIZE)
        error[::1024] = torch.randn(SIZE // 1024, generator=generator)
    error *= 0.8 * FP32.rel_norm_tolerance * float(ref.norm()) / float(error.norm())
    out = ref + error
    for secret in range(40):
        digest = output_digest.DigestMaker(secret)
        failure = output_digest.mismatch(digest([out], 0), digest([ref], 0), FP32)
        assert "relative error" not in failure, (secret, failure)


@pytest.mark.parametrize("size", [SIZE, 1000])  # sampled positions; an output kept whole
def test_values_written_after_the_probe_are_not_the_sampled_ones(size):
    # The timers read the probe inside the timed window; work the call leaves to run after it
    # returns (a signal handler, a thread) writes the output after that read.
    digest = output_digest.DigestMaker(5)
    ref = _reference(size)
    want = digest([ref], 3)
    out = torch.zeros(size)
    digest.prepare(3)
    probes = digest.probe([out], 3)
    out.copy_(ref)  # the late work
    assert output_digest.mismatch(digest([out], 3, probes), want, FP32) != ""
    assert output_digest.mismatch(digest([out], 3, digest.probe([out], 3)), want, FP32) == ""


def test_a_non_contiguous_output_is_probed_at_the_same_positions():
    digest = output_digest.DigestMaker(9)
    ref = _reference(1 << 16).reshape(256, 256)
    want = digest([ref.t().contiguous()], 1)
    out = ref.t()  # the same values, column-major: the probe gathers without a copy
    assert not out.is_contiguous()
    assert output_digest.mismatch(digest([out], 1, digest.probe([out], 1)), want, FP32) == ""


def test_a_complex_output_is_held_to_both_parts():
    # Complex outputs are compared as their real view: the imaginary part was outside the digest.
    ref = torch.complex(_reference(4096, 0), _reference(4096, 1))
    assert _mismatch(ref.clone(), ref) == ""
    assert _mismatch(torch.complex(ref.real, -ref.imag), ref) != ""
    assert _mismatch(torch.complex(ref.real, ref.imag * (1 + 1e-3)), ref) != ""
