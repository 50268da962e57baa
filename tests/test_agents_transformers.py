"""TransformersChat with a tiny randomly initialised model built here (nothing downloaded)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from cuda_gym_agents.llm import SamplingConfig, TransformersChat
from cuda_gym_agents.react import WORKFLOW_GUIDE, ReactPolicy
from cuda_gym.trajectory import Trajectory
from cuda_gym.envs import KernelEnv
from cuda_gym.tasks import get_task

from .helpers import GELU_TASK

CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant\n{% endif %}")


def tiny_chat_model(corpus: list[str], vocab_size: int = 600):
    """A byte-level BPE tokenizer trained on `corpus` and a 2-layer Llama with random weights."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval(), tokenizer


def recomputed_logprobs(model, prompt_ids: list[int], token_ids: list[int]) -> torch.Tensor:
    """One forward pass over prompt + generated ids: log_softmax of the logits, gathered."""
    ids = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    predicting = logits[len(prompt_ids) - 1: -1]
    return torch.log_softmax(predicting, dim=-1).gather(1, torch.tensor(token_ids)[:, None])[:, 0]


def test_transformers_chat_plays_an_episode_and_records_exact_ids_and_logprobs(cpu_evaluator):
    env = KernelEnv(backend="cpu", evaluator=cpu_evaluator, max_turns=2)
    prompt, _ = env.reset(options={"task_id": GELU_TASK})
    model, tokenizer = tiny_chat_model([prompt, WORKFLOW_GUIDE, "#! check\n```python\nclass ModelNew(nn.Module):\n```"])
    chat = TransformersChat(model, tokenizer, sampling=SamplingConfig(temperature=0.8, top_p=0.95, max_new_tokens=24))
    trajectory = ReactPolicy().play(env, chat, get_task(GELU_TASK))
    env.close()

    assert trajectory.end_reason == "max_turns" and len(trajectory.turns) == 2
    assert trajectory.backend == "transformers" and trajectory.sampling["temperature"] == 0.8
    for turn in trajectory.turns:
        # A random model writes no candidate: the env's own feedback, no exception.
        assert turn.error_code == "INVALID_ACTION" and turn.reward == -1.0
        # The prompt ids are the chat template applied to exactly the messages recorded.
        expected = tokenizer.apply_chat_template(turn.messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=True)["input_ids"]
        assert turn.prompt_token_ids == list(expected)
        assert 0 < len(turn.token_ids) == len(turn.logprobs) <= 24
        assert turn.usage == {"prompt_tokens": len(turn.prompt_token_ids), "completion_tokens": len(turn.token_ids)}
        assert turn.reply == tokenizer.decode(turn.token_ids, skip_special_tokens=True)
        stopped = turn.token_ids[-1] == tokenizer.eos_token_id
        assert turn.finish_reason == ("stop" if stopped else "length")
        again = recomputed_logprobs(model, turn.prompt_token_ids, turn.token_ids)
        assert torch.allclose(torch.tensor(turn.logprobs), again, atol=1e-4), (turn.logprobs, again.tolist())
    # The second turn is conditioned on the first reply and its feedback.
    second = trajectory.turns[1].messages
    assert second[-2] == {"role": "assistant", "content": trajectory.turns[0].reply}
    assert second[-1]["content"].startswith(trajectory.turns[0].observation)
    # The records survive JSON as they are (ids and logprobs as lists of numbers).
    assert Trajectory.from_dict(trajectory.to_dict()) == trajectory


def test_greedy_decoding_and_from_pretrained(tmp_path):
    model, tokenizer = tiny_chat_model(["def forward(self, x):\n    return x\n"] * 4, vocab_size=300)
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    chat = TransformersChat.from_pretrained(tmp_path / "tiny", device="cpu",
                                            sampling=SamplingConfig(temperature=0.0, max_new_tokens=12))
    messages = [{"role": "system", "content": "Write a kernel."}, {"role": "user", "content": "Go."}]
    first, second = chat.chat(messages), chat.chat(messages)
    assert first.token_ids == second.token_ids  # greedy: deterministic
    again = recomputed_logprobs(chat._model, first.prompt_token_ids, first.token_ids)
    assert torch.allclose(torch.tensor(first.logprobs), again, atol=1e-4)
    # Greedy picks the most likely token at each step.
    ids = torch.tensor([first.prompt_token_ids + first.token_ids])
    with torch.no_grad():
        logits = chat._model(ids).logits[0, len(first.prompt_token_ids) - 1: -1]
    assert logits.argmax(-1).tolist() == first.token_ids
    assert chat.count_tokens(messages) == len(first.prompt_token_ids)
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        TransformersChat.from_pretrained(tmp_path / "missing")
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="no chat_template"):
        TransformersChat(model, tokenizer)


def test_cuda_gym_agent_with_a_local_checkpoint(tmp_path, monkeypatch, cache_dir):
    from cuda_gym.trajectory import read_trajectories
    from cuda_gym.cli import main

    monkeypatch.setenv("CUDA_GYM_CACHE", cache_dir)
    model, tokenizer = tiny_chat_model(["#! check\n```python\nclass ModelNew(nn.Module):\n```"] * 4, vocab_size=300)
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    out = tmp_path / "run"
    code = main(["agent", "--checkpoint", str(tmp_path / "ckpt"), "--model", "tiny-sft", "--device", "cpu",
                 "--tasks", GELU_TASK,
                 "--backend", "cpu", "--max-turns", "2", "--max-new-tokens", "8", "--out", str(out), "--no-progress"])
    assert code == 0
    (trajectory,) = read_trajectories(out / "trajectories.jsonl")
    assert (trajectory.backend, trajectory.model, trajectory.end_reason) == ("transformers", "tiny-sft", "max_turns")
    assert all(len(t.token_ids) == len(t.logprobs) > 0 and t.prompt_token_ids for t in trajectory.turns)
    assert (out / "summary.json").exists()
    assert main(["agent", "--checkpoint", str(tmp_path / "nowhere"), "--tasks", GELU_TASK, "--backend", "cpu",
                 "--out", str(tmp_path / "other")]) == 2
