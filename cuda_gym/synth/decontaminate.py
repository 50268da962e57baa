"""Decontamination against KernelBench: a task whose `Model` is too close to a KernelBench program
is removed, by two tests with their own thresholds.

- AST similarity (`ast_threshold`, default 0.9 as in CUDA Agent): difflib's ratio between the
  normalized AST label sequences of the two `Model` classes (`fingerprint.model_tokens`).
- Operator signature (`signature_threshold`, default 1.0: an exact match): the ratio between the
  two operator sequences (`fingerprint.operator_signature`). An AST threshold misses a bare
  `ConvTranspose2d` written differently from KernelBench's file; the signature does not.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import asdict, dataclass
from ..tasks.task import Task
from .fingerprint import model_tokens, operator_signature, sequence_similarity


@dataclass(frozen=True)
class Match:
    """Why a task was removed: the test ("ast" or "signature"), the KernelBench task, the score."""

    test: str
    kernelbench_id: str
    score: float
    signature: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)


class KernelBenchIndex:
    """KernelBench's programs, fingerprinted once; `match(source)` says whether a task is contaminated."""

    def __init__(self, tasks: list[Task], ast_threshold: float = 0.9, signature_threshold: float = 1.0):
        for name, value in (("ast_threshold", ast_threshold), ("signature_threshold", signature_threshold)):
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        self.ast_threshold = ast_threshold
        self.signature_threshold = signature_threshold
        self.entries: list[tuple[str, list[str], tuple[str, ...]]] = []
        self.by_signature: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for task in tasks:
            try:
                tokens, signature = model_tokens(task.source), operator_signature(task.source)
            except SyntaxError:
                continue
            self.entries.append((task.id, tokens, signature))
            if signature:
                self.by_signature[signature].append(task.id)
        self.signatures = list(self.by_signature)

    @classmethod
    def from_path(cls, path: str | os.PathLike | None = None, **thresholds: float) -> "KernelBenchIndex":
        """KernelBench read from `path` (else $CUDA_GYM_KERNELBENCH) with the `kernelbench` suite's reader;
        raises DataNotFoundError (with what to pass) when neither points at the data."""
        from ..tasks.kernelbench import load_kernelbench

        return cls(load_kernelbench(path), **thresholds)

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, source: str) -> Match | None:
        """The KernelBench program this task is too close to (signature first: it is cheaper), or None."""
        signature = operator_signature(source)
        if signature:
            if self.signature_threshold >= 1.0:
                if signature in self.by_signature:
                    return Match("signature", self.by_signature[signature][0], 1.0, signature)
            else:
                best = None
                for other in self.signatures:
                    score = sequence_similarity(signature, other, self.signature_threshold)
                    if score is not None and (best is None or score > best[0]):
                        best = (score, other)
                if best is not None:
                    return Match("signature", self.by_signature[best[1]][0], round(best[0], 4), signature)
        tokens = model_tokens(source)
        best_ast = None
        for task_id, other_tokens, _ in self.entries:
            score = sequence_similarity(tokens, other_tokens, self.ast_threshold)
            if score is not None and (best_ast is None or score > best_ast[0]):
                best_ast = (score, task_id)
        if best_ast is not None:
            return Match("ast", best_ast[1], round(best_ast[0], 4), signature)
        return None
