"""scripts/bench_locomo.py stays importable, and its reading and scoring are right on a tiny conversation.

The conversation below is made up here (two people, three sessions' worth of turns in
LoCoMo's format); the benchmark's data is never copied into the repository.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_locomo

CONVERSATION = {
    "speaker_a": "Ada",
    "speaker_b": "Bo",
    "session_1_date_time": "1:00 pm on 1 May, 2023",
    "session_1": [
        {"speaker": "Ada", "dia_id": "D1:1", "text": "I adopted a cat last week."},
        {
            "speaker": "Bo",
            "dia_id": "D1:2",
            "text": "Look at my garden!",
            "img_url": ["https://example.invalid/garden.jpg"],
            "blip_caption": "a photo of tomatoes in a garden",
        },
    ],
    "session_2_date_time": "2:00 pm on 8 May, 2023",
    "session_2": [
        {"speaker": "Ada", "dia_id": "D2:1", "text": "The cat is called Pixel."},
        {"speaker": "Bo", "dia_id": "D2:2", "text": "Nice name."},
    ],
    # Dates without a session, event summaries and other keys are left alone.
    "session_3_date_time": "3:00 pm on 15 May, 2023",
    "events_session_1": {"Ada": ["adopts a cat"]},
    "qa": [
        {"question": "What is Ada's cat called?", "answer": "Pixel", "evidence": ["D2:1"], "category": 4},
        {
            "question": "When did Ada adopt a cat?",
            "answer": "late April",
            "evidence": ["D1:1"],
            "category": 2,
        },
        {
            "question": "What grows in Bo's garden?",
            "answer": "tomatoes",
            "evidence": ["D1:2; D2:2"],
            "category": 1,
        },
        {"question": "What is Bo's dog called?", "adversarial_answer": "Rex", "evidence": [], "category": 5},
    ],
}


def test_the_corrections_file_beside_the_conversations_is_not_read_as_one(tmp_path: Path) -> None:
    (tmp_path / "7.json").write_text(json.dumps(CONVERSATION), encoding="utf-8")
    corrections = [{"conversation": "7", "question": "When?", "correct_evidence": ["D2:1"]}]
    (tmp_path / bench_locomo.CORRECTIONS).write_text(json.dumps(corrections), encoding="utf-8")
    (tmp_path / "README.md").write_text("about the data", encoding="utf-8")
    assert [path.name for path in bench_locomo.conversation_files(tmp_path)] == ["7.json"]
    assert bench_locomo.conversation_files(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="not a LoCoMo conversation"):
        bench_locomo.load(tmp_path / bench_locomo.CORRECTIONS)


def test_a_conversation_is_read_in_order_with_photos_and_categories_1_to_4(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(CONVERSATION), encoding="utf-8")
    conversation = bench_locomo.load(path)
    assert conversation.name == "tiny"
    assert [turn.dia_id for turn in conversation.turns] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert conversation.turns[1].text == "Look at my garden! [photo: a photo of tomatoes in a garden]"
    assert conversation.turns[1].speaker == "Bo"
    # Category 5 (adversarial) is left out; an entry naming two turns is both.
    assert [(q.category, sorted(q.evidence)) for q in conversation.questions] == [
        (4, ["D2:1"]),
        (2, ["D1:1"]),
        (1, ["D1:2", "D2:2"]),
    ]


def test_hits_recall_and_reciprocal_rank_of_one_question() -> None:
    evidence = frozenset({"D1:2", "D2:2"})
    ranked = [frozenset({"D9:9"})] * 2 + [frozenset({"D2:2"})] + [frozenset({"D3:3"})] * 4
    ranked += [frozenset({"D1:2", "D7:7"})]
    scores = bench_locomo.question_scores(ranked, evidence)
    assert scores == {
        "hit@1": 0.0,
        "hit@5": 1.0,
        "recall@5": 0.5,
        "hit@10": 1.0,
        "recall@10": 1.0,
        "MRR": pytest.approx(1 / 3),
    }
    missed = bench_locomo.question_scores([frozenset({"D9:9"})] * 10, evidence)
    assert missed == dict.fromkeys(bench_locomo.METRICS, 0.0)
    # Fewer than 10 results, and an evidence turn past the 10th, count as not found.
    assert bench_locomo.question_scores([], evidence)["MRR"] == 0.0
    late = [frozenset({"D9:9"})] * 10 + [frozenset({"D1:2"})]
    assert bench_locomo.question_scores(late, evidence)["hit@10"] == 0.0


def test_means_over_questions() -> None:
    rows = [
        bench_locomo.question_scores([frozenset({"a"})], frozenset({"a"})),
        bench_locomo.question_scores([frozenset({"b"})], frozenset({"a"})),
    ]
    means = bench_locomo.mean_scores(rows)
    assert means["hit@1"] == 0.5 and means["MRR"] == 0.5 and means["recall@10"] == 0.5
    assert bench_locomo.mean_scores([]) == dict.fromkeys(bench_locomo.METRICS, 0.0)


def test_the_corrected_key_takes_the_audits_evidence_matched_by_question_text(tmp_path: Path) -> None:
    (tmp_path / "7.json").write_text(json.dumps(CONVERSATION), encoding="utf-8")
    corrections = [
        {"conversation": "7", "question": "When did Ada adopt a cat?", "correct_evidence": ["D1:1; D2:1"]},
        # Another conversation's question of the same text is not this one's.
        {"conversation": "8", "question": "What is Ada's cat called?", "correct_evidence": ["D1:2"]},
    ]
    (tmp_path / bench_locomo.CORRECTIONS).write_text(json.dumps(corrections), encoding="utf-8")
    questions = bench_locomo.load(tmp_path / "7.json").questions
    assert [sorted(q.key("original")) for q in questions] == [["D2:1"], ["D1:1"], ["D1:2", "D2:2"]]
    assert [sorted(q.key("corrected")) for q in questions] == [["D2:1"], ["D1:1", "D2:1"], ["D1:2", "D2:2"]]
    # Without a corrections file both keys are the original one.
    (tmp_path / bench_locomo.CORRECTIONS).unlink()
    assert all(q.key("corrected") == q.evidence for q in bench_locomo.load(tmp_path / "7.json").questions)
