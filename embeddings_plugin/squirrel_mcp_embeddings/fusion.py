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

import numpy as np
import numpy.typing as npt

Numbers = npt.NDArray[np.float64]

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


def fused_scores(
    lexical_scores: Numbers,
    cosines: Numbers,
    decays: Numbers,
    floor: float,
    span: float,
    weight: float = WEIGHT,
) -> Numbers:
    """`fused_score` of every member at once, bit for bit the same numbers; NaN cosine: no vector.

    The same operations in the same order, in float64, so each value equals the scalar one.
    """
    top = floor + span
    with np.errstate(invalid="ignore", divide="ignore"):
        part = np.where(cosines <= floor, 0.0, np.where(cosines >= top, 1.0, (cosines - floor) / span))
    part[np.isnan(cosines)] = 0.0
    fused = weight * lexical_scores + (1 - weight) * part * decays
    every = lexical_scores >= 1.0 - 1e-9
    return np.where(every, EVERY_WORD + fused / 2, fused / 2)


def ranked(
    ids: Sequence[str],
    lexical_scores: Numbers,
    cosines: Numbers,
    decays: Numbers,
    word_ranks: npt.NDArray[np.int64],
    *,
    floor: float,
    span: float,
    limit: int,
    weight: float = WEIGHT,
) -> list[Scored]:
    """The first `limit` members in the fused order, from one array per number (member i is ids[i]).

    `cosines` NaN for a member without a vector; `word_ranks` each member's place in the
    lexical order (members found by meaning alone: after every word match). The order is a
    sort by (score down, cosine down, lexical order, id); only the members scoring at least
    the limit-th best score are sorted, which gives the same first `limit`.
    """
    scores = fused_scores(lexical_scores, cosines, decays, floor, span, weight)
    if limit <= 0 or not len(scores):
        return []
    if limit < len(scores):
        kth = -np.partition(-scores, limit - 1)[limit - 1]
        contenders = np.flatnonzero(scores >= kth)
    else:
        contenders = np.arange(len(scores))
    hits = []
    for n in contenders.tolist():
        cosine = float(cosines[n])
        semantic = None if cosine != cosine else cosine
        hits.append(Scored(ids[n], float(scores[n]), float(lexical_scores[n]), semantic))
    rank_of = dict(zip((ids[n] for n in contenders.tolist()), word_ranks[contenders].tolist(), strict=True))
    hits.sort(
        key=lambda hit: (
            -hit.score,
            -(hit.semantic_score if hit.semantic_score is not None else -2.0),
            rank_of[hit.memory_id],
            hit.memory_id,
        )
    )
    return hits[:limit]


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
    members = list(lexical) + sorted(
        memory_id for memory_id, cosine in cosines.items() if cosine >= floor and memory_id not in lexical
    )
    hits = ranked(
        members,
        np.array([lexical.get(memory_id, 0.0) for memory_id in members], dtype=np.float64),
        np.array([cosines.get(memory_id, np.nan) for memory_id in members], dtype=np.float64),
        np.array([decays.get(memory_id, 1.0) for memory_id in members], dtype=np.float64),
        np.array([rank_in_words.get(memory_id, len(rank_in_words)) for memory_id in members], dtype=np.int64),
        floor=floor,
        span=span,
        limit=limit,
        weight=weight,
    )
    if near_misses:
        hits += near_misses_of(cosines, set(members), near_misses)
    return hits, len(members)


def near_misses_of(cosines: Mapping[str, float], members: set[str], count: int) -> list[Scored]:
    """The `count` closest memories of `cosines` that are not members, each with score 0."""
    closest = heapq.nsmallest(
        count, ((-cosine, memory_id) for memory_id, cosine in cosines.items() if memory_id not in members)
    )
    return [Scored(memory_id, 0.0, 0.0, -cosine, near_miss=True) for cosine, memory_id in closest]
