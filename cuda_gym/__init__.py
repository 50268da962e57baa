"""cuda_gym: Gymnasium environments for training agents to write fast, correct GPU kernels."""
__version__ = "0.1.0"

from . import tasks  # noqa: E402
