"""How a candidate is judged: parse, build, run in a worker, check, time, reward."""
from .candidate import Candidate, InvalidCandidate, parse_candidate
from .config import EvalConfig
from .interface import EvaluatorInterface
from .result import ErrorCode, EvalResult, TimingStats, TrialResult
from .reward import get_reward, log_speedup_reward, milestone_reward


def __getattr__(name: str):
    # The Evaluator imports torch (over a second): import it on first use only, so that parsing a
    # candidate or reading a result (`cuda-gym eval` answering INVALID_ACTION) does not wait for it.
    if name == "Evaluator":
        from .evaluator import Evaluator

        return Evaluator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Candidate", "ErrorCode", "EvalConfig", "EvalResult", "Evaluator", "EvaluatorInterface", "InvalidCandidate",
    "TimingStats", "TrialResult", "get_reward", "log_speedup_reward", "milestone_reward", "parse_candidate",
]
