"""scripts/calibrate_candidates.py and scripts/fusion_options.py: today's order is the ranker's, and
caps and options change what they say.

Made-up numbers only: no benchmark data is read.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from calibrate_candidates import Numbers, capped_order
from fusion_options import OPTIONS, Option, option_order

from squirrel_mcp_embeddings import fusion

FLOOR, SPAN = 0.35, 0.03


def made_up(seed: int) -> Numbers:
    """Up to 60 memories: about half word matches (some holding every word), cosines around the floor.

    Word matches come in the order of their made-up lexical scores; some memories are long
    (a whole-text cosine under their best passage's).
    """
    rng = random.Random(seed)
    ids = [f"m{n:02d}" for n in range(rng.randint(1, 60))]
    matches = [memory_id for memory_id in ids if rng.random() < 0.5]
    scores = {memory_id: round(rng.uniform(0.5, 9.0), 3) for memory_id in matches}
    order = sorted(matches, key=lambda memory_id: (-scores[memory_id], memory_id))
    words = [(memory_id, rng.choice([0.25, 0.5, 0.75, 1.0])) for memory_id in order]
    cosines = {memory_id: round(rng.uniform(0.1, 0.6), 2) for memory_id in ids}
    whole = {memory_id: cosine - rng.choice([0.0, 0.05, 0.2]) for memory_id, cosine in cosines.items()}
    # Some memories older than others: the ranker weighs their meaning part down.
    decays = {memory_id: rng.choice([1.0, 0.9, 0.5]) for memory_id in ids if rng.random() < 0.5}
    return Numbers(words, cosines, decays, scores, whole)


def rankers_order(numbers: Numbers) -> list[str]:
    """The first 10 ids in the order fusion.fuse (the ranker's) gives these numbers."""
    hits, _ = fusion.fuse(
        dict(numbers.words),
        numbers.cosines,
        numbers.decays,
        floor=FLOOR,
        span=SPAN,
        limit=10,
        order=[memory_id for memory_id, _ in numbers.words],
    )
    return [hit.memory_id for hit in hits]


@pytest.mark.parametrize("seed", range(200))
def test_without_caps_the_order_is_the_rankers(seed: int) -> None:
    numbers = made_up(seed)
    found = capped_order(numbers, floor=FLOOR, span=SPAN, words=None, meaning=None, limit=10)
    assert found == rankers_order(numbers)


@pytest.mark.parametrize("seed", range(200))
def test_caps_keep_the_first_word_matches_every_word_ones_and_the_closest(seed: int) -> None:
    numbers = made_up(seed)
    found = capped_order(numbers, floor=FLOOR, span=SPAN, words=3, meaning=2, limit=100)
    order = [memory_id for memory_id, _ in numbers.words]
    every = {memory_id for memory_id, share in numbers.words if fusion.every_word(share)}
    close = sorted(
        (memory_id for memory_id, cosine in numbers.cosines.items() if cosine >= FLOOR),
        key=lambda memory_id: (-numbers.cosines[memory_id], memory_id),
    )[:2]
    assert set(found) == set(order[:3]) | every | set(close)


@pytest.mark.parametrize("seed", range(200))
def test_the_first_fusion_option_is_the_rankers_order(seed: int) -> None:
    numbers = made_up(seed)
    assert OPTIONS[0] == Option("today")
    assert option_order(numbers, OPTIONS[0], floor=FLOOR, limit=10) == rankers_order(numbers)


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
