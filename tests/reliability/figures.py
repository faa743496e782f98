"""Where each reliability check records what it measured, for docs/reliability.md.

Every check (a test module or a script under `nox -s reliability`) calls `record` once
with its real counts; `scripts/reliability_report.py` reads every file and writes the
table. Files go to build/reliability/ (gitignored), one JSON per check.
"""

from __future__ import annotations

import json
from pathlib import Path

FIGURES_DIR = Path(__file__).resolve().parents[2] / "build" / "reliability"


def record(
    check: str,
    *,
    runs: int,
    faults_injected: int = 0,
    inputs_tried: int = 0,
    data_lost: int = 0,
    seconds: float,
    notes: str = "",
) -> Path:
    """Write one check's figures to build/reliability/<check>.json and return the path."""
    FIGURES_DIR.mkdir(parents=True, exist_ok=True)
    path = FIGURES_DIR / f"{check}.json"
    figures = {
        "check": check,
        "runs": runs,
        "faults_injected": faults_injected,
        "inputs_tried": inputs_tried,
        "data_lost": data_lost,
        "seconds": round(seconds, 1),
        "notes": notes,
    }
    path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return path
