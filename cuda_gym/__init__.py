"""cuda_gym: Gymnasium environments for training agents to write fast, correct GPU kernels."""
__version__ = "0.1.0"

from . import tasks  # noqa: E402
from .envs.registration import register_envs  # noqa: E402

register_envs()
