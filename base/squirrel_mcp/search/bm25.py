"""Word search over the index of decrypted memories: BM25 times each category's recency decay.

This is the base package's ranking. It runs locally, over the in-memory index of
the vault, because storage only ever holds ciphertext. How terms are made is in
`squirrel_mcp.text.tokens`; how fields are weighted, in `squirrel_mcp.search.index`;
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
import itertools
import math
import operator
from collections.abc import Callable, Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from datetime import datetime

from squirrel_mcp.core.models import Revision, parse_iso
from squirrel_mcp.search.index import HALF, SECONDS_PER_DAY, SearchIndex, recency
from squirrel_mcp.search.ranking import Candidate
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

# A search ranks every SAMPLE-th score first to find a floor for the best (`_cutoff`).
SAMPLE = 16

# Finding one document in one posting by bisection costs about as much as walking this
# many of a posting's entries: past that, walking the postings is cheaper.
PROBE_COST = 8

NO_WORDS_NOTE = (
    "This query has no letter or digit in any script, so it cannot be searched by words. "
    "Search with words instead."
)
ONLY_STOPWORDS_NOTE = (
    "This query holds only common words (such as 'the', 'is', 'what'), which say nothing about "
    "what to find, so it was not searched by words. Search with the words that matter: a name, "
    "a thing, a place."
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


def _holding(index: SearchIndex, term: str, found: list[str], docs: Collection[int]) -> dict[int, float]:
    """How fully each of `docs` holds query term `term`, given the index terms it finds: 1 or HALF; absent, 0.

    A memory holds the term in full only by the term itself held whole; by a hyphen
    part, or by a longer word beginning with it, at HALF. Probes each document's place
    in each posting when `docs` are few (the top hits), or walks the postings when they
    are many (every match, for a ranker).
    """
    postings = [index.postings[match] for match in found]
    if len(docs) * len(postings) * PROBE_COST < sum(map(len, postings)):
        levels: dict[int, float] = {}
        for doc in docs:
            level = max((_level(index, term, match, doc) for match in found), default=0.0)
            if level:
                levels[doc] = level
        return levels
    wholly: set[int] = set()
    partly: set[int] = set()
    for match, posting in zip(found, postings, strict=True):
        partial = index.partial.get(match)
        if match != term:
            partly.update(posting.docs)
        elif partial is None:
            wholly.update(posting.docs)
        else:
            wholly.update(set(posting.docs) - partial)
            partly.update(partial)
    levels = dict.fromkeys(partly - wholly, HALF)
    levels.update(dict.fromkeys(wholly, 1.0))
    return {doc: levels[doc] for doc in levels.keys() & docs}


def _level(index: SearchIndex, term: str, match: str, doc: int) -> float:
    """How fully document `doc` holds query term `term` by index term `match`: 1, HALF or 0."""
    level = index.level(match, doc)
    return level if match == term else min(level, HALF)


def _lexical_scores(
    index: SearchIndex, wanted: list[QueryWord], matches: dict[str, list[str]], chosen: list[int]
) -> dict[int, float]:
    """Each chosen document's lexicalScore: the share of the content words `wanted` it holds."""
    totals = dict.fromkeys(chosen, 0.0)
    for word in wanted:
        whole = _holding(index, word.term, matches[word.term], chosen)
        if not word.parts:
            for doc, level in whole.items():
                totals[doc] += level
            continue
        parts = [_holding(index, part, matches[part], chosen) for part in word.parts]
        for doc in chosen:
            totals[doc] += _held(whole.get(doc, 0.0), [part.get(doc, 0.0) for part in parts])
    return {doc: total / len(wanted) for doc, total in totals.items()}


def _held(whole: float, parts: list[float]) -> float:
    """How fully a memory holds a hyphenated query word, 0 to 1, from how fully it holds it and each part."""
    if whole == 1.0:
        return whole
    # A hyphenated query word missing whole still counts half for each part held
    # (a quarter for a part held only at half). It is held in full only when every
    # part is, as words of their own ("pi hole"), so lexicalScore 1 keeps its meaning.
    cap = 1.0 if min(parts) == 1.0 else HALF
    return max(whole, min(cap, HALF * sum(parts)))


