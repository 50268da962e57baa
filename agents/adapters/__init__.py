"""Plug-ins for other trainers' rollout loops (docs/adapters.md).

- `cuda_gym_agents.adapters.trl`: Hugging Face TRL's `GRPOTrainer`: an `environment_factory` whose
  environments expose a `submit_kernel(source)` tool, and a single-turn reward function;
- `cuda_gym_agents.adapters.verl`: a verl agent loop (`AgentLoopBase`, registered as "cuda_gym_agent") that
  plays a `KernelEnv` episode per sample.

Neither module imports its trainer at import time.
"""
