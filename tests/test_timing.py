"""Which CUDA measurement the timer reports (timing.choose_cuda_time), on synthetic repeat times
shaped like an H200's: a 0.13 ms kernel, 0.01-0.09 ms of host issue time."""
from __future__ import annotations

import pytest

from cuda_gym.eval.timing import (HELD_DISAGREES_FLAG, HELD_OUTLASTED_FLAG, UNTRACKED_WORK_FLAG,
                                  choose_cuda_time)

DEVICE_MS = 0.13


def repeats(value: float, count: int = 12, jitter: float = 0.002) -> list[float]:
    return [value + jitter * ((i % 3) - 1) for i in range(count)]


def open_repeats(issue_ms: float, extra_device_ms: float = 0.0) -> tuple[list, list, list]:
    """Event, wall and issue times of open repeats: the GPU waits for the host's issue, then runs."""
    event = DEVICE_MS + extra_device_ms + issue_ms
    return repeats(event), repeats(event + 0.02), repeats(issue_ms)


def test_held_device_time_is_reported_whatever_the_hosts_issue_time():
    reported = []
    for issue in (0.01, 0.04, 0.09):  # fresh workers differ this much in host issue time
        event, wall, open_issue = open_repeats(issue)
        stats, flags = choose_cuda_time(event, wall, open_issue, repeats(DEVICE_MS, 36), repeats(issue, 36),
                                        repeats(0.004, 36), hold_ms=3 * issue + 0.05)
        assert flags == [] and stats.method == "cuda_event_held"
        assert stats.detail["open_issue_ms"] == pytest.approx(issue)
        reported.append(stats.median_ms)
    assert max(reported) / min(reported) - 1 < 0.01


def test_a_host_bound_call_is_charged_its_host_time():
    event, wall, open_issue = open_repeats(0.3)
    stats, flags = choose_cuda_time(event, wall, open_issue, repeats(0.02, 36), repeats(0.3, 36),
                                    repeats(0.004, 36), hold_ms=0.9)
    assert flags == [] and stats.median_ms == pytest.approx(0.3, abs=0.003)


def test_work_hidden_under_the_hold_falls_back_to_the_open_time():
    # A copy on another stream (copy engines run while the SMs are held): 0.2 ms the held window misses.
    event, wall, open_issue = open_repeats(0.03, extra_device_ms=0.2)
    stats, flags = choose_cuda_time(event, wall, open_issue, repeats(DEVICE_MS, 36), repeats(0.03, 36),
                                    repeats(0.004, 36), hold_ms=0.1)
    assert flags == [HELD_DISAGREES_FLAG] and stats.method == "cuda_event"
    assert stats.median_ms == pytest.approx(DEVICE_MS + 0.23, abs=0.003)


def test_the_issue_credit_is_capped_at_half_the_open_time():
    # Stalling the host in open repeats only (to inflate the credit) hides at most half the open time.
    event, wall, open_issue = open_repeats(2.0)
    stats, flags = choose_cuda_time(event, wall, open_issue, repeats(0.2, 36), repeats(0.01, 36),
                                    repeats(0.004, 36), hold_ms=0.05)
    assert flags == [HELD_DISAGREES_FLAG] and stats.median_ms > 2.0


def test_a_call_that_waits_for_the_gpu_is_not_charged_the_hold():
    event, wall, open_issue = open_repeats(0.01)
    open_issue = repeats(DEVICE_MS + 0.01)  # it synchronizes: its host time includes the kernel
    stats, flags = choose_cuda_time(event, wall, open_issue, repeats(DEVICE_MS, 36), repeats(0.6, 36),
                                    repeats(0.004, 36), hold_ms=0.42)
    assert flags == [HELD_OUTLASTED_FLAG] and stats.method == "cuda_event"


def test_work_left_running_after_the_window_reports_the_host_clock():
    event, wall, open_issue = open_repeats(0.02)
    stats, flags = choose_cuda_time(event, wall, open_issue, repeats(0.005, 36), repeats(0.02, 36),
                                    repeats(0.13, 36), hold_ms=0.06)
    assert flags == [UNTRACKED_WORK_FLAG] and stats.method == "wall+device_sync"
    event, wall, _ = open_repeats(0.02)
    stats, flags = choose_cuda_time(event, repeats(event[0] + 0.3), open_issue, [], [], [], hold_ms=0.06)
    assert flags == [UNTRACKED_WORK_FLAG] and stats.method == "wall+device_sync"


def test_without_held_repeats_the_open_events_stand():
    event, wall, open_issue = open_repeats(0.02)
    stats, flags = choose_cuda_time(event, wall, open_issue, [], [], [], hold_ms=0.05)
    assert flags == [] and stats.method == "cuda_event" and stats.detail == {}


@pytest.mark.parametrize("open_ms", [0.03, 1.0])
def test_held_repeats_never_report_less_than_half_the_open_time(open_ms):
    # Launch latency and a large issue credit together still cannot take the floor below half.
    stats, flags = choose_cuda_time(repeats(open_ms, jitter=0), repeats(open_ms + 0.01, jitter=0),
                                    repeats(open_ms, jitter=0), repeats(0.45 * open_ms, 36, jitter=0),
                                    repeats(0.001, 36, jitter=0), repeats(0.001, 36, jitter=0), hold_ms=0.05)
    assert flags == [HELD_DISAGREES_FLAG] and stats.median_ms == pytest.approx(open_ms)


def test_a_tiny_kernel_with_host_bound_calls_keeps_its_held_time():
    # 8 us of device work issued in 20 us: held counts the host's 20 us, which the open repeats allow.
    stats, flags = choose_cuda_time(repeats(0.03, jitter=0), repeats(0.04, jitter=0), repeats(0.02, jitter=0),
                                    repeats(0.008, 36, jitter=0), repeats(0.02, 36, jitter=0),
                                    repeats(0.001, 36, jitter=0), hold_ms=0.06)
    assert flags == [] and stats.median_ms == pytest.approx(0.02)


def test_every_run_audits_at_least_one_timed_repeat():
    # The warm-ups are audited at known positions; a candidate honest there and in the trials but
    # not in its timed calls met a random quarter only, which missed all five repeats 24% of the time.
    import contextlib

    import torch

    from cuda_gym.eval.timing import Timer

    for _ in range(30):  # without the secret audited repeat, all 30 pass with probability 3e-4
        timer = Timer("cpu", warmup_reps=1, reps=5, min_reps=3, budget_s=0.0, l2_flush=False)
        audited = []
        calls = []

        @contextlib.contextmanager
        def audit():
            audited.append(len(calls))
            yield

        def forward(x):
            calls.append(1)
            return x + 1

        timer.run(forward, [torch.zeros(4)], lambda k: None, 1, lambda out, k, *read: 0.0, audit=audit)
        assert [a for a in audited if a > 0], audited  # call 0 is the audited warm-up
