"""What leaves a worker about one forward's outputs: plain tensors only (a subclass could defer its
work), each output whole when small, else a sample at seeded positions and, for a candidate, its
error statistics against the reference computed here."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .correctness import ToleranceFloor, flatten_outputs, output_stats

FULL_COMPARE_MAX_ELEMENTS = 1 << 20  # larger outputs are compared on the device, and sampled
SAMPLE_SIZE = 8192


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if type(value) not in _PLAIN_TENSORS:  # a subclass can defer its work
            raise TypeError(f"forward returned a tensor subclass ({type(value).__name__}); outputs must be "
                            "plain torch.Tensor objects")
        return value.detach()
    if type(value) in (bool, int, float):  # exactly: a subclass's __float__ would be the candidate's code
        return torch.tensor(value)
    raise TypeError(f"forward returned a {type(value).__name__}; outputs must be tensors or numbers")


def sample_positions(numel: int, seed: int, device: Any) -> torch.Tensor:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randint(0, numel, (SAMPLE_SIZE,), generator=generator, device=device)


def host_array(tensor: torch.Tensor) -> np.ndarray:
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return tensor.cpu().contiguous().numpy()


def describe_outputs(output: Any, sample_seed: int, reference: list[torch.Tensor] | None = None, config: Any = None,
                     floors: list[ToleranceFloor | None] = ()) -> tuple[list[np.ndarray], list[dict]]:
    """What leaves the worker about one forward's outputs: each output whole when small, else a
    sample at seeded positions plus (for a candidate) its error statistics computed here, with
    each output's widened tolerances where the reference is rounding noise (`floors`)."""
    arrays, specs = [], []
    for index, value in enumerate(flatten_outputs(output)):
        tensor = as_tensor(value)
        spec: dict[str, Any] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", ""),
                                "full": tensor.numel() <= FULL_COMPARE_MAX_ELEMENTS}
        if spec["full"]:
            arrays.append(host_array(tensor))
        else:
            positions = sample_positions(tensor.numel(), sample_seed + index, tensor.device)
            arrays.append(host_array(tensor.reshape(-1)[positions]))
            if reference is not None and index < len(reference):
                ref = reference[index]
                if tuple(ref.shape) == tuple(tensor.shape) and ref.dtype == tensor.dtype:
                    spec["stats"] = output_stats(tensor, ref, config, floors[index] if index < len(floors) else None)
        specs.append(spec)
    return arrays, specs


def compact(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`, or a copy of it where its storage is larger than itself: the kept reference outputs
    must hold what the memory plan counts for them (numel x element size). F.smooth_l1_loss and
    F.mse_loss with a reduction return a 0-dim tensor on an input-sized storage (ATen sizes the
    output like the input, then resizes it to ()), and a view output keeps its whole base alive."""
    try:
        larger = tensor.layout == torch.strided and tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size()
    except (RuntimeError, NotImplementedError):  # no plain storage (a subclass, a nested tensor): kept as it is
        return tensor
    return tensor.clone() if larger else tensor


def finite(outputs: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(o).all()) for o in outputs if o.is_floating_point())


def trial_sample_seed(job: dict, draw_index: int) -> int:
    return job["seed"] * 1_000_003 + 1000 * draw_index + 7


def stream_sample(output: Any, seed: int) -> list[torch.Tensor]:
    """Each output tensor read at seeded positions, enqueued on the current stream right after the
    forward returned and before any synchronize: what a caller's next op on that stream sees."""
    samples = []
    for index, value in enumerate(flatten_outputs(output)):
        if isinstance(value, torch.Tensor) and type(value) in _PLAIN_TENSORS and value.numel():
            flat = value.detach().reshape(-1)
            samples.append(flat[sample_positions(flat.numel(), seed + index, flat.device)])
    return samples

