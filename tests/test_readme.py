"""The README's examples run as written.

Every ```python and ```bash block of README.md is run, each in a fresh process from the repository
root, on the CPU when there is no GPU: python blocks with this interpreter, bash blocks with
`bash -e`, where `cuda-gym` is this checkout's command. A block that must not run here is marked on
the line right before its opening fence with

    <!-- readme-test: skip (why) -->

and the reason is required (installing packages, a server, a run of many minutes). All blocks share
one cuda_gym cache (the test session's), so builds and baselines measured by one are reused by the
next, as a user's second command would.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SKIP_MARKER = re.compile(r"^<!--\s*readme-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->$")
FENCE = re.compile(r"^```(?P<language>\w*)\s*$")
BLOCK_TIMEOUT_S = 900


@dataclass(frozen=True)
class Example:
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    skip_reason: str | None


def readme_examples(text: str) -> list[Example]:
    """The python and bash blocks of `text`, with the skip reason of those marked not to run."""
    examples, lines, index = [], text.splitlines(), 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        previous = next((lines[i].strip() for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = SKIP_MARKER.match(previous)
        if opening["language"] in ("python", "bash"):
            examples.append(Example(index + 1, opening["language"], "\n".join(lines[index + 1:end]) + "\n",
                                    marker["reason"] if marker else None))
        index = end + 1
    return examples


EXAMPLES = readme_examples(README.read_text(encoding="utf-8"))


def test_the_readme_has_runnable_examples_and_every_skip_says_why():
    runnable = [e for e in EXAMPLES if e.skip_reason is None]
    assert {e.language for e in runnable} == {"python", "bash"} and len(runnable) >= 4
    marked = [line for line in README.read_text(encoding="utf-8").splitlines() if "readme-test" in line]
    assert len(marked) == sum(e.skip_reason is not None for e in EXAMPLES), "a marker that is not right before a block"


@pytest.mark.slow
@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.skip_reason is None],
                         ids=lambda e: f"README.md:{e.line}-{e.language}")
def test_readme_example_runs(example, cache_dir, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "cuda-gym"  # this checkout's command, whatever is installed
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cuda_gym.cli "$@"\n')
    command.chmod(0o755)
    env = os.environ | {
        "CUDA_GYM_CACHE": cache_dir,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    argv = [sys.executable, "-c", example.code] if example.language == "python" else ["bash", "-e", "-c", example.code]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, f"README.md line {example.line}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
