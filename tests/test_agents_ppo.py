"""PPO trainer (agents/ppo), rejection fine-tuning and value pretraining (agents/rft.py).

Tiny randomly initialised transformers models are built here; nothing is downloaded."""
from __future__ import annotations

import copy
import math

import pytest
import torch

pytest.importorskip("transformers")

from cuda_gym_agents.ppo.batch import collate, trajectory_gae, turn_samples
from cuda_gym_agents.ppo.config import PPOConfig
from cuda_gym_agents.ppo.losses import (clip_fraction, clipped_surrogate_loss, clipped_value_loss, compute_gae,
                                        explained_variance, policy_ratio, token_mean)
from cuda_gym_agents.ppo.model import policy_outputs
from cuda_gym_agents.ppo.trainer import PPOTrainer
from cuda_gym.trajectory import Trajectory, Turn

VOCAB = 24


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return LlamaForCausalLM(config)


@torch.no_grad()
def sample_reply(model, prompt: list[int], length: int, generator: torch.Generator) -> tuple[list[int], list[float]]:
    """Sample `length` tokens one at a time, recording each token's logprob as a generator would."""
    ids, logprobs = list(prompt), []
    for _ in range(length):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        log_probs = torch.log_softmax(logits, -1)
        token = int(torch.multinomial(log_probs.exp(), 1, generator=generator))
        ids.append(token)
        logprobs.append(float(log_probs[token]))
    return ids[len(prompt):], logprobs


def make_turn(index, prompt, tokens, logprobs, reward=0.0, error_code="OK", command="submit", finish="stop", reply=None):
    return Turn(index=index, messages=[], reply=reply if reply is not None else " ".join(map(str, tokens)),
                command=command, observation="", reward=reward, error_code=error_code, prompt_token_ids=prompt,
                token_ids=tokens, logprobs=logprobs, finish_reason=finish)


def sampled_trajectories(model, count: int, seed: int = 0) -> list[Trajectory]:
    """Two-turn episodes played by `model`: the second prompt holds the first exchange plus
    'feedback' tokens the model never generated; reward +2 if the last reply starts with an even id."""
    generator = torch.Generator().manual_seed(seed)
    trajectories = []
    for episode in range(count):
        prompt = [1, 3 + episode % 5, 4]
        first, first_lp = sample_reply(model, prompt, 3, generator)
        prompt2 = prompt + first + [5, 6, 7]                     # 5, 6, 7: environment feedback
        second, second_lp = sample_reply(model, prompt2, 4, generator)
        reward = 2.0 if second[0] % 2 == 0 else -1.0
        turns = [make_turn(1, prompt, first, first_lp, 0.0, command="check"),
                 make_turn(2, prompt2, second, second_lp, reward, "OK" if reward > 0 else "INCORRECT")]
        trajectories.append(Trajectory(task_id=f"toy/{episode % 5}", level=1, episode=episode, backend="test",
                                       model="tiny", turns=turns, end_reason="submit", total_reward=reward))
    return trajectories


# ------------------------------------------------------------------------------------------ GAE

def test_gae_matches_hand_computed_values_over_masked_feedback_and_episode_ends():
    # Row 0: two generated tokens, two environment tokens (masked; their values must be ignored),
    # one generated token with the outcome reward. Row 1: two episodes in one row, the first ending
    # after token 1 (nothing may be bootstrapped across the end).
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, -1.0, 0.0, 2.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 9.0, 9.0, 0.8], [0.1, 0.2, 0.3, 0.4, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0, 1], [1, 1, 1, 1, 0]])
    ends = torch.tensor([[0, 0, 0, 0, 1], [0, 1, 0, 1, 0]], dtype=torch.bool)
    advantages, returns = compute_gae(rewards, values, mask, gamma=1.0, gae_lambda=0.95, episode_ends=ends)
    # Row 0, backwards: A4 = 1 - 0.8 = 0.2; A1 = (0.8 - 0.6) + 0.95 * 0.2 = 0.39; A0 = (0.6 - 0.5) + 0.95 * 0.39.
    # Row 1: A3 = 2 - 0.4 = 1.6; A2 = (0.4 - 0.3) + 0.95 * 1.6 = 1.62; A1 = -1 - 0.2 = -1.2; A0 = 0.1 + 0.95 * -1.2.
    expected = torch.tensor([[0.4705, 0.39, 0.0, 0.0, 0.2], [-1.04, -1.2, 1.62, 1.6, 0.0]])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, torch.where(mask.bool(), expected + values, torch.zeros_like(values)), atol=1e-6)
    # Without explicit ends each row is one episode: row 1 then bootstraps A1 from token 2.
    advantages, _ = compute_gae(rewards[1:, :4], values[1:, :4], mask[1:, :4], 1.0, 0.95)
    assert advantages[0, 1].item() == pytest.approx(-1.0 + 0.3 - 0.2 + 0.95 * 1.62, abs=1e-6)


