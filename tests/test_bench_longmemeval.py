"""scripts/bench_longmemeval.py reads a question and scores a search right, on a tiny haystack.

The haystack below is made up here (three sessions in LongMemEval's format); the
benchmark's data is never copied into the repository.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_longmemeval

HAYSTACK = {
    "question_id": "tiny_1",
    "question_type": "multi-session",
    "question": "How many bikes do I own now?",
    "question_date": "2024/05/01 (Wed) 10:00",
    "answer": "3",
    "haystack_session_ids": ["s_cook", "answer_a", "answer_b"],
    "haystack_dates": ["2024/04/01 (Mon) 09:00", "2024/04/02 (Tue) 09:00", "2024/04/03 (Wed) 09:00"],
    "answer_session_ids": ["answer_a", "answer_b"],
    "haystack_sessions": [
        [
            {"role": "user", "content": "Any tips for a crisp roast potato?"},
            {"role": "assistant", "content": "Parboil them first."},
        ],
        [
            {"role": "user", "content": "I bought a second road bike today.", "has_answer": True},
            {"role": "assistant", "content": "Congratulations\x08 on the new bike!"},
            {"role": "user", "content": "   "},
        ],
        [
            {"role": "user", "content": "My gravel bike makes three bikes.", "has_answer": True},
            {"role": "assistant", "content": "x" * 5000},
        ],
    ],
}


@pytest.fixture
def question(tmp_path: Path) -> bench_longmemeval.Question:
    path = tmp_path / "tiny_1.json"
    path.write_text(json.dumps(HAYSTACK), encoding="utf-8")
    return bench_longmemeval.load(path)


def test_a_question_is_read_turn_by_turn_with_its_sessions_and_evidence(
    question: bench_longmemeval.Question,
) -> None:
    assert question.question_id == "tiny_1" and question.question_type == "multi-session"
    # A blank turn is not saved (save_memory refuses it); a long one is cut to what the server keeps.
    assert [turn.key for turn in question.turns] == ["0:0", "0:1", "1:0", "1:1", "2:0", "2:1"]
    assert [turn.entity for turn in question.turns[:2]] == ["user", "assistant"]
    # save_memory refuses a control character: it is saved as a space.
    assert question.turns[3].text == "Congratulations  on the new bike!"
    assert len(question.turns[-1].text) == bench_longmemeval.MAX_TEXT
    assert question.session_of["2:0"] == "answer_b"
    assert question.answer_sessions == {"answer_a", "answer_b"}
    assert question.answer_turns == {"1:0", "2:0"}


def test_a_file_that_is_not_a_question_is_refused(tmp_path: Path) -> None:
    (tmp_path / "README.json").write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match="not a LongMemEval question"):
        bench_longmemeval.load(tmp_path / "README.json")
    assert bench_longmemeval.question_files(tmp_path / "missing") == []


def ranked(*keys: str) -> list[frozenset[str]]:
    """Results that each hold one turn (a key "" is a result holding none of the haystack's)."""
    return [frozenset({key}) if key else frozenset() for key in keys]


def test_one_answer_session_in_the_first_five_and_the_other_by_ten(
    question: bench_longmemeval.Question,
) -> None:
    # Ranks 1-5: cooking, then the answer session a's assistant turn (no evidence in it).
    # Rank 8: session b's evidence turn.
    scores = bench_longmemeval.scores(ranked("0:0", "0:1", "", "1:1", "", "", "", "2:0"), question)
    assert scores == {
        "recall_any@5": 1.0,
        "recall_all@5": 0.0,
        "frac@5": 0.5,
        "turn hit@5": 0.0,
        "recall_any@10": 1.0,
        "recall_all@10": 1.0,
        "frac@10": 1.0,
        "turn hit@10": 1.0,
    }


def test_nothing_found_and_everything_found(question: bench_longmemeval.Question) -> None:
    missed = bench_longmemeval.scores(ranked("0:0", "0:1") + ranked("") * 10, question)
    assert missed == dict.fromkeys(bench_longmemeval.MEASURES, 0.0)
    # One memory may hold several turns (identical ones of one role): it counts for each.
    both = bench_longmemeval.scores([frozenset({"1:0", "2:0"})], question)
    assert both == dict.fromkeys(bench_longmemeval.MEASURES, 1.0)
    # A session found only past the 10th result does not count at 10.
    late = bench_longmemeval.scores(ranked("") * 10 + ranked("2:0"), question)
    assert late["recall_any@10"] == 0.0


def test_means_over_questions_and_a_subset_stratified_by_type(
    question: bench_longmemeval.Question,
) -> None:
    rows = [dict.fromkeys(bench_longmemeval.MEASURES, 1.0), dict.fromkeys(bench_longmemeval.MEASURES, 0.0)]
    assert bench_longmemeval.mean_scores(rows) == dict.fromkeys(bench_longmemeval.MEASURES, 0.5)
    assert bench_longmemeval.mean_scores([]) == dict.fromkeys(bench_longmemeval.MEASURES, 0.0)
    kinds = ["multi-session"] * 4 + ["temporal-reasoning", "knowledge-update"] + ["multi-session"] * 2
    questions = [
        bench_longmemeval.Question(f"q{n}", kind, "?", [], {}, frozenset(), frozenset())
        for n, kind in enumerate(kinds)
    ]
    # Each type in proportion to its questions (6 of 8 are multi-session), each type's first.
    assert [q.question_id for q in bench_longmemeval.pick(questions, 4)] == ["q0", "q1", "q2", "q5"]
    assert [q.question_id for q in bench_longmemeval.pick(questions, 1)] == ["q0"]
    assert bench_longmemeval.pick(questions, None) == questions
    assert bench_longmemeval.pick(questions, 20) == questions


def test_a_question_left_half_saved_is_removed_and_no_other(
    question: bench_longmemeval.Question, tmp_path: Path
) -> None:
    scratch = tmp_path / "kept"
    scratch.mkdir()
    mine = [scratch / "tiny_1.sqlite3", scratch / "tiny_1.sqlite3-wal", scratch / "tiny_1.held.json"]
    theirs = [scratch / "tiny_10.sqlite3", scratch / "other.sqlite3"]
    for path in mine + theirs:
        path.write_text("x")
    (scratch / "tiny_1.cache").mkdir()
    (scratch / "tiny_1.cache" / "vectors").write_text("x")

    bench_longmemeval.remove_question(scratch, question)

    assert sorted(scratch.iterdir()) == sorted(theirs)


def test_a_section_says_how_many_vaults_an_earlier_run_kept() -> None:
    fresh = [{"kept before": False}, {"kept before": False}]
    assert bench_longmemeval.kept_lines(fresh) == []
    said = " ".join(bench_longmemeval.kept_lines([{"kept before": True}, *fresh]))
    assert said.startswith("The vaults of 1 of them were saved through the server")
