"""guard._make_checker in this process (no tripwire armed): what its object and registry checks
report. The hostile catalogue (test_hostile.py) covers the same through whole evaluations."""
from __future__ import annotations

import json
import types

import torch

from cuda_gym.eval import guard


def _checker(monkeypatch, objects):
    monkeypatch.setattr(guard, "WATCHED_OBJECTS", objects)
    return guard._make_checker("cpu", types.SimpleNamespace(events=lambda: []))


def test_a_watched_object_replaced_is_reported_and_a_missing_one_is_not(monkeypatch):
    # torch versions differ in what they have: an attribute missing at the snapshot is not watched.
    changes = _checker(monkeypatch, (("json", "_default_encoder"), ("json", "no_such_attribute_here")))
    assert changes() == []
    monkeypatch.setattr(json, "_default_encoder", json.JSONEncoder())
    assert changes() == ["json._default_encoder"]


def test_tensor_as_a_pytree_node_and_a_dispatch_rule_for_a_cuda_gym_class_are_reported(monkeypatch):
    import torch.utils._pytree as pytree
    from torch._library.simple_registry import singleton

    changes = _checker(monkeypatch, ())
    assert changes() == []
    monkeypatch.setitem(pytree.SUPPORTED_NODES, torch.Tensor, object())
    assert changes() == ["torch.utils._pytree.SUPPORTED_NODES[Tensor]"]
    monkeypatch.delitem(pytree.SUPPORTED_NODES, torch.Tensor)
    rules = singleton.find("aten::gelu").torch_dispatch_rules
    monkeypatch.setitem(vars(rules)["_data"], guard.OpRecorder, lambda *args: None)
    assert changes() == ["a torch dispatch rule for OpRecorder on aten::gelu"]
