"""Every evaluator, and every test stand-in for one, follows `EvaluatorInterface`: the same methods
with the same parameters (names, kinds, defaults), and the same attributes on an instance."""
from __future__ import annotations

import inspect

import pytest

from cuda_gym.eval import EvaluatorInterface, Evaluator
from cuda_gym.eval.distributed import RayEvaluator
from cuda_gym.eval.interface import interface_attributes, interface_methods
from cuda_gym.eval.remote import RemoteEvaluator

from .fakes import CannedEvaluator, FakeJudge, NeverDone, RecordingEvaluator, SeedRecordingEvaluator

IMPLEMENTATIONS = [Evaluator, RayEvaluator, RemoteEvaluator]
FAKES = [CannedEvaluator, FakeJudge, SeedRecordingEvaluator, RecordingEvaluator, NeverDone]


def _parameters(function) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter after `self`: what a caller can rely on."""
    parameters = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, p.kind, p.default) for p in parameters]


def interface_mismatches(cls: type) -> list[str]:
    """What `cls` lacks or declares differently from the interface's methods ([] when it follows)."""
    wrong = []
    for name, expected in interface_methods().items():
        method = getattr(cls, name, None)
        if method is None or not callable(method):
            wrong.append(f"{cls.__name__}.{name} is missing")
        elif _parameters(method) != _parameters(expected):
            wrong.append(f"{cls.__name__}.{name}{inspect.signature(method)} is not {name}{inspect.signature(expected)}")
    return wrong


@pytest.mark.parametrize("cls", IMPLEMENTATIONS + FAKES, ids=lambda cls: cls.__name__)
def test_each_evaluator_and_fake_has_the_interface_methods_with_its_parameters(cls):
    assert interface_mismatches(cls) == []


def test_the_check_finds_a_missing_method_and_a_different_signature():
    class PositionalConfig(CannedEvaluator):  # as a leaderboard stand-in once took its config
        def submit(self, task, candidate, config):
            raise AssertionError("never called")

    class NoPrewarm:
        backend = device_name = torch_version = "cpu"
        config = None
        evaluate = submit = baselines = wait_until_warm = close = __enter__ = __exit__ = CannedEvaluator.close

    (wrong,) = interface_mismatches(PositionalConfig)
    assert wrong.startswith("PositionalConfig.submit(self, task, candidate, config) is not submit(")
    assert any("NoPrewarm.prewarm is missing" == line for line in interface_mismatches(NoPrewarm))
    assert not isinstance(NoPrewarm(), EvaluatorInterface)


def test_each_fake_instance_is_an_evaluator_interface():
    fakes = [CannedEvaluator(), FakeJudge(), SeedRecordingEvaluator(), RecordingEvaluator(CannedEvaluator()),
             NeverDone()]
    assert {type(fake) for fake in fakes} == set(FAKES)
    for fake in fakes:
        assert isinstance(fake, EvaluatorInterface), type(fake).__name__
        assert all(isinstance(getattr(fake, name), str) for name in interface_attributes() if name != "config")


def test_the_local_evaluator_instance_is_an_evaluator_interface(cpu_evaluator):
    assert isinstance(cpu_evaluator, EvaluatorInterface)
    assert cpu_evaluator.backend == "cpu" and cpu_evaluator.device_name == "cpu" and cpu_evaluator.torch_version


def test_the_remote_evaluator_instance_is_an_evaluator_interface(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from cuda_gym.serve.server import Service
    from cuda_gym.tasks import load_suite

    with Service(FakeJudge(), load_suite("builtin"), tmp_path / "journal", port=0) as service:
        with RemoteEvaluator(service.url) as remote:
            assert isinstance(remote, EvaluatorInterface)
            assert remote.prewarm([]) == {} and remote.device_name == "fake-cpu"
