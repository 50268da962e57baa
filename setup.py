"""Packaging for cuda_gym. torch is deliberately unpinned: users bring the build that matches their CUDA."""
from setuptools import find_packages, setup

TRITON = ["triton>=3.9"]  # Triton candidates; on the CPU they run in its interpreter (the wheel is ~290 MB)
# CuPy candidates' NVRTC compile checks, which run without a GPU (tests/test_cupy.py): the cupy wheel
# (~67 MB) and libnvrtc (~56 MB; 13.0, the CUDA of the device image's torch cu130 build).
CUPY_COMPILE = ["cupy-cuda13x>=14", "nvidia-cuda-nvrtc~=13.0.0"]
EXTRAS = {
    "test": ["pytest>=7", "pytest-timeout>=2", "import-linter>=2.1", "pyarrow>=12", "openai>=1.30", "matplotlib>=3.5",
             "stable-baselines3>=2.3", "sb3-contrib>=2.3", "trl>=1.16", "transformers>=5.2", "peft>=0.10", "ray>=2.40",
             "fastapi>=0.110", "uvicorn>=0.29",
             *TRITON, *CUPY_COMPILE],
    "triton": TRITON,
    "data": ["pyarrow>=12"],
    "agents": ["openai>=1.30", "transformers>=4.56"],  # agents/llm (4.56: from_pretrained(dtype=))
    "rl": ["stable-baselines3>=2.3", "sb3-contrib>=2.3"],  # agents/schedule_ppo.py
    "rl-llm": ["transformers>=4.50", "peft>=0.10"],  # agents/ppo, agents/rft (peft: LoRA only)
    "plot": ["matplotlib>=3.5"],
    "trl": ["trl>=1.16", "transformers>=5.2"],  # agents/adapters/trl.py (environment_factory needs transformers 5.2)
    "cuda": ["cupy-cuda13x>=13"],  # the CUDA 13 wheel; pick the cupy wheel for your CUDA
    "ray": ["ray>=2.40"],  # cuda_gym/eval/distributed.py: RayEvaluator (docs/scaling.md)
    # cuda_gym/serve: `cuda-gym serve` (docs/serving.md); its client, RemoteEvaluator, needs nothing extra.
    "serve": ["fastapi>=0.110", "uvicorn>=0.29"],
    "openenv": ["openenv-core>=0.3", "fastapi>=0.110", "uvicorn>=0.29"],  # cuda_gym/serve/openenv_env.py
    # agents/adapters/verifiers_env.py and the Hub package cuda_gym_kernel (docs/adapters.md). Not in "test":
    # verifiers 0.4 pins openai<3 and pulls gradio, mcp and the prime-* clients.
    "verifiers": ["verifiers>=0.4,<0.5"],
}
# "all" leaves verifiers out: its openai<3 pin would downgrade a researcher's openai.
EXTRAS["all"] = sorted({dep for name, deps in EXTRAS.items() if name != "verifiers" for dep in deps})

setup(
    name="cuda_gym",
    version="0.1.0",
    description="Gymnasium environments for training agents to write fast, correct GPU kernels",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # csrc/ (native sources: the template library) is installed as the package data cuda_gym/csrc, and
    # the folder agents/ as the package cuda_gym_agents: a top-level `agents` would collide with
    # openai-agents' package of that name. agents/verifiers_hub/cuda_gym_kernel (a folder that is not a
    # package, so find_packages leaves it out) is the verifiers Environments-Hub package cuda_gym_kernel
    # (a taskset id must be a top-level module name).
    packages=(find_packages(include=["cuda_gym", "cuda_gym.*"]) + ["cuda_gym.csrc"]
              + ["cuda_gym_agents"] + [f"cuda_gym_agents.{name}" for name in find_packages("agents")]
              + ["cuda_gym_kernel"]),
    package_dir={"cuda_gym.csrc": "csrc", "cuda_gym_agents": "agents", "cuda_gym_kernel": "agents/verifiers_hub/cuda_gym_kernel"},
    package_data={"cuda_gym.tasks": ["builtin/level*/*.py", "builtin/solutions/*/*/*.py"],
                  "cuda_gym.csrc": ["*.md", "templates/*.h", "templates/*.cuh", "templates/*.hpp"]},
    include_package_data=True,
    install_requires=[
        "torch>=2.4",
        "gymnasium>=0.29",
        "numpy>=1.24",
        "ninja>=1.11",
        "pybind11>=2.11",
        "tqdm>=4.60",
    ],
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": ["cuda-gym=cuda_gym.cli:main"],
        # `cuda-gym` subcommands that live outside the package cuda_gym: each names a module with
        # `add_command(commands)`; the CLI finds them here, so cuda_gym never imports their package.
        "cuda_gym.commands": [
            "agent=cuda_gym_agents.cli",
            "solve=cuda_gym_agents.template_cli",
            "train=cuda_gym_agents.ppo.cli",
        ],
        # Chat backends for cuda_gym's own model calls (`cuda_gym.chat.open_chat_backend`).
        "cuda_gym.chat_backends": ["openai=cuda_gym_agents.llm.openai_chat:chat_backend"],
    },
)