def test_gae_runs_across_turns_of_a_trajectory():
    # Turn 1 has 2 tokens, turn 2 has 1 token carrying the outcome; the chain runs through both turns.
    trajectory = Trajectory(task_id="t", level=1, episode=0, backend="test", model="m", total_reward=1.0, turns=[
        make_turn(1, [1, 2], [3, 4], [-1.0, -1.0]), make_turn(2, [1, 2, 3, 4, 9, 9], [5], [-1.0], reward=1.0)])
    samples = turn_samples([trajectory], "outcome")
    assert [s.rewards.tolist() for s in samples] == [[0.0, 0.0], [1.0]]
    values = [torch.tensor([0.5, 0.6]), torch.tensor([0.8])]
    advantages, returns = trajectory_gae(samples, values, 1.0, 0.95)
    assert torch.allclose(advantages[0], torch.tensor([0.4705, 0.39]), atol=1e-6)
    assert torch.allclose(advantages[1], torch.tensor([0.2]), atol=1e-6)
    assert torch.allclose(returns[0], torch.tensor([0.9705, 0.99]), atol=1e-6)


def test_per_turn_rewards_sit_on_each_turns_last_token():
    trajectory = Trajectory(task_id="t", level=1, episode=0, backend="test", model="m", total_reward=1.5, turns=[
        make_turn(1, [1], [3, 4], [-1.0, -1.0], reward=-1.0), make_turn(2, [1], [], [], reward=0.5),
        make_turn(3, [1], [5, 6, 7], [-1.0] * 3, reward=2.0)])
    outcome = turn_samples([trajectory], "outcome")
    assert [s.rewards.tolist() for s in outcome] == [[0.0, 0.0], [0.0, 0.0, 1.5]]
    per_turn = turn_samples([trajectory], "per_turn")
    # The empty turn's 0.5 is carried to the next turn that generated tokens.
    assert [s.rewards.tolist() for s in per_turn] == [[0.0, -1.0], [0.0, 0.0, 2.5]]


def test_turns_without_token_ids_are_refused_with_a_clear_error():
    trajectory = Trajectory(task_id="t", level=1, episode=0, backend="openai", model="m", turns=[
        Turn(index=1, messages=[], reply="x", command="check", observation="", reward=1.0, error_code="OK")])
    with pytest.raises(ValueError, match="TransformersChat"):
        turn_samples([trajectory])
    damaged = Trajectory(task_id="t", level=1, episode=0, backend="test", model="m",
                         turns=[make_turn(1, [1], [3, 4], [-1.0])])
    with pytest.raises(ValueError, match="2 token ids but 1 logprobs"):
        turn_samples([damaged])
    with pytest.raises(ValueError, match="no trajectories"):
        PPOTrainer(tiny_llama(), PPOConfig(critic="head")).update([])


# ------------------------------------------------------------------------------- clipped losses

def _loss_and_grad(ratio_value: float, advantage: float, **clip):
    ratio = torch.tensor([ratio_value], requires_grad=True)
    loss = clipped_surrogate_loss(ratio, torch.tensor([advantage]), **clip).sum()
    loss.backward()
    return loss.item(), ratio.grad.item()


