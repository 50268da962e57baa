"""benchmarks/results/index.json names the current result of each benchmark, and docs/benchmarks.md shows
the same files: every indexed file exists, every file under benchmarks/results is indexed, and the docs
cite exactly the indexed files."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"
LAYOUT = re.compile(r"^(?P<benchmark>[a-z0-9_]+)/(?P<device>[a-z0-9-]+)/(?P<date>\d{4}-\d{2}-\d{2})[^/]*(/[^/]+)?$")
CITED = re.compile(r"`([a-z0-9_]+/[a-z0-9-]+/\d{4}-\d{2}-\d{2}[^`\s]*)`")


def figures() -> list[dict]:
    return json.loads((RESULTS / "index.json").read_text())["figures"]


def test_every_indexed_file_exists_and_follows_the_layout():
    for figure in figures():
        for name in [figure["file"], *figure.get("also", [])]:
            match = LAYOUT.match(name)
            assert match, f"{name} is not <benchmark>/<device>/<date>.<ext>"
            assert (match["benchmark"], match["device"]) == (figure["benchmark"], figure["device"]), name
            assert (RESULTS / name).is_file(), f"index.json names {name}, which is not in benchmarks/results"
        assert figure["command"].strip() and figure["shows"].strip(), figure["file"]


def test_every_result_file_is_indexed_once():
    named = [name for figure in figures() for name in [figure["file"], *figure.get("also", [])]]
    assert len(named) == len(set(named)), "a file is indexed twice"
    present = {str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*") if p.is_file()} - {"index.json"}
    assert present - set(named) == set(), "results that index.json does not name (remove or index them)"


def test_docs_cite_exactly_the_indexed_files():
    cited = set(CITED.findall(DOCS.read_text()))
    indexed = {figure["file"] for figure in figures()}
    assert cited - indexed == set(), "docs/benchmarks.md cites files that index.json does not name"
    assert indexed - cited == set(), "index.json names files that docs/benchmarks.md does not show"


def test_docs_show_each_figure_with_its_command():
    text = DOCS.read_text()
    for figure in figures():
        rows = [line for line in text.splitlines() if line.startswith("|") and f"`{figure['file']}`" in line]
        assert any(f"`{figure['command']}`" in row for row in rows), \
            f"no row of docs/benchmarks.md shows {figure['file']} with index.json's command"
