"""`cuda-gym train`: CUDA Agent's training stages (RFT, value pretraining, PPO) on a local model.

Two kinds of runs:
- `--suite menu`: the toy (`cuda_gym_agents.ppo.menu`): a tiny randomly initialised policy (or `--model DIR`
  saved by an earlier menu run) picks one of four candidates per task; runs in minutes on a CPU.
- any other suite or `--tasks`: a transformers checkpoint (`--model DIR`, with a tokenizer that has a
  chat template) plays the ReAct policy through `cuda_gym_agents.rollout`, which records token ids and
  logprobs at generation; PPO trains on exactly those.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from cuda_gym.tasks.selection import add_task_options


def add_command(commands: argparse._SubParsersAction) -> None:
    from cuda_gym.cli import add_eval_options, suite_list

    train = commands.add_parser(
        "train", help="train a local model with RFT, value pretraining and PPO (CUDA Agent's recipe)",
        description="Run training stages in order and write <out>/metrics.jsonl (one line per PPO update), "
                    "<out>/stages.json, <out>/checkpoints/ and <out>/curves.png. See docs/training.md.")
    train.add_argument("--algo", default="ppo",
                       help="stages to run, comma-separated, run in the order rft, value, ppo (default: ppo). "
                            "rft: rejection fine-tuning of the actor; value: value pretraining of the critic")
    train.add_argument("--model", help="local checkpoint folder (transformers; weights are initialised at random "
                                       "when it holds only config.json and the tokenizer). --suite menu: optional")
    train.add_argument("--suite", help=f"menu (the CPU toy) or a suite: {suite_list()}")
    add_task_options(train, tasks_help="task ids, instead of --suite (menu/L1/<name> for menu tasks)",
                     levels_help="with --suite: only these levels")
    train.add_argument("--data-path", help="KernelBench / Ops-6K data (else $CUDA_GYM_KERNELBENCH / $CUDA_GYM_OPS6K)")
    train.add_argument("--out", required=True, help="output directory (must not hold metrics.jsonl already)")
    train.add_argument("--updates", type=int, default=None, help="PPO updates (default: 30 on the menu, else 10)")
    train.add_argument("--batch-size", type=int, default=None,
                       help="episodes per update (default: the paper's 1024; menu: 48)")
    train.add_argument("--episodes-per-task", type=int, default=None,
                       help="episodes per task per update (default: ceil(batch size / tasks))")
    train.add_argument("--trajectories", help="trajectories.jsonl for rft/value (default: sample --warmup-batches)")
    train.add_argument("--warmup-batches", type=int, default=None,
                       help="batches sampled with the initial policy for rft/value (default: 3 on the menu, else 1)")
    train.add_argument("--max-turns", type=int, default=8, help="turns per episode (not menu; default 8)")
    train.add_argument("--max-new-tokens", type=int, default=2048, help="reply length limit (not menu)")
    train.add_argument("--concurrency", type=int, default=4, help="episodes played at once (not menu)")
    train.add_argument("--critic", choices=["separate", "head"], default=None, help="default: separate")
    train.add_argument("--actor-lr", type=float, default=None, help="default 3e-6 (menu: 1e-3)")
    train.add_argument("--critic-lr", type=float, default=None, help="default 6e-6 (menu: 1e-3)")
    train.add_argument("--lora-rank", type=int, default=0, help="LoRA rank (0: train all weights; needs peft)")
    train.add_argument("--kl-coef", type=float, default=0.0, help="KL to the initial policy (default 0: none)")
    train.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_eval_options(train)
    train.set_defaults(func=run_train)


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _ppo_config(args: argparse.Namespace, base):
    overrides = {name: value for name, value in (("critic", args.critic), ("actor_lr", args.actor_lr),
                                                 ("critic_lr", args.critic_lr), ("batch_size", args.batch_size))
                 if value is not None}
    overrides.update(lora_rank=args.lora_rank, kl_coef=args.kl_coef, seed=args.seed)
    return base(**overrides)


def run_train(args: argparse.Namespace) -> int:
    from .pipeline import parse_stages

    try:
        stages = parse_stages(args.algo)
    except ValueError as exc:
        return _error(str(exc))
    out = Path(args.out)
    if (out / "metrics.jsonl").exists():
        return _error(f"{out / 'metrics.jsonl'} exists; choose a new --out directory (nothing is overwritten)")
    if args.trajectories and not Path(args.trajectories).exists():
        return _error(f"--trajectories {args.trajectories} does not exist")
    menu_tasks = args.tasks and all(t.startswith("menu/") for t in args.tasks)
    if args.suite == "menu" or menu_tasks:
        return _train_menu(args, stages, out)
    return _train_llm(args, stages, out)


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _train_menu(args, stages, out: Path) -> int:
    import torch

    from cuda_gym.cli import evaluator_config, make_evaluator

    from . import menu
    from .pipeline import run_stages

    base = evaluator_config(args)
    config = menu.menu_eval_config().replace(precision=base.precision, policy=base.policy, baselines=base.baselines)
    device = _device(args.device)
    if args.model:
        from transformers import AutoModelForCausalLM

        if not Path(args.model).is_dir():
            return _error(f"--model {args.model} is not a folder; leave it out to train a new tiny policy")
        policy = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True)
    else:
        policy = menu.tiny_policy(args.seed)
    policy.to(device)
    ppo_config = _ppo_config(args, menu.menu_ppo_config)
    names = None
    if args.tasks:
        names = [t.rsplit("/", 1)[-1] for t in args.tasks]
        unknown = [n for n in names if n not in menu.MENU_TASKS]
        if unknown:
            return _error(f"unknown menu tasks {unknown}; the menu has {', '.join(f'menu/L1/{n}' for n in menu.MENU_TASKS)}")
    if args.backend == "cuda":
        return _error("the menu runs on the CPU backend only (its candidates are C++ loops over host memory); "
                      "use --backend cpu")
    args.backend = "cpu"
    with make_evaluator(args, config) as evaluator:
        board = menu.MenuEnv(evaluator, names, backend=args.backend, seed=args.seed)
        episodes = args.episodes_per_task or math.ceil(ppo_config.batch_size / len(board.names))
        try:
            rewards = board.judge_all()
            print(f"menu rewards (judged once each): {rewards}; best mean reward {board.best_mean_reward():.2f}")
            generator = torch.Generator().manual_seed(args.seed)

            def collect(tag: str):
                return menu.play_menu(policy, board, episodes, generator=generator)

            summary = run_stages(policy, collect, stages, out,
                                 ppo_config=ppo_config, updates=args.updates or 30,
                                 trajectories=args.trajectories, warmup_batches=args.warmup_batches or 3,
                                 rft_config=menu.MENU_RFT_CONFIG, value_config=menu.MENU_VALUE_CONFIG,
                                 pad_token_id=menu.PAD, plot_title=f"menu, {'+'.join(stages)}",
                                 progress=not args.no_progress)
        finally:
            board.close()
    _print_summary(summary, out)
    return 0


def _train_llm(args, stages, out: Path) -> int:
    from cuda_gym.cli import make_evaluator

    from ..cli import _select_tasks
    from ..llm.base import SamplingConfig
    from ..llm.transformers_chat import TransformersChat
    from ..react import ReactConfig
    from ..rollout import RolloutConfig
    from .config import PPOConfig
    from .pipeline import run_stages

    if not args.model:
        return _error("--model DIR is needed (a local transformers checkpoint folder with a chat-template "
                      "tokenizer); or use --suite menu for the CPU toy")
    try:
        tasks = _select_tasks(args)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        return _error(str(exc))
    try:
        policy, tokenizer = load_model(args.model, _device(args.device))
    except (OSError, ValueError, ImportError) as exc:
        return _error(str(exc))
    config = _ppo_config(args, PPOConfig)
    chat = TransformersChat(policy, tokenizer, sampling=SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens),
                            model_name=args.model)
    context = int(getattr(policy.config, "max_position_embeddings", 32768) or 32768)
    episodes = args.episodes_per_task or math.ceil(config.batch_size / len(tasks))
    rollout_config = RolloutConfig(episodes_per_task=episodes, concurrency=args.concurrency,
                                   max_turns=args.max_turns, seed=args.seed,
                                   reward_mode="final" if config.reward_placement == "outcome" else "per_step",
                                   react=ReactConfig(context_tokens=context))
    with make_evaluator(args) as evaluator:
        collect = rollout_collector(chat, tasks, evaluator, out, rollout_config, backend=args.backend,
                                    progress=not args.no_progress)
        summary = run_stages(policy, collect, stages, out, ppo_config=config, updates=args.updates or 10,
                             trajectories=args.trajectories, warmup_batches=args.warmup_batches or 1,
                             tokenizer=tokenizer, plot_title=f"{args.model}, {'+'.join(stages)}",
                             progress=not args.no_progress)
    _print_summary(summary, out)
    return 0


def rollout_collector(chat, tasks, evaluator, out: Path, rollout_config, *, backend: str = "auto",
                      progress: bool = True):
    """`collect(tag)` for `run_stages`: one `cuda_gym_agents.rollout.rollout` of `tasks` into
    `out/rollouts/<tag>/` (its trajectories.jsonl and summary.json), returning the trajectories PPO
    can train on. An episode with a turn that generated nothing (a backend or environment error) stays
    in that folder and is left out, with a note."""
    from ..rollout import rollout
    from cuda_gym.trajectory import read_trajectories

    def collect(tag: str):
        folder = Path(out) / "rollouts" / tag
        rollout(chat, tasks, evaluator, folder, rollout_config, backend=backend, progress=progress)
        played = read_trajectories(folder / "trajectories.jsonl")
        trainable = [t for t in played if t.turns and all(turn.token_ids for turn in t.turns)]
        if len(trainable) < len(played):
            print(f"note: {len(played) - len(trainable)} of {len(played)} episodes in {folder} have a turn without "
                  "generated tokens (a backend or environment error); they are kept there and left out of training")
        return trainable

    return collect


def load_model(path: str, device):
    """A causal LM and its tokenizer from a local folder; random weights when the folder holds a
    config.json but no weights (nothing is downloaded)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"--model {path} is not a folder; pass a local checkpoint folder (nothing is downloaded)")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    has_weights = any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))
    if has_weights:
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    else:
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, local_files_only=True))
    return model.to(device), tokenizer


def _print_summary(summary: dict, out: Path) -> None:
    if "rft" in summary:
        rft = summary["rft"]
        print(f"rft: kept {rft['kept']} of {summary['sampled']['episodes']} sampled episodes "
              f"(rejected: {rft['rejected']}); nll {rft['epochs'][0]['nll']:.3f} -> {rft['epochs'][-1]['nll']:.3f}")
    if "value" in summary:
        epochs = summary["value"]["epochs"]
        print(f"value pretraining: loss {epochs[0]['value_loss']:.3f} -> {epochs[-1]['value_loss']:.3f}")
    if summary.get("ppo", {}).get("last"):
        first, last = summary["ppo"]["first"], summary["ppo"]["last"]
        print(f"ppo: {summary['ppo']['updates']} updates, mean reward {first['mean_reward']:.2f} -> "
              f"{last['mean_reward']:.2f}, pass rate {first['pass_rate']:.2f} -> {last['pass_rate']:.2f}")
    print(f"wrote {out}/ (metrics.jsonl, stages.json, checkpoints/)")
