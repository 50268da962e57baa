"""The template agent over KernelBench levels 1+2 and the built-in suite on one GPU, in a fixed time.

    CUDA_GYM_KERNELBENCH=.kb timeout 590 python3 benchmarks/template_agent.py --time-budget 480 --out $OUT

Phase A (correctness): every task the templates cover gets its default configuration, judged with the
check judge (`EvalConfig.for_check()`: the full correctness trials, no baselines, one timed call, no warm-up;
the same settings as `KernelEnv`'s `check` command). No baseline worker starts, so a verdict costs
one warm eval worker on the device. All candidates are queued at once, in an order that alternates
suites and levels (so a cut run still covers each), and the build workers overlap the device.
Phase A ends when every covered task is judged or at `--phase-a-share` of the budget, whichever
comes first. Phase B (speed): the candidates phase A found correct are judged again (their builds
are cached) with the recommended judge, `EvalConfig()` (eager and torch.compile baselines, each
timed in the evaluator's default fresh baseline workers, the full timing), one task at a time in the
same alternating order, until the budget ends; then, if time is left, `--tune` random configurations
per task compete with the default under the phase B judge. Results are written after every verdict,
so a run cut by its time limit keeps everything it measured.

A run cut by the device's time limit continues with `--resume <its JSON>`: verdicts for the
configurations judged now are kept when the candidate's text is the same (its sha256 is in the row),
and the evaluator's baseline cache ($CUDA_GYM_CACHE/baselines.json), carried along, saves the
baselines already measured.

What the JSON means: "correct" is phase A's check verdict; every speedup comes from a phase B
verdict (phase A times one call against no baseline, so it reports `a_check_ms`, never a speedup).

    <out>/template_agent_<backend>_<date>.json: per task the plan (stage kinds) or why it is not
    covered; phase A's verdict and its one timed call; phase B's verdict, speedups vs eager and
    vs torch.compile and candidate median; and per suite and level: tasks, covered, judged, correct,
    phase B's count and geomeans vs eager and vs compile over the same tasks.

Budget: on an H200 the device is the limit (builds of 8 workers stay ahead of it). Phase A costs
about 1.5 s per verdict, so a 480 s budget with phase A capped at 0.75 of it judges every covered
task; phase B measures both baselines in fresh workers at about 15-25 s per task. The measured run
is in docs/template-agent.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

from cuda_gym.schedule.sweep import run_sweep, summarize


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-budget", type=float, default=480.0, help="seconds for the whole run (default 480)")
    parser.add_argument("--phase-a-share", type=float, default=0.75,
                        help="the most of the budget phase A may use; phase B starts when phase A is done "
                             "(default 0.75)")
    parser.add_argument("--tune", type=int, default=3, help="random configurations per task after phase B (default 3)")
    parser.add_argument("--kernelbench", default=os.environ.get("CUDA_GYM_KERNELBENCH"),
                        help="KernelBench data (default $CUDA_GYM_KERNELBENCH); without it only the built-in suite")
    parser.add_argument("--levels", default="1,2", help="KernelBench levels (default 1,2)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many tasks per suite (0: all)")
    parser.add_argument("--out", default=os.environ.get("OUT") or "cuda_gym_results")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--resume", default=None,
                        help="an earlier result JSON: its verdicts for the configurations judged now are kept")
    args = parser.parse_args()
    previous = None
    if args.resume:
        try:
            previous = json.loads(Path(args.resume).read_text())["tasks"]
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--resume {args.resume}: not a template agent result ({exc})")
    if not 0.0 < args.phase_a_share <= 1.0:
        parser.error("--phase-a-share must be in (0, 1]")
    started = time.monotonic()

    from cuda_gym.eval import EvalConfig, Evaluator
    from cuda_gym.tasks import load_suite

    tasks = load_suite("builtin")
    if args.limit:
        tasks = tasks[:args.limit]
    if args.kernelbench:
        if not Path(args.kernelbench).exists():
            parser.error(f"KernelBench data not found at {args.kernelbench} (pass --kernelbench or set "
                         "$CUDA_GYM_KERNELBENCH to the folder holding KernelBench/level1...)")
        kb = load_suite("kernelbench", levels=tuple(int(x) for x in args.levels.split(",")),
                        data_path=args.kernelbench)
        tasks += kb[:args.limit] if args.limit else kb
    else:
        print("no KernelBench data (--kernelbench or $CUDA_GYM_KERNELBENCH): built-in suite only", flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / f"template_agent_{args.backend}_{dt.datetime.now():%Y-%m-%d_%H%M}.json"
    judge = EvalConfig()
    meta = {"date": dt.datetime.now().isoformat(timespec="seconds"), "backend": args.backend,
            "time_budget_s": args.time_budget, "phase_a_share": args.phase_a_share, "host": platform.node(),
            "python": platform.python_version(),
            "phase_a_config": dataclasses.asdict(judge.for_check()),
            "phase_b_config": dataclasses.asdict(judge), "resumed_from": args.resume}

    def write(phase: str, rows: dict) -> None:
        payload = {**meta, "phase": phase, "elapsed_s": round(time.monotonic() - started, 1),
                   "summary": summarize(rows), "tasks": rows}
        tmp = out_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=1))
        os.replace(tmp, out_path)

    with Evaluator(args.backend, judge) as evaluator:
        meta["device"] = evaluator.device_name
        meta["torch"] = evaluator.torch_version
        meta["build_workers"] = evaluator.build_workers
        remaining = args.time_budget - (time.monotonic() - started)
        rows = run_sweep(evaluator, tasks, backend=args.backend, time_budget_s=remaining,
                         phase_a_share=args.phase_a_share, tune=args.tune, judge_config=judge, write=write,
                         log=lambda line: print(line, flush=True), previous=previous)
    write("done", rows)
    for name, entry in summarize(rows).items():
        print(f"{name:<16} tasks {entry['tasks']:>3} covered {entry['covered']:>3} judged {entry['judged']:>3} "
              f"correct {entry['correct']:>3} | timed {entry['b_correct']:>3} geomean vs eager "
              f"{entry['geomean_speedup_vs_eager']} vs compile {entry['geomean_speedup_vs_compile']} "
              f"(over {entry['compile_measured']})", flush=True)
    print(f"wrote {out_path} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
