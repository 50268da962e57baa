"""OpenAIChat against an OpenAI-compatible server on loopback, and `cuda-gym agent` end to end."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai")

from cuda_gym_agents.llm import BackendError, OpenAIChat, SamplingConfig
from cuda_gym_agents.rollout import RolloutConfig, rollout
from cuda_gym.trajectory import read_trajectories
from cuda_gym.cli import main
from cuda_gym.tasks import get_task

from .conftest import TEST_CONFIG
from .helpers import CORRECT_BODY, GELU_TASK, native_candidate

GOOD = native_candidate(CORRECT_BODY)


class ChatServer:
    """/v1/chat/completions on 127.0.0.1. `script(body, request_index)` returns what to do:
    a reply text, ("status", code), ("sleep", seconds, text) or ("raw", dict)."""

    def __init__(self, script):
        self.script = script
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(body)
                action = server.script(body, index)
                if isinstance(action, tuple) and action[0] == "status":
                    self._send(action[1], {"error": {"message": "scripted failure", "type": "server_error"}})
                    return
                if isinstance(action, tuple) and action[0] == "sleep":
                    time.sleep(action[1])
                    action = action[2]
                payload = action[1] if isinstance(action, tuple) else server.completion(body, action)
                try:
                    self._send(200, payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def completion(body, text):
        """A vLLM-style response: logprobs, and token ids as with return_token_ids."""
        tokens = text.split(" ") if text else []
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                  "logprobs": {"content": [{"token": t, "logprob": -0.25 * (i + 1), "bytes": None, "top_logprobs": []}
                                           for i, t in enumerate(tokens)]}}
        response = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [choice],
                    "usage": {"prompt_tokens": 11, "completion_tokens": len(tokens), "total_tokens": 11 + len(tokens)}}
        if body.get("return_token_ids"):
            response["prompt_token_ids"] = [7, 8, 9]
            choice["token_ids"] = list(range(100, 100 + len(tokens)))
        return response

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(script):
        servers.append(ChatServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "\u00fcnic\u00f6de \u2713"}]


def test_request_and_reply_fields(serve):
    server = serve(lambda body, i: "alpha beta gamma")
    chat = OpenAIChat(server.base_url, "served-model", sampling=SamplingConfig(temperature=0.7, top_p=0.9,
                                                                                max_new_tokens=123, seed=5),
                      return_token_ids=True, extra_body={"top_k": 20})
    reply = chat.chat(MESSAGES)
    chat.close()
    body = server.requests[0]
    assert body["model"] == "served-model" and body["messages"] == MESSAGES
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.7, 0.9, 123, 5)
    assert body["logprobs"] is True and body["return_token_ids"] is True and body["top_k"] == 20
    assert reply.text == "alpha beta gamma" and reply.finish_reason == "stop"
    assert reply.logprobs == [-0.25, -0.5, -0.75]
    assert reply.prompt_token_ids == [7, 8, 9] and reply.token_ids == [100, 101, 102]
    assert reply.usage == {"prompt_tokens": 11, "completion_tokens": 3}


def test_server_error_is_retried_then_fails_clearly(serve):
    server = serve(lambda body, i: ("status", 500) if i == 0 else "recovered" if i == 1 else "")
    chat = OpenAIChat(server.base_url, "m", retries=2, backoff_s=0.01)
    assert chat.chat(MESSAGES).text == "recovered" and len(server.requests) == 2
    empty = chat.chat(MESSAGES)
    assert (empty.text, empty.logprobs, empty.usage["completion_tokens"]) == ("", None, 0)

    down = serve(lambda body, i: ("status", 500))
    chat = OpenAIChat(down.base_url, "m", retries=2, backoff_s=0.01)
    with pytest.raises(BackendError, match=r"failed 3 times \(2 retries\).*HTTP 500.*Is the server up"):
        chat.chat(MESSAGES)
    assert len(down.requests) == 3
    # A client error (wrong model name, key) is not retried.
    missing = serve(lambda body, i: ("status", 404))
    chat = OpenAIChat(missing.base_url, "nope", retries=3, backoff_s=0.01)
    with pytest.raises(BackendError, match=r"refused the request: NotFoundError \(HTTP 404\).*--model"):
        chat.chat(MESSAGES)
    assert len(missing.requests) == 1


def test_timeout_is_retried_then_fails_clearly(serve):
    server = serve(lambda body, i: ("sleep", 2.0, "too late"))
    chat = OpenAIChat(server.base_url, "m", timeout_s=0.3, retries=1, backoff_s=0.01)
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"failed 2 times \(1 retries\): APITimeoutError.*per request: 0.3 s"):
        chat.chat(MESSAGES)
    assert time.monotonic() - started < 1.9 and len(server.requests) == 2
    nothing = OpenAIChat("http://127.0.0.1:9/v1", "m", timeout_s=2, retries=1, backoff_s=0.01)  # nothing listens
    with pytest.raises(BackendError, match="APIConnectionError"):
        nothing.chat(MESSAGES)


def test_rollout_writes_the_trajectory_of_a_server_that_dies(serve, cpu_evaluator, tmp_path):
    server = serve(lambda body, i: "Let me think first." if i == 0 else ("status", 503))
    chat = OpenAIChat(server.base_url, "m", retries=1, backoff_s=0.01)
    summary = rollout(chat, [get_task(GELU_TASK)], cpu_evaluator, tmp_path, RolloutConfig(max_turns=4),
                      backend="cpu", progress=False)
    (trajectory,) = read_trajectories(tmp_path / "trajectories.jsonl")
    assert trajectory.end_reason == "backend_error" and "HTTP 503" in trajectory.error
    assert [t.error_code for t in trajectory.turns] == ["INVALID_ACTION"]
    assert trajectory.turns[0].reply == "Let me think first."
    assert trajectory.turns[0].logprobs == [-0.25, -0.5, -0.75, -1.0]
    assert summary["end_reasons"] == {"backend_error": 1} and summary["pass_rate"] == 0.0
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["tasks"][GELU_TASK]["best_error_code"] == "INVALID_ACTION"
    with pytest.raises(FileExistsError, match="choose a new output directory"):
        rollout(chat, [get_task(GELU_TASK)], cpu_evaluator, tmp_path, backend="cpu", progress=False)


def scripted_agent(body, index):
    """Check the candidate, then submit it; anything after that is an error."""
    played = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if played == 0:
        return f"A single loop with erf.\n#! check\n```python\n{GOOD}```"
    if played == 1:
        return f"It is correct; submitting.\n#! submit\n```python\n{GOOD}```"
    return ("status", 400)


def quick_evaluator_config(monkeypatch):
    """The command's own EvalConfig (from its options), with the test suite's short timing."""
    import cuda_gym.cli

    real = cuda_gym.cli.evaluator_config
    quick = {k: getattr(TEST_CONFIG, k) for k in ("baseline_workers", "timing_reps", "timing_min_reps", "warmup_reps",
                                                   "timing_budget_s")}
    monkeypatch.setattr(cuda_gym.cli, "evaluator_config", lambda args: real(args).replace(**quick))


def test_cuda_gym_agent_end_to_end(serve, tmp_path, monkeypatch, capsys, cache_dir):
    monkeypatch.setenv("CUDA_GYM_CACHE", cache_dir)  # the session's builds (baselines are keyed by settings)
    quick_evaluator_config(monkeypatch)
    server = serve(scripted_agent)
    out = tmp_path / "run"
    code = main(["agent", "--base-url", server.base_url, "--model", "tiny-served", "--api-key", "secret",
                 "--tasks", GELU_TASK, "--backend", "cpu", "--max-turns", "3", "--out", str(out),
                 "--episodes-per-task", "2", "--concurrency", "2", "--no-compile-baseline", "--return-token-ids",
                 "--max-new-tokens", "512", "--no-progress"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    trajectories = sorted(read_trajectories(out / "trajectories.jsonl"), key=lambda t: t.episode)
    assert [t.episode for t in trajectories] == [0, 1]
    for trajectory in trajectories:
        assert (trajectory.task_id, trajectory.backend, trajectory.model) == (GELU_TASK, "openai", "tiny-served")
        assert trajectory.end_reason == "submit" and [t.command for t in trajectory.turns] == ["check", "submit"]
        assert [t.error_code for t in trajectory.turns] == ["OK", "OK"]
        submit = trajectory.turns[1]
        assert submit.speedup_vs_eager > 0 and submit.speedup_vs_compile is None  # --no-compile-baseline
        assert submit.prompt_token_ids == [7, 8, 9] and len(submit.token_ids) == len(submit.logprobs) > 0
        assert submit.usage["prompt_tokens"] == 11 and submit.finish_reason == "stop"
        assert trajectory.best().turn == 2 and trajectory.best().candidate == GOOD
    assert all(r["max_tokens"] == 512 for r in server.requests) and len(server.requests) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass_rate"] == 1.0 and summary["episodes"] == 2 and summary["model"] == "tiny-served"
    assert summary["levels"]["1"]["pass_rate"] == 1.0 and summary["geomean_speedup_vs_compile"] is None
    task = summary["tasks"][GELU_TASK]
    assert task["best_error_code"] == "OK" and task["passed_episodes"] == 2
    assert task["best_speedup_vs_eager"] == max(t.turns[1].speedup_vs_eager for t in trajectories)
    assert "wrote" in printed.out

    # The same directory again is refused; a dead server gives exit code 1 and a kept record.
    assert main(["agent", "--base-url", server.base_url, "--model", "m", "--tasks", GELU_TASK, "--backend", "cpu",
                 "--out", str(out)]) == 2
    assert "exists; choose a new --out" in capsys.readouterr().err
    dead = tmp_path / "dead"
    code = main(["agent", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tasks", GELU_TASK,
                 "--backend", "cpu", "--out", str(dead), "--retries", "0", "--timeout", "2", "--no-progress"])
    assert code == 1 and "stopped early" in capsys.readouterr().err
    (record,) = read_trajectories(dead / "trajectories.jsonl")
    assert record.end_reason == "backend_error" and "APIConnectionError" in record.error


def test_cuda_gym_agent_option_errors(capsys):
    assert main(["agent", "--base-url", "http://x/v1", "--model", "m", "--backend", "cpu"]) == 2
    assert "give either --tasks" in capsys.readouterr().err
    assert main(["agent", "--base-url", "http://x/v1", "--model", "m", "--tasks", "builtin/L1/nope",
                 "--backend", "cpu"]) == 2
    assert "no task 'builtin/L1/nope'" in capsys.readouterr().err
