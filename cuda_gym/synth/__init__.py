"""Task synthesis (CUDA Agent's data pipeline as a command): seed operators, composition, execution
filter, decontamination against KernelBench, deduplication. See docs/synthesis.md.

Importing this package is cheap (no torch); the filter's torch work runs in worker processes.
"""
from .catalogue import PlanError, SeedOp, seed_catalogue
from .compose import ComposerConfig, RuleComposer, SizingConfig, TaskPlan, build_plan
from .decontaminate import KernelBenchIndex
from .fingerprint import model_tokens, normalized_hash, operator_signature
from .pipeline import SynthConfig, SynthResult, synthesize, write_result
from .render import render

__all__ = ["ComposerConfig", "KernelBenchIndex", "PlanError", "RuleComposer", "SeedOp", "SizingConfig", "SynthConfig",
           "SynthResult", "TaskPlan", "build_plan", "model_tokens", "normalized_hash", "operator_signature", "render",
           "seed_catalogue", "synthesize", "write_result"]