def test_asymmetric_clip_just_inside_and_outside_its_bounds():
    # Positive advantage: the upper bound is 1 + 0.28. 1.27 is inside (gradient flows), 1.29 outside.
    assert _loss_and_grad(1.27, 1.0) == pytest.approx((-1.27, -1.0))
    assert _loss_and_grad(1.29, 1.0) == pytest.approx((-1.28, 0.0))
    # A symmetric clip (eps_high = eps_low = 0.2) would already have clipped 1.25: the default must not.
    assert _loss_and_grad(1.25, 1.0) == pytest.approx((-1.25, -1.0))
    assert _loss_and_grad(1.25, 1.0, clip_eps_low=0.2, clip_eps_high=0.2) == pytest.approx((-1.2, 0.0))
    # Negative advantage: the lower bound is 1 - 0.2. 0.81 is inside, 0.79 outside.
    assert _loss_and_grad(0.81, -1.0) == pytest.approx((0.81, 1.0))
    assert _loss_and_grad(0.79, -1.0) == pytest.approx((0.80, 0.0))
    # The pessimistic bound: a ratio below the range with a positive advantage is not clipped.
    assert _loss_and_grad(0.7, 1.0) == pytest.approx((-0.7, -1.0))
    # And the upper bound does not apply to a negative advantage (1.4 keeps its full penalty).
    assert _loss_and_grad(1.4, -1.0) == pytest.approx((1.4, 1.0))
    ratios = torch.tensor([1.27, 1.29, 0.81, 0.79])
    assert clip_fraction(ratios, torch.tensor([1.0, 1.0, -1.0, -1.0])).tolist() == [0.0, 1.0, 0.0, 1.0]


def test_clipped_value_loss():
    old, returns = torch.tensor([0.0, 0.0]), torch.tensor([2.0, 2.0])
    values = torch.tensor([1.0, 0.3], requires_grad=True)
    loss = clipped_value_loss(values, old, returns, value_clip_eps=0.5)
    # 1.0 moved more than 0.5 from 0: the clipped value 0.5 is further from the return, so it counts
    # and the gradient stops; 0.3 is inside the range: plain squared error.
    assert loss.tolist() == pytest.approx([0.5 * 1.5 ** 2, 0.5 * 1.7 ** 2])
    loss.sum().backward()
    assert values.grad.tolist() == pytest.approx([0.0, 0.3 - 2.0])


def test_ratio_token_mean_and_explained_variance():
    assert policy_ratio(torch.tensor([-1.0]), torch.tensor([-1.0 - math.log(2)])).item() == pytest.approx(2.0)
    mask = torch.tensor([[1, 1, 0]])
    assert token_mean(torch.tensor([[1.0, 3.0, 100.0]]), mask).item() == 2.0
    assert token_mean(torch.tensor([[1.0, 3.0, 100.0]]), mask, num_tokens=4).item() == 1.0
    returns = torch.tensor([[1.0, 2.0, 3.0]])
    assert explained_variance(returns, returns, torch.ones(1, 3)) == 1.0
    assert explained_variance(torch.full((1, 3), 2.0), returns, torch.ones(1, 3)) == pytest.approx(0.0)
    assert explained_variance(-returns, returns, torch.ones(1, 3)) < -1


# ------------------------------------------------------------------------------ model and masks

def test_trainer_logprobs_equal_those_recorded_at_sampling():
    model = tiny_llama()
    samples = turn_samples(sampled_trajectories(model, 4))
    # Different prompt lengths in one micro-batch: left padding must not change any logprob.
    batch = collate(samples, pad_token_id=0, per_token={"recorded": [s.old_logprobs for s in samples]})
    with torch.no_grad():
        out = policy_outputs(model, batch)
    mask = batch.action_mask
    assert torch.allclose(out.logprobs[mask], batch.per_token["recorded"][mask], atol=1e-5)


def test_masked_tokens_get_no_gradient():
    model = tiny_llama()
    samples = turn_samples(sampled_trajectories(model, 3))
    batch = collate(samples, 0, {"old": [s.old_logprobs for s in samples],
                                 "adv": [torch.randn(len(s.response_ids)) for s in samples]})
    assert not batch.action_mask.all()  # the batch has padded (masked) response columns
    out = policy_outputs(model, batch)
    logprobs = out.logprobs.detach().requires_grad_(True)

    def loss_with(advantages):
        ratio = policy_ratio(logprobs, batch.per_token["old"])
        return token_mean(clipped_surrogate_loss(ratio, advantages), batch.action_mask)

    advantages = batch.per_token["adv"]
    loss_with(advantages).backward()
    masked = ~batch.action_mask
    assert torch.all(logprobs.grad[masked] == 0) and torch.any(logprobs.grad[~masked] != 0)
    # Whatever sits on masked positions, the loss and its gradient are the same.
    grad = logprobs.grad.clone()
    logprobs.grad = None
    garbage = torch.where(masked, torch.full_like(advantages, 1e6), advantages)
    loss_with(garbage).backward()
    assert torch.equal(grad, logprobs.grad)


