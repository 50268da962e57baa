"""The strict policy's rule for the ops a candidate's forward dispatched: creation, view and metadata
ops and ops of the candidate's own namespaces are allowed; PyTorch compute on the task's data is not
(the op recorder, recorder.py, names each such op with its data's origin). The permissive policy
allows everything."""
from __future__ import annotations

import torch

CREATION_AND_VIEW_OPS = frozenset({
    # creation (no data from inputs)
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_",
    "scalar_tensor", "lift_fresh", "lift_fresh_copy", "arange", "resize_",
    # views and metadata
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "expand_as", "t", "transpose", "permute",
    "squeeze", "unsqueeze", "select", "slice", "narrow", "unbind", "split", "split_with_sizes", "chunk",
    "alias", "detach", "detach_", "view_as", "flatten", "unflatten", "movedim", "numpy_T", "contiguous",
    "item", "_local_scalar_dense", "size", "stride", "numel", "dim", "is_contiguous", "sym_size",
    "sym_stride", "sym_numel", "is_same_size", "record_stream", "_has_compatible_shallow_copy_type",
})
# Namespaces of the ops PyTorch itself registers (those that exist when the evaluator starts, before
# any candidate code): an op of another namespace is the candidate's own (its TORCH_LIBRARY).
# `profiler::` ops only open and close record_function ranges.
PYTORCH_NAMESPACES = frozenset({"aten", "prims", "prim"} | {
    name.partition("::")[0] for name in torch._C._dispatch_get_all_op_names()}) - {"profiler"}


def op_is_allowed(qualified_name: str, policy: str) -> bool:
    """`qualified_name` is a key of `OpRecorder.ops`: an op ('aten::mm'), or a PyTorch compute op on
    the task's data ('aten::mm on input 0 (task data: forward input x)'), which the strict policy
    never allows. Ops of other namespaces are the candidate's own; creation, view and metadata ops
    are allowed whatever they are called on."""
    if policy == "permissive":
        return True
    op = qualified_name.split(" ", 1)[0]
    namespace, _, name = op.partition("::")
    if namespace not in PYTORCH_NAMESPACES:
        return True
    return op == qualified_name and name in CREATION_AND_VIEW_OPS
