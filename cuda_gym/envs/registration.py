"""Gymnasium IDs of cuda_gym's environments. Registration is data: an ID is a suite plus levels.

Versioning (Gymnasium's rule): an ID's behaviour is frozen. Any change in what an episode rewards
or how a candidate is timed or judged (reward function or mode, timing protocol, correctness
tolerances, the action protocol, the default policy) bumps every affected ID's version suffix
(`-v1` -> `-v2`). The old ID is removed, not kept under a changed meaning: gymnasium then answers
`gym.make` of it with `DeprecatedEnv` naming the current version, and an ID without a version with
the latest one (and a warning).

v1: timed calls are held to the correctness trials' tolerances, global switches are watched, and a
degenerate task pays at most 1 (milestone) or 0 (log_speedup); v0 rewarded without these.
"""
from __future__ import annotations

from typing import Any

ENTRY_POINT = "cuda_gym.envs.kernel_env:KernelEnv"

ENV_SPECS: dict[str, dict[str, Any]] = {
    # KernelBench's levels (local data: data_path=... or $CUDA_GYM_KERNELBENCH)
    "CudaKernel-L1-v1": {"suite": "kernelbench", "levels": (1,)},
    "CudaKernel-L2-v1": {"suite": "kernelbench", "levels": (2,)},
    "CudaKernel-L3-v1": {"suite": "kernelbench", "levels": (3,)},
    # CUDA Agent's synthesized training operators (data_path=... or $CUDA_GYM_OPS6K)
    "CudaKernel-Ops6K-v1": {"suite": "ops6k"},
    # tasks written by `cuda-gym synth --out DIR` (data_path=DIR or $CUDA_GYM_SYNTH)
    "CudaKernel-Synth-v1": {"suite": "synth"},
    # the tasks that ship with cuda_gym
    "CudaKernel-Builtin-v1": {"suite": "builtin"},
    "CudaKernel-Builtin-L1-v1": {"suite": "builtin", "levels": (1,)},
    "CudaKernel-Builtin-L2-v1": {"suite": "builtin", "levels": (2,)},
    "CudaKernel-Builtin-L3-v1": {"suite": "builtin", "levels": (3,)},
}

# Shared by every ID above (override any of them as gym.make keyword arguments).
DEFAULT_KWARGS: dict[str, Any] = {"reward": "milestone", "reward_mode": "per_step", "max_turns": 8}

# Schedule environments (MultiDiscrete knobs of the csrc/ templates; see schedule_env.py).
SCHEDULE_ENTRY_POINT = "cuda_gym.envs.schedule_env:ScheduleEnv"
SCHEDULE_ENV_SPECS: dict[str, dict[str, Any]] = {
    "CudaSchedule-Builtin-v1": {"suite": "builtin"},
    "CudaSchedule-L1-v1": {"suite": "kernelbench", "levels": (1,)},
    "CudaSchedule-L2-v1": {"suite": "kernelbench", "levels": (2,)},
}
SCHEDULE_DEFAULT_KWARGS: dict[str, Any] = {"reward": "log_speedup", "episode_steps": 1}

# The CUDA Agent workspace: one tool call per turn in a per-episode workdir (see workspace_env.py).
WORKSPACE_ENTRY_POINT = "cuda_gym.envs.workspace_env:WorkspaceEnv"
WORKSPACE_ENV_SPECS: dict[str, dict[str, Any]] = {
    "CudaKernelWorkspace-L1-v1": {"suite": "kernelbench", "levels": (1,)},
    "CudaKernelWorkspace-L2-v1": {"suite": "kernelbench", "levels": (2,)},
    "CudaKernelWorkspace-L3-v1": {"suite": "kernelbench", "levels": (3,)},
    "CudaKernelWorkspace-Ops6K-v1": {"suite": "ops6k"},
    "CudaKernelWorkspace-Synth-v1": {"suite": "synth"},
    "CudaKernelWorkspace-Builtin-v1": {"suite": "builtin"},
}
# The best judged result of the episode (CUDA Agent's scoring); every tool call is a turn.
WORKSPACE_DEFAULT_KWARGS: dict[str, Any] = {"reward": "milestone", "reward_mode": "final", "max_turns": 40}


def register_envs() -> None:
    """Register the IDs with gymnasium; idempotent and cheap (imports no torch, starts nothing)."""
    from gymnasium.envs.registration import register, registry

    for env_id, kwargs in ENV_SPECS.items():
        if env_id in registry:
            continue
        register(
            id=env_id,
            entry_point=ENTRY_POINT,
            kwargs={**DEFAULT_KWARGS, **kwargs},
            # Timings vary run to run, so the same action can get different feedback and reward.
            nondeterministic=True,
        )
    for env_id, kwargs in SCHEDULE_ENV_SPECS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=SCHEDULE_ENTRY_POINT, kwargs={**SCHEDULE_DEFAULT_KWARGS, **kwargs},
                     nondeterministic=True)
    for env_id, kwargs in WORKSPACE_ENV_SPECS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=WORKSPACE_ENTRY_POINT, kwargs={**WORKSPACE_DEFAULT_KWARGS, **kwargs},
                     nondeterministic=True)
