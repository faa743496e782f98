"""Word search over the index of decrypted memories: BM25 times each category's recency decay.

This is the base package's ranking. It runs locally, over the in-memory index of
the vault, because storage only ever holds ciphertext. How terms are made is in
`squirrel_mcp.text.tokens`; how fields are weighted, in `squirrel_mcp.index`;
the user's account of it all, in docs/search.md.

A query word of three or more characters also finds the memory terms that begin
with it (`tokens.matches_prefixes`). For lexicalScore such a match holds the word
like a same-spelled one: in full, or at half for a hyphen part. For BM25, a query
word's weight in a memory is the best of the weights of the terms it matches there,
never their sum, so a memory gains nothing by holding many words that begin alike;
its idf counts the memories holding the word in any of those forms; and a term that
only begins with the word counts PREFIX of its weight, so an exact match always
scores at least as high as a prefix-only match on an otherwise identical memory.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from squirrel_mcp.index import HALF, SECONDS_PER_DAY, SearchIndex, recency
from squirrel_mcp.models import HALF_LIFE_DAYS, Revision
from squirrel_mcp.text.tokens import (
    QueryWord,
    content_words,
    has_letter_or_digit,
    matches_prefixes,
    query_words,
)

# A memory term that only begins with a query word ("allergic" for "allerg") counts this
# share of its BM25 weight: it may be another word ("raspberry" for "ras"), so it says
# less than the word itself, and the word spelled out ranks first among equals. A half,
# like the spec's other partial matches (hyphen parts, characters inside pairs).
PREFIX = 0.5

NO_WORDS_NOTE = (
    "This query has no letter or digit in any script, so it cannot be searched by words. "
    "Search with words instead."
)


def decay(category: str, age_days: float) -> float:
    """The category's recency weight: 1 when new, halving every half-life (HALF_LIFE_DAYS)."""
    return recency(category, max(0.0, age_days) * SECONDS_PER_DAY)


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


def _expansions(index: SearchIndex, term: str) -> list[str]:
    """The index's terms a query term matches: itself, and the longer ones beginning with it if it may."""
    if matches_prefixes(term):
        return index.expand(term)
    return [term] if term in index.postings else []


def _level(index: SearchIndex, terms: list[str], memory_id: str) -> float:
    """How fully a memory holds any of `terms` (one query term's matches): 1, HALF or 0."""
    best = 0.0
    for term in terms:
        level = index.level(term, memory_id)
        if level == 1.0:
            return level
        best = max(best, level)
    return best


def _held(index: SearchIndex, word: QueryWord, matches: dict[str, list[str]], memory_id: str) -> float:
    """How fully a memory holds one query word, 0 to 1; `matches` maps each query term to its matches."""
    level = _level(index, matches[word.term], memory_id)
    if level == 1.0 or not word.parts:
        return level
    # A hyphenated query word missing whole still counts half for each part held
    # (a quarter for a part held only at half). It is held in full only when every
    # part is, as words of their own ("pi hole"), so lexicalScore 1 keeps its meaning.
    parts = [_level(index, matches[part], memory_id) for part in word.parts]
    cap = 1.0 if min(parts) == 1.0 else HALF
    return max(level, min(cap, HALF * sum(parts)))


