"""`cuda-gym synth`: synthesize fresh, decontaminated tasks into a directory the `synth` suite reads."""
from __future__ import annotations

import argparse
import os
import shutil
import sys


def add_command(commands: argparse._SubParsersAction) -> None:
    synth = commands.add_parser(
        "synth", help="synthesize new tasks (seed operators -> composition -> execution filter -> decontamination)",
        description="Compose chains of 1-5 torch operators into KernelBench-format tasks, keep those that run "
                    "deterministically in eager and torch.compile with an eager time in the window, drop "
                    "duplicates and anything close to KernelBench, and write them to --out "
                    "(load them with load_suite('synth', data_path=OUT) or CudaKernel-Synth-v1).")
    synth.add_argument("--n", type=int, default=100, help="tasks wanted (default 100)")
    synth.add_argument("--out", help="output directory (required unless --list-ops)")
    synth.add_argument("--backend", default="auto", choices=["auto", "cuda", "cpu"],
                       help="where the execution filter runs (default: cuda if a GPU is visible, else cpu)")
    synth.add_argument("--seed", type=int, default=0, help="composer seed: the same seed gives the same tasks")
    synth.add_argument("--max-candidates", type=int, help="candidates drawn at most (default 4 * n)")
    synth.add_argument("--min-ops", type=int, default=1, help="fewest operators per task (default 1)")
    synth.add_argument("--max-ops", type=int, default=5, help="most operators per task (default 5)")
    synth.add_argument("--no-transformers", action="store_true",
                       help="leave transformers' modules out of the seed catalogue")
    decontam = synth.add_argument_group("decontamination")
    decontam.add_argument("--kernelbench", help="KernelBench data (default: $CUDA_GYM_KERNELBENCH)")
    decontam.add_argument("--no-kernelbench", action="store_true", help="skip decontamination (not recommended)")
    decontam.add_argument("--ast-threshold", type=float, default=0.9,
                          help="remove tasks whose Model's AST similarity to a KernelBench program reaches this "
                               "(default 0.9)")
    decontam.add_argument("--signature-threshold", type=float, default=1.0,
                          help="remove tasks whose operator-signature similarity reaches this (default 1.0: exact)")
    filt = synth.add_argument_group("execution filter")
    filt.add_argument("--compile-check", default="50",
                      help="'all', or how many kept tasks (a seeded sample) must also pass torch.compile; 0: none "
                           "(default 50)")
    filt.add_argument("--window-ms", type=float, nargs=2, metavar=("LOW", "HIGH"),
                      help="eager-time window on the backend (default 1 100)")
    filt.add_argument("--calibrate-rounds", type=int, default=3,
                      help="batch-size rescales tried for a task outside the window (default 3; 0: none)")
    filt.add_argument("--workers", type=int, help="filter worker processes (default: cores on cpu, up to 8 on cuda)")
    filt.add_argument("--timeout", type=float, default=120.0, help="seconds per task check (default 120)")
    llm = synth.add_argument_group("LLM composer (instead of the rule composer)")
    llm.add_argument("--composer", default="rule", choices=["rule", "llm"], help="default rule")
    llm.add_argument("--base-url", help="OpenAI-compatible API root for --composer llm")
    llm.add_argument("--model", help="model name for --composer llm")
    llm.add_argument("--api-key", help="API key (default: $OPENAI_API_KEY, else 'EMPTY')")
    llm.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    synth.add_argument("--overwrite", action="store_true", help="replace an earlier synthesis output in --out")
    synth.add_argument("--list-ops", action="store_true", help="print the seed catalogue and exit")
    synth.add_argument("--no-progress", action="store_true", help="no progress bars")
    synth.set_defaults(func=run_synth)


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _backend(requested: str) -> str:
    if requested != "auto":
        return requested
    if shutil.which("nvidia-smi") is None:
        return "cpu"
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # asks NVML; no CUDA context here
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _composer(args: argparse.Namespace, catalogue, config):
    if args.composer == "rule":
        from .compose import RuleComposer

        return RuleComposer(catalogue, args.seed, config)
    if not (args.base_url and args.model):
        raise ValueError("--composer llm needs --base-url and --model (an OpenAI-compatible server)")
    from ..chat import open_chat_backend
    from .llm import LLMComposer

    chat = open_chat_backend("openai", base_url=args.base_url, model=args.model, api_key=args.api_key,
                             temperature=args.temperature, max_new_tokens=1024, seed=args.seed)
    return LLMComposer(chat, catalogue, seed=args.seed, config=config)


