"""Soak on the real benchmark: many mixed candidates through one Evaluator, each with its expected verdict.

The mix (seeded, weighted): KernelBench level-2 references submitted as their own candidate
(`class ModelNew(Model): pass`, permissive policy: OK) and the same with every output element moved
up by 0.01 + 1% of its size (INCORRECT); the built-in suite's shipped solutions (strict: OK); a compile error and a malformed
action; and every hostile file of the backend's catalogue (tests/hostile/<backend>_*.py: illegal
address, device trap, out of memory, hanging kernel, races, laundering, tampering, ...) with the
verdict its header declares (files marked KNOWN_GAP or needing what this evaluator lacks are left
out). Afterwards: no process of the run left alive, no compute process left on the GPU, the GPU's
used memory back where it started, and the driver's memory flat.

    CUDA_GYM_KERNELBENCH=.kb python benchmarks/gpu_soak.py --n 1000 --out $OUT            # an H200 host
    CUDA_GYM_KERNELBENCH=.kb python benchmarks/gpu_soak.py --n 400 --resume --out $OUT    # in pieces
    python benchmarks/gpu_soak.py --resume <a partial soak JSON> --out $OUT

A run cut short keeps its verdicts (the JSON is rewritten every 25 verdicts); `--resume` reads the
file (this run's output file, or the one named) and judges only the plan's indices it does not hold
yet (the plan depends on --seed and --n only) or holds for a candidate that has changed since (each
verdict names its candidate's digest; the old verdict is kept under "superseded"). Writes gpu_soak_<backend>_<date>.json into --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cuda_gym.eval import EvalConfig, Evaluator  # noqa: E402
from cuda_gym.tasks import get_task, load_suite, solution_path  # noqa: E402
from tests.leaks import leaked, snapshot  # noqa: E402  (reads /proc; tags this process first)
from tests.test_hostile import HOSTILE_DIR, NOT_FASTER, header  # noqa: E402

# Light timing and no baselines: the soak checks verdicts and leaks, not speed.
SOAK_CONFIG = EvalConfig(baselines=(), baseline_workers=1, correctness_trials=3, timing_reps=3,
                         timing_min_reps=2, warmup_reps=1, timing_budget_s=0.05, timing_warmup_s=0.0,
                         eval_timeout_s=30.0, compile_timeout_s=120.0)
IDENTITY = "\n\nclass ModelNew(Model):\n    pass\n"
# Every output element moved by at least 0.01 and at least 1% of itself, beyond the fp32 tolerance: a
# scale alone leaves a constant-zero output unchanged, and an affine map has a fixed point that a clamp
# can sit on, so either could pass (rightly) on a degenerate task.
WRONG = ("\n\nclass ModelNew(Model):\n    def forward(self, *inputs):\n"
         "        out = super().forward(*inputs)\n        return out + 0.01 * (1 + out.abs())\n")


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    task_id: str
    source: str
    expected: str  # an ErrorCode name, or OK_NOT_FASTER (judged as OK here)
    policy: str
    weight: float

    @property
    def digest(self) -> str:
        """What the verdict judged and expected: the candidate, its task, policy and expected verdict
        (a verdict given for another at the same plan index is judged again on resume)."""
        return hashlib.sha256(json.dumps([self.name, self.task_id, self.expected, self.policy, self.source]).encode()
                              ).hexdigest()[:16]


def kinds(backend: str, held_timing: bool) -> list[Kind]:
    out: list[Kind] = []
    level2 = load_suite("kernelbench", levels=(2,))
    for task in level2:
        out.append(Kind("kernelbench_identity", task.id, task.source + IDENTITY, "OK", "permissive", 3 / len(level2)))
        out.append(Kind("kernelbench_wrong", task.id, task.source + WRONG, "INCORRECT", "permissive", 1.5 / len(level2)))
    builtin = [t for t in load_suite("builtin") if solution_path(t, backend) is not None]
    for task in builtin:
        out.append(Kind("builtin_solution", task.id, solution_path(task, backend).read_text(), "OK", "strict",
                        3 / len(builtin)))
    gelu = "builtin/L1/gelu"
    out.append(Kind("compile_error", gelu, solution_path(get_task(gelu), backend).read_text().replace(
        "extern \"C\"", "extern \"C\" this is not C++;", 1), "COMPILE_ERROR", "strict", 0.3))
    out.append(Kind("invalid_action", gelu, "def forward(:", "INVALID_ACTION", "strict", 0.2))
    hostile = []
    for path in sorted(HOSTILE_DIR.glob(f"{backend}_*.py")):
        fields = header(path)
        if "known_gap" in fields or (fields.get("needs") == "held_timing" and not held_timing):
            continue
        if "__CUDA_GYM_TEST_PORT__" in path.read_text():
            continue  # needs the test's listener
        hostile.append((path, fields))
    for path, fields in hostile:
        expected = "OK" if fields["expected"] == NOT_FASTER else fields["expected"]
        out.append(Kind(f"hostile:{path.stem}", fields["task"], path.read_text(), expected, "strict",
                        2.0 / max(1, len(hostile))))
    return out


def gpu_state() -> dict:
    """Used memory and compute processes on the GPU, from nvidia-smi (empty where there is none)."""
    if not shutil.which("nvidia-smi"):
        return {}
    query = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                          capture_output=True, text=True)
    return {"memory_used_mib": [int(v) for v in query.stdout.split() if v.strip().isdigit()],
            "compute_apps": [line.strip() for line in apps.stdout.splitlines() if line.strip()]}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--in-flight", type=int, default=16, help="submissions queued at once")
    parser.add_argument("--resume", nargs="?", const="", default=None, metavar="FILE",
                        help="keep the verdicts already in FILE (default: this run's output file) and judge the rest")
    parser.add_argument("--max-minutes", type=float, default=9.0, help="stop submitting after this long")
    parser.add_argument("--out", default=str(ROOT / "cuda_gym_results"))
    args = parser.parse_args()
    out = Path(args.out) / f"gpu_soak_{args.backend}_{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    source = Path(args.resume) if args.resume else out
    if args.resume and not source.exists():
        parser.error(f"--resume {source}: no such file")
    previous = json.loads(source.read_text()) if args.resume is not None and source.exists() else {}
    rows: dict[int, dict] = {int(k): v for k, v in previous.get("verdicts", {}).items()}
    for row in rows.values():  # verdicts written before each named its device: the file's device then
        row.setdefault("device", previous.get("device"))

    started = time.monotonic()
    gpu_before = gpu_state()
    processes_before = snapshot()
    with Evaluator(args.backend, SOAK_CONFIG) as evaluator:
        mix = kinds(args.backend, evaluator.held_timing)
        rng = random.Random(args.seed)
        plan = rng.choices(range(len(mix)), weights=[k.weight for k in mix], k=args.n)
        # A verdict stands only for the candidate it judged: one whose Kind.digest has changed since (or
        # that predates the digest, or lies outside this plan) is kept aside under "superseded", with why.
        superseded = dict(previous.get("superseded", {}))
        stale = [i for i, row in rows.items() if i >= args.n or row.get("digest") != mix[plan[i]].digest]
        for index in stale:
            row = rows.pop(index)
            why = ("outside this plan of --n" if index >= args.n else "the candidate changed since" if row.get("digest")
                   else "judged before verdicts named their candidate")
            superseded.setdefault(str(index), []).append({**row, "why": why})
        todo = [i for i in range(args.n) if i not in rows]
        kept_from_file = len(rows)
        if stale:
            print(f"{len(stale)} earlier verdicts superseded (their candidate changed)", flush=True)
        # SIGTERM (a `timeout` around the run): stop submitting, write what is judged now, and keep the
        # verdicts of the evaluations already running as they finish.
        stopping: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
        print(f"{len(mix)} kinds, plan of {args.n}, {len(todo)} to judge", flush=True)
        rss_start = rss_mb()

        def write(final: dict | None = None) -> None:
            wrong = {i: r for i, r in rows.items() if r["got"] != r["expected"]}
            counts: dict[str, dict[str, int]] = {}
            for r in rows.values():
                group = r["kind"].split(":")[0]
                entry = counts.setdefault(group, {"judged": 0, "as_expected": 0})
                entry["judged"] += 1
                entry["as_expected"] += r["got"] == r["expected"]
            payload = {"date": dt.date.today().isoformat(), "backend": args.backend,
                       "device": evaluator.device_name,  # this run's; each verdict names its own
                       "n": args.n, "seed": args.seed, "judged": len(rows), "wrong_verdicts": len(wrong),
                       "by_kind": counts, "wrong": {str(i): r for i, r in sorted(wrong.items())[:50]},
                       "seconds_this_run": round(time.monotonic() - started, 1),
                       "config": dataclasses.asdict(SOAK_CONFIG), **(final or {}),
                       "verdicts": {str(i): r for i, r in sorted(rows.items())}, "superseded": superseded}
            out.write_text(json.dumps(payload, indent=1))

        pending: dict = {}
        queue = list(todo)
        deadline = started + 60 * args.max_minutes
        while queue or pending:
            if stopping and queue:
                queue.clear()
                for future in [f for f in pending if f.cancel()]:  # not started yet
                    pending.pop(future)
                write({"interrupted": "SIGTERM"})
                print(f"SIGTERM: {len(rows)} verdicts written, {len(pending)} evaluations finishing", flush=True)
            while queue and len(pending) < args.in_flight and time.monotonic() < deadline:
                index = queue.pop(0)
                kind = mix[plan[index]]
                hostile = kind.name.startswith("hostile")
                # KernelBench's level-2 sizes take minutes per evaluation on a small CPU: there the
                # run is a smoke of the machinery, with a long timeout for those tasks.
                slow_here = args.backend == "cpu" and kind.name.startswith("kernelbench")
                config = SOAK_CONFIG.replace(policy=kind.policy,
                                             eval_timeout_s=20.0 if hostile else 600.0 if slow_here else 30.0,
                                             compile_timeout_s=30.0 if hostile else 120.0)
                pending[evaluator.submit(get_task(kind.task_id), kind.source, config=config)] = (index, kind)
            if time.monotonic() >= deadline:
                queue.clear()
            if not pending:
                break
            done, _ = wait(list(pending), timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                index, kind = pending.pop(future)
                result = future.result()
                rows[index] = {"kind": kind.name, "task_id": kind.task_id, "expected": kind.expected,
                               "got": result.error_code.value, "message": result.message[:200],
                               "device": evaluator.device_name, "digest": kind.digest,
                               # where a verdict's time goes: the build and the eval worker
                               "build_s": result.compile_seconds, "eval_s": result.eval_seconds}
                if rows[index]["got"] != kind.expected:
                    print(f"#{index} {kind.name}: {result.error_code.value} (expected {kind.expected}): "
                          f"{result.message[:160]}", flush=True)
                if len(rows) % 25 == 0 or stopping:
                    print(f"{len(rows)}/{args.n} judged ({time.monotonic() - started:.0f} s)", flush=True)
                    write({"interrupted": "SIGTERM"} if stopping else None)
        rss_end = rss_mb()
    leftovers = leaked(processes_before, str(evaluator.cache_dir))
    time.sleep(2)
    gpu_after = gpu_state()
    final = {"complete": len(rows) == args.n, **({"interrupted": "SIGTERM"} if stopping else {}),
             "processes_left": leftovers, "gpu_before": gpu_before,
             "gpu_after": gpu_after, "driver_rss_mb": [round(rss_start), round(rss_end)],
             "judged_this_run": len(rows) - kept_from_file,  # not len(todo): a run stopped by --max-minutes judges fewer
             "per_minute_this_run": round(60 * (len(rows) - kept_from_file) / max(1e-9, time.monotonic() - started), 1)}
    write(final)
    print(json.dumps({k: v for k, v in json.loads(out.read_text()).items() if k not in ("verdicts", "config")},
                     indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
