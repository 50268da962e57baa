"""Trajectory records, best-in-trajectory, the JSONL file and the rollout summary (no evaluator)."""
from __future__ import annotations

import json
import threading

import pytest

from cuda_gym_agents.rollout import summarize
from cuda_gym.trajectory import Trajectory, Turn, append_trajectory, read_trajectories


def turn(index, command, code, *, eager=None, compile_=None, candidate=None, reward=0.0, **extra):
    return Turn(index=index, messages=[{"role": "user", "content": "m"}], reply=f"reply {index}", command=command,
                observation=f"obs {index}", reward=reward, error_code=code, candidate=candidate or f"src{index}",
                speedup_vs_eager=eager, speedup_vs_compile=compile_, **extra)


def trajectory(task_id="builtin/L1/gelu", level=1, episode=0, turns=(), end_reason="max_turns"):
    return Trajectory(task_id=task_id, level=level, episode=episode, backend="scripted", model="m",
                      turns=list(turns), end_reason=end_reason)


def test_best_prefers_correct_then_speedup_vs_compile_then_eager():
    t = trajectory(turns=[
        turn(1, "compile", "COMPILED"),
        turn(2, "check", "OK"),                                  # correct, not timed
        turn(3, "eval", "OK", eager=3.0, compile_=0.9),
        turn(4, "eval", "OK", eager=1.5, compile_=1.2),          # the best: fastest vs compile
        turn(5, "eval", "INCORRECT", eager=9.0, compile_=9.0),   # fast but wrong
        turn(6, "eval", "OK", eager=2.0, compile_=1.2),          # same vs compile, faster vs eager: wins
    ])
    best = t.best()
    assert (best.turn, best.correct, best.speedup_vs_compile, best.speedup_vs_eager, best.candidate) == (
        6, True, 1.2, 2.0, "src6")
    # Without compile timings, eager decides; a timed correct candidate beats a check-only one.
    t = trajectory(turns=[turn(1, "eval", "OK", eager=1.1), turn(2, "eval", "OK", eager=0.8), turn(3, "check", "OK")])
    assert t.best().turn == 1
    t = trajectory(turns=[turn(1, "check", "OK"), turn(2, "submit", "OK", eager=0.5)])
    assert t.best().turn == 2


def test_best_without_a_correct_candidate_is_the_one_that_got_furthest():
    t = trajectory(turns=[turn(1, None, "INVALID_ACTION"), turn(2, "check", "INCORRECT"),
                          turn(3, "compile", "COMPILE_ERROR"), turn(4, "compile", "COMPILED")])
    best = t.best()
    assert (best.turn, best.correct, best.error_code) == (2, False, "INCORRECT")
    # A compile step's short check is not a correctness verdict: "OK" there does not count.
    assert not turn(1, "compile", "OK").correct and turn(1, "check", "OK").correct
    assert trajectory().best() is None


def test_jsonl_round_trip_concurrent_appends_and_a_cut_line(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    full = trajectory(turns=[turn(1, "eval", "OK", eager=1.3, reward=2.0, prompt_token_ids=[1, 2], token_ids=[3, 4],
                                  logprobs=[-0.5, -1.25], usage={"prompt_tokens": 2, "completion_tokens": 2},
                                  finish_reason="stop", result={"error_code": "OK", "correct": True})],
                      end_reason="submit")
    full.sampling = {"temperature": 1.0}
    threads = [threading.Thread(target=append_trajectory, args=(path, trajectory(episode=i))) for i in range(8)]
    append_trajectory(path, full)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = read_trajectories(path)
    assert len(records) == 9 and records[0] == full
    assert sorted(r.episode for r in records[1:]) == list(range(8))
    assert json.loads(path.read_text().splitlines()[0])["turns"][0]["logprobs"] == [-0.5, -1.25]
    # A line cut by a crash is reported with its file and line number.
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"task_id": "x", "turns": [')
    with pytest.raises(ValueError, match=r"trajectories\.jsonl:10: not a trajectory record"):
        read_trajectories(path)
    path.write_text('{"task_id": "x"}\n')
    with pytest.raises(ValueError, match=r":1: .*lacks the fields \['backend', 'episode', 'level', 'model'\]"):
        read_trajectories(path)


def test_summary_follows_best_of_trajectory_protocol():
    records = [
        trajectory("builtin/L1/a", 1, 0, [turn(1, "eval", "OK", eager=2.0, compile_=0.5)], "submit"),
        trajectory("builtin/L1/a", 1, 1, [turn(1, "eval", "INCORRECT")], "max_turns"),
        trajectory("builtin/L1/b", 1, 0, [turn(1, "check", "OK")], "max_turns"),
        trajectory("builtin/L2/c", 2, 0, [turn(1, "eval", "OK", eager=8.0, compile_=2.0)], "submit"),
        trajectory("builtin/L2/d", 2, 0, [], "backend_error"),
    ]
    records[-1].error = "server down"
    summary = summarize(records, model="m")
    assert summary["episodes"] == 5 and summary["pass_rate"] == pytest.approx(3 / 5)
    assert summary["faster_than_eager_rate"] == pytest.approx(2 / 5)
    assert summary["faster_than_compile_rate"] == pytest.approx(1 / 5)
    assert summary["geomean_speedup_vs_eager"] == pytest.approx(4.0)      # sqrt(2 * 8); the check has none
    assert summary["geomean_speedup_vs_compile"] == pytest.approx(1.0)    # sqrt(0.5 * 2)
    assert summary["levels"]["1"]["pass_rate"] == pytest.approx(2 / 3)
    assert summary["levels"]["2"]["pass_rate"] == pytest.approx(1 / 2)
    assert summary["levels"]["2"]["geomean_speedup_vs_compile"] == pytest.approx(2.0)
    assert summary["end_reasons"] == {"submit": 2, "max_turns": 2, "backend_error": 1}
    assert summary["first_error"] == "server down" and summary["model"] == "m"
    tasks = summary["tasks"]
    assert tasks["builtin/L1/a"] == {"level": 1, "episodes": 2, "passed_episodes": 1, "best_error_code": "OK",
                                     "best_speedup_vs_eager": 2.0, "best_speedup_vs_compile": 0.5,
                                     "best_episode": 0, "best_turn": 1}
    assert tasks["builtin/L1/b"]["best_speedup_vs_eager"] is None and tasks["builtin/L1/b"]["passed_episodes"] == 1
    assert tasks["builtin/L2/d"]["best_error_code"] == "NO_TURNS"
    json.dumps(summary)  # serialisable as is
