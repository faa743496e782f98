"""scripts/fusion_options.py: its first option is today's order, and the others change what they say.

Made-up numbers only: no benchmark data is read.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from calibrate_candidates import Numbers
from fusion_options import OPTIONS, Option, option_order

from squirrel_mcp_embeddings import fusion

FLOOR, SPAN = 0.35, 0.03


def made_up(seed: int) -> Numbers:
    """Up to 60 memories: about half word matches, cosines around the floor, some long ones."""
    rng = random.Random(seed)
    ids = [f"m{n:02d}" for n in range(rng.randint(1, 60))]
    matches = [memory_id for memory_id in ids if rng.random() < 0.5]
    scores = {memory_id: round(rng.uniform(0.5, 9.0), 3) for memory_id in matches}
    order = sorted(matches, key=lambda memory_id: (-scores[memory_id], memory_id))
    words = [(memory_id, rng.choice([0.25, 0.5, 0.75, 1.0])) for memory_id in order]
    cosines = {memory_id: round(rng.uniform(0.1, 0.6), 2) for memory_id in ids}
    whole = {m: cosine - rng.choice([0.0, 0.05, 0.2]) for m, cosine in cosines.items()}
    decays = {memory_id: rng.choice([1.0, 0.9, 0.5]) for memory_id in ids if rng.random() < 0.5}
    return Numbers(words, cosines, decays, scores, whole)


@pytest.mark.parametrize("seed", range(200))
def test_today_is_the_rankers_order(seed: int) -> None:
    numbers = made_up(seed)
    hits, _ = fusion.fuse(
        dict(numbers.words),
        numbers.cosines,
        numbers.decays,
        floor=FLOOR,
        span=SPAN,
        limit=10,
        order=[memory_id for memory_id, _ in numbers.words],
    )
    assert OPTIONS[0] == Option("today")
    assert option_order(numbers, OPTIONS[0], floor=FLOOR, limit=10) == [hit.memory_id for hit in hits]


def test_a_long_memorys_discount_and_the_word_part_change_the_order() -> None:
    # "long": a word match on half the words, close by one passage only; "short": every word but one,
    # a shorter text (a higher BM25 score), close to the floor.
    numbers = Numbers(
        words=[("short", 0.75), ("long", 0.5)],
        cosines={"short": 0.36, "long": 0.70},
        decays={},
        scores={"short": 8.0, "long": 2.0},
        whole={"short": 0.36, "long": 0.30},
    )
    assert option_order(numbers, Option("today"), floor=FLOOR) == ["long", "short"]
    # Read by its whole text, the long memory is under the floor: its word part alone is left.
    assert option_order(numbers, Option("whole", discount=None), floor=FLOOR) == ["short", "long"]
    # By the lexical score over the query's best, weighted 0.8, the short memory's words win.
    assert option_order(numbers, Option("bm25", words="bm25", weight=0.8), floor=FLOOR) == ["short", "long"]
