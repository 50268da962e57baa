"""`cuda-gym serve [--port P] [--token-file F] [--ray auto|ADDRESS] ...`: the judge as an HTTP service."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_command(commands) -> None:
    from ..cli import add_eval_options, suite_list

    sub = commands.add_parser(
        "serve", help="judge candidates for trainers on other machines (an HTTP service; docs/serving.md)",
        description="Serve the judge over HTTP (FastAPI + uvicorn): trainers submit candidates and collect "
                    "verdicts with `--judge URL` or cuda_gym.eval.remote.RemoteEvaluator. Without a token it "
                    "listens on 127.0.0.1 only; with one, every request needs `Authorization: Bearer <token>`. "
                    "Every verdict is journaled to disk as it is made. Needs the extra: pip install 'cuda_gym[serve]'.")
    sub.add_argument("--host", default=None,
                     help="address to listen on (default 127.0.0.1; another needs a token, e.g. 0.0.0.0)")
    sub.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    sub.add_argument("--token-file", help="bearer tokens, one per line, each a client with its own jobs and queue "
                                          "bound (else $CUDA_GYM_JUDGE_TOKEN, one token)")
    sub.add_argument("--journal", help="folder of the verdict journal (default: $CUDA_GYM_CACHE or "
                                       "~/.cache/cuda_gym, under serve/)")
    sub.add_argument("--suite", action="append", default=None,
                     help=f"a suite whose tasks are judged by id (repeatable; default builtin): {suite_list()}")
    sub.add_argument("--data-path", help="KernelBench / Ops-6K data for --suite")
    sub.add_argument("--allow-task-source", action="store_true",
                     help="also judge tasks sent as source (their reference then runs in this machine's workers, "
                          "as candidates do): needed for tasks outside --suite")
    sub.add_argument("--max-queued-per-client", type=int, default=256, help="jobs of one client not yet judged")
    sub.add_argument("--max-queued", type=int, default=4096, help="jobs of all clients not yet judged")
    sub.add_argument("--max-batch", type=int, default=256, help="jobs in one batch request")
    sub.add_argument("--max-body-mb", type=float, default=8.0, help="largest request body in MB (default 8)")
    sub.add_argument("--openenv", action="store_true",
                     help="serve the text environment (KernelEnv) over OpenEnv's protocol instead of the judge API "
                          "(extra `openenv`); localhost only, since OpenEnv's server has no authentication")
    sub.add_argument("--max-sessions", type=int, default=8, help="with --openenv: concurrent episodes")
    add_eval_options(sub, judge=False)
    sub.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    from ..cli import make_evaluator
    from ..eval.remote import TOKEN_ENV
    from ..tasks import load_suite
    from .jobs import ServiceLimits

    try:
        from .server import LOOPBACK, Service, is_loopback, read_tokens
    except ImportError as exc:
        print(f"error: cuda-gym serve needs FastAPI and uvicorn: pip install 'cuda_gym[serve]' ({exc})", file=sys.stderr)
        return 2
    try:
        tokens = read_tokens(args.token_file) if args.token_file else (
            [os.environ[TOKEN_ENV]] if os.environ.get(TOKEN_ENV) else [])
        kwargs = {"data_path": args.data_path} if args.data_path else {}
        tasks = [task for suite in (args.suite or ["builtin"])
                 for task in load_suite(suite, **(kwargs if suite != "builtin" else {}))]
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    host = args.host or LOOPBACK
    if args.openenv:
        return _serve_openenv(args, host, tokens)
    if not tokens and not is_loopback(host):  # before the evaluator starts: said at once
        print(f"error: --host {host} without a token: a service reachable from other machines needs --token-file "
              f"(or ${TOKEN_ENV}); without one it listens on {LOOPBACK} only", file=sys.stderr)
        return 2
    journal = Path(args.journal) if args.journal else Path(
        os.environ.get("CUDA_GYM_CACHE") or Path.home() / ".cache" / "cuda_gym") / "serve"
    limits = ServiceLimits(max_queued_per_client=args.max_queued_per_client, max_queued=args.max_queued,
                           max_batch=args.max_batch, allow_task_source=args.allow_task_source)
    with make_evaluator(args) as evaluator:
        try:
            service = Service(evaluator, tasks, journal, host=host, port=args.port, tokens=tokens, limits=limits,
                              max_body_bytes=int(args.max_body_mb * (1 << 20)), log_level="info")
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        lost = len(service.journal.lost)
        print(f"cuda-gym serve: judging {len(tasks)} tasks on {evaluator.device_name} ({evaluator.backend}) at "
              f"{service.url}; {'bearer token required' if tokens else 'no token: localhost only'}; journal "
              f"{service.journal.path} ({len(service.journal.entries)} jobs"
              f"{f', {lost} lost unjudged in an earlier run' if lost else ''})", flush=True)
        service.serve_forever()
    return 0


def _serve_openenv(args: argparse.Namespace, host: str, tokens: list[str]) -> int:
    from ..cli import make_evaluator
    from .server import is_loopback

    if tokens or not is_loopback(host):
        print("error: --openenv serves without authentication (OpenEnv's server has none), so on localhost only "
              "and without --token-file; reach it from another machine through an SSH tunnel", file=sys.stderr)
        return 2
    if args.suite and len(args.suite) > 1:
        print("error: --openenv serves one suite", file=sys.stderr)
        return 2
    try:
        from .openenv_env import serve_openenv
    except ImportError as exc:
        print(f"error: --openenv needs openenv-core: pip install 'cuda_gym[openenv]' ({exc})", file=sys.stderr)
        return 2
    suite = (args.suite or ["builtin"])[0]
    env_kwargs = {"suite": suite} | ({"data_path": args.data_path} if args.data_path else {})
    with make_evaluator(args) as evaluator:
        server = serve_openenv(evaluator, port=args.port, max_sessions=args.max_sessions, backend=evaluator.backend,
                               **env_kwargs)
        print(f"cuda-gym serve --openenv: KernelEnv on suite {suite} over OpenEnv at {server.url} (WebSocket /ws), "
              f"judged on {evaluator.device_name}; up to {args.max_sessions} sessions", flush=True)
        server.serve_forever()
    return 0
