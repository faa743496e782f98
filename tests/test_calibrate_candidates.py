"""scripts/calibrate_candidates.py: its order without caps is the ranker's, and caps keep what they say.

Made-up numbers only: no benchmark data is read.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from calibrate_candidates import Numbers, capped_order

from squirrel_mcp_embeddings import fusion

FLOOR, SPAN = 0.35, 0.03


def made_up(seed: int) -> Numbers:
    """Up to 60 memories: about half word matches (some holding every word), cosines around the floor."""
    rng = random.Random(seed)
    ids = [f"m{n:02d}" for n in range(rng.randint(1, 60))]
    matches = [memory_id for memory_id in ids if rng.random() < 0.5]
    rng.shuffle(matches)
    words = [(memory_id, rng.choice([0.25, 0.5, 0.75, 1.0])) for memory_id in matches]
    cosines = {memory_id: round(rng.uniform(0.1, 0.6), 2) for memory_id in ids}
    # Some memories older than others: the ranker weighs their meaning part down.
    decays = {memory_id: rng.choice([1.0, 0.9, 0.5]) for memory_id in ids if rng.random() < 0.5}
    return Numbers(words, cosines, decays)


@pytest.mark.parametrize("seed", range(200))
def test_without_caps_the_order_is_the_rankers(seed: int) -> None:
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
    expected = [hit.memory_id for hit in hits]
    assert capped_order(numbers, floor=FLOOR, span=SPAN, words=None, meaning=None, limit=10) == expected


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
