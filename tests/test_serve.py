"""`cuda-gym serve` and `RemoteEvaluator` on loopback, with a real uvicorn server on a free port.

Most tests serve a fake judge (verdicts named by the candidate text, at once or when a gate opens)
so that they test the service itself in milliseconds; the slow one serves the session's CPU
Evaluator and compares verdicts with it."""
from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from cuda_gym.eval import ErrorCode, EvalConfig  # noqa: E402
from cuda_gym.eval.remote import (JudgeJobLost, JudgeRequestError, JudgeUnavailable,  # noqa: E402
                                  RemoteEvaluator, task_to_dict)
from cuda_gym.serve.jobs import ServiceLimits  # noqa: E402
from cuda_gym.serve.server import Service  # noqa: E402
from cuda_gym.tasks import get_task, load_suite, solution_path  # noqa: E402

from .fakes import FakeJudge, rich_result  # noqa: E402
from .helpers import CORRECT_BODY, GELU_TASK, native_candidate  # noqa: E402

TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
GELU = get_task(GELU_TASK)
BUILTIN = load_suite("builtin")


def raw(service: Service, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    connection.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b"{}")


@pytest.fixture
def fake_service(tmp_path):
    judge = FakeJudge()
    with Service(judge, BUILTIN, tmp_path / "journal", port=0, tokens=[TOKEN_A, TOKEN_B],
                 limits=ServiceLimits(max_queued_per_client=3), max_body_bytes=50_000) as service:
        service.judge = judge
        yield service
        judge.gate.set()


def test_a_verdict_round_trips_through_the_service_losslessly(fake_service):
    with RemoteEvaluator(fake_service.url, TOKEN_A) as remote:
        for code in (ErrorCode.OK, ErrorCode.INCORRECT):
            got = remote.evaluate(GELU, f"class ModelNew: pass  # {code.value}")
            assert got.to_dict() == rich_result(GELU.id, code).to_dict()
        assert remote.backend == "cpu" and remote.device_name == "fake-cpu" and remote.config == EvalConfig()


def test_baselines_come_back_as_the_evaluator_gives_them(fake_service):
    with RemoteEvaluator(fake_service.url, TOKEN_A) as remote:
        assert remote.baselines(GELU) == fake_service.judge.baselines(GELU)


def test_requests_without_the_right_token_are_refused(fake_service):
    body = json.dumps({"task_id": GELU.id, "candidate": "OK"}).encode()
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": f"Basic {TOKEN_A}"}):
        for method, path, payload in (("GET", "/v1/health", None), ("POST", "/v1/jobs", body),
                                      ("GET", "/v1/metrics", None)):
            status, answer = raw(fake_service, method, path, payload, headers)
            assert status == 401 and "bearer token" in answer["detail"], (headers, path)
    assert raw(fake_service, "GET", "/v1/health", headers={"Authorization": f"Bearer {TOKEN_B}"})[0] == 200
    with pytest.raises(JudgeRequestError, match="HTTP 401"):
        RemoteEvaluator(fake_service.url, "wrong-token-0123456789")


def test_a_service_without_a_token_listens_on_localhost_only(tmp_path):
    with pytest.raises(ValueError, match="without a token"):
        Service(FakeJudge(), BUILTIN, tmp_path, host="0.0.0.0", port=0)


def test_the_serve_command_refuses_other_hosts_without_a_token_and_short_tokens(tmp_path, capsys, monkeypatch):
    from cuda_gym.cli import main

    monkeypatch.delenv("CUDA_GYM_JUDGE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--backend", "cpu"]) == 2
    assert "without a token" in capsys.readouterr().err
    short = tmp_path / "token"
    short.write_text("abc\n")
    assert main(["serve", "--token-file", str(short), "--backend", "cpu"]) == 2
    assert "shorter than 16 characters" in capsys.readouterr().err


