"""The text environment served through OpenEnv (openenv-core): a scripted policy played through
OpenEnv's own client gets the observations' verdicts and the rewards of the local KernelEnv."""
from __future__ import annotations

import json

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


def test_grpo_trainer_step_against_the_openenv_server(cpu_evaluator, tmp_path, monkeypatch):
    """One real GRPOTrainer step whose environments are OpenEnv sessions of `serve_openenv` (the real
    CPU judge, the built-in GELU task): the rewards the trainer computed are the rewards the server
    returned, both verdicts occur, and the step changed the weights."""
    pytest.importorskip("trl")
    import inspect
    import math

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from cuda_gym.tasks import get_task
    from cuda_gym_agents.adapters.trl import OpenEnvKernelEnvironmentFactory, environment_rows

    from .helpers import GELU_TASK
    from .test_adapters import GOOD, WRONG, _byte_tokenizer, _scripted_model

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = _byte_tokenizer()

    def tool_call(source):
        call = {"name": "submit_kernel", "arguments": {"source": source}}
        return "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"

    scripts = [tokenizer.encode(text, add_special_tokens=False)
               for text in (tool_call(GOOD), "<think>a shortcut</think>" + tool_call(WRONG), "Done.")]
    model = _scripted_model(tokenizer, scripts)
    weights_before = model.lm_head.weight.detach().clone()
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1,
                      max_completion_length=4096, learning_rate=0.1, logging_steps=1, report_to="none",
                      save_strategy="no", gradient_checkpointing=False, use_cpu=True, bf16=False, seed=0,
                      max_tool_calling_iterations=2, generation_kwargs={"use_cache": False})
    seen = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with serve_openenv(cpu_evaluator, port=0, backend="cpu", max_turns=2) as server:
            factory = OpenEnvKernelEnvironmentFactory(server.url)
            environment = factory()  # the tool interface TRL reads: only submit_kernel is a tool
            public = {name for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
                      if not name.startswith("_")}
            assert public == {"reset", "submit_kernel", "get_reward"}
            trainer = GRPOTrainer(model=model, args=args, processing_class=tokenizer, environment_factory=factory,
                                  train_dataset=Dataset.from_list(environment_rows([get_task(GELU_TASK)], 2) * 4))
            calculate = trainer._calculate_rewards

            def spy(*a, **kw):
                rewards = calculate(*a, **kw)
                seen.append(rewards.detach().cpu().clone())
                return rewards

            trainer._calculate_rewards = spy
            trainer.train()
            used = [e for e in factory.environments if e.steps]
            served = [e.get_reward() for e in used]
            factory.close()
    finally:
        torch.set_num_threads(threads)

    assert len(used) == 4 and all(e.task_id == GELU_TASK for e in used)  # one submit_kernel per rollout
    verdicts = [verdict for e in used for verdict, _ in e.steps]
    assert set(verdicts) == {"INCORRECT", "OK"}  # seed 0: the policy drew both scripts
    for e in used:
        ((verdict, reward),) = e.steps
        assert e.get_reward() == reward and (reward == -1.0 if verdict == "INCORRECT" else reward >= 1.0)
    (rewards,) = seen  # one batch, one reward column (the environment's get_reward)
    assert rewards.shape == (4, 1)
    assert sorted(rewards[:, 0].tolist()) == sorted(served)  # what the trainer used is what the server returned
    logs = trainer.state.log_history[0]
    assert logs["tools/call_frequency"] == 1.0 and logs["tools/failure_frequency"] == 0.0
    assert logs["reward"] == pytest.approx(sum(served) / 4) and logs["reward_std"] > 0 and math.isfinite(logs["loss"])
    assert not torch.equal(model.lm_head.weight.detach(), weights_before)  # the step changed the policy
