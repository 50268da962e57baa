"""The text environment served through OpenEnv (openenv-core): a scripted policy played through
OpenEnv's own client gets the observations' verdicts and the rewards of the local KernelEnv."""
from __future__ import annotations

import pytest

pytest.importorskip("openenv.core")

from cuda_gym.envs import KernelEnv  # noqa: E402
from cuda_gym.serve.openenv_env import KernelAction, KernelEnvClient, serve_openenv  # noqa: E402

from .test_serve import GELU, FakeJudge  # noqa: E402

# compile, a wrong eval, a correct eval, then submit: every command and both signs of reward.
SCRIPT = ["#! compile\nclass ModelNew: pass  # OK", "class ModelNew: pass  # INCORRECT",
          "#! eval\nclass ModelNew: pass  # RUNTIME_ERROR", "#! submit\nclass ModelNew: pass  # OK"]


def play_locally(judge: FakeJudge) -> list[tuple[str, float, bool]]:
    env = KernelEnv(backend="cpu", task_filter=GELU.id, evaluator=judge, max_turns=8)
    env.reset(seed=0, options={"task_id": GELU.id})
    steps = []
    for message in SCRIPT:
        _, reward, terminated, truncated, info = env.step(message)
        steps.append((info["verdict"], reward, terminated or truncated))
    env.close()
    return steps


def test_a_scripted_policy_gets_the_local_rewards_through_openenv():
    judge = FakeJudge()
    local = play_locally(judge)
    assert [reward for _, reward, _ in local] == [0.0, -1.0, -1.0, 1.0]  # the script covers every sign
    with serve_openenv(judge, port=0, backend="cpu", task_filter=GELU.id, max_turns=8) as server:
        with KernelEnvClient(base_url=server.url).sync() as client:
            first = client.reset(task_id=GELU.id)
            assert first.observation.task_id == GELU.id and "ModelNew" in first.observation.text
            remote = []
            for message in SCRIPT:
                result = client.step(KernelAction(message=message))
                remote.append((result.observation.verdict, result.reward, result.done))
            state = client.state()
    assert remote == local
    assert state.task_id == GELU.id and state.turn == len(SCRIPT) and state.done