def test_an_oversized_body_is_refused_and_the_service_goes_on(fake_service):
    with RemoteEvaluator(fake_service.url, TOKEN_A) as remote:
        with pytest.raises(JudgeRequestError, match="HTTP 413") as refused:
            remote.submit(GELU, "# OK\n" + "x" * 60_000)  # the client knows the limit and does not send it
        assert "limit of 50000 bytes" in str(refused.value)
        big = json.dumps({"task_id": GELU.id, "candidate": "# OK\n" + "x" * 60_000}).encode()
        status, answer = raw(fake_service, "POST", "/v1/jobs", big, {"Authorization": f"Bearer {TOKEN_A}"})
        assert status == 413 and "50000 bytes" in answer["detail"]
        # Streamed without a Content-Length: refused once the bytes read pass the limit.
        connection = http.client.HTTPConnection("127.0.0.1", fake_service.port, timeout=10)
        chunks = (b'{"task_id": "builtin/L1/gelu", "candidate": "' + b"x" * 10_000 for _ in range(8))
        connection.request("POST", "/v1/jobs", body=chunks, encode_chunked=True,
                           headers={"Authorization": f"Bearer {TOKEN_A}", "Content-Type": "application/json"})
        assert connection.getresponse().status == 413
        assert remote.evaluate(GELU, "class ModelNew: pass  # OK").ok


def test_each_client_has_a_bound_on_queued_jobs(fake_service):
    with RemoteEvaluator(fake_service.url, TOKEN_A) as a, RemoteEvaluator(fake_service.url, TOKEN_B) as b:
        held = [a.submit(GELU, f"hold OK {i}") for i in range(3)]
        with pytest.raises(JudgeRequestError, match="HTTP 429"):
            a.submit(GELU, "hold OK 4")
        other = b.submit(GELU, "OK")  # another token is another client
        assert other.result(timeout=10).ok
        assert a.metrics()["queue_depth"] == 3
        fake_service.judge.gate.set()
        assert all(f.result(timeout=10).ok for f in held)
        assert a.evaluate(GELU, "OK").ok  # room again
        metrics = a.metrics()
        assert metrics["queue_depth"] == 0 and metrics["verdicts"] == 5 and metrics["verdict_codes"] == {"OK": 5}
        assert metrics["verdicts_last_hour"] == 5 and metrics["per_device"]["fake-cpu"]["eval_seconds"] == 7.5
        # A job id is its client's: another token cannot read it.
        with pytest.raises(JudgeRequestError, match="no job"):
            b.fetch(held[0].job_id, timeout_s=10)


def test_results_are_long_polled_and_batches_are_taken_whole(fake_service):
    auth = {"Authorization": f"Bearer {TOKEN_A}"}
    with RemoteEvaluator(fake_service.url, TOKEN_A) as remote:
        held = remote.submit(GELU, "hold OK")
        started = time.monotonic()
        status, answer = raw(fake_service, "GET", f"/v1/jobs/{held.job_id}?wait_s=0.5", headers=auth)
        assert (status, answer["status"]) == (200, "queued") and time.monotonic() - started >= 0.5
        threading.Timer(0.3, fake_service.judge.gate.set).start()
        started = time.monotonic()
        status, answer = raw(fake_service, "GET", f"/v1/jobs/{held.job_id}?wait_s=30", headers=auth)
        assert answer["status"] == "done" and answer["result"]["error_code"] == "OK"
        assert time.monotonic() - started < 5, "a long-poll returns when the verdict lands, not at wait_s"
        # A batch over the client's bound (3) is refused whole: nothing of it is queued.
        fake_service.judge.gate.clear()
        with pytest.raises(JudgeRequestError, match="HTTP 429"):
            remote.submit_many([(GELU, "hold OK")] * 4)
        assert remote.metrics()["queue_depth"] == 0
        fake_service.judge.gate.set()
        futures = remote.submit_many([(GELU, "OK"), (GELU, "INCORRECT"), (GELU, "RUNTIME_ERROR")])
        assert [f.result(timeout=10).error_code.value for f in futures] == ["OK", "INCORRECT", "RUNTIME_ERROR"]


def test_job_requests_are_checked(fake_service, tmp_path):
    with RemoteEvaluator(fake_service.url, TOKEN_A) as remote:
        other = get_task(GELU_TASK)
        changed = type(other)(**{**other.__dict__, "source": other.source + "\n# changed"})
        with pytest.raises(JudgeRequestError, match="--allow-task-source"):
            remote.submit(changed, "OK")
        with pytest.raises(JudgeRequestError, match="above this service's limit"):
            remote.submit(GELU, "OK", config=remote.config.replace(eval_timeout_s=10_000))
        assert remote.evaluate(GELU, "OK", config=remote.config.replace(eval_timeout_s=5)).ok
    status, answer = raw(fake_service, "POST", "/v1/jobs", json.dumps(
        {"task_id": "builtin/L9/nothing", "candidate": "OK"}).encode(), {"Authorization": f"Bearer {TOKEN_A}"})
    assert status == 400 and "unknown task" in answer["detail"]
    status, answer = raw(fake_service, "POST", "/v1/jobs", json.dumps(
        {"task_id": GELU.id, "candidate": "OK", "config": {"no_such_field": 1}}).encode(),
        {"Authorization": f"Bearer {TOKEN_A}"})
    assert status == 400 and "no_such_field" in answer["detail"]
    with Service(FakeJudge(), BUILTIN, tmp_path / "open", port=0,
                 limits=ServiceLimits(allow_task_source=True)) as service:
        with RemoteEvaluator(service.url) as remote:
            assert remote.evaluate(changed, "OK").task_id == changed.id