def run_synth(args: argparse.Namespace) -> int:
    from ..tasks.kernelbench import DataNotFoundError
    from .catalogue import describe_catalogue, seed_catalogue
    from .compose import ComposerConfig
    from .pipeline import OutputExistsError, SynthConfig, synthesize, write_result
    from .pool import WorkerStartError

    catalogue = seed_catalogue(False if args.no_transformers else None)
    if args.list_ops:
        print(describe_catalogue(catalogue))
        return 0
    if not args.out:
        return _error("--out DIR is required (where the task files go)")
    compile_check = args.compile_check if args.compile_check == "all" else None
    if compile_check is None:
        try:
            compile_check = int(args.compile_check)
        except ValueError:
            return _error(f"--compile-check takes 'all' or a count, not {args.compile_check!r}")
    try:
        composer_config = ComposerConfig(min_ops=args.min_ops, max_ops=args.max_ops)
        config = SynthConfig(
            n=args.n, backend=_backend(args.backend), seed=args.seed, max_candidates=args.max_candidates,
            composer=composer_config, include_transformers=False if args.no_transformers else None,
            kernelbench=args.kernelbench, decontaminate=not args.no_kernelbench, ast_threshold=args.ast_threshold,
            signature_threshold=args.signature_threshold, compile_check=compile_check,
            window_ms=tuple(args.window_ms) if args.window_ms else None, calibrate_rounds=args.calibrate_rounds,
            workers=args.workers, task_timeout_s=args.timeout, progress=not args.no_progress)
        composer = _composer(args, catalogue, composer_config)
    except (ValueError, ImportError) as exc:
        return _error(str(exc))
    low, high = config.window
    print(f"cuda-gym synth: {config.n} tasks on {config.backend}, seed {config.seed}, {len(catalogue)} seed operators, "
          f"window {low:g}-{high:g} ms, compile check: {config.compile_check}")
    try:
        result = synthesize(config, composer)
        out = write_result(result, args.out, overwrite=args.overwrite)
    except (DataNotFoundError, OutputExistsError, WorkerStartError) as exc:
        hint = ("\n(or pass --no-kernelbench to skip decontamination)" if isinstance(exc, DataNotFoundError) else "")
        return _error(f"{exc}{hint}")
    print()
    print(f"{'stage':<24} {'count':>7}")
    for stage, count in result.funnel_rows():
        print(f"{stage:<24} {count:>7}")
    print("\noperators per task:")
    histogram = result.op_count_histogram()
    widest = max(histogram.values() or [1])
    for level, count in histogram.items():
        print(f"  {level} op{'s' if level > 1 else ' '} {count:>6}  {'#' * max(0, round(40 * count / widest))}")
    report = result.kernelbench
    if report.get("skipped"):
        print("\ndecontamination: skipped (--no-kernelbench)")
    else:
        print(f"\ndecontamination against {report['tasks']} KernelBench programs ({report['path']}): removed "
              f"{result.funnel.get('contaminated_signature', 0)} by operator signature, "
              f"{result.funnel.get('contaminated_ast', 0)} by AST similarity")
    print(f"\nwrote {len(result.tasks)} tasks to {out} in {result.seconds['total']:.0f} s "
          f"(manifest.json, decontamination.json); load them with load_suite('synth', data_path={str(out)!r})")
    return 0 if len(result.tasks) >= config.n else 1
