"""Word search over decrypted memories: BM25 times each category's recency decay.

This is the base package's ranking. It runs locally, over the in-memory view of
the vault, because storage only ever holds ciphertext.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from squirrel_mcp.models import HALF_LIFE_DAYS, Revision, parse_iso

# BM25's usual constants (Robertson & Zaragoza, "The Probabilistic Relevance
# Framework", 2009): term-frequency saturation and length normalisation.
BM25_K1 = 1.2
BM25_B = 0.75

# Left out of lexicalScore (the share of the query's content words a memory holds).
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)

NO_WORDS_NOTE = (
    "This query has no letter or digit in any script, so it cannot be searched by words. "
    "Search with words instead."
)

_WORD = re.compile(r"\w+")
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")


def _is_latin(char: str) -> bool:
    return "LATIN" in unicodedata.name(char, "")


def fold(text: str) -> str:
    """Case-fold and drop accents on Latin letters only (crème -> creme, Straße -> strasse)."""
    out: list[str] = []
    latin_base = False
    for char in unicodedata.normalize("NFD", text):
        if unicodedata.combining(char):
            if not latin_base:
                out.append(char)
            continue
        latin_base = _is_latin(char)
        out.append(char)
    return unicodedata.normalize("NFC", "".join(out)).casefold()


def tokenize(text: str) -> list[str]:
    """The words of a text, folded."""
    return _WORD.findall(fold(text))


def memory_words(memory: Revision) -> list[str]:
    """Every word a memory can be found by: entity, text, tags and keywords."""
    return tokenize(" ".join([memory.entity, memory.text, *memory.tags, *memory.keywords]))


def content_words(words: list[str]) -> list[str]:
    """The words that are not stopwords, or all of them when every one is."""
    kept = [word for word in words if word not in STOPWORDS]
    return kept or words


def decay(memory: Revision, now: datetime) -> float:
    """The category's recency weight: 1 when new, halving every half-life."""
    half_life = HALF_LIFE_DAYS[memory.category]
    if half_life is None:
        return 1.0
    age_days = max(0.0, (now - parse_iso(memory.updatedAt)).total_seconds() / 86_400)
    return float(0.5 ** (age_days / half_life))


@dataclass(frozen=True)
class Hit:
    """One search result before it becomes a tool result."""

    memory: Revision
    score: float
    lexical_score: float


@dataclass(frozen=True)
class Outcome:
    """All hits in rank order, and a note for the agent when there is one."""

    hits: list[Hit]
    note: str | None = None


def search(memories: list[Revision], query: str, now: datetime) -> Outcome:
    """Rank `memories` by BM25 over their words times their recency decay."""
    if not _LETTER_OR_DIGIT.search(query):
        return Outcome([], NO_WORDS_NOTE)
    query_terms = sorted(set(tokenize(query)))
    wanted = set(content_words(query_terms))
    documents = [(memory, Counter(memory_words(memory))) for memory in memories]
    if not documents:
        return Outcome([])
    average_length = sum(sum(counts.values()) for _, counts in documents) / len(documents)
    document_frequency = Counter(term for _, counts in documents for term in query_terms if term in counts)
    hits = []
    for memory, counts in documents:
        held = [term for term in query_terms if term in counts]
        if not held:
            continue
        length = sum(counts.values())
        bm25 = 0.0
        for term in held:
            df = document_frequency[term]
            idf = math.log(1 + (len(documents) - df + 0.5) / (df + 0.5))
            tf = counts[term]
            bm25 += (
                idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average_length))
            )
        lexical_score = len(wanted.intersection(held)) / len(wanted)
        hits.append(Hit(memory, bm25 * decay(memory, now), lexical_score))
    hits.sort(key=lambda hit: (-hit.score, -hit.lexical_score, hit.memory.id))
    return Outcome(hits)


def likely_duplicates(memories: list[Revision], new: Revision, limit: int = 3) -> list[Hit]:
    """Other memories that say much the same as `new`: at least half their content words shared."""
    new_words = set(content_words(memory_words(new)))
    found = []
    for memory in memories:
        if memory.id == new.id:
            continue
        words = set(content_words(memory_words(memory)))
        overlap = len(new_words & words) / max(1, len(new_words | words))
        if overlap >= 0.5:
            found.append(Hit(memory, overlap, overlap))
    found.sort(key=lambda hit: (-hit.score, hit.memory.id))
    return found[:limit]
