"""Timed calls' inputs (cuda_gym.eval.timed_inputs): a fresh draw per call that can be made again
for the reference's digest, loaded in place, and checked unchanged after the call."""
import random

import numpy as np
import pytest
import torch

from cuda_gym.eval.timed_inputs import (SEED_IGNORED, InputsChanged, TimedInput, TimedInputs, TimedLoader,
                                        changed_inputs, fresh_draw, rotated, same_inputs, secret_shifts, seed_check)


def get_inputs():
    return [torch.randn(16, 8), torch.randint(0, 10, (5,)), 3]


def test_a_seed_gives_the_same_draw_twice_and_another_seed_another():
    first, again, other = fresh_draw(get_inputs, 11, "cpu"), fresh_draw(get_inputs, 11, "cpu"), fresh_draw(get_inputs, 12, "cpu")
    assert same_inputs(first, again)
    assert not same_inputs(first, other)


def test_a_draw_leaves_the_global_random_streams_as_they_were():
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    fresh_draw(lambda: [torch.rand(4), random.random(), np.random.rand()], 99, "cpu")
    got = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def test_numpy_and_python_draws_are_seeded_too():
    def numpy_inputs():
        return [torch.from_numpy(np.random.rand(6)), random.random()]

    assert same_inputs(fresh_draw(numpy_inputs, 3, "cpu"), fresh_draw(numpy_inputs, 3, "cpu"))


def test_an_unrepeatable_draw_is_told_apart():
    counter = iter(range(100))

    def drifting():
        return [torch.full((4,), float(next(counter)))]

    assert not same_inputs(fresh_draw(drifting, 1, "cpu"), fresh_draw(drifting, 1, "cpu"))


def test_nan_inputs_count_as_unchanged():
    a = torch.tensor([1.0, float("nan")])
    assert same_inputs([a], [a.clone()])
    assert changed_inputs([a, a, 3], [a.clone(), torch.tensor([1.0, 2.0]), 3]) == [1]


def test_loader_copies_in_place_and_catches_a_changed_input():
    seeds = [TimedInput(1), TimedInput(2)]
    live = [torch.zeros(16, 8), torch.zeros(5, dtype=torch.int64), 3]
    addresses = [live[0].data_ptr(), live[1].data_ptr()]
    loader = TimedLoader(live, seeds, lambda timed: fresh_draw(get_inputs, timed.seed, "cpu"))
    loader.load(0)
    assert same_inputs(live, fresh_draw(get_inputs, 1, "cpu"))
    assert [live[0].data_ptr(), live[1].data_ptr()] == addresses
    loader.verify()  # unchanged: passes
    loader.load(1)
    live[0].mul_(2.0)  # what a forward that works in place on its input does
    with pytest.raises(InputsChanged, match=r"input\(s\) \[0\]"):
        loader.verify()


def test_rotated_fallback_keeps_the_values_and_moves_them():
    chooser = random.SystemRandom()
    values = [torch.arange(12.0).reshape(3, 4), torch.arange(5), 7]
    shifts = secret_shifts(chooser, values)
    assert shifts[0] > 0 and shifts[1] > 0 and shifts[2] == 0
    moved = rotated(values, shifts)
    assert torch.equal(moved[0].reshape(-1), values[0].reshape(-1).roll(shifts[0])) and moved[2] == 7


def test_a_task_whose_draws_repeat_gets_fresh_draws_and_one_that_drifts_gets_rotations():
    chooser = random.SystemRandom()
    sets = [[torch.arange(12.0)]]
    assert seed_check(get_inputs, "cpu") == ("", "")
    fresh = TimedInputs(get_inputs, "cpu", sets, "")
    timed = fresh.secret(chooser, 0)
    assert timed.seed is not None and same_inputs(fresh.values(timed), fresh.values(timed))

    counter = iter(range(100))
    why, _ = seed_check(lambda: [torch.full((4,), float(next(counter)))], "cpu")
    assert "other values under the same seed" in why
    drifting = TimedInputs(lambda: [torch.full((4,), float(next(counter)))], "cpu", sets, why)
    timed = drifting.secret(chooser, 0)
    assert timed.seed is None and timed.shifts[0] > 0
    assert torch.equal(drifting.values(timed)[0], sets[0][0].roll(timed.shifts[0]))
    assert drifting.secret(chooser, 0, plain=True).shifts == (0,)


def test_the_checksum_digests_first_then_verifies():
    live = [torch.zeros(16, 8), torch.zeros(5, dtype=torch.int64), 3]
    loader = TimedLoader(live, [TimedInput(1)], lambda timed: fresh_draw(get_inputs, timed.seed, "cpu"))
    seen = []
    check = loader.digest_then_verify(lambda output, index: seen.append((index, live[0].clone())) or "record")
    loader.load(0)
    live[0].add_(1.0)
    with pytest.raises(InputsChanged):
        check("output", 0)
    assert seen and seen[0][0] == 0  # the digest ran before the check raised


def test_the_timers_read_the_probe_before_the_clock_stops(monkeypatch):
    # What a call leaves to run after it returns must land before this read or show in it: the
    # probe comes between the call and the clock's second reading, the digest after it.
    from cuda_gym.eval import timing

    events: list[str] = []
    ticks = iter(range(10**9))
    monkeypatch.setattr(timing, "_perf_counter_ns", lambda: events.append("clock") or next(ticks))

    class Digest:
        def prepare(self, index):
            events.append("prepare")

        def probe(self, output, index):
            events.append("probe")
            return ["read"]

        def __call__(self, output, index, probes=None):
            events.append(f"digest:{probes}")
            return index

    def forward(x):
        events.append("call")
        return x * 2

    loader = TimedLoader([torch.ones(4)], [TimedInput(None, 0, (0,))] * 4, lambda timed: [torch.ones(4)])
    timer = timing.Timer("cpu", warmup_reps=0, reps=4, min_reps=4, budget_s=0.0, l2_flush=False)
    timer.run(forward, loader.live, loader.load, 4, loader.digest_then_verify(Digest()))
    timed = [i for i, e in enumerate(events) if e == "call"]
    assert len(timed) == 4
    for i in timed:
        assert events[i - 2: i + 4] == ["prepare", "clock", "call", "probe", "clock", "digest:['read']"], events
    events.clear()
    pairs = timing.time_pairs("cpu", forward, forward, loader.live, loader.load, loader.digest_then_verify(Digest()),
                              [(True, False)], after_call=lambda: None, warmup_reps=0, warmup_s=0.0)
    assert pairs["candidate_digests"] and pairs["reference_digests"]
    calls = [i for i, e in enumerate(events) if e == "call"]
    for i in calls[-2:]:
        assert events[i - 2: i + 4] == ["prepare", "clock", "call", "probe", "clock", "digest:['read']"], events


def test_a_task_that_seeds_itself_is_told_apart():
    # Every "fresh" draw of such a task is the same: a cache keyed on a few elements would serve
    # every timed call, so the task is degenerate (speed earns nothing).
    def seeds_itself():
        torch.manual_seed(1234)
        return [torch.randn(8, 8)]

    assert seed_check(seeds_itself, "cpu") == ("", SEED_IGNORED)
