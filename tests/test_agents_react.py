"""The ReAct policy (agents/react.py) playing the real KernelEnv with the session's CPU evaluator."""
from __future__ import annotations

import pytest

from cuda_gym_agents.llm import BackendError, ChatReply, SamplingConfig, ScriptedChat
from cuda_gym_agents.react import START_MESSAGE, WORKFLOW_GUIDE, ReactConfig, ReactPolicy, action_for, parse_reply
from cuda_gym.envs import KernelEnv
from cuda_gym.tasks import get_task

from .helpers import CORRECT_BODY, GELU_TASK, native_candidate

GOOD = native_candidate(CORRECT_BODY)
BROKEN = native_candidate(CORRECT_BODY.replace("0.5f *", "0.5f * +*"))
# Runs, but computes relu instead of gelu.
WRONG = native_candidate("for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;")


def fenced(command: str | None, source: str, text: str = "") -> str:
    head = f"{text}\n" if text else ""
    return head + (f"#! {command}\n" if command else "") + f"```python\n{source}```\n"


def make_env(evaluator, max_turns):
    return KernelEnv(backend="cpu", evaluator=evaluator, max_turns=max_turns)


# ----------------------------------------------------------------------------------- parsing

def test_parse_reply_finds_command_candidate_and_text():
    parsed = parse_reply("I will check it.\n#! check\n```python\nclass ModelNew: pass\n```\nDone.")
    assert (parsed.command, parsed.candidate) == ("check", "class ModelNew: pass\n")
    assert parsed.text == "I will check it.\n#! check\n\nDone."
    # A command line opening the block, and no command at all (the env's default, eval).
    inner = parse_reply("```python\n#! submit\nclass ModelNew: pass\n```")
    assert (inner.command, inner.candidate) == ("submit", "class ModelNew: pass\n")
    assert action_for(inner, "") == "#! submit\nclass ModelNew: pass\n"
    assert action_for(parse_reply("```py\nclass ModelNew: pass\n```"), "") == "#! eval\nclass ModelNew: pass\n"
    # Of several blocks, the last one defining ModelNew; non-Python blocks are ignored.
    several = parse_reply("```python\nclass ModelNew: a = 1\n```\n```python\nprint(2)\n```\n```cpp\nint x;\n```")
    assert several.candidate == "class ModelNew: a = 1\n"
    # No block: the raw reply is stepped, so the environment explains what is wrong.
    assert parse_reply("no code here").candidate is None
    assert action_for(parse_reply("#! deploy"), "#! deploy") == "#! deploy"
    assert parse_reply("#! Deploy\n```python\nclass ModelNew: pass\n```").command == "deploy"


# -------------------------------------------------------------------------------- episodes

@pytest.mark.slow
def test_scripted_episode_compile_error_fix_check_submit(cpu_evaluator):
    chat = ScriptedChat([
        fenced("compile", BROKEN, "First attempt: one elementwise loop."),
        fenced("compile", GOOD, "Fixed the typo."),
        fenced("check", GOOD),
        fenced("eval", WRONG, "Trying a faster formula."),
        "Submitting my best candidate.\n```python\n#! submit\n" + GOOD + "```",
    ])
    env = make_env(cpu_evaluator, max_turns=8)
    trajectory = ReactPolicy().play(env, chat, get_task(GELU_TASK), episode=3)
    env.close()

    assert trajectory.end_reason == "submit" and trajectory.error == ""
    assert (trajectory.task_id, trajectory.level, trajectory.episode) == (GELU_TASK, 1, 3)
    assert trajectory.env_backend == "cpu"
    codes = [t.error_code for t in trajectory.turns]
    commands = [t.command for t in trajectory.turns]
    assert codes == ["COMPILE_ERROR", "COMPILED", "OK", "INCORRECT", "OK"]
    assert commands == ["compile", "compile", "check", "eval", "submit"]
    # Milestone rewards per step: failure -1, a build 0, correct 1, wrong -1; the submit is correct
    # and timed against eager (1, or 2 when >5% faster: CPU timing decides which).
    rewards = [t.reward for t in trajectory.turns]
    assert rewards[:4] == [-1.0, 0.0, 1.0, -1.0]
    submit = trajectory.turns[-1]
    assert submit.speedup_vs_eager is not None and submit.speedup_vs_eager > 0
    assert rewards[4] == (2.0 if submit.speedup_vs_eager > 1.05 else 1.0)
    assert trajectory.total_reward == pytest.approx(sum(rewards))
    assert "error:" in trajectory.turns[0].observation and "Reward: -1" in trajectory.turns[0].observation
    assert submit.result["error_code"] == "OK" and submit.result["correct"] is True

    best = trajectory.best()
    assert (best.turn, best.command, best.correct, best.error_code) == (5, "submit", True, "OK")
    assert best.candidate == GOOD and best.speedup_vs_eager == submit.speedup_vs_eager

    # What the model saw: the env prompt + guide as system message, then reply / feedback pairs.
    messages = submit.messages
    assert messages[0]["role"] == "system" and messages[0]["content"].endswith(WORKFLOW_GUIDE)
    assert "# Task builtin/L1/gelu" in messages[0]["content"]
    assert messages[1] == {"role": "user", "content": START_MESSAGE}
    assert [m["role"] for m in messages[2:]] == ["assistant", "user"] * 4
    assert messages[-1]["content"] == trajectory.turns[3].observation
    assert chat.calls[-1] == messages


