"""The search index: an inverted index over the vault's live memories, kept in memory.

The memory store adds a memory when a new revision of it is decrypted and drops
it when it is deleted, so each save, correction or delete re-tokenizes that one
memory and a search never tokenizes the vault. Like the decrypted view it is
built from, the index lives only in the server's memory and is never written to disk.

Each posting holds the memory's BM25 term weight for that term, computed once when
the memory is indexed (an impact-ordered index in the sense of Anh & Moffat,
"Pruned query evaluation using pre-computed impacts", 2006), so a search only adds
up weights. Two choices make that possible:

- Fields are weighted as in BM25F (Robertson, Zaragoza & Taylor, "Simple BM25
  extension to multiple weighted fields", 2004): a term's frequency is the sum of
  its counts in each field times the field's weight, and the memory's length is
  the weighted sum of its fields' lengths.
- Length is normalised against a fixed typical memory length rather than the
  vault's running average, so one save never changes every other memory's weights.
- The recency decay is split in two: the part from the memory's date to the index's
  epoch is folded into its weights; the part from the epoch to now is the same for
  every memory of a category and is applied per search.

A query word of three or more characters also finds the terms that begin with it
(`squirrel_mcp.text.tokens`). The index keeps its terms in a sorted list, the
vocabulary, so the terms beginning with a word are one bisection and a short walk
away (`expand`), never a scan of every term. The list is brought up to date at the
first search after a change: the terms that appeared or vanished since are put in
or taken out one by one by bisection, or, after many changes (a vault unlocked,
another process's batch of writes), the list is sorted again from scratch.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass

from squirrel_mcp.models import HALF_LIFE_DAYS, Revision, parse_iso
from squirrel_mcp.text.stopwords import STOPWORDS
from squirrel_mcp.text.tokens import begins_with, document_terms

# The entity, tags and keywords are labels chosen so the memory is found again;
# a word there says more about what the memory is about than the same word said
# in passing in the text, so they count twice.
FIELD_WEIGHTS = {"entity": 2.0, "text": 1.0, "tags": 2.0, "keywords": 2.0}
# A hyphen part, or a character inside a pair, is half a match (docs/search.md).
HALF = 0.5
SECONDS_PER_DAY = 86_400.0
# BM25's usual constants (Robertson & Zaragoza, "The Probabilistic Relevance
# Framework", 2009): term-frequency saturation and length normalisation.
BM25_K1 = 1.2
BM25_B = 0.75
# BM25's avgdl, fixed: a memory is a sentence or two; with the entity and labels
# counted twice that is about 30 weighted words.
TYPICAL_LENGTH = 30.0
# Past this many changed terms, sorting the vocabulary again beats bisecting each in.
RESORT_CHANGES = 256


@dataclass(frozen=True, slots=True)
class Entry:
    """What the index keeps about one memory besides its postings."""

    # Tuples, not sets: a third of the size, and these are only ever scanned.
    memory: Revision
    # Every term the memory is posted under, to remove it again.
    terms: tuple[str, ...]
    # Its distinct full terms that are not stopwords: what duplicates are judged by.
    content: tuple[str, ...]


def saturate(tf: float, denominator: float) -> float:
    """BM25's term-frequency part: tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl))."""
    return tf * (BM25_K1 + 1) / (tf + denominator)


def halvings(category: str, seconds: float) -> float:
    """How many half-lives of `category` fit in `seconds` (0 for a category that never fades)."""
    half_life = HALF_LIFE_DAYS[category]
    return 0.0 if half_life is None else seconds / (half_life * SECONDS_PER_DAY)


def recency(category: str, seconds: float) -> float:
    """The category's recency weight after `seconds`: 1 when new, halving every half-life."""
    return float(0.5 ** halvings(category, seconds))


