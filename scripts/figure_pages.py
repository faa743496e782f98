"""Where a report writes its page of figures: the tracked page in docs/, or build/ beside it.

The pages in docs/ (docs/recall.md, docs/reliability.md) are rewritten only by the
commands that exist to measure: `nox -s recall`, `nox -s reliability` and `nox -s bench`
set SQUIRREL_WRITE_FIGURES=1. Anything else that runs a report (the test suite runs the
recall gate and the reliability checks) writes the same page under build/, so a test run
leaves the working tree as it found it and its figures can still be read.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "SQUIRREL_WRITE_FIGURES"


def destination(page: Path, root: Path) -> Path:
    """`page` (a file under `root`'s docs/) when figures are to be published, else its build/ copy."""
    if os.environ.get(VARIABLE) == "1":
        return page
    return root / "build" / page.relative_to(root)


def write_page(page: Path, root: Path, text: str) -> Path:
    """Write `text` where `destination` says, saying where on stdout; the path written."""
    target = destination(page, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    note = (
        ""
        if target == page
        else f" ({page.relative_to(root)} only with {VARIABLE}=1, as nox -s recall/reliability/bench set)"
    )
    print(f"wrote {target.relative_to(root)}{note}")
    return target
