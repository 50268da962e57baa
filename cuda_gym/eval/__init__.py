"""How a candidate is judged: parse, build, run in a worker, check, time, reward."""
from .candidate import Candidate, InvalidCandidate, parse_candidate
from .config import EvalConfig
from .evaluator import Evaluator
from .result import ErrorCode, EvalResult, TimingStats, TrialResult
from .reward import get_reward, log_speedup_reward, milestone_reward

__all__ = [
    "Candidate", "ErrorCode", "EvalConfig", "EvalResult", "Evaluator", "InvalidCandidate", "TimingStats",
    "TrialResult", "get_reward", "log_speedup_reward", "milestone_reward", "parse_candidate",
]
