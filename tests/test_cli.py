"""What the `cuda-gym` command tells a newcomer: verdicts that need no evaluator come at once, task
descriptions are shown whole, and every help text names the same suites."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from cuda_gym import cli
from cuda_gym.eval.result import result_keys
from cuda_gym.tasks import load_suite, suite_names


def _no_evaluator(*args, **kwargs):
    raise AssertionError("an evaluator was started")


def test_a_candidate_that_does_not_parse_is_answered_without_an_evaluator(tmp_path, monkeypatch, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n")
    monkeypatch.setattr(cli, "make_evaluator", _no_evaluator)
    assert cli.main(["eval", "builtin/L1/softmax", str(broken), "--json", "--backend", "cpu"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["error_code"] == "INVALID_ACTION" and "line 2" in data["message"]
    assert list(data) == list(result_keys()) and data["backend"] == "cpu"


def test_parsing_a_candidate_does_not_import_torch():
    code = ("import sys; from cuda_gym.eval import parse_candidate, EvalResult; import cuda_gym.cli; "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_tasks_list_shows_every_description_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["tasks", "list"]) == 0
    listing = capsys.readouterr().out
    words = " ".join(listing.split())
    for task in load_suite("builtin"):
        assert " ".join(task.description.split()) in words, task.id
    assert all(len(line) <= 80 for line in listing.splitlines()[1:])


def _help_texts(parser: argparse.ArgumentParser) -> list[str]:
    """The help text of every option and argument of `parser` and its subcommands."""
    texts = []
    for action in parser._actions:
        texts.append(action.help or "")
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                texts += _help_texts(subparser)
    return texts


def test_every_help_text_that_lists_suites_names_all_of_them():
    suites = suite_names()
    listings = [text for text in _help_texts(cli.build_parser()) if re.search(r"\bkernelbench\b", text)]
    assert len(listings) >= 5  # tasks list, leaderboard, agent, train, solve
    for text in listings:
        assert all(name in text for name in suites), text


def test_the_agents_commands_come_from_the_installed_entry_points():
    """`pip install -e .` registers the agents side's commands; cuda_gym itself never imports them."""
    commands = {action.dest: action for action in cli.build_parser()._actions}["command"].choices
    assert {"agent", "solve", "train", "leaderboard", "synth"} <= set(commands)


def test_without_the_agents_package_its_commands_are_absent_with_a_reason(monkeypatch, capsys):
    monkeypatch.setattr(cli, "command_entry_points", lambda: [])
    commands = {action.dest: action for action in cli.build_parser()._actions}["command"].choices
    assert "agent" not in commands and "leaderboard" in commands
    assert cli.main(["agent", "--help"]) == 2
    err = capsys.readouterr().err
    assert "'agent' is not installed" in err and "cuda_gym_agents" in err and "pip install -e ." in err


def test_run_refuses_a_task_that_is_not_built_in(capsys, monkeypatch):
    monkeypatch.setattr(cli, "make_evaluator", _no_evaluator)
    assert cli.main(["run", "--task", "builtin/L1/no_such_task"]) == 2
    assert "builtin/L1/no_such_task" in capsys.readouterr().err


@pytest.mark.slow
def test_run_says_how_many_tasks_it_judges_and_what_cpu_speedups_mean(tmp_path, capsys, monkeypatch, cache_dir):
    monkeypatch.setenv("CUDA_GYM_CACHE", cache_dir)
    out = tmp_path / "run.json"
    assert cli.main(["run", "--backend", "cpu", "--no-compile-baseline", "--task", "builtin/L1/softmax",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "judging 1 of 1 built-in tasks, those with a reference solution for cpu" in printed
    assert "correct, not tuned" in printed
    assert json.loads(out.read_text())["results"][0]["error_code"] == "OK"