def search(
    index: SearchIndex,
    query: str,
    now: datetime,
    *,
    limit: int | None = None,
    keep: Callable[[Revision], bool] | None = None,
    projects: Collection[str | None] | None = None,
) -> Outcome:
    """Rank the indexed memories by BM25 over their words times their recency decay.

    A memory matches when it holds at least one of the query's content words, whole
    or in part, or a word beginning with one of three or more characters (stopwords
    alone do not make a match; a query of stopwords only gets ONLY_STOPWORDS_NOTE and
    no hits); only the words `plan` keeps count. `keep` filters
    memories (category, tags); `projects` keeps only the memories of these projects
    (None in it: those with no project; None: every project); `limit` caps the hits
    returned, while `total` counts every match.
    """
    if not has_letter_or_digit(query):
        return Outcome([], 0, NO_WORDS_NOTE)
    with index.lock:
        planned = plan(index, query)
        matches = planned.matches
        wanted = content_words(planned.words)
        if not wanted:
            return Outcome([], 0, ONLY_STOPWORDS_NOTE)
        wanted_terms = {word.term for word in wanted} | {part for word in wanted for part in word.parts}
        # Each distinct term's weight in the query: whole words count fully, hyphen parts half.
        weights = dict.fromkeys([part for word in planned.words for part in word.parts], HALF)
        weights.update(dict.fromkeys([word.term for word in planned.words], 1.0))
        # Each term's documents and weights, with how many memories count for its idf.
        tables = {term: _table(index, term, matches[term]) for term in weights if matches[term]}
        matched: set[int] | None = None
        restrict: set[str] = set()
        if keep is not None or not wanted_terms.issuperset(tables):
            # Stopwords only add to memories a content word matched, and a filter drops some.
            matched = set().union(*(tables[term][0] for term in wanted_terms if term in tables))
            if keep is not None and projects is not None:
                # By set intersection first, so `keep` is asked about fewer memories.
                matched = _within(index, matched, projects)
            if keep is not None:
                matched = {doc for doc in matched if keep(_revision(index, doc))}
            restrict = set(tables) if keep is not None else set(tables) - wanted_terms
        sums = _scores(index, weights, tables, matched, restrict) if matched is None or matched else {}
        if projects is not None and keep is None:
            # Every match is scored as in an unscoped search, which adds a posting's weights in
            # C; filtering each posting first would cost more than that. Then only the
            # projects' matches are kept, the same numbers: a score is per memory.
            inside = _within(index, sums.keys(), projects)
            sums = dict(zip(inside, map(sums.__getitem__, inside), strict=True))
        if not sums:
            return Outcome([], 0)
        fading = index.fading(now.timestamp())
        # Each score times its category's decay since the epoch, in one pass.
        docs = list(sums)
        decays = map(fading.__getitem__, map(index.categories.__getitem__, docs))
        scores = list(map(operator.mul, sums.values(), decays))
        total = len(docs)
        if limit is not None and limit < total:
            # Only the best need lexicalScore; keep every tie of the last one for the tie-break.
            cutoff = _cutoff(scores, limit)
            best = dict(itertools.compress(zip(docs, scores, strict=True), map(cutoff.__le__, scores)))
        else:
            best = dict(zip(docs, scores, strict=True))
        chosen = list(best)
        shares = _lexical_scores(index, wanted, matches, chosen)
        hits = [Candidate(_revision(index, doc), best[doc], shares[doc]) for doc in chosen]
    hits.sort(key=lambda hit: (-hit.score, -hit.lexical_score, hit.memory.id))
    return Outcome(hits[:limit], total)


