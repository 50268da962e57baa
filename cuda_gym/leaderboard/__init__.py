"""The leaderboard: judge one candidate per task under a hidden seed; report pass rate, fast_p and
geomean speedups per level, as JSON, markdown and plots (docs/leaderboard.md).

- `read_submissions(path, tasks)`: a folder (`L<level>/<name>.py`, `level<level>/<name>.py`) or a
  rollout's `trajectories.jsonl` (best of each trajectory);
- `run_leaderboard(submissions, tasks, evaluator, seed=None)`: the record (secret seed by default);
- `write_leaderboard(record, out_dir, compare=None)`: leaderboard.json, leaderboard.md, PNGs;
- `leaderboard_metrics(rows)`: the metrics alone; `load_leaderboard(path)` reads a record back.

The `cuda-gym leaderboard` command is `cuda_gym.leaderboard.command`.
"""
from .metrics import FAST_P_THRESHOLDS, Row, group_metrics, leaderboard_metrics, rows_of
from .run import draw_secret_seed, load_leaderboard, run_leaderboard, write_leaderboard
from .submissions import Submission, SubmissionError, Submissions, read_submissions

__all__ = ["FAST_P_THRESHOLDS", "Row", "group_metrics", "leaderboard_metrics", "draw_secret_seed",
           "load_leaderboard", "rows_of", "run_leaderboard", "write_leaderboard", "Submission", "SubmissionError",
           "Submissions", "read_submissions"]
