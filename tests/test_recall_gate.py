"""The recall gate (tests/recall/gate.py): its conditions hold and fail where they should,
and the gate itself passes on the real model.

Its `gate` function is given figures on either side of each threshold; then the whole
gate runs as `nox -s recall` runs it (`python -m tests.recall.gate`, which writes
docs/recall.md), so `nox -s tests` fails when recall falls below a bar.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import needs_model
from tests.recall import gate

ROOT = Path(__file__).resolve().parents[1]
# A backstop against a hang: the gate embeds 500 memories, and with the shared data LoCoMo's
# 2,760 turns and two LongMemEval haystacks of about 500 turns: many minutes on a loaded machine.
GATE_TIMEOUT_S = 2400


@pytest.fixture(scope="module")
def recall_gate() -> ModuleType:
    return gate


def figures(
    paraphrase: tuple[float, float], exact: tuple[float, float], ranking: float, scripts: float
) -> dict:
    """recall@5 per ranking and set (recall@1 and MRR do not gate)."""

    def one(value: float) -> dict[str, float]:
        return {"recall@1": 0.0, "recall@5": value, "MRR": 0.0}

    return {
        "lexical": {
            "paraphrase": one(paraphrase[0]),
            "exact": one(exact[0]),
            "ranking": one(ranking),
            "scripts": one(scripts),
        },
        "hybrid": {
            "paraphrase": one(paraphrase[1]),
            "exact": one(exact[1]),
            "ranking": one(1),
            "scripts": one(1),
        },
    }


def held(recall_gate: ModuleType, measured: dict) -> list[bool]:
    return [ok for _, ok in recall_gate.gate(measured)]


def test_the_gate_passes_at_its_thresholds(recall_gate: ModuleType) -> None:
    assert held(recall_gate, figures((0.10, 0.25), (0.9, 0.9), 0.8, 0.8)) == [True] * 4


@pytest.mark.parametrize(
    ("measured", "failing"),
    [
        (((0.10, 0.24), (0.9, 0.9), 0.8, 0.8), 0),
        (((0.10, 0.60), (0.9, 0.89), 0.8, 0.8), 1),
        (((0.10, 0.60), (0.9, 0.9), 0.79, 0.8), 2),
        (((0.10, 0.60), (0.9, 0.9), 0.8, 0.7), 3),
    ],
)
def test_each_condition_fails_below_its_threshold(
    recall_gate: ModuleType, measured: tuple, failing: int
) -> None:
    expected = [True] * 4
    expected[failing] = False
    assert held(recall_gate, figures(*measured)) == expected


def test_longmemeval_is_reported_skipped_without_its_data(
    recall_gate: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(recall_gate.bench_longmemeval, "DATA", tmp_path / "missing")
    section = recall_gate.longmemeval_section()
    assert section.startswith("\n## LongMemEval\n") and "LongMemEval skipped: no questions in" in section


@needs_model
@pytest.mark.process
def test_the_gate_holds_on_the_real_model() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.recall.gate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=GATE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
