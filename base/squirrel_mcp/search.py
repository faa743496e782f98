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
from dataclasses import dataclass, replace
from datetime import datetime

from squirrel_mcp.index import HALF, SECONDS_PER_DAY, SearchIndex, recency
from squirrel_mcp.models import HALF_LIFE_DAYS, Revision, parse_iso
from squirrel_mcp.ranking import Candidate
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
# like the other partial matches (hyphen parts, characters inside pairs; docs/search.md).
PREFIX = 0.5

# Bounds on the work one query can ask for (`plan`), far above what real queries use:
# the recall corpus's queries have at most 10 distinct terms and the tests' at most 4,
# and an ordinary query word finds at most 39 longer terms in a 100,000-memory vault
# (scripts/bench_search.py's corpus). Without them a query of 250 three-letter
# prefixes, the tool's 1,000 characters, makes every memory a hit and matches
# thousands of terms, all while holding the index lock.
MAX_QUERY_TERMS = 64
MAX_TERM_EXPANSIONS = 512
MAX_QUERY_EXPANSIONS = 2048

NO_WORDS_NOTE = (
    "This query has no letter or digit in any script, so it cannot be searched by words. "
    "Search with words instead."
)


def decay(category: str, age_days: float) -> float:
    """The category's recency weight: 1 when new, halving every half-life (HALF_LIFE_DAYS)."""
    return recency(category, max(0.0, age_days) * SECONDS_PER_DAY)


def age_days(memory: Revision, now: datetime) -> float:
    """Days since the memory last changed as of `now`, as `decay` counts them (never negative)."""
    return max(0.0, (now - parse_iso(memory.updatedAt)).total_seconds() / SECONDS_PER_DAY)


@dataclass(frozen=True)
class Outcome:
    """The best hits in rank order, how many matched in all, and a note for the agent when there is one.

    The hits are the `Candidate`s a ranker is handed, as they are.
    """

    hits: list[Candidate]
    total: int
    note: str | None = None


@dataclass(frozen=True)
class Plan:
    """What one query looks up in the index, within the limits above."""

    words: list[QueryWord]
    """The query's distinct words in order, as many as fit in MAX_QUERY_TERMS terms."""
    matches: dict[str, list[str]]
    """Each term of those words (a word, a hyphen part) -> the index terms it finds, sorted."""

    @property
    def expansions(self) -> int:
        """How many index terms the query's terms find beyond their own spelling."""
        return sum(len(found) - (term in found) for term, found in self.matches.items())


def plan(index: SearchIndex, query: str) -> Plan:
    """The words of `query` that count and the index terms each of their terms matches.

    The terms are taken in query order (a word, then its hyphen parts) and the rest
    of the query is left out once MAX_QUERY_TERMS distinct terms are reached. A term
    that may match as a prefix finds its own spelling and at most
    MAX_TERM_EXPANSIONS longer terms (`SearchIndex.expand`), and the query's terms
    together at most MAX_QUERY_EXPANSIONS, given out in query order: a term past
    that finds only its own spelling. So the work a query can ask for is bounded
    whatever it holds.
    """
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
            words.append(replace(word, parts=tuple(parts)))
            break
        words.append(word)
    matches: dict[str, list[str]] = {}
    budget = MAX_QUERY_EXPANSIONS
    with index.lock:
        for term in terms:
            if matches_prefixes(term) and budget > 0:
                found = index.expand(term, min(MAX_TERM_EXPANSIONS, budget))
                budget -= len(found) - (term in found)
            else:
                found = [term] if term in index.postings else []
            matches[term] = found
    return Plan(words, matches)