def test_a_client_killed_mid_run_fetches_its_verdicts_later(fake_service, tmp_path):
    ids_file = tmp_path / "ids.json"
    script = (
        "import json, sys, time\n"
        "from cuda_gym.eval.remote import RemoteEvaluator\n"
        "from cuda_gym.tasks import get_task\n"
        f"remote = RemoteEvaluator({fake_service.url!r}, {TOKEN_A!r})\n"
        "futures = [remote.submit(get_task('builtin/L1/gelu'), c) for c in ('hold OK', 'hold INCORRECT', 'hold RUNTIME_ERROR')]\n"
        f"open({str(ids_file)!r}, 'w').write(json.dumps([f.job_id for f in futures]))\n"
        "[f.result() for f in futures]\n"
    )
    client = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not ids_file.exists() or not ids_file.read_text():
            assert client.poll() is None and time.monotonic() < deadline, "the client died before submitting"
            time.sleep(0.05)
    finally:
        client.kill()
        client.wait()
    job_ids = json.loads(ids_file.read_text())
    fake_service.judge.gate.set()
    with RemoteEvaluator(fake_service.url, TOKEN_A) as remote:
        codes = [remote.fetch(job_id, timeout_s=10).error_code for job_id in job_ids]
    assert codes == [ErrorCode.OK, ErrorCode.INCORRECT, ErrorCode.RUNTIME_ERROR]


def test_a_restarted_service_answers_for_journaled_verdicts_and_names_lost_jobs(tmp_path):
    journal = tmp_path / "journal"
    with Service(FakeJudge(), BUILTIN, journal, port=0, tokens=[TOKEN_A]) as first:
        with RemoteEvaluator(first.url, TOKEN_A) as remote:
            judged = {f.job_id: f for f in [remote.submit(GELU, "OK"), remote.submit(GELU, "INCORRECT")]}
            verdicts = {job_id: f.result(timeout=10).to_dict() for job_id, f in judged.items()}
            unjudged = remote.submit(GELU, "hold OK").job_id
    with open(journal / "journal.jsonl", "ab") as handle:
        handle.write(b'{"event": "verdict", "job_id": "torn')  # a crash mid-write
    with Service(FakeJudge(), BUILTIN, journal, port=0, tokens=[TOKEN_A]) as second:
        assert second.journal.torn_lines == 1
        with RemoteEvaluator(second.url, TOKEN_A) as remote:
            for job_id, verdict in verdicts.items():
                assert remote.fetch(job_id, timeout_s=10).to_dict() == verdict
            with pytest.raises(JudgeJobLost, match="submit the candidate again"):
                remote.fetch(unjudged, timeout_s=10)
            assert [job["job_id"] for job in remote.lost_jobs()] == [unjudged]
            assert remote.info["lost_jobs"] == 1 and remote.metrics()["lost_jobs"] == 1
            assert remote.evaluate(GELU, "OK").ok  # and it judges new jobs, journaled after the torn line
    with Service(FakeJudge(), BUILTIN, journal, port=0, tokens=[TOKEN_A]) as third:
        assert len(third.journal.entries) == 4 and third.journal.lost == {unjudged}


def test_a_dead_service_is_a_clear_error():
    with Service(FakeJudge(), BUILTIN, "/tmp", port=0) as service:
        url = service.url
    with pytest.raises(JudgeUnavailable, match="did not answer.*Is `cuda-gym serve` running"):
        RemoteEvaluator(url)