class SearchIndex:
    """Term -> memory id -> BM25 weight times decay to the epoch, for every live memory's latest revision.

    Hold `lock` while reading `postings`, `partial`, `entries` and `categories`, or
    calling `expand`: tools run in worker threads, and a save may update the index
    during a search.
    """

    def __init__(self, memories: list[Revision] | None = None) -> None:
        """An index holding `memories` (none by default)."""
        self.lock = threading.RLock()
        # The moment the folded-in decay runs to; any fixed time works, now keeps numbers near 1.
        self.epoch = time.time()
        self.postings: dict[str, dict[str, float]] = {}
        # Memories holding a term only as a hyphen part or inside a pair: they hold it at half.
        self.partial: dict[str, set[str]] = {}
        self.entries: dict[str, Entry] = {}
        # Apart from `entries` because a search reads it for every match.
        self.categories: dict[str, str] = {}
        # Every key of `postings`, sorted, as of the last `expand`; `changed` holds the
        # terms that were added to or dropped from `postings` since.
        self._vocabulary: list[str] = []
        self._changed: set[str] = set()
        for memory in memories or []:
            self.add(memory)

    def __len__(self) -> int:
        """How many memories the index holds."""
        return len(self.entries)

    def memory(self, memory_id: str) -> Revision | None:
        """The indexed revision of a live memory, or None when the index holds no memory with this id."""
        with self.lock:
            entry = self.entries.get(memory_id)
        return None if entry is None else entry.memory

    def add(self, memory: Revision) -> None:
        """Index `memory`, replacing any earlier revision of it."""
        full: dict[str, float] = {}
        half: dict[str, float] = {}
        length = 0.0
        fields = {
            "entity": [memory.entity],
            "text": [memory.text],
            "tags": memory.tags,
            "keywords": memory.keywords,
        }
        for name, values in fields.items():
            weight = FIELD_WEIGHTS[name]
            for value in values:
                terms = document_terms(value)
                length += weight * len(terms.full)
                for term in terms.full:
                    full[term] = full.get(term, 0.0) + weight
                for term in terms.half:
                    half[term] = half.get(term, 0.0) + weight * HALF
        # A date ahead of this machine's clock (another device's) counts as now.
        updated = min(parse_iso(memory.updatedAt).timestamp(), time.time())
        weight = recency(memory.category, self.epoch - updated)
        denominator = BM25_K1 * (1 - BM25_B + BM25_B * length / TYPICAL_LENGTH)
        entry = Entry(
            memory=memory,
            terms=tuple(full.keys() | half.keys()),
            content=tuple(term for term in full if term not in STOPWORDS),
        )
        with self.lock:
            self.remove(memory.id)
            for term, frequency in full.items():
                tf = frequency + half.pop(term, 0.0)
                self._posting(term)[memory.id] = weight * saturate(tf, denominator)
            for term, tf in half.items():
                self._posting(term)[memory.id] = weight * saturate(tf, denominator)
                self.partial.setdefault(term, set()).add(memory.id)
            self.entries[memory.id] = entry
            self.categories[memory.id] = memory.category

    def remove(self, memory_id: str) -> None:
        """Drop a memory from the index; nothing happens if it is not there."""
        with self.lock:
            entry = self.entries.pop(memory_id, None)
            if entry is None:
                return
            del self.categories[memory_id]
            for term in entry.terms:
                posting = self.postings[term]
                del posting[memory_id]
                if not posting:
                    del self.postings[term]
                    self._changed.add(term)
                partial = self.partial.get(term)
                if partial is not None:
                    partial.discard(memory_id)
                    if not partial:
                        del self.partial[term]

    def _posting(self, term: str) -> dict[str, float]:
        """The posting of `term`, made (and the term noted for the vocabulary) if it is new."""
        posting = self.postings.get(term)
        if posting is None:
            posting = self.postings[term] = {}
            self._changed.add(term)
        return posting

    def vocabulary(self) -> list[str]:
        """Every term in the index, sorted: brought up to date with the changes since the last call."""
        with self.lock:
            changed = self._changed
            vocabulary = self._vocabulary
            if len(changed) > RESORT_CHANGES:
                self._vocabulary = sorted(self.postings)
            else:
                for term in changed:
                    position = bisect.bisect_left(vocabulary, term)
                    listed = position < len(vocabulary) and vocabulary[position] == term
                    if term in self.postings and not listed:
                        vocabulary.insert(position, term)
                    elif listed and term not in self.postings:
                        del vocabulary[position]
            changed.clear()
            return self._vocabulary

    def expand(self, prefix: str, limit: int | None = None) -> list[str]:
        """The terms in the index that are `prefix` or begin with it (`tokens.begins_with`), sorted.

        With a `limit`, at most that many longer terms besides `prefix` itself: the
        shortest, and of the same length the first in sorted order. The shortest are
        the nearest forms of the word ("gardens" before "gardenersworld").
        """
        with self.lock:
            vocabulary = self.vocabulary()
            position = bisect.bisect_left(vocabulary, prefix)
            found = []
            while position < len(vocabulary) and vocabulary[position].startswith(prefix):
                if begins_with(vocabulary[position], prefix):
                    found.append(vocabulary[position])
                position += 1
        exact = found[:1] if found[:1] == [prefix] else []
        if limit is None or len(found) - len(exact) <= limit:
            return found
        # sorted() is stable, so terms of one length keep their sorted order.
        return exact + sorted(sorted(found[len(exact) :], key=len)[:limit])

    def recency_since_epoch(self, category: str, now: float) -> float:
        """The decay from the epoch to `now` (epoch seconds): what a search multiplies by."""
        return recency(category, now - self.epoch)

    def level(self, term: str, memory_id: str) -> float:
        """How fully a memory holds a term: 1, HALF (only as a part or inside a pair), or 0."""
        posting = self.postings.get(term)
        if posting is None or memory_id not in posting:
            return 0.0
        partial = self.partial.get(term)
        return HALF if partial is not None and memory_id in partial else 1.0