def search(
    index: SearchIndex,
    query: str,
    now: datetime,
    *,
    limit: int | None = None,
    keep: Callable[[Revision], bool] | None = None,
) -> Outcome:
    """Rank the indexed memories by BM25 over their words times their recency decay.

    A memory matches when it holds at least one of the query's content words, whole
    or in part, or a word beginning with one of three or more characters (stopwords
    alone do not make a match). `keep` filters memories
    (category, tags); `limit` caps the hits returned, while `total` counts every match.
    """
    if not has_letter_or_digit(query):
        return Outcome([], 0, NO_WORDS_NOTE)
    words = query_words(query)
    wanted = content_words(words)
    wanted_terms = {word.term for word in wanted} | {part for word in wanted for part in word.parts}
    # Each distinct term's weight in the query: whole words count fully, hyphen parts half.
    weights = dict.fromkeys([part for word in words for part in word.parts], HALF)
    weights.update(dict.fromkeys([word.term for word in words], 1.0))
    with index.lock:
        postings = index.postings
        matches = {term: _expansions(index, term) for term in weights}
        matched: set[str] = set().union(
            *(postings[match] for term in wanted_terms for match in matches[term])
        )
        if keep is not None:
            matched = {memory_id for memory_id in matched if keep(index.entries[memory_id].memory)}
        if not matched:
            return Outcome([], 0)
        scores = dict.fromkeys(matched, 0.0)
        count = len(index)
        for term, weight in weights.items():
            found = matches[term]
            if not found:
                continue
            posting = postings[term] if found == [term] else _best_of(postings, term, found)
            # The memories holding the word in any form it matches.
            frequency = len(posting)
            # BM25's inverse document frequency; the rest of its formula is in the posting.
            gain = weight * math.log(1 + (count - frequency + 0.5) / (frequency + 0.5))
            if keep is None and term in wanted_terms:
                # Every memory holding a content term matched: no need to check.
                for memory_id, impact in posting.items():
                    scores[memory_id] += gain * impact
            else:
                for memory_id in matched.intersection(posting):
                    scores[memory_id] += gain * posting[memory_id]
        now_seconds = now.timestamp()
        fading = {category: index.recency_since_epoch(category, now_seconds) for category in HALF_LIFE_DAYS}
        categories = index.categories
        for memory_id, score in scores.items():
            scores[memory_id] = score * fading[categories[memory_id]]
        total = len(scores)
        chosen: list[str] = list(scores)
        if limit is not None and limit < total:
            # Only the best need lexicalScore; keep every tie of the last one for the tie-break.
            cutoff = scores[heapq.nlargest(limit, scores, key=scores.__getitem__)[-1]]
            chosen = [memory_id for memory_id, score in scores.items() if score >= cutoff]
        hits = [
            Hit(
                index.entries[memory_id].memory,
                scores[memory_id],
                sum(_held(index, word, matches, memory_id) for word in wanted) / len(wanted),
            )
            for memory_id in chosen
        ]
    hits.sort(key=lambda hit: (-hit.score, -hit.lexical_score, hit.memory.id))
    return Outcome(hits[:limit], total)


def _best_of(postings: dict[str, dict[str, float]], term: str, found: list[str]) -> dict[str, float]:
    """One posting for a query term: each memory's best weight over the terms it matches there.

    The term itself counts in full, a term that only begins with it PREFIX of its weight.
    """
    # `found` is sorted, so the term itself, when the index holds it, comes first.
    exact = found[0] == term
    best = dict(postings[term]) if exact else {}
    for match in found[1:] if exact else found:
        for memory_id, impact in postings[match].items():
            weight = PREFIX * impact
            if weight > best.get(memory_id, 0.0):
                best[memory_id] = weight
    return best


def likely_duplicates(index: SearchIndex, new: Revision, limit: int = 3) -> list[Hit]:
    """Other memories that say much the same as `new`: at least half their content words shared.

    `new` must already be in the index (the store indexes every saved revision).
    """
    with index.lock:
        words = set(index.entries[new.id].content)
        # An overlap of 1/2 needs at least half of `words` shared, so a duplicate holds one
        # of the len // 2 + 1 rarest (prefix filtering, Chaudhuri, Ganti & Kaushik, 2006):
        # the common words ("user") then never make every memory a candidate.
        rarest = sorted(words, key=lambda term: (len(index.postings[term]), term))[: len(words) // 2 + 1]
        candidates: set[str] = set().union(*(index.postings[term] for term in rarest))
        candidates.discard(new.id)
        found = []
        for memory_id in candidates:
            entry = index.entries[memory_id]
            shared = len(words.intersection(entry.content))
            overlap = shared / (len(words) + len(entry.content) - shared)
            if overlap >= 0.5:
                found.append(Hit(entry.memory, overlap, overlap))
    found.sort(key=lambda hit: (-hit.score, hit.memory.id))
    return found[:limit]