def test_a_slow_service_is_a_clear_error_and_the_episode_keeps_its_trajectory(tmp_path):
    cuda_gym_agents = pytest.importorskip("cuda_gym_agents")
    from cuda_gym.envs import KernelEnv
    from cuda_gym_agents.llm import ScriptedChat
    from cuda_gym_agents.react import ReactPolicy

    del cuda_gym_agents
    with Service(FakeJudge(), BUILTIN, tmp_path, port=0) as service:
        env = KernelEnv(backend="cpu", task_filter=GELU.id, max_turns=4)
        env._evaluator = RemoteEvaluator(service.url, job_timeout_s=1.0)  # a trainer's short patience
        chat = ScriptedChat(["```python\nclass ModelNew: pass  # INCORRECT\n```",
                             "```python\nclass ModelNew: pass  # hold OK\n```"])
        trajectory = ReactPolicy().play(env, chat, GELU)
        env.close()
        service.judge = None
    assert trajectory.end_reason == "env_error" and "had no verdict after 1 s" in trajectory.error
    assert [turn.error_code for turn in trajectory.turns] == ["INCORRECT"]


def test_commands_that_judge_take_the_judge_options(fake_service, tmp_path, capsys):
    from cuda_gym.cli import build_parser, main

    commands = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    for name in ("eval", "run", "leaderboard", "agent", "train", "solve"):
        if name in commands.choices:
            options = {o for action in commands.choices[name]._actions for o in action.option_strings}
            assert {"--judge", "--judge-token-file"} <= options, name
    assert "--judge" not in {o for a in commands.choices["serve"]._actions for o in a.option_strings}
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN_A + "\n")
    candidate = tmp_path / "candidate.py"
    candidate.write_text("class ModelNew: pass  # INCORRECT\n")
    code = main(["eval", GELU.id, str(candidate), "--json", "--judge", fake_service.url,
                 "--judge-token-file", str(token_file)])
    assert code == 1 and json.loads(capsys.readouterr().out)["error_code"] == "INCORRECT"
    with pytest.raises(SystemExit, match="HTTP 401"):
        main(["eval", GELU.id, str(candidate), "--judge", fake_service.url])


def test_the_environment_judges_on_the_service_through_judge_url(fake_service):
    from cuda_gym.envs import KernelEnv

    env = KernelEnv(backend="cpu", task_filter=GELU.id, judge_url=fake_service.url, judge_token=TOKEN_A)
    env.reset(seed=0)
    _, reward, _, _, info = env.step("```python\nclass ModelNew: pass  # INCORRECT\n```")
    env.close()
    assert info["verdict"] == "INCORRECT" and reward == -1.0


@pytest.mark.slow
def test_four_client_threads_get_the_verdicts_of_a_local_evaluator(cpu_evaluator, tmp_path):
    softmax = get_task("builtin/L1/softmax")
    candidates = [
        (GELU, native_candidate(CORRECT_BODY)),
        (GELU, solution_path(GELU, "cpu").read_text()),
        (softmax, solution_path(softmax, "cpu").read_text()),
        (GELU, native_candidate("for (int64_t i = 0; i < n; ++i) y[i] = x[i];")),  # wrong: identity
        (GELU, native_candidate("volatile int* p = nullptr; *p = 1;")),  # crashes
        (GELU, native_candidate(CORRECT_BODY, python_forward="        raise ValueError('boom')\n")),
        (GELU, native_candidate("this is not C++;")),
        (GELU, "def forward(:"),
    ]
    local = [cpu_evaluator.evaluate(task, source).error_code for task, source in candidates]
    assert {ErrorCode.OK, ErrorCode.INCORRECT, ErrorCode.RUNTIME_ERROR} <= set(local)
    with Service(cpu_evaluator, BUILTIN, tmp_path, port=0, tokens=[TOKEN_A]) as service:
        def client(thread: int) -> list[tuple[int, ErrorCode]]:
            with RemoteEvaluator(service.url, TOKEN_A) as remote:
                futures = [(i, remote.submit(task, source)) for i, (task, source) in enumerate(candidates)]
                return [(i, future.result(timeout=600).error_code) for i, future in futures]

        with ThreadPoolExecutor(4) as pool:
            answers = [pair for pairs in pool.map(client, range(4)) for pair in pairs]
        metrics = RemoteEvaluator(service.url, TOKEN_A).metrics()
    assert len(answers) == 32
    assert all(code is local[i] for i, code in answers), [(i, code, local[i]) for i, code in answers]
    assert metrics["verdicts"] == 32 and metrics["queue_depth"] == 0 and metrics["eval_seconds"] > 0
