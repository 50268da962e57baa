"""Gymnasium environments: `KernelEnv` and its registered IDs (see docs/environment.md)."""
from .registration import ENV_SPECS, register_envs


def __getattr__(name: str):
    # KernelEnv pulls in gymnasium spaces and the evaluator's modules: import it on first use only,
    # so that `import cuda_gym` (which registers the IDs) stays cheap.
    if name in ("CompactResultInfo", "KernelEnv", "compact_result", "result_from_info"):
        from . import kernel_env

        return getattr(kernel_env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENV_SPECS", "CompactResultInfo", "KernelEnv", "compact_result", "register_envs", "result_from_info"]
