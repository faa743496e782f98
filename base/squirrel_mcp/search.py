"""Word search over the index of decrypted memories: BM25 times each category's recency decay.

This is the base package's ranking. It runs locally, over the in-memory index of
the vault, because storage only ever holds ciphertext. How terms are made is in
`squirrel_mcp.text.tokens`; how fields are weighted, in `squirrel_mcp.index`;
the user's account of it all, in docs/search.md.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from squirrel_mcp.index import HALF, SearchIndex
from squirrel_mcp.models import HALF_LIFE_DAYS, Revision
from squirrel_mcp.text.tokens import QueryWord, content_words, has_letter_or_digit, query_words

# BM25's usual constants (Robertson & Zaragoza, "The Probabilistic Relevance
# Framework", 2009): term-frequency saturation and length normalisation.
BM25_K1 = 1.2
BM25_B = 0.75

NO_WORDS_NOTE = (
    "This query has no letter or digit in any script, so it cannot be searched by words. "
    "Search with words instead."
)

SECONDS_PER_DAY = 86_400.0


def decay(category: str, age_days: float) -> float:
    """The category's recency weight: 1 when new, halving every half-life (HALF_LIFE_DAYS)."""
    half_life = HALF_LIFE_DAYS[category]
    if half_life is None:
        return 1.0
    return float(0.5 ** (max(0.0, age_days) / half_life))


@dataclass(frozen=True)
class Hit:
    """One search result before it becomes a tool result."""

    memory: Revision
    score: float
    lexical_score: float


@dataclass(frozen=True)
class Outcome:
    """The best hits in rank order, how many matched in all, and a note for the agent when there is one."""

    hits: list[Hit]
    total: int
    note: str | None = None


def _held(index: SearchIndex, word: QueryWord) -> dict[str, float]:
    """How fully each memory holds one query word, 0 to 1, for memories that hold it at all."""
    levels = {memory_id: index.level(word.term, memory_id) for memory_id in index.postings.get(word.term, ())}
    if word.parts:
        # A hyphenated query word missing whole still counts half for each part held
        # (a quarter for a part held only at half). It is held in full only when every
        # part is, as words of their own ("pi hole"), so lexicalScore 1 keeps its meaning.
        from_parts: dict[str, list[float]] = {}
        for part in word.parts:
            for memory_id in index.postings.get(part, ()):
                from_parts.setdefault(memory_id, []).append(index.level(part, memory_id))
        for memory_id, held in from_parts.items():
            cap = 1.0 if len(held) == len(word.parts) and min(held) == 1.0 else HALF
            level = min(cap, HALF * sum(held))
            levels[memory_id] = max(levels.get(memory_id, 0.0), level)
    return levels


def search(
    index: SearchIndex,
    query: str,
    now: datetime,
    *,
    limit: int | None = None,
    keep: Callable[[Revision], bool] | None = None,
) -> Outcome:
    """Rank the indexed memories by BM25 over their words times their recency decay.

    A memory matches when it holds at least one of the query's content words
    (stopwords alone do not make a match). `keep` filters memories (category,
    tags); `limit` caps the hits returned, while `total` counts every match.
    """
    if not has_letter_or_digit(query):
        return Outcome([], 0, NO_WORDS_NOTE)
    words = query_words(query)
    wanted = content_words(words)
    # Each distinct term's weight in the query: whole words count fully, hyphen parts half.
    weights: dict[str, float] = {}
    for word in words:
        weights[word.term] = 1.0
    for word in words:
        for part in word.parts:
            weights.setdefault(part, HALF)
    with index.lock:
        held: dict[str, float] = {}
        for word in wanted:
            for memory_id, level in _held(index, word).items():
                held[memory_id] = held.get(memory_id, 0.0) + level
        if keep is not None:
            held = {memory_id: h for memory_id, h in held.items() if keep(index.entries[memory_id].memory)}
        if not held:
            return Outcome([], 0)
        count = len(index)
        # BM25's denominator tf + k1 * (1 - b + b * dl / avgdl), split into constants per search.
        base = BM25_K1 * (1 - BM25_B)
        per_length = BM25_K1 * BM25_B / index.average_length
        bm25 = dict.fromkeys(held, 0.0)
        for term, weight in weights.items():
            posting = index.postings.get(term)
            if posting is None:
                continue
            frequency = len(posting)
            idf = math.log(1 + (count - frequency + 0.5) / (frequency + 0.5))
            gain = weight * idf * (BM25_K1 + 1)
            for memory_id in held.keys() & posting.keys() if len(held) < len(posting) else posting:
                if memory_id in bm25:
                    tf = posting[memory_id]
                    length = index.entries[memory_id].length
                    bm25[memory_id] += gain * tf / (tf + base + per_length * length)
        now_seconds = now.timestamp()
        scored = []
        for memory_id, score in bm25.items():
            entry = index.entries[memory_id]
            age_days = (now_seconds - entry.updated) / SECONDS_PER_DAY
            lexical = min(1.0, held[memory_id] / len(wanted))
            scored.append((-score * decay(entry.memory.category, age_days), -lexical, memory_id))
        best = sorted(scored) if limit is None else heapq.nsmallest(limit, scored)
        hits = [Hit(index.entries[memory_id].memory, -score, -lexical) for score, lexical, memory_id in best]
    return Outcome(hits, len(scored))


def likely_duplicates(index: SearchIndex, new: Revision, limit: int = 3) -> list[Hit]:
    """Other memories that say much the same as `new`: at least half their content words shared.

    `new` must already be in the index (the store indexes every saved revision).
    """
    with index.lock:
        words = index.entries[new.id].content
        candidates: set[str] = set()
        for term in words:
            candidates.update(index.postings.get(term, ()))
        candidates.discard(new.id)
        found = []
        for memory_id in candidates:
            entry = index.entries[memory_id]
            overlap = len(words & entry.content) / max(1, len(words | entry.content))
            if overlap >= 0.5:
                found.append(Hit(entry.memory, overlap, overlap))
    found.sort(key=lambda hit: (-hit.score, hit.memory.id))
    return found[:limit]
