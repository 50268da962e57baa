"""`cuda-gym agent`: play tasks with a chat model and write trajectories.jsonl and summary.json."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from cuda_gym.tasks.selection import add_task_options


def add_command(commands: argparse._SubParsersAction) -> None:
    from cuda_gym.cli import add_eval_options, suite_list

    agent = commands.add_parser(
        "agent", help="play tasks with an LLM (OpenAI-compatible server or local checkpoint) and score it",
        description="Play tasks with the ReAct policy (agents/react.py). The model is an OpenAI-compatible "
                    "server (--base-url, --model) or a local transformers checkpoint (--checkpoint). Writes "
                    "<out>/trajectories.jsonl (one line per episode, as it finishes) and <out>/summary.json "
                    "(CUDA Agent's best-of-trajectory protocol). See docs/agents.md.")
    model = agent.add_argument_group("model")
    model.add_argument("--base-url", help="OpenAI-compatible API root, e.g. http://localhost:8000/v1")
    model.add_argument("--model", help="model name as the server knows it (with --checkpoint: the name to "
                                       "record, default the path)")
    model.add_argument("--api-key", help="API key (default: $OPENAI_API_KEY, else 'EMPTY' for local servers)")
    model.add_argument("--checkpoint", help="local transformers checkpoint folder (instead of --base-url)")
    model.add_argument("--device", default="auto", help="--checkpoint: auto, cpu, cuda or cuda:N (default auto)")
    model.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                       help="--checkpoint: weight dtype (default: the checkpoint's)")
    model.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    model.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1.0: off)")
    model.add_argument("--max-new-tokens", type=int, default=4096, help="reply length limit (default 4096)")
    model.add_argument("--context-tokens", type=int, default=32768,
                       help="context budget: prompt + reply must fit (default 32768; set to the model's)")
    model.add_argument("--timeout", type=float, default=600.0, help="seconds per server request (default 600)")
    model.add_argument("--retries", type=int, default=3, help="retries of a failed server request (default 3)")
    model.add_argument("--no-logprobs", action="store_true", help="do not ask the server for logprobs")
    model.add_argument("--return-token-ids", action="store_true",
                       help="ask the server for prompt and reply token ids (vLLM >= 0.10.2)")

    tasks = agent.add_argument_group("tasks")
    add_task_options(tasks, levels_help="with --suite: only these levels, e.g. 1,2 (default all)")
    tasks.add_argument("--suite", help=f"play a whole suite: {suite_list()}")
    tasks.add_argument("--data-path", help="KernelBench / Ops-6K data (else $CUDA_GYM_KERNELBENCH / $CUDA_GYM_OPS6K)")

    play = agent.add_argument_group("episodes")
    play.add_argument("--env", default="text", choices=["text", "workspace"],
                      help="text: one message with a #! command and a candidate per turn (KernelEnv); workspace: "
                           "CUDA Agent's workspace through function calling, one tool call per turn (WorkspaceEnv, "
                           "docs/workspace.md; the server must parse tool calls). Default text")
    play.add_argument("--language", default="cuda", choices=["cuda", "triton"],
                      help="the kernel language the prompt asks for: cuda (CUDA C++, C++ on the cpu backend) or "
                           "triton (@triton.jit kernels; needs pip install cuda_gym[triton]). Default cuda")
    play.add_argument("--max-turns", type=int, help="turns per episode (default 8; --env workspace: 40)")
    play.add_argument("--episodes-per-task", type=int, default=1, help="episodes per task (default 1)")
    play.add_argument("--concurrency", type=int, default=4, help="episodes played at once (default 4)")
    play.add_argument("--reward-mode", choices=["per_step", "final"],
                      help="default per_step; --env workspace: final (the best judged result of the episode)")
    play.add_argument("--out", help="output directory (default: cuda_gym_results/agent_<time>); must be new")
    play.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_eval_options(agent)
    agent.set_defaults(func=run_agent)


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _select_tasks(args: argparse.Namespace) -> list:
    from cuda_gym.tasks import get_task, load_suite

    if bool(args.tasks) == bool(args.suite):
        raise ValueError("give either --tasks ID,ID or --suite NAME [--levels 1,2]")
    if args.tasks:
        tasks = []
        for task_id in args.tasks:
            suite = task_id.split("/", 1)[0]
            kwargs = {"data_path": args.data_path} if suite != "builtin" and args.data_path else {}
            tasks.append(get_task(task_id, **kwargs))
        return tasks
    levels = tuple(args.levels) if args.levels else None
    kwargs = {"data_path": args.data_path} if args.suite != "builtin" and args.data_path else {}
    tasks = load_suite(args.suite, levels=levels, **kwargs)
    if not tasks:
        raise ValueError(f"suite {args.suite!r} has no tasks with levels {levels}")
    return tasks


def _check_model_options(args: argparse.Namespace) -> None:
    if bool(args.base_url) == bool(args.checkpoint):
        raise ValueError("give either --base-url URL --model NAME (a server) or --checkpoint PATH (a local model)")
    if args.base_url and not args.model:
        raise ValueError("--base-url needs --model NAME (the name the server serves, e.g. from GET /v1/models)")
    if args.checkpoint and not Path(args.checkpoint).is_dir():
        raise ValueError(f"--checkpoint {args.checkpoint} is not a folder; give a local checkpoint folder "
                         "(config.json, weights, tokenizer with a chat template)")


def _chat_backend(args: argparse.Namespace):
    from .llm import OpenAIChat, SamplingConfig, TransformersChat

    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens)
    if args.checkpoint:
        return TransformersChat.from_pretrained(args.checkpoint, device=args.device, dtype=args.dtype,
                                                sampling=sampling, model_name=args.model)
    return OpenAIChat(args.base_url, args.model, api_key=args.api_key, sampling=sampling, timeout_s=args.timeout,
                      retries=args.retries, logprobs=not args.no_logprobs, return_token_ids=args.return_token_ids)


def run_agent(args: argparse.Namespace) -> int:
    from cuda_gym.cli import make_evaluator

    from .react import ReactConfig
    from .rollout import SUMMARY_FILE, TRAJECTORIES_FILE, RolloutConfig, rollout

    try:
        _check_model_options(args)
        tasks = _select_tasks(args)
    except (KeyError, FileNotFoundError, ValueError) as exc:
        return _error(exc.args[0] if exc.args else str(exc))
    out = Path(args.out) if args.out else Path("cuda_gym_results") / f"agent_{dt.datetime.now():%Y%m%d_%H%M%S}"
    if (out / TRAJECTORIES_FILE).exists():
        return _error(f"{out / TRAJECTORIES_FILE} exists; choose a new --out directory (nothing is overwritten)")
    workspace = args.env == "workspace"
    max_turns = args.max_turns if args.max_turns is not None else (40 if workspace else 8)
    reward_mode = args.reward_mode or ("final" if workspace else "per_step")
    if max_turns < 1 or args.episodes_per_task < 1 or args.concurrency < 1:
        return _error("--max-turns, --episodes-per-task and --concurrency must be at least 1")
    config = RolloutConfig(episodes_per_task=args.episodes_per_task, concurrency=args.concurrency,
                           max_turns=max_turns, reward_mode=reward_mode, env=args.env, language=args.language,
                           react=ReactConfig(context_tokens=args.context_tokens))
    # The evaluator first (seconds): a problem there shows before a large checkpoint is loaded (minutes).
    with make_evaluator(args) as evaluator:
        try:
            chat = _chat_backend(args)
        except (ValueError, FileNotFoundError, ImportError) as exc:
            return _error(str(exc))
        try:
            print(f"cuda-gym agent: {len(tasks)} task(s) x {args.episodes_per_task} episode(s), {chat.name} "
                  f"model {chat.model!r}, backend {evaluator.backend}, {args.env} env, {args.language} kernels, "
                  f"up to {max_turns} turns; "
                  f"writing {out}")
            summary = rollout(chat, tasks, evaluator, out, config, backend=args.backend,
                              progress=not args.no_progress)
        finally:
            chat.close()
    print(json.dumps({key: summary[key] for key in ("episodes", "pass_rate", "faster_than_eager_rate",
                                                    "faster_than_compile_rate", "geomean_speedup_vs_eager",
                                                    "geomean_speedup_vs_compile", "end_reasons")}, indent=1))
    print(f"wrote {out / TRAJECTORIES_FILE} and {out / SUMMARY_FILE}")
    failed = {reason: count for reason, count in summary["end_reasons"].items()
              if reason in ("backend_error", "env_error")}
    if failed:
        print(f"error: {sum(failed.values())} episode(s) stopped early ({failed}); their turns are kept in "
              f"{out / TRAJECTORIES_FILE}, the 'error' field says why: {summary.get('first_error', '')}",
              file=sys.stderr)
        return 1
    return 0
