"""Every subcommand takes task ids and levels the same way: commas, spaces, both, or the option
repeated (cuda_gym.tasks.selection)."""
from __future__ import annotations

import pytest

from cuda_gym.cli import build_parser
from cuda_gym.tasks.selection import split_levels, split_list

# each subcommand with the other arguments it requires
COMMANDS = {
    "run": ["run"],
    "leaderboard": ["leaderboard", "submissions/", "--out", "o"],
    "leaderboard --suite": ["leaderboard", "submissions/", "--out", "o", "--suite", "builtin"],
    "agent": ["agent", "--model", "m"],
    "solve": ["solve"],
    "train": ["train", "--out", "o"],
}
SPELLINGS = [
    ["--tasks", "builtin/L1/gelu,builtin/L2/linear_gelu"],
    ["--tasks", "builtin/L1/gelu", "builtin/L2/linear_gelu"],
    ["--tasks", "builtin/L1/gelu, builtin/L2/linear_gelu"],
    ["--tasks", "builtin/L1/gelu", "--tasks", "builtin/L2/linear_gelu,builtin/L1/gelu"],
    ["--task", "builtin/L1/gelu", "--task", "builtin/L2/linear_gelu"],
]


def test_split_list_accepts_commas_spaces_and_both():
    assert split_list("a,b") == split_list(["a", "b"]) == split_list("a, b") == split_list([" a ,", "b,,a"]) == ["a", "b"]
    assert split_list(None) == [] and split_list("") == []
    assert split_levels(["1,2", "3"]) == [1, 2, 3]
    with pytest.raises(ValueError, match="'x'"):
        split_levels("1,x")


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"leaderboard --suite"}))
@pytest.mark.parametrize("spelling", SPELLINGS, ids=["commas", "spaces", "comma-space", "repeated", "alias"])
def test_every_subcommand_parses_task_lists_alike(command, spelling):
    parser = build_parser()
    if command not in parser._subparsers._group_actions[0].choices:
        pytest.skip(f"`cuda-gym {command}` comes from the agents package, which is not installed")
    args = parser.parse_args(COMMANDS[command] + spelling)
    assert args.tasks == ["builtin/L1/gelu", "builtin/L2/linear_gelu"]


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"leaderboard"}) + ["tasks list"])
@pytest.mark.parametrize("spelling", [["--levels", "1,2"], ["--levels", "1", "2"], ["--levels", "1, 2"],
                                      ["--level", "1", "--level", "2"]])
def test_every_subcommand_parses_levels_alike(command, spelling):
    parser = build_parser()
    base = ["tasks", "list"] if command == "tasks list" else COMMANDS[command]
    if base[0] not in parser._subparsers._group_actions[0].choices:
        pytest.skip(f"`cuda-gym {command}` comes from the agents package, which is not installed")
    assert parser.parse_args(base + spelling).levels == [1, 2]


def test_a_level_that_is_not_an_integer_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "--levels", "1,two"])
    assert exit_.value.code == 2 and "--levels: levels are integers, got 'two'" in capsys.readouterr().err
