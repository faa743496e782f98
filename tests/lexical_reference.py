"""A straightforward word search to check the compact index against: same rules, no shortcuts.

Postings are dicts of memory id -> weight, a memory's weights are summed term by
term and field by field, each query term's contribution is added memory by memory,
and prefixes are found by scanning every term. It is the search as it was written
before the index became compact (`squirrel_mcp.search.index`, `squirrel_mcp.search.bm25`), kept
here so tests/test_search_reference.py can demand the very same numbers from it.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from datetime import datetime

from squirrel_mcp.core.models import HALF_LIFE_DAYS, Revision, parse_iso
from squirrel_mcp.search.bm25 import (
    MAX_QUERY_EXPANSIONS,
    MAX_QUERY_TERMS,
    MAX_TERM_EXPANSIONS,
    PREFIX,
    Outcome,
)
from squirrel_mcp.search.index import BM25_B, BM25_K1, FIELD_WEIGHTS, HALF, TYPICAL_LENGTH, recency, saturate
from squirrel_mcp.search.ranking import Candidate
from squirrel_mcp.text.stopwords import STOPWORDS
from squirrel_mcp.text.tokens import (
    QueryWord,
    begins_with,
    content_words,
    document_terms,
    has_letter_or_digit,
    matches_prefixes,
    query_words,
)


class ReferenceIndex:
    """Term -> memory id -> weight; the decay folded in up to `epoch`, as the real index does."""

    def __init__(self, epoch: float) -> None:
        self.epoch = epoch
        self.postings: dict[str, dict[str, float]] = {}
        self.partial: dict[str, set[str]] = {}
        self.memories: dict[str, Revision] = {}
        self.terms: dict[str, set[str]] = {}

    def add(self, memory: Revision) -> None:
        self.remove(memory.id)
        full: dict[str, float] = {}
        half: dict[str, float] = {}
        length = 0.0
        fields = {"entity": [memory.entity], "text": [memory.text]}
        for name, values in {**fields, "tags": memory.tags, "keywords": memory.keywords}.items():
            weight = float(FIELD_WEIGHTS[name])
            for value in values:
                terms = document_terms(value)
                length += weight * len(terms.full)
                for term in terms.full:
                    full[term] = full.get(term, 0.0) + weight
                for term in terms.half:
                    half[term] = half.get(term, 0.0) + weight * HALF
        updated = min(parse_iso(memory.updatedAt).timestamp(), time.time())
        decay = recency(memory.category, self.epoch - updated)
        denominator = BM25_K1 * (1 - BM25_B + BM25_B * length / TYPICAL_LENGTH)
        for term, frequency in full.items():
            tf = frequency + half.pop(term, 0.0)
            self.postings.setdefault(term, {})[memory.id] = decay * saturate(tf, denominator)
        for term, tf in half.items():
            self.postings.setdefault(term, {})[memory.id] = decay * saturate(tf, denominator)
            self.partial.setdefault(term, set()).add(memory.id)
        self.memories[memory.id] = memory
        self.terms[memory.id] = {*full, *half}

    def remove(self, memory_id: str) -> None:
        if self.memories.pop(memory_id, None) is None:
            return
        for term in self.terms.pop(memory_id):
            self.postings[term].pop(memory_id, None)
            if not self.postings[term]:
                del self.postings[term]
            if term in self.partial:
                self.partial[term].discard(memory_id)
                if not self.partial[term]:
                    del self.partial[term]

    def expand(self, prefix: str, limit: int) -> list[str]:
        found = sorted(term for term in self.postings if begins_with(term, prefix))
        exact = found[:1] if found[:1] == [prefix] else []
        if len(found) - len(exact) <= limit:
            return found
        return exact + sorted(sorted(found[len(exact) :], key=len)[:limit])

    def level(self, term: str, memory_id: str) -> float:
        if memory_id not in self.postings.get(term, {}):
            return 0.0
        return HALF if memory_id in self.partial.get(term, set()) else 1.0


def plan(index: ReferenceIndex, query: str) -> tuple[list[QueryWord], dict[str, list[str]]]:
    words: list[QueryWord] = []
    terms: dict[str, None] = {}
    for word in query_words(query):
        if word.term not in terms and len(terms) == MAX_QUERY_TERMS:
            break
        terms[word.term] = None
        parts: list[str] = []
        for part in word.parts:
            if part not in terms:
                if len(terms) == MAX_QUERY_TERMS:
                    break
                terms[part] = None
            parts.append(part)
        if len(parts) < len(word.parts):
            words.append(QueryWord(word.term, tuple(parts), word.stopword))
            break
        words.append(word)
    matches: dict[str, list[str]] = {}
    budget = MAX_QUERY_EXPANSIONS
    for term in terms:
        if matches_prefixes(term) and budget > 0:
            found = index.expand(term, min(MAX_TERM_EXPANSIONS, budget))
            budget -= len(found) - (term in found)
        else:
            found = [term] if term in index.postings else []
        matches[term] = found
    return words, matches


def search(
    index: ReferenceIndex,
    query: str,
    now: datetime,
    *,
    limit: int | None = None,
    keep: Callable[[Revision], bool] | None = None,
) -> Outcome:
    if not has_letter_or_digit(query):
        return Outcome([], 0, "no words")
    words, matches = plan(index, query)
    wanted = content_words(words)
    if not wanted:
        return Outcome([], 0, "only stopwords")
    wanted_terms = {word.term for word in wanted} | {part for word in wanted for part in word.parts}
    weights = dict.fromkeys([part for word in words for part in word.parts], HALF)
    weights.update(dict.fromkeys([word.term for word in words], 1.0))
    matched: set[str] = set()
    for term in wanted_terms:
        for match in matches[term]:
            matched.update(index.postings[match])
    if keep is not None:
        matched = {memory_id for memory_id in matched if keep(index.memories[memory_id])}
    if not matched:
        return Outcome([], 0)
    scores = dict.fromkeys(matched, 0.0)
    for term, weight in weights.items():
        found = matches[term]
        if not found:
            continue
        posting: dict[str, float] = {}
        for match in found:
            # The term itself in full, weight or no weight; a longer term PREFIX of it, if more.
            share = 1.0 if match == term else PREFIX
            for memory_id, impact in index.postings[match].items():
                if match == term or share * impact > posting.get(memory_id, 0.0):
                    posting[memory_id] = share * impact
        gain = weight * math.log(1 + (len(index.memories) - len(posting) + 0.5) / (len(posting) + 0.5))
        for memory_id in matched:
            if memory_id in posting:
                scores[memory_id] += gain * posting[memory_id]
    for memory_id in scores:
        seconds = now.timestamp() - index.epoch
        scores[memory_id] *= recency(index.memories[memory_id].category, seconds)
    chosen = list(scores)
    if limit is not None and limit < len(scores):
        cutoff = heapq.nlargest(limit, scores.values())[-1]
        chosen = [memory_id for memory_id in scores if scores[memory_id] >= cutoff]

    def level(term: str, memory_id: str) -> float:
        """How fully the memory holds the query term in any form it matches; a longer word at most half."""
        return max(
            (
                index.level(match, memory_id) if match == term else min(HALF, index.level(match, memory_id))
                for match in matches[term]
            ),
            default=0.0,
        )

    hits = []
    for memory_id in chosen:
        total = 0.0
        for word in wanted:
            whole = level(word.term, memory_id)
            if word.parts and whole < 1.0:
                parts = [level(part, memory_id) for part in word.parts]
                cap = 1.0 if min(parts) == 1.0 else HALF
                whole = max(whole, min(cap, HALF * sum(parts)))
            total += whole
        hits.append(Candidate(index.memories[memory_id], scores[memory_id], total / len(wanted)))
    hits.sort(key=lambda hit: (-hit.score, -hit.lexical_score, hit.memory.id))
    return Outcome(hits[:limit], len(scores))


def text_words(memory: Revision) -> set[str]:
    """The content words of a memory's text alone."""
    return set(document_terms(memory.text).full) - STOPWORDS


def same_word(one: str, other: str) -> bool:
    """Spelled the same, or beginning alike for 5 characters or more and 3/4 of the shorter word."""
    common = 0
    while common < min(len(one), len(other)) and one[common] == other[common]:
        common += 1
    return one == other or (common >= 5 and common >= 0.75 * min(len(one), len(other)))


def likely_duplicates(index: ReferenceIndex, new: Revision, limit: int = 3) -> list[Candidate]:
    """Every other memory whose text shares two words or more, and more than half the shorter one's."""
    words = text_words(new)
    found = []
    for memory_id, memory in index.memories.items():
        theirs = text_words(memory)
        if memory_id == new.id or min(len(words), len(theirs)) < 2:
            continue
        mine_held = sum(1 for word in words if any(same_word(word, their) for their in theirs))
        theirs_held = sum(1 for their in theirs if any(same_word(their, word) for word in words))
        shared = min(mine_held, theirs_held)
        overlap = shared / min(len(words), len(theirs))
        if shared >= 2 and overlap > 0.5:
            found.append(Candidate(memory, overlap, overlap))
    found.sort(key=lambda hit: (-hit.score, hit.memory.id))
    return found[:limit]


assert set(HALF_LIFE_DAYS) >= {"event", "profile"}
