"""The agent on a GPU: a scripted episode on the CUDA backend, and TransformersChat on the device."""
from __future__ import annotations

import pytest

from cuda_gym_agents.llm import SamplingConfig, ScriptedChat, TransformersChat
from cuda_gym_agents.react import ReactPolicy
from cuda_gym.envs import KernelEnv
from cuda_gym.tasks import get_task, solution_path

TASK = "builtin/L1/gelu"


@pytest.mark.gpu
def test_scripted_episode_on_cuda(cuda_evaluator):
    solution = solution_path(get_task(TASK), "cuda").read_text()
    broken = solution.replace("extern \"C\"", "extern \"C\" int broken = ;\nextern \"C\"", 1)
    chat = ScriptedChat([f"#! compile\n```python\n{broken}```", f"#! check\n```python\n{solution}```",
                         f"#! submit\n```python\n{solution}```"])
    env = KernelEnv(backend="cuda", evaluator=cuda_evaluator, max_turns=4)
    trajectory = ReactPolicy().play(env, chat, get_task(TASK))
    env.close()
    assert trajectory.env_backend == "cuda" and trajectory.end_reason == "submit"
    assert [t.error_code for t in trajectory.turns] == ["COMPILE_ERROR", "OK", "OK"]
    best = trajectory.best()
    assert best.turn == 3 and best.correct and best.speedup_vs_eager > 0  # TEST_CONFIG: eager baseline only


@pytest.mark.gpu
def test_transformers_chat_on_cuda_records_logprobs_a_forward_pass_recomputes():
    torch = pytest.importorskip("torch")
    from .test_agents_transformers import recomputed_logprobs, tiny_chat_model

    model, tokenizer = tiny_chat_model(["#! check\n```python\nclass ModelNew(nn.Module):\n```"] * 4, vocab_size=300)
    chat = TransformersChat(model.to("cuda"), tokenizer, sampling=SamplingConfig(max_new_tokens=16))
    reply = chat.chat([{"role": "system", "content": "Write a kernel."}, {"role": "user", "content": "Go."}])
    again = recomputed_logprobs(model.to("cpu"), reply.prompt_token_ids, reply.token_ids)
    assert torch.allclose(torch.tensor(reply.logprobs), again, atol=1e-3)