def _within(index: SearchIndex, docs: AbstractSet[int], projects: Collection[str | None]) -> set[int]:
    """Those of `docs` in one of `projects` (None: no project), by set intersection. Under the lock."""
    inside: set[int] = set()
    for project in projects:
        # An intersection walks the smaller side: a rare word's matches, or a small project.
        inside |= index.in_project(project) & docs
    return inside


def _cutoff(scores: list[float], limit: int) -> float:
    """The `limit`-th largest of `scores` (at least that many of them), mostly in C.

    The `limit`-th largest of every SAMPLE-th score is no larger, so only the scores
    at or above it, a few dozen, are ranked one by one.
    """
    sample = scores[::SAMPLE]
    if len(sample) >= limit:
        floor = heapq.nlargest(limit, sample)[-1]
        scores = list(filter(floor.__le__, scores))
    return heapq.nlargest(limit, scores)[-1]


# A term's documents and their weights, and how many memories count for its idf.
Table = tuple[Sequence[int] | dict[int, float], Iterable[float], int]


def _scores(
    index: SearchIndex,
    weights: dict[str, float],
    tables: dict[str, Table],
    matched: set[int] | None,
    restrict: set[str],
) -> dict[int, float]:
    """Each matched document's BM25 score: the query terms' idf times the document's weight, summed.

    A term adds to every document in its table, or, when it is in `restrict`, only
    to those in `matched` (stopwords, and every term of a filtered search). The terms
    are added in `weights` order, so each sum is the number a term-by-term loop gives.
    """
    count = len(index)
    scores: dict[int, float] = {}
    for term, weight in weights.items():
        if term not in tables:
            continue
        docs, values, frequency = tables[term]
        # BM25's inverse document frequency; the rest of its formula is in the weights.
        gain = weight * math.log(1 + (count - frequency + 0.5) / (frequency + 0.5))
        if matched is not None and term in restrict:
            table = dict(zip(docs, values, strict=True))
            docs = list(table.keys() & matched)
            values = map(table.__getitem__, docs)
        part = dict(zip(docs, map(gain.__mul__, values), strict=True))
        if scores:
            # Where two terms meet the two are added (this sum first); the rest is merged as is.
            both = list(part.keys() & scores.keys())
            sums = map(operator.add, map(scores.__getitem__, both), map(part.__getitem__, both))
            part.update(zip(both, sums, strict=True))
            scores.update(part)
        else:
            scores = part
    return scores


def _table(index: SearchIndex, term: str, found: list[str]) -> Table:
    """One query term's documents and weights, and how many memories count for its idf.

    For a term found by its own spelling alone, its posting. Otherwise each memory's
    best weight over the terms it matches there: the term itself counts in full, a
    term that only begins with it PREFIX of its weight. The memories holding the
    word in any form it matches count for its idf, except where every such form
    weighs nothing (a decay run down to zero), as a term-by-term maximum leaves them out.
    """
    if found == [term]:
        posting = index.postings[term]
        return posting.docs, posting.weights, len(posting)
    # `found` is sorted, so the term itself, when the index holds it, comes first.
    exact = found[0] == term
    best = index.postings[term].table() if exact else {}
    weightless = False
    for match in found[1:] if exact else found:
        posting = index.postings[match]
        longer = dict(zip(posting.docs, map(PREFIX.__mul__, posting.weights), strict=True))
        weightless = weightless or not min(longer.values()) > 0.0
        # Where the memory holds both, the larger weight.
        both = list(best.keys() & longer.keys())
        larger = map(max, map(best.__getitem__, both), map(longer.__getitem__, both))
        longer.update(zip(both, larger, strict=True))
        best.update(longer)
    frequency = len(best)
    if weightless:
        held = set(index.postings[term].docs) if exact else set()
        frequency -= sum(1 for doc, weight in best.items() if weight == 0.0 and doc not in held)
    return best, best.values(), frequency


def _revision(index: SearchIndex, doc: int) -> Revision:
    """The revision of a live document."""
    memory = index.docs[doc]
    assert memory is not None, "postings only hold live documents"
    return memory
