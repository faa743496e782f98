"""scripts/bench_projects.py stays importable and runs end to end in a tiny mode.

The figures of a tiny vault mean nothing; what is checked is that the script still
drives the real store, run_search and (with the model) the embeddings plugin, that its
checks on the answers pass, and that it writes every way of every part to its page.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from squirrel_mcp.search import bm25
from squirrel_mcp.server import searching
from tests.conftest import needs_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_projects


def rows(page: str) -> list[list[str]]:
    """The figures table's rows, as their cells."""
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in page.splitlines()
        if line.startswith("| ") and line.split("|")[3].strip() in bench_projects.SIDES
    ]


def test_the_word_part_runs_checks_and_writes_each_way(tmp_path: Path) -> None:
    output = tmp_path / "projects.md"
    argv = ["--memories", "600", "--queries", "12", "--no-hybrid", "--output", str(output)]
    assert bench_projects.main(argv) == 0
    page = output.read_text(encoding="utf-8")
    found = rows(page)
    assert [row[2] for row in found] == list(bench_projects.SIDES)
    assert all(row[0] == "word search" and row[1] == "12" for row in found)
    assert "of 600 memories in 10 projects" in page.replace("\n", " ")
    # The stand-in for the first way of scoping is put back after every search.
    assert searching.bm25 is bm25


@needs_model
def test_the_hybrid_part_runs_with_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The script points the plugin's vector file at its scratch folder; this puts the variable back after.
    monkeypatch.setenv("SQUIRREL_MEMORY_CACHE_DIR", str(tmp_path / "unused"))
    output = tmp_path / "projects.md"
    argv = ["--memories", "300", "--queries", "4", "--hybrid-queries", "4", "--output", str(output)]
    assert bench_projects.main(argv) == 0
    found = rows(output.read_text(encoding="utf-8"))
    assert [row[0] for row in found] == ["word search"] * 3 + ["hybrid search"] * 3
    # The recall set's queries, then the 4 made up.
    assert int(found[3][1]) > 4
