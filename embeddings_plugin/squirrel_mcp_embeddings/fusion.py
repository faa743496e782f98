"""The fused order of hybrid search (docs/hybrid.md), as a pure function of numbers.

    fused = WEIGHT × lexicalScore + (1 − WEIGHT) × part × decay
    part  = 0 at or below the floor, 1 at floor + span or above, linear between
    score = 0.5 + fused / 2 for a hit holding every query word, fused / 2 for any other

Members are the word matches and the memories whose cosine is at or above the
floor. The decay is applied to the meaning part only, so age never fades a word
match. Ties go to the higher cosine. Near misses are the closest non-members,
after the matches, with score 0. Nothing here reads a memory's text.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The share of the word match in the fused value (chosen on the recall corpus; any
# weight in (0, 1) keeps the order docs/hybrid.md promises, see the tests).
WEIGHT = 0.3
# A hit holding every query word scores at least this; any other at most this.
EVERY_WORD = 0.5


@dataclass(frozen=True)
class Scored:
    """One memory's numbers: the inputs of fusion and its result."""

    memory_id: str
    score: float
    lexical_score: float
    semantic_score: float | None
    near_miss: bool = False


def semantic_part(cosine: float | None, floor: float, span: float) -> float:
    """0 at or below the floor (or without a vector), 1 at floor + span or above, linear between."""
    if cosine is None or cosine <= floor:
        return 0.0
    # Compared before dividing: (floor + span - floor) / span can round to just under 1.
    if cosine >= floor + span:
        return 1.0
    return (cosine - floor) / span


def every_word(lexical_score: float) -> bool:
    """Whether a hit holds every query word (lexicalScore 1, up to float rounding)."""
    return lexical_score >= 1.0 - 1e-9


def fused_score(
    lexical_score: float,
    cosine: float | None,
    decay: float,
    floor: float,
    span: float,
    weight: float = WEIGHT,
) -> float:
    """A member's score, 0 to 1."""
    fused = weight * lexical_score + (1 - weight) * semantic_part(cosine, floor, span) * decay
    return EVERY_WORD + fused / 2 if every_word(lexical_score) else fused / 2


def fuse(
    lexical: Mapping[str, float],
    cosines: Mapping[str, float],
    decays: Mapping[str, float],
    *,
    floor: float,
    span: float,
    limit: int,
    near_misses: int = 0,
    weight: float = WEIGHT,
    order: Sequence[str] = (),
) -> tuple[list[Scored], int]:
    """The ranked hits (at most `limit`, then up to `near_misses` near misses) and the member count.

    - `lexical`: each word match's lexicalScore.
    - `cosines`: the cosine of every memory that has a vector and may be returned.
    - `decays`: the recency weight of every member (missing: 1).
    - `order`: the lexical order of the word matches, the last tie-break (then the id).
    """
    rank_in_words = {memory_id: n for n, memory_id in enumerate(order)}
    members = set(lexical) | {memory_id for memory_id, cosine in cosines.items() if cosine >= floor}
    scored = [
        Scored(
            memory_id,
            fused_score(
                lexical.get(memory_id, 0.0),
                cosines.get(memory_id),
                decays.get(memory_id, 1.0),
                floor,
                span,
                weight,
            ),
            lexical.get(memory_id, 0.0),
            cosines.get(memory_id),
        )
        for memory_id in members
    ]
    scored.sort(
        key=lambda hit: (
            -hit.score,
            -(hit.semantic_score if hit.semantic_score is not None else -2.0),
            rank_in_words.get(hit.memory_id, len(rank_in_words)),
            hit.memory_id,
        )
    )
    hits = scored[:limit]
    if near_misses:
        closest = heapq.nsmallest(
            near_misses,
            ((-cosine, memory_id) for memory_id, cosine in cosines.items() if memory_id not in members),
        )
        hits += [
            Scored(memory_id, 0.0, 0.0, cosine, near_miss=True)
            for cosine, memory_id in ((-c, i) for c, i in closest)
        ]
    return hits, len(members)
