"""Multi-turn PPO at scale on one GPU: a randomly initialised ~110M-parameter Llama (nothing exists to
download) plays the ReAct policy on built-in tasks through cuda_gym_agents.rollout, and PPO trains on the
recorded token ids and logprobs (`cuda-gym train`'s LLM path: cuda_gym_agents.ppo.pipeline.run_stages).

Measures per update: rollout tokens/s (reply tokens / wall time of the rollout, which includes the
environment's steps; `generation_seconds` sums the per-turn backend calls, which overlap the wait
for TransformersChat's one-at-a-time generation lock, so it is not a wall time), training tokens/s
(prompt + reply tokens of every turn / update time), episodes per hour (episodes / wall time of
rollout + update), peak GPU memory (torch.cuda.max_memory_allocated), and the curve (mean reward,
entropy, explained variance). A random model writes no candidate, so its replies are judged
INVALID_ACTION (reward -1); this measures the machinery's throughput, not learning (for learning see
benchmarks/ppo_learning.py).

PPO starts no new update after `--time-budget-s` seconds of PPO (default 140: the whole run then
takes about 4 minutes on an H200 with the defaults), so the number of updates is what fits, at most
`--updates`. Needs transformers and tokenizers (the `rl-llm` extra); matplotlib for the PNG.

The tokenizer is a byte-level BPE trained here on the tasks' prompts, the workflow guide and the
reference solutions, with a small chat template.

    python benchmarks/ppo_gpu.py --out "$OUT"                  # on the GPU machine, about 4 minutes
    python benchmarks/ppo_gpu.py --smoke --out /tmp/ppo_gpu    # tiny model on the CPU, to check the path
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch

CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant\n{% endif %}")


def build_tokenizer(corpus: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer, *, hidden: int, layers: int, heads: int, context: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=int(hidden * 8 / 3) // 64 * 64,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=context, tie_word_embeddings=False,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="cuda_gym_results")
    parser.add_argument("--smoke", action="store_true", help="tiny model, CPU, two updates: checks the path")
    parser.add_argument("--updates", type=int, default=8, help="at most this many PPO updates")
    parser.add_argument("--time-budget-s", type=float, default=140.0,
                        help="start no new PPO update after this many seconds of PPO")
    parser.add_argument("--tasks", type=int, default=8, help="the first N built-in level-1 tasks")
    parser.add_argument("--episodes-per-task", type=int, default=1)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    args = parser.parse_args()

    from cuda_gym_agents.llm import SamplingConfig, TransformersChat
    from cuda_gym_agents.ppo.cli import rollout_collector
    from cuda_gym_agents.ppo.config import PPOConfig
    from cuda_gym_agents.ppo.pipeline import run_stages
    from cuda_gym_agents.ppo.trainer import json_safe
    from cuda_gym_agents.react import WORKFLOW_GUIDE, ReactConfig
    from cuda_gym_agents.rollout import RolloutConfig
    from cuda_gym.envs import KernelEnv
    from cuda_gym.eval import Evaluator
    from cuda_gym.tasks import load_suite, solution_path

    backend = "cpu" if args.smoke else "cuda"
    device = torch.device("cpu" if args.smoke else "cuda")
    if args.smoke:
        args.updates, args.tasks, args.max_turns, args.max_new_tokens = 2, 2, 2, 16
    tasks = load_suite("builtin", levels=(1,))[:args.tasks]
    prompt_env = KernelEnv(backend="cpu", max_turns=args.max_turns)  # cpu: writing the prompt starts nothing
    corpus = [prompt_env.reset(options={"task": t})[0] for t in tasks] + [WORKFLOW_GUIDE]
    corpus += [path.read_text() for t in load_suite("builtin") for b in ("cuda", "cpu") if (path := solution_path(t, b))]
    prompt_env.close()
    tokenizer = build_tokenizer(corpus, 600 if args.smoke else 8192)
    shape = dict(hidden=32, layers=2, heads=4) if args.smoke else dict(hidden=768, layers=14, heads=12)
    model = build_model(tokenizer, context=32768, **shape).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"policy: {parameters / 1e6:.1f}M parameters, vocabulary {len(tokenizer)}", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="ppo_gpu_"))  # rollouts and checkpoints (GBs): not kept
    config = PPOConfig(minibatch_size=16, micro_batch_size=2, checkpoint_every=0)
    chat = TransformersChat(model, tokenizer, sampling=SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens),
                            model_name=f"random-llama-{parameters / 1e6:.0f}M")
    rollout_config = RolloutConfig(episodes_per_task=args.episodes_per_task, concurrency=4, max_turns=args.max_turns,
                                   reward_mode="final", react=ReactConfig(context_tokens=32768))
    timings: list[dict] = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    with Evaluator(backend) as evaluator:
        inner = rollout_collector(chat, tasks, evaluator, run_dir, rollout_config, backend=backend, progress=False)

        def collect(tag: str):
            begun = time.perf_counter()
            trajectories = inner(tag)
            turns = [turn for t in trajectories for turn in t.turns]
            timings.append({"tag": tag, "rollout_seconds": time.perf_counter() - begun, "episodes": len(trajectories),
                            "reply_tokens": sum(len(turn.token_ids) for turn in turns),
                            "generation_seconds": sum(turn.generation_seconds for turn in turns),
                            "trained_tokens": sum(len(turn.prompt_token_ids) + len(turn.token_ids) for turn in turns)})
            print(f"{tag}: {timings[-1]}", flush=True)
            return trajectories

        ppo_started = time.perf_counter()
        run_stages(model, collect, ("ppo",), run_dir, ppo_config=config, updates=args.updates, tokenizer=tokenizer,
                   plot_title=f"random Llama {parameters / 1e6:.0f}M, multi-turn PPO on built-in L1",
                   time_budget_s=args.time_budget_s, progress=False)
        ppo_seconds = time.perf_counter() - ppo_started
    total = time.perf_counter() - started
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    per_update = []
    for timing, line in zip(timings, metrics):
        wall = timing["rollout_seconds"] + line["update_seconds"]
        per_update.append({**timing, "update_seconds": line["update_seconds"],
                           "rollout_reply_tokens_per_s": timing["reply_tokens"] / timing["rollout_seconds"],
                           "training_tokens_per_s": timing["trained_tokens"] / line["update_seconds"],
                           "episodes_per_hour": timing["episodes"] / wall * 3600})
    result = {
        "benchmark": "ppo_gpu",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "policy_parameters": parameters,
        "critic": config.critic,
        "vocabulary": len(tokenizer),
        "settings": vars(args),
        "ppo": config.to_dict(),
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
        "updates_run": len(metrics),
        "totals": {
            "rollout_reply_tokens_per_s": sum(u["reply_tokens"] for u in per_update)
            / max(sum(u["rollout_seconds"] for u in per_update), 1e-9),
            "training_tokens_per_s": sum(u["trained_tokens"] for u in per_update)
            / max(sum(u["update_seconds"] for u in per_update), 1e-9),
            "episodes_per_hour": sum(u["episodes"] for u in per_update)
            / max(sum(u["rollout_seconds"] + u["update_seconds"] for u in per_update), 1e-9) * 3600,
        },
        "per_update": per_update,
        "metrics": metrics,
        "startup_seconds": ppo_started - started,
        "ppo_seconds": ppo_seconds,
        "seconds": total,
    }
    stem = "ppo_gpu_smoke" if args.smoke else f"ppo_gpu_cuda_{dt.date.today().isoformat()}"
    (out / f"{stem}.json").write_text(json.dumps(json_safe(result), indent=1))
    if (run_dir / "curves.png").exists():
        (out / f"{stem}.png").write_bytes((run_dir / "curves.png").read_bytes())
    shutil.rmtree(run_dir, ignore_errors=True)
    print(json.dumps({k: result[k] for k in ("device", "policy_parameters", "peak_gpu_memory_gib", "updates_run",
                                             "totals", "startup_seconds", "seconds")}
                     | {"per_update": per_update}, indent=1))


if __name__ == "__main__":
    main()
