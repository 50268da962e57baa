"""The result JSON has one shape: every key for every verdict, None where nothing was measured, and
`EvalResult.from_dict` reads the JSON of older schema versions."""
from __future__ import annotations

import json

import pytest

from cuda_gym.eval import ErrorCode, EvalResult
from cuda_gym.eval.result import RESULT_SCHEMA_VERSION, result_keys
from cuda_gym.tasks import get_task, solution_path

from .helpers import CORRECT_BODY, GELU_TASK, native_candidate

TIMING_KEYS = {"median_ms", "min_ms", "max_ms", "iqr_ms", "reps", "method", "detail"}
# Fields that hold a measurement: None exactly when that measurement was not taken.
MEASURED = ("max_abs_error", "max_rel_error", "rel_norm_error", "candidate_time", "eager_time", "compile_time",
            "speedup_vs_eager", "speedup_vs_compile")


@pytest.fixture(scope="module")
def verdicts(cpu_evaluator) -> dict[ErrorCode, EvalResult]:
    softmax, gelu = get_task("builtin/L1/softmax"), get_task(GELU_TASK)
    return {
        ErrorCode.OK: cpu_evaluator.evaluate(softmax, solution_path(softmax, "cpu").read_text()),
        ErrorCode.INCORRECT: cpu_evaluator.evaluate(gelu, native_candidate("for (int64_t i = 0; i < n; ++i) y[i] = x[i];")),
        ErrorCode.COMPILE_ERROR: cpu_evaluator.evaluate(gelu, native_candidate("this is not C++;")),
        ErrorCode.INVALID_ACTION: cpu_evaluator.evaluate(gelu, "class ModelNew(:\n    pass\n"),
    }


@pytest.mark.parametrize("code", [ErrorCode.OK, ErrorCode.INCORRECT, ErrorCode.COMPILE_ERROR, ErrorCode.INVALID_ACTION])
def test_every_key_is_present_for_every_verdict(verdicts, code):
    result = verdicts[code]
    assert result.error_code is code, (result.error_code, result.message)
    data = json.loads(result.to_json())
    assert list(data) == list(result_keys())
    assert data["schema_version"] == RESULT_SCHEMA_VERSION and data["error_code"] == code.value
    for key in ("candidate_time", "eager_time", "compile_time"):
        assert data[key] is None or set(data[key]) == TIMING_KEYS, key
    assert EvalResult.from_dict(data) == result


def test_unmeasured_values_are_none_and_measured_ones_are_not(verdicts):
    ok, invalid = verdicts[ErrorCode.OK].to_dict(), verdicts[ErrorCode.INVALID_ACTION].to_dict()
    assert all(invalid[key] is None for key in MEASURED)
    # TEST_CONFIG measures the eager baseline only: no torch.compile time, so no speedup against it.
    assert ok["compile_time"] is None and ok["speedup_vs_compile"] is None
    assert all(ok[key] is not None for key in MEASURED if key not in ("compile_time", "speedup_vs_compile"))
    incorrect = verdicts[ErrorCode.INCORRECT].to_dict()
    # The worst errors are summed up for a correct candidate only; a wrong one's are in its trials.
    assert any(not t["passed"] and t["max_abs_error"] > 0 for t in incorrect["trials"])
    assert incorrect["speedup_vs_eager"] is None and incorrect["candidate_time"] is None


def test_older_result_json_is_read():
    older = {  # schema 4 had reference_time_in_worker (gone since 7); keys left out take their defaults
        "schema_version": 4, "task_id": "builtin/L1/softmax", "backend": "cpu", "error_code": "OK",
        "correct": True, "compiled": True, "speedup_vs_eager": 1.5, "reference_time_in_worker": {"median_ms": 1.0},
        "candidate_time": {"median_ms": 1.0, "min_ms": 0.9, "max_ms": 1.2, "iqr_ms": 0.1, "reps": 5, "method": "wall"},
        "trials": [{"distribution": "task", "passed": True, "max_abs_error": 0.0, "max_rel_error": 0.0,
                    "rel_norm_error": 0.0}],
    }
    result = EvalResult.from_dict(older)
    assert result.ok and result.speedup_vs_eager == 1.5 and result.schema_version == 4
    assert result.candidate_time.detail == {} and result.device_memory == {} and result.speedup_vs_compile is None
    assert result.trials[0].passed


def test_a_newer_result_json_is_refused_with_what_to_do():
    newer = EvalResult("builtin/L1/softmax", "cpu", ErrorCode.OK).to_dict() | {"schema_version": RESULT_SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match="upgrade cuda_gym"):
        EvalResult.from_dict(newer)