def _lexical_scores(
    index: SearchIndex, wanted: list[QueryWord], held: dict[str, dict[str, float]], chosen: list[str]
) -> dict[str, float]:
    """Each chosen memory's lexicalScore: the share of the content words `wanted` it holds.

    `held` maps a term that finds other terms than itself to how fully each memory
    holds it. Each word walks its memories or the chosen ones, whichever are fewer,
    so a search that keeps every match costs no more per word than its posting.
    """
    totals = dict.fromkeys(chosen, 0.0)

    def level(term: str, memory_id: str) -> float:
        """How fully a memory holds a query term in any form it matches: 1, HALF or 0."""
        table = held.get(term)
        return index.level(term, memory_id) if table is None else table.get(memory_id, 0.0)

    for word in wanted:
        if word.parts:
            for memory_id in chosen:
                totals[memory_id] += _held(word, level, memory_id)
            continue
        table = held.get(word.term)
        if table is None:
            # Found by its own spelling alone: held in full, or at half (a part, inside a pair).
            posting = index.postings.get(word.term, {})
            partial = index.partial.get(word.term, set())
            for memory_id in posting if len(posting) < len(totals) else chosen:
                if memory_id in totals and memory_id in posting:
                    totals[memory_id] += HALF if memory_id in partial else 1.0
        elif len(table) < len(totals):
            for memory_id, value in table.items():
                if memory_id in totals:
                    totals[memory_id] += value
        else:
            for memory_id in chosen:
                totals[memory_id] += table.get(memory_id, 0.0)
    return {memory_id: total / len(wanted) for memory_id, total in totals.items()}


def _held(word: QueryWord, level: Callable[[str, str], float], memory_id: str) -> float:
    """How fully a memory holds one hyphenated query word, 0 to 1; `level` says how fully it holds a term."""
    whole = level(word.term, memory_id)
    if whole == 1.0:
        return whole
    # A hyphenated query word missing whole still counts half for each part held
    # (a quarter for a part held only at half). It is held in full only when every
    # part is, as words of their own ("pi hole"), so lexicalScore 1 keeps its meaning.
    parts = [level(part, memory_id) for part in word.parts]
    cap = 1.0 if min(parts) == 1.0 else HALF
    return max(whole, min(cap, HALF * sum(parts)))


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
    alone do not make a match); only the words `plan` keeps count. `keep` filters
    memories (category, tags); `limit` caps the hits returned, while `total` counts
    every match.
    """
    if not has_letter_or_digit(query):
        return Outcome([], 0, NO_WORDS_NOTE)
    with index.lock:
        planned = plan(index, query)
        words = planned.words
        matches = planned.matches
        wanted = content_words(words)
        wanted_terms = {word.term for word in wanted} | {part for word in wanted for part in word.parts}
        # Each distinct term's weight in the query: whole words count fully, hyphen parts half.
        weights = dict.fromkeys([part for word in words for part in word.parts], HALF)
        weights.update(dict.fromkeys([word.term for word in words], 1.0))
        postings = index.postings
        matched: set[str] = set().union(
            *(postings[match] for term in wanted_terms for match in matches[term])
        )
        if keep is not None:
            matched = {memory_id for memory_id in matched if keep(index.entries[memory_id].memory)}
        if not matched:
            return Outcome([], 0)
        scores = dict.fromkeys(matched, 0.0)
        # For a content term that finds other terms than itself: how fully each memory
        # holds it, worked out once, so lexicalScore costs one look-up per hit and term.
        held: dict[str, dict[str, float]] = {}
        count = len(index)
        for term, weight in weights.items():
            found = matches[term]
            if not found:
                continue
            if found == [term]:
                posting = postings[term]
            else:
                posting = _best_of(postings, term, found)
                if term in wanted_terms:
                    held[term] = _levels(index, found)
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
        shares = _lexical_scores(index, wanted, held, chosen)
        hits = [
            Candidate(index.entries[memory_id].memory, scores[memory_id], shares[memory_id])
            for memory_id in chosen
        ]
    hits.sort(key=lambda hit: (-hit.score, -hit.lexical_score, hit.memory.id))
    return Outcome(hits[:limit], total)


def _levels(index: SearchIndex, found: list[str]) -> dict[str, float]:
    """How fully each memory holds any of `found` (one query term's matches): 1 or HALF."""
    levels: dict[str, float] = {}
    for match in found:
        partial = index.partial.get(match, set())
        for memory_id in index.postings[match]:
            if memory_id in partial:
                levels.setdefault(memory_id, HALF)
            else:
                levels[memory_id] = 1.0
    return levels


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


def likely_duplicates(index: SearchIndex, new: Revision, limit: int = 3) -> list[Candidate]:
    """Other memories that say much the same as `new`: at least half their content words shared.

    Each comes with that share (Jaccard overlap of content words) as both its scores.
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
                found.append(Candidate(entry.memory, overlap, overlap))
    found.sort(key=lambda hit: (-hit.score, hit.memory.id))
    return found[:limit]
