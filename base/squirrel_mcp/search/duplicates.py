"""Which memories may say the same thing as another: save_memory's hint and the page's Duplicates.

Two memories are likely duplicates by words when the shorter one's text shares more
than half of its words, and at least two, with the other's text. Only the texts
count: the entity ("user" on most memories) and the tags and keywords an agent adds
are shared by memories that say different things, and differ between two that say
the same ("Allergic to peanuts" and "Is allergic to peanuts; carries an EpiPen").
The shorter one's words count because a restatement often adds a detail, which a
share of both memories' words holds against it. Its precision and recall on a set
of written pairs are in docs/benchmarks/duplicates.md.

A word is a content word of the text (a full term of `tokens.document_terms`, not a
stopword). There is no stemming, so two words also count as one when they begin
with the same STEM characters or more, and those make up at least STEM_SHARE of the
shorter word: "allergy" and "allergic", "peanut" and "peanuts", not "internet" and
"international". A single word says too little to call anything its repeat, so a
memory of one word is nobody's duplicate.

A plugin may name more, by meaning (the `similar_memories` hook): `with_meaning`
joins the two, those found by words first.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from squirrel_mcp.core.models import Revision
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.search.ranking import Candidate
from squirrel_mcp.text.tokens import text_content

# Two words that begin alike for this many characters or more may be forms of one word.
STEM = 5
# ... when the beginning they share is at least this share of the shorter word.
STEM_SHARE = 0.75
# The fewest words two memories must share to be called duplicates.
FEWEST = 2

# The content words of a memory's text: its full terms that are not stopwords.
text_words = text_content


def same_word(one: str, other: str) -> bool:
    """Whether two words count as one: spelled the same, or the same word's forms (see the module)."""
    if one == other:
        return True
    # zip stops at the shorter word: the beginning two words share is at most that long.
    alike = itertools.takewhile(lambda pair: pair[0] == pair[1], zip(one, other, strict=False))
    common = sum(1 for _ in alike)
    return common >= STEM and common >= STEM_SHARE * min(len(one), len(other))


def _by_stem(words: Iterable[str]) -> dict[str, list[str]]:
    """The words of STEM characters or more, by their first STEM: only those can be forms of one word."""
    found: dict[str, list[str]] = {}
    for word in words:
        if len(word) >= STEM:
            found.setdefault(word[:STEM], []).append(word)
    return found


def _matched(words: frozenset[str], other: frozenset[str], stems: dict[str, list[str]]) -> int:
    """How many of `words` have a word in `other` (`stems`: its words by stem) that counts as the same."""
    same = len(words & other)
    for word in words - other:
        if any(same_word(word, held) for held in stems.get(word[:STEM], ())):
            same += 1
    return same


def overlap(one: frozenset[str], other: frozenset[str]) -> float:
    """The share of the shorter one's words found in the other; 0 when they share fewer than FEWEST.

    A word counts from both sides (the smaller count), so two forms of one word in
    one text are not two shared words.
    """
    shorter = min(len(one), len(other))
    if shorter < FEWEST:
        return 0.0
    shared = min(_matched(one, other, _by_stem(other)), _matched(other, one, _by_stem(one)))
    return shared / shorter if shared >= FEWEST else 0.0


def is_duplicate(share: float) -> bool:
    """Whether an `overlap` calls two memories duplicates: more than half the shorter one's words."""
    return share > 0.5


def _forms(index: SearchIndex, word: str) -> list[str]:
    """The index's terms that count as `word` (hold the index's lock)."""
    if len(word) < STEM:
        return [word] if word in index.postings else []
    return [term for term in index.expand(word[:STEM]) if same_word(word, term)]


def likely_duplicates(
    index: SearchIndex,
    new: Revision,
    limit: int = 3,
    keep: Callable[[Revision], bool] | None = None,
    *,
    longer_only: bool = False,
) -> list[Candidate]:
    """Other memories that may say the same as `new` by words, the closest first (see the module).

    Each comes with its overlap as both its scores. `new` must already be in the
    index (the store indexes every saved revision). `keep`: only memories it keeps
    (those the saver may see: its projects). `longer_only`: only memories whose text
    has at least as many words as `new`'s; a caller that asks this of every memory
    finds every pair from its shorter side, and the search is narrower.
    """
    words = text_words(new.text)
    if len(words) < FEWEST:
        return []
    found: list[Candidate] = []
    with index.lock:
        own = index.number(new.id)
        assert own is not None, "the store indexes every saved revision"
        holders = {word: _holders(index, word) for word in words}
        if longer_only:
            # A longer memory holds more than half of `words`, so it holds one of any
            # len - len // 2 of them: the rarest, so that common words ("prefers")
            # never make every memory a candidate (prefix filtering).
            rarest = sorted(words, key=lambda word: (len(holders[word]), word))[
                : len(words) - len(words) // 2
            ]
            allowed: set[int] | None = set().union(*(holders[word] for word in rarest))
        else:
            allowed = None
        # How many of `words` each memory holds in any field: at least what its text shares. A
        # memory holding fewer than its text would need to share is left without reading its text.
        held = Counter(doc for docs in holders.values() for doc in docs if allowed is None or doc in allowed)
        size = len(words)
        for doc, count in held.items():
            # More than half the shorter one's words, and at least FEWEST, as `overlap` asks.
            if count < FEWEST or doc == own:
                continue
            their_size = index.content_count(doc)
            if count <= min(size, their_size) // 2 or (longer_only and their_size < size):
                continue
            memory = index.docs[doc]
            assert memory is not None, "postings only hold live documents"
            share = overlap(words, text_words(memory.text))
            if is_duplicate(share) and (keep is None or keep(memory)):
                found.append(Candidate(memory, share, share))
    found.sort(key=lambda hit: (-hit.score, hit.memory.id))
    return found[:limit]


def _holders(index: SearchIndex, word: str) -> set[int]:
    """The documents holding `word` in any of its forms, in any field (hold the index's lock)."""
    docs: set[int] = set()
    for term in _forms(index, word):
        docs.update(index.postings[term].docs)
    return docs


@dataclass(frozen=True)
class Duplicate:
    """A memory the new one may repeat: the share of words their texts share, and the closeness in meaning.

    `meaning` is None when no plugin measured it (or it did not name this memory).
    """

    memory: Revision
    overlap: float
    meaning: float | None = None


def with_meaning(
    new: Revision, by_words: Sequence[Candidate], by_meaning: Sequence[tuple[Revision, float]], limit: int = 3
) -> list[Duplicate]:
    """The memories found by words, then those found by meaning alone, `limit` at most.

    Each found by both carries both numbers; one found by meaning alone, its words' overlap.
    """
    closeness = {memory.id: value for memory, value in by_meaning}
    found = [Duplicate(hit.memory, hit.score, closeness.get(hit.memory.id)) for hit in by_words]
    named = {hit.memory.id for hit in by_words}
    words = text_words(new.text)
    found += [
        Duplicate(memory, overlap(words, text_words(memory.text)), value)
        for memory, value in by_meaning
        if memory.id not in named
    ]
    return found[:limit]