def test_environment_tokens_in_the_prompt_are_not_trained():
    model = tiny_llama()
    trajectories = sampled_trajectories(model, 2)
    samples = turn_samples(trajectories)
    # The feedback tokens (5, 6, 7) are in the second turn's prompt, never among the trained tokens.
    second = [s for s in samples if s.turn == 2]
    assert all(s.prompt_ids[-3:] == [5, 6, 7] for s in second)
    assert sum(len(s.response_ids) for s in samples) == sum(len(t.token_ids) for tr in trajectories for t in tr.turns)


# ------------------------------------------------------------------------------------- updates

@pytest.mark.parametrize("critic", ["separate", "head"])
def test_one_ppo_update_changes_the_weights_and_reports_its_metrics(critic, tmp_path):
    model = tiny_llama()
    trajectories = sampled_trajectories(model, 6)
    config = PPOConfig(critic=critic, actor_lr=1e-3, critic_lr=1e-3, minibatch_size=12, micro_batch_size=4,
                       kl_coef=0.1 if critic == "head" else 0.0)
    reference = copy.deepcopy(model) if critic == "head" else None
    trainer = PPOTrainer(model, config, reference=reference)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    critic_before = {k: v.clone() for k, v in trainer.critic_module.state_dict().items()}
    metrics = trainer.update(trajectories)
    changed = [k for k, v in trainer.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "the update did not change the policy"
    assert any(not torch.equal(v, critic_before[k]) for k, v in trainer.critic_module.state_dict().items())
    for key in ("update", "mean_reward", "pass_rate", "entropy", "explained_variance", "clip_frac", "approx_kl",
                "mean_response_tokens", "truncation_share", "pg_loss", "value_loss", "logprob_gap"):
        assert key in metrics, key
    assert metrics["update"] == 1 and metrics["episodes"] == 6
    assert metrics["mean_reward"] == pytest.approx(sum(t.total_reward for t in trajectories) / 6)
    assert metrics["logprob_gap"] < 1e-5          # the recorded logprobs are the trainer's
    assert metrics["approx_kl"] < 1e-6            # 12 turns, one minibatch step: ratio 1 when measured
    assert (critic == "head") == ("kl_to_reference" in metrics)
    path = trainer.save(tmp_path / "ckpt")
    assert (path / "actor" / "config.json").exists() and (path / "critic.pt").exists()
    fresh = PPOTrainer(tiny_llama(1), PPOConfig(critic=critic))
    fresh.load_critic(path / "critic.pt")
    for k, v in fresh.critic_module.state_dict().items():
        assert torch.equal(v, trainer.critic_module.state_dict()[k])


def test_train_stops_starting_updates_when_its_time_budget_is_spent(tmp_path):
    from cuda_gym_agents.ppo.trainer import train

    model = tiny_llama()
    trainer = PPOTrainer(model, PPOConfig(actor_lr=1e-3, critic_lr=1e-3, minibatch_size=8, micro_batch_size=8))
    tags = []

    def collect(tag):
        tags.append(tag)
        return sampled_trajectories(trainer.policy, 4, seed=len(tags))

    history = train(trainer, collect, 5, tmp_path / "budget", time_budget_s=0.0, progress=False)
    assert tags == ["update_1"] and len(history) == 1          # the first round always runs
    assert len((tmp_path / "budget" / "metrics.jsonl").read_text().splitlines()) == 1
    history = train(trainer, collect, 2, tmp_path / "no_budget", progress=False)
    assert tags == ["update_1", "update_2", "update_3"] and [h["update"] for h in history] == [2, 3]


def test_micro_batches_accumulate_to_the_same_step_as_one_batch():
    trajectories = sampled_trajectories(tiny_llama(), 5)
    results = []
    for micro in (5, 2):
        trainer = PPOTrainer(tiny_llama(), PPOConfig(critic="head", actor_lr=1e-3, minibatch_size=10,
                                                      micro_batch_size=micro))
        trainer.update(trajectories)
        results.append(torch.cat([p.detach().flatten() for p in trainer.policy.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)


# ------------------------------------------------------------------------ RFT and value pretraining

def _episode(name, reward, replies, error_codes=None, end_reason="submit", finish="stop"):
    turns = [make_turn(i + 1, [1, 3], [4 + i, 2], [-1.0, -1.0], error_code=(error_codes or {}).get(i, "OK"),
                       finish=finish, reply=reply) for i, reply in enumerate(replies)]
    return Trajectory(task_id=name, level=1, episode=0, backend="test", model="m", turns=turns,
                      end_reason=end_reason, total_reward=reward)


def test_rejection_filter_keeps_positive_clean_trajectories_only():
    from cuda_gym_agents.rft import rejection_filter, rejection_reason

    looping = " ".join(["for (int i = 0; i < n; ++i) {"] * 40)
    cases = {
        "kept": (_episode("kept", 2.0, ["#! check\nA", "#! submit\nA"]), None),
        "zero reward": (_episode("zero", 0.0, ["#! submit\nA"]), "reward"),
        "negative": (_episode("neg", -1.0, ["#! submit\nA"]), "reward"),
        "malformed turn": (_episode("fmt", 3.0, ["hello", "#! submit\nA"], {0: "INVALID_ACTION"}), "format"),
        "cut reply": (_episode("cut", 1.0, ["#! submit\nA"], finish="length"), "format"),
        "backend failure": (_episode("err", 1.0, ["#! eval\nA"], end_reason="backend_error"), "format"),
        "same reply twice": (_episode("rep", 1.0, ["#! eval\nA", "#! eval\nA", "#! submit\nA"]), "loop"),
        "stuck generation": (_episode("stuck", 1.0, ["#! submit\n" + looping]), "loop"),
    }
    for name, (trajectory, reason) in cases.items():
        assert rejection_reason(trajectory) == reason, name
    kept, rejected = rejection_filter([t for t, _ in cases.values()])
    assert [t.task_id for t in kept] == ["kept"]
    assert rejected == {"reward": 2, "format": 3, "loop": 2}


def test_rft_finetune_raises_the_likelihood_of_kept_replies():
    from cuda_gym_agents.rft import FinetuneConfig, rft_finetune

    model = tiny_llama()
    kept = [t for t in sampled_trajectories(model, 8) if t.total_reward > 0]
    assert kept
    history = rft_finetune(model, kept, FinetuneConfig(epochs=8, lr=3e-3, minibatch_size=2), progress=False)
    assert history[-1]["nll"] < 0.75 * history[0]["nll"]
    with pytest.raises(ValueError, match="kept none"):
        rft_finetune(model, [])


@pytest.mark.parametrize("critic, lr, loss_ratio, ev_gain", [("separate", 3e-3, 0.5, 0.5), ("head", 3e-2, 0.7, 0.25)])
def test_value_pretraining_lowers_value_loss_and_raises_explained_variance(critic, lr, loss_ratio, ev_gain):
    from cuda_gym_agents.rft import FinetuneConfig, value_pretrain

    model = tiny_llama()
    trajectories = sampled_trajectories(model, 12)
    trainer = PPOTrainer(model, PPOConfig(critic=critic))
    policy_before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    # (A value head on a frozen random backbone is a linear fit: it gets less far than a whole critic.)
    history = value_pretrain(trainer, trajectories, FinetuneConfig(epochs=10, lr=lr, minibatch_size=6), progress=False)
    first, last = history[0], history[-1]
    assert len(history) == 11
    assert last["value_loss"] < loss_ratio * first["value_loss"]
    assert last["explained_variance"] > first["explained_variance"] + ev_gain
    # The policy is frozen during value pretraining.
    assert all(torch.equal(v, policy_before[k]) for k, v in trainer.policy.state_dict().items())


# ----------------------------------------------------------------- real rollouts, the menu, the command

def test_one_ppo_update_on_trajectories_from_the_rollout(cpu_evaluator, tmp_path):
    pytest.importorskip("tokenizers")
    from cuda_gym_agents.llm import SamplingConfig, TransformersChat
    from cuda_gym_agents.react import WORKFLOW_GUIDE
    from cuda_gym_agents.rollout import RolloutConfig, rollout
    from cuda_gym.trajectory import read_trajectories
    from cuda_gym.tasks import get_task

    from .helpers import GELU_TASK
    from .test_agents_transformers import tiny_chat_model

    from cuda_gym.envs import KernelEnv

    env = KernelEnv(backend="cpu", max_turns=2)  # writing a CPU prompt starts nothing
    prompt, _ = env.reset(options={"task_id": GELU_TASK})
    env.close()
    model, tokenizer = tiny_chat_model([prompt, WORKFLOW_GUIDE])  # a BPE that knows the prompt: short ids
    chat = TransformersChat(model, tokenizer, sampling=SamplingConfig(temperature=1.0, max_new_tokens=12))
    rollout(chat, [get_task(GELU_TASK)], cpu_evaluator, tmp_path / "rollout",
            RolloutConfig(episodes_per_task=2, max_turns=2, reward_mode="final", concurrency=1), backend="cpu",
            progress=False)
    trajectories = read_trajectories(tmp_path / "rollout" / "trajectories.jsonl")
    assert len(trajectories) == 2 and all(len(t.turns) == 2 for t in trajectories)
    trainer = PPOTrainer(model, PPOConfig(critic="head", actor_lr=1e-3, critic_lr=1e-3, minibatch_size=4),
                         tokenizer=tokenizer)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    metrics = trainer.update(trajectories)
    # The trainer recomputes the logprobs TransformersChat recorded, from the recorded ids alone.
    assert metrics["logprob_gap"] < 1e-4
    assert metrics["mean_reward"] == pytest.approx(sum(t.total_reward for t in trajectories) / 2)
    assert metrics["tokens"] == sum(len(turn.token_ids) for t in trajectories for turn in t.turns)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))


def test_menu_candidates_and_replies():
    from cuda_gym_agents.ppo import menu

    for name in menu.MENU_TASKS:
        kinds = menu.label_kinds(name)
        assert set(kinds.values()) == set(menu.KINDS) and list(kinds.values()).count("fast") == 1
        sources = {kind: menu.candidate_source(name, kind) for kind in menu.KINDS}
        assert len(set(sources.values())) == 4
        assert "omp simd" in sources["fast"] and "-ffast-math" in sources["fast"]
        assert "omp simd" not in sources["slow"] and "-ffast-math" not in sources["slow"]
        assert sources["wrong"].replace(menu.MENU_TASKS[name][1], menu.MENU_TASKS[name][0]) == sources["fast"]
    # Each label is correct (fast or slow) for at most one task, whatever the seed.
    for seed in range(len(menu.LABELS)):
        for label in menu.LABELS:
            kinds = [menu.label_kinds(name, seed)[label] for name in menu.MENU_TASKS]
            assert sum(kind in ("fast", "slow") for kind in kinds) <= 1, (seed, label, kinds)
    assert menu.label_kinds("elu", seed=1) != menu.label_kinds("elu")
    assert menu.parse_reply([menu.LABEL_TOKENS["C"]]) == "C"
    assert menu.parse_reply([menu.EOS]) is None and menu.parse_reply([menu.LABEL_TOKENS["A"]] * 2) is None
    assert [t.id for t in menu.load_menu()] == [f"menu/L1/{n}" for n in menu.MENU_TASKS]
    with pytest.raises(ValueError, match="CPU backend only"):
        menu.MenuEnv(None, backend="cuda")


def test_ppo_learning_benchmark_smoke(cpu_evaluator, tmp_path):
    """A short run of the PPO learning comparison (benchmarks/ppo_learning.py) on the real CPU evaluator: both conditions run, the
    menu's verdicts are the real ones, and the JSON and PNG are written."""
    pytest.importorskip("matplotlib")
    from cuda_gym_agents.ppo.learning import run

    result = run(tmp_path, updates=2, seeds=(0,), episodes_per_task=8, warmup_batches=1, tasks=("elu",),
                 evaluator=cpu_evaluator, progress=False)
    for name in result["menu"]["rewards"]:
        verdicts = result["menu"]["rewards"][name]
        assert verdicts["wrong"] == -1.0 and verdicts["broken"] == -1.0
        assert verdicts["fast"] >= 1.0 and verdicts["slow"] >= 1.0
    for name in ("ppo", "rft+value+ppo"):
        (run_,) = result["runs"][name]
        assert [line["update"] for line in run_["history"]] == [1, 2]
    rft = result["runs"]["rft+value+ppo"][0]["stages"]
    assert rft["sampled"]["episodes"] == 8 and rft["rft"]["kept"] + sum(rft["rft"]["rejected"].values()) == 8
    assert len(list(tmp_path.glob("ppo_learning_cpu_*.json"))) == 1 and len(list(tmp_path.glob("*.png"))) == 1


def test_train_command_on_one_menu_task(tmp_path, capsys):
    from cuda_gym.cli import main

    out = tmp_path / "run"
    code = main(["train", "--algo", "value,ppo", "--tasks", "menu/L1/tanh", "--backend", "cpu", "--out", str(out),
                 "--updates", "2", "--episodes-per-task", "8", "--warmup-batches", "1", "--no-progress",
                 "--critic", "head", "--no-compile-baseline"])
    assert code == 0, capsys.readouterr()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    import json

    first = json.loads(lines[0])
    for key in ("update", "mean_reward", "pass_rate", "entropy", "explained_variance", "clip_frac", "approx_kl",
                "mean_response_tokens", "truncation_share"):
        assert key in first
    stages = json.loads((out / "stages.json").read_text())
    assert stages["stages"] == ["value", "ppo"] and len(stages["value"]["epochs"]) >= 2
    assert (out / "checkpoints" / "final" / "actor" / "config.json").exists()
    assert (out / "curves.png").exists() and (out / "trajectories.jsonl").exists()
    # Nothing is overwritten; bad stages and missing models get a clear error.
    assert main(["train", "--suite", "menu", "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["train", "--algo", "ppo,dance", "--suite", "menu", "--out", str(tmp_path / "x")]) == 2
    assert "unknown stages" in capsys.readouterr().err
    assert main(["train", "--suite", "builtin", "--out", str(tmp_path / "y")]) == 2
    assert "--model DIR" in capsys.readouterr().err
    assert main(["train", "--suite", "menu", "--backend", "cuda", "--out", str(tmp_path / "z")]) == 2
    assert "CPU backend only" in capsys.readouterr().err


def test_lora_policy_trains_only_its_adapters_with_kl_to_its_base_weights():
    pytest.importorskip("peft")
    model = tiny_llama()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = PPOTrainer(model, PPOConfig(critic="head", lora_rank=4, kl_coef=0.1, actor_lr=1e-2, minibatch_size=8))
    trajectories = sampled_trajectories(model, 4)
    first = trainer.update(trajectories)
    second = trainer.update(trajectories)
    changed = {k for k, v in trainer.policy.state_dict().items() if "lora_" in k}
    assert changed and all(p.requires_grad == ("lora_" in n) for n, p in trainer.policy.named_parameters())
    # The base weights stay as they were; the adapters moved the policy away from them (the KL,
    # measured during the one step of each update, is 0 before the first step and > 0 after it).
    for name, value in trainer.policy.get_base_model().state_dict().items():
        key = name.replace("base_layer.", "")
        if key in base:
            assert torch.equal(value, base[key]), name
    assert first["kl_to_reference"] == pytest.approx(0.0, abs=1e-6) and second["kl_to_reference"] > 0


def test_train_command_with_a_local_checkpoint_through_the_rollout(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    import json

    from cuda_gym_agents.ppo.cli import load_model
    from cuda_gym.cli import main

    from .helpers import GELU_TASK
    from .test_agents_transformers import tiny_chat_model

    from cuda_gym_agents.react import WORKFLOW_GUIDE
    from cuda_gym.envs import KernelEnv

    env = KernelEnv(backend="cpu", max_turns=1)  # writing a CPU prompt starts nothing
    prompt, _ = env.reset(options={"task_id": GELU_TASK})
    env.close()
    model, tokenizer = tiny_chat_model([prompt, WORKFLOW_GUIDE])  # a BPE that knows the prompt: short ids
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    out = tmp_path / "run"
    code = main(["train", "--algo", "ppo", "--model", str(tmp_path / "ckpt"), "--tasks", GELU_TASK, "--backend", "cpu",
                 "--device", "cpu", "--updates", "1", "--episodes-per-task", "2", "--max-turns", "1",
                 "--max-new-tokens", "8", "--critic", "head", "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr()
    (line,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert line["episodes"] == 2 and line["turns"] == 2 and line["logprob_gap"] < 1e-4
    assert (out / "rollouts" / "update_1" / "summary.json").exists()
    assert (out / "checkpoints" / "final" / "actor" / "tokenizer_config.json").exists()
    # A folder with only a config and a tokenizer gives a randomly initialised model of that shape.
    model.config.save_pretrained(tmp_path / "shape")
    tokenizer.save_pretrained(tmp_path / "shape")
    fresh, _ = load_model(str(tmp_path / "shape"), "cpu")
    assert sum(p.numel() for p in fresh.parameters()) == sum(p.numel() for p in model.parameters())
    assert main(["train", "--model", str(tmp_path / "nowhere"), "--tasks", GELU_TASK, "--out", str(tmp_path / "z")]) == 2
    assert "not a folder" in capsys.readouterr().err
