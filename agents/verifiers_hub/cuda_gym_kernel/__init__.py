"""cuda_gym's kernel-writing environment as a verifiers (>= 0.4) Environments-Hub package: taskset id
`cuda_gym_kernel`. verifiers imports this module by that id and takes the `Taskset` and `Env`
subclasses of `__all__`; the implementation is `cuda_gym_agents.adapters.verifiers_env`.

    import verifiers.v1 as vf
    env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": "cuda_gym_kernel", "backend": "cuda"}}))
    # or: from cuda_gym_kernel import load_environment; env = load_environment(backend="cuda")
"""
from cuda_gym_agents.adapters.verifiers_env import (KernelTask, KernelTaskData, KernelTaskset, KernelTasksetConfig,
                                                    KernelVerifiersEnv, KernelVerifiersEnvConfig, load_environment)

__all__ = ["KernelTask", "KernelTaskData", "KernelTaskset", "KernelTasksetConfig", "KernelVerifiersEnv",
           "KernelVerifiersEnvConfig", "load_environment"]
