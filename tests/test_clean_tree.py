"""A test run leaves the working tree as it found it.

The reports a test run produces (the reliability table; the recall gate's page) go under
build/ unless SQUIRREL_WRITE_FIGURES=1, which only `nox -s recall`, `reliability` and
`bench` set (scripts/figure_pages.py); and `nox -s tests` ends by comparing the tree with
a snapshot taken at its start (scripts/tree_state.py). Both run here as the real scripts,
in copies of this checkout's layout, never in the checkout itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
PUBLISHED = "# Reliability (as published)\n"


def figures_checkout(tmp_path: Path) -> Path:
    """A directory laid out as the checkout for scripts/reliability_report.py, with one check's figures."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for script in ("reliability_report.py", "figure_pages.py"):
        shutil.copy(SCRIPTS / script, root / "scripts" / script)
    (root / "docs").mkdir()
    (root / "docs" / "reliability.md").write_text(PUBLISHED, encoding="utf-8")
    figures = root / "build" / "reliability"
    figures.mkdir(parents=True)
    check = {"check": "fuzz", "runs": 3, "faults_injected": 0, "inputs_tried": 41, "data_lost": 0}
    (figures / "fuzz.json").write_text(json.dumps({**check, "seconds": 1.5, "notes": "n"}), encoding="utf-8")
    return root


def report(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "SQUIRREL_WRITE_FIGURES"}
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "reliability_report.py")],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_report_writes_its_page_under_build_unless_figures_are_published(tmp_path: Path) -> None:
    root = figures_checkout(tmp_path)

    done = report(root)
    assert done.returncode == 0, done.stderr
    assert (root / "docs" / "reliability.md").read_text(encoding="utf-8") == PUBLISHED
    page = (root / "build" / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert "| fuzz | 3 | 0 | 41 | 0 | 1.5 | n |" in page
    assert (
        "wrote build/docs/reliability.md (docs/reliability.md only with SQUIRREL_WRITE_FIGURES=1"
        in done.stdout
    )

    done = report(root, SQUIRREL_WRITE_FIGURES="1")
    assert done.returncode == 0, done.stderr
    assert (root / "docs" / "reliability.md").read_text(encoding="utf-8") == page
    assert "wrote docs/reliability.md" in done.stdout


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


def tree_state(repo: Path, command: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(repo / "scripts" / "tree_state.py"), command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_tree_check_names_what_a_run_changed_and_nothing_else(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPTS / "tree_state.py", repo / "scripts")
    (repo / "docs").mkdir()
    (repo / "docs" / "recall.md").write_text("figures\n")
    (repo / "notes.md").write_text("mine\n")
    (repo / "old.md").write_text("kept\n")
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "start")
    # An edit of the developer's own, made before the run: not the run's doing.
    (repo / "notes.md").write_text("mine, edited\n")

    before = tree_state(repo, "snapshot")
    assert before.returncode == 0 and list(json.loads(before.stdout)) == ["notes.md"]
    # What a run may do: write under an ignored folder.
    (repo / "build").mkdir()
    (repo / "build" / "recall.md").write_text("this run's figures\n")
    unchanged = tree_state(repo, "compare", before.stdout)
    assert unchanged.returncode == 0, unchanged.stderr
    assert "as the run found it" in unchanged.stdout

    # What it must not: rewrite a tracked page, delete a tracked file, leave a new file, touch the edit.
    (repo / "docs" / "recall.md").write_text("figures, rewritten by a test\n")
    (repo / "old.md").unlink()
    (repo / "docs" / "new page.md").write_text("stray\n")
    (repo / "notes.md").write_text("mine, edited again\n")
    changed = tree_state(repo, "compare", before.stdout)
    assert changed.returncode == 1
    assert "changed 4 file(s) in the working tree: docs/new page.md, docs/recall.md, notes.md, old.md." in (
        changed.stderr
    )
