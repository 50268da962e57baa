"""The verifiers (>= 0.4) Environments-Hub package `cuda_gym_kernel`: loaded by verifiers' own loader
from its taskset id, a rollout through verifiers' real machinery (the `null` chat harness in a
subprocess, its model interception, the eval client) against a scripted OpenAI-compatible model
gets the reward the local KernelEnv gives for the same replies.

verifiers is not in the `test` extra (it pins openai<3 and pulls gradio, mcp and the prime-*
clients): this module skips without it. The harness's chat program runs through `uv`, which
installs its few dependencies from the package index on first use."""
from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

vf = pytest.importorskip("verifiers.v1", reason="verifiers >= 0.4 is not installed (pip install -e '.[verifiers]')")

from cuda_gym.envs import KernelEnv  # noqa: E402
from cuda_gym_agents.react import action_for, parse_reply  # noqa: E402

from .fakes import FakeJudge  # noqa: E402
from .test_serve import GELU  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("uv") is None and shutil.which("pip") is None,
                                reason="verifiers' chat harness needs uv (or pip to install it)")


def reply(command: str, verdict: str) -> str:
    return f"Here is my kernel.\n#! {command}\n```python\nclass ModelNew: pass  # {verdict}\n```"


class ScriptedModel:
    """An OpenAI-compatible chat-completions endpoint (streamed or not) answering from a script and
    recording the messages of every request."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.requests: list[list[dict]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                model.requests.append(body.get("messages", []))
                text = model.replies.pop(0) if model.replies else ""
                usage = {"prompt_tokens": 10, "completion_tokens": max(1, len(text) // 4),
                         "total_tokens": 10 + max(1, len(text) // 4)}
                head = {"id": f"chatcmpl-{len(model.requests)}", "created": int(time.time()),
                        "model": body.get("model", "scripted")}
                if body.get("stream"):
                    chunks = [
                        {**head, "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                      "finish_reason": None}]},
                        {**head, "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                        {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage},
                    ]
                    payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
                    payload += b"data: [DONE]\n\n"
                    content_type = "text/event-stream"
                else:
                    payload = json.dumps({**head, "object": "chat.completion", "usage": usage, "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}]}).encode()
                    content_type = "application/json"
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def local_reward(judge: FakeJudge, replies: list[str], max_turns: int) -> tuple[float, list[str]]:
    """The reward KernelEnv (reward_mode="final") gives an episode of these replies, parsed as the
    verifiers environment parses them, and the verdict of each step."""
    env = KernelEnv(backend="cpu", task_filter=GELU.id, evaluator=judge, max_turns=max_turns, reward_mode="final")
    env.reset(options={"task_id": GELU.id})
    verdicts = []
    for text in replies:
        if not text.strip():
            break  # the environment ends the exchange on an empty reply
        _, reward, terminated, truncated, info = env.step(action_for(parse_reply(text), text))
        verdicts.append(info["verdict"])
        if terminated or truncated:
            env.close()
            return reward, verdicts
    reward = env.episode_reward()
    env.close()
    return reward, verdicts


def play(env, model: ScriptedModel):
    (task,) = list(env.taskset)
    ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(base_url=model.url,
                                                                       api_key_var="SCRIPTED_MODEL_KEY"))

    async def run():
        async with env.serving():
            return await env.run_episode(task, ctx)

    return asyncio.run(run())


@pytest.mark.parametrize("replies", [
    [reply("check", "INCORRECT"), reply("submit", "OK")],      # fixed, then submitted: a positive reward
    [reply("eval", "RUNTIME_ERROR"), reply("submit", "INCORRECT")],  # never correct: the failure reward
    [reply("eval", "OK"), ""],                                  # the model stops: the episode as it stands
], ids=["fixed-then-submitted", "never-correct", "stopped-early"])
def test_verifiers_rollout_gets_the_local_reward(replies, monkeypatch, tmp_path):
    monkeypatch.setenv("SCRIPTED_MODEL_KEY", "unused")
    from cuda_gym_kernel import KernelVerifiersEnv, load_environment

    judge = FakeJudge()
    expected, expected_verdicts = local_reward(judge, replies, max_turns=4)
    # verifiers' own loader resolves the taskset id to the Hub package's Env and Taskset
    config = vf.resolve_env_config({"taskset": {"id": "cuda_gym_kernel", "backend": "cpu",
                                                "task_ids": [GELU.id], "max_turns": 4}})
    assert type(vf.load_environment(config)) is KernelVerifiersEnv
    env = load_environment(evaluator=judge, backend="cpu", task_ids=[GELU.id], max_turns=4)
    model = ScriptedModel(replies)
    try:
        episode = play(env, model)
    finally:
        model.close()
    assert not episode.errors, episode.errors
    (trace,) = episode.traces
    assert trace.rewards["kernel_reward"].score == expected and trace.reward == expected
    judged = expected_verdicts
    assert trace.metrics["kernel_steps"] == len(judged)
    assert trace.metrics["kernel_correct"] == float(any(v == "OK" for v in judged))
    # the model saw the task prompt first, then the environment's feedback on its candidate
    first = model.requests[0][-1]["content"]
    assert GELU.id in first and "class Model" in first and "#! submit" in first
    assert judged[0] in model.requests[1][-1]["content"]
    assert env.evaluator is judge  # the environment judged with the evaluator it was given


def test_rewards_differ_across_scripts():
    """The local rewards the test compares against are not one constant."""
    scripts = ([reply("check", "INCORRECT"), reply("submit", "OK")],
               [reply("eval", "RUNTIME_ERROR"), reply("submit", "INCORRECT")])
    rewards = {local_reward(FakeJudge(), script, 4)[0] for script in scripts}
    assert len(rewards) == 2