def test_malformed_empty_huge_and_non_ascii_replies(cpu_evaluator):
    comment = "# Voil\u00e0 \u2014 \u00fcn\u00efc\u00f6de \u2713 \U0001f680\n"
    non_ascii = GOOD.replace("class ModelNew", comment + "class ModelNew")
    chat = ScriptedChat([
        "",                                                          # empty
        "I think we should use tiling. \u00bfQu\u00e9 opinas? \u2728",  # prose, no code, non-ASCII
        fenced("check", "def broken(:\n    pass\n"),                  # not Python
        fenced("deploy", GOOD),                                       # unknown command
        fenced("check", "x" * 250_000),                               # longer than the action limit
        ChatReply(text="#! check\n```python\nimport torch\nclass ModelNew", finish_reason="length"),  # cut
        fenced("compile", non_ascii, "Gr\u00fc\u00dfe \u2014 compiling \u2192 now"),  # valid, non-ASCII comments
    ])
    env = make_env(cpu_evaluator, max_turns=7)
    trajectory = ReactPolicy().play(env, chat, get_task(GELU_TASK))
    env.close()

    assert trajectory.end_reason == "max_turns" and len(trajectory.turns) == 7
    invalid = trajectory.turns[:6]
    assert all(t.error_code == "INVALID_ACTION" and t.command is None and t.reward == -1.0 for t in invalid)
    observations = [t.observation for t in invalid]
    assert "the action is empty" in observations[0]
    assert "not valid Python" in observations[1] and "not valid Python" in observations[2]
    assert "unknown command 'deploy'" in observations[3]
    assert "250" in observations[4] and "limit" in observations[4]
    assert all(o.isascii() for o in observations)
    # The cut reply is noted to the model in the next turn's last message.
    assert "cut at the generation limit" in trajectory.turns[6].messages[-1]["content"]
    last = trajectory.turns[6]
    assert (last.command, last.error_code, last.reward) == ("compile", "COMPILED", 0.0)
    assert last.candidate == non_ascii and last.reply.count("\U0001f680") == 1
    best = trajectory.best()
    assert best.turn == 7 and not best.correct and best.error_code == "COMPILED"


def test_backend_error_mid_episode_keeps_the_turns_played(cpu_evaluator):
    chat = ScriptedChat(["no code yet", BackendError("server at http://x/v1 failed 4 times: HTTP 500")])
    env = make_env(cpu_evaluator, max_turns=5)
    trajectory = ReactPolicy().play(env, chat, get_task(GELU_TASK))
    env.close()
    assert trajectory.end_reason == "backend_error" and "HTTP 500" in trajectory.error
    assert [t.error_code for t in trajectory.turns] == ["INVALID_ACTION"]
    # Anything else a backend raises ends the episode the same way, with its type named.
    chat = ScriptedChat([TimeoutError("read timed out")])
    env = make_env(cpu_evaluator, max_turns=5)
    trajectory = ReactPolicy().play(env, chat, get_task(GELU_TASK))
    env.close()
    assert (trajectory.end_reason, trajectory.turns) == ("backend_error", [])
    assert trajectory.error == "TimeoutError: read timed out" and trajectory.best() is None


def test_context_management_keeps_best_candidate_and_latest_feedback_whole(cpu_evaluator):
    padding = "Thinking about the memory layout. " * 150  # ~5,000 characters of prose per reply
    replies = [fenced("check", GOOD, "A first version.")] + [padding + f"(reply {i})" for i in range(2, 6)]
    chat = ScriptedChat(replies, sampling=SamplingConfig(max_new_tokens=200))
    env = make_env(cpu_evaluator, max_turns=5)
    system_tokens = chat.count_tokens([{"role": "system", "content": ReactPolicy().system_prompt(env.reset(
        options={"task_id": GELU_TASK})[0])}])
    # Room for the system prompt, the best candidate's turn and about one more whole reply.
    policy = ReactPolicy(ReactConfig(context_tokens=system_tokens + 200 + 3_000))
    trajectory = policy.play(env, chat, get_task(GELU_TASK))
    env.close()

    assert trajectory.end_reason == "max_turns"
    assert [t.error_code for t in trajectory.turns] == ["OK"] + ["INVALID_ACTION"] * 4
    for turn in trajectory.turns:
        assert chat.count_tokens(turn.messages) <= policy.config.context_tokens - 200
    last = trajectory.turns[-1].messages
    contents = [m["content"] for m in last]
    assert contents[2] == trajectory.turns[0].reply            # the best candidate's reply, whole
    assert contents[-1] == trajectory.turns[3].observation      # the latest feedback, whole
    assert contents[-2] == trajectory.turns[3].reply            # room left for the latest reply: whole
    assert any("[feedback shortened to save context]" in c for c in contents)
    assert any("[...]" in c for c in contents if len(c) < 1000)  # an older reply shortened
    assert sum(padding in c for c in contents) < 4               # not every long reply kept whole

    # A budget that cannot hold even the system prompt ends the episode before any turn.
    chat = ScriptedChat(["never used"], sampling=SamplingConfig(max_new_tokens=200))
    env = make_env(cpu_evaluator, max_turns=3)
    tight = ReactPolicy(ReactConfig(context_tokens=system_tokens)).play(env, chat, get_task(GELU_TASK))
    env.close()
    assert (tight.end_reason, tight.turns, chat.calls) == ("context_budget", [], [])
    assert f"{system_tokens} tokens" in tight.error
