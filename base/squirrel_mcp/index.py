"""The search index: an inverted index over the vault's live memories, kept in memory.

The memory store adds a memory when a new revision of it is decrypted and drops
it when it is deleted, so each save, correction or delete re-tokenizes that one
memory and a search never tokenizes the vault. Like the decrypted view it is
built from, the index lives only in the server's memory and is never written to disk.

Fields are weighted as in BM25F (Robertson, Zaragoza & Taylor, "Simple BM25
extension to multiple weighted fields", 2004): a term's frequency in a memory is
the sum of its counts in each field times the field's weight, and the memory's
length is the weighted sum of its fields' lengths.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from squirrel_mcp.models import Revision, parse_iso
from squirrel_mcp.text.stopwords import STOPWORDS
from squirrel_mcp.text.tokens import document_terms

# The entity, tags and keywords are labels chosen so the memory is found again;
# a word there says more about what the memory is about than the same word said
# in passing in the text, so they count twice.
FIELD_WEIGHTS = {"entity": 2.0, "text": 1.0, "tags": 2.0, "keywords": 2.0}
# A hyphen part, or a character inside a pair, is half a match (the spec's rule).
HALF = 0.5


@dataclass(frozen=True, slots=True)
class Entry:
    """What the index keeps about one memory besides its postings."""

    memory: Revision
    length: float
    updated: float
    # Every term the memory is posted under, to remove it again.
    terms: frozenset[str]
    # Its full terms that are not stopwords: what duplicates are judged by.
    content: frozenset[str]


class SearchIndex:
    """Term -> memory id -> weighted term frequency, for the latest revision of every live memory.

    Hold `lock` while reading `postings`, `partial` and `entries`: tools run in
    worker threads, and a save may update the index during a search.
    """

    def __init__(self, memories: list[Revision] | None = None) -> None:
        """An index holding `memories` (none by default)."""
        self.lock = threading.RLock()
        self.postings: dict[str, dict[str, float]] = {}
        # Memories holding a term only as a hyphen part or inside a pair: they hold it at half.
        self.partial: dict[str, set[str]] = {}
        self.entries: dict[str, Entry] = {}
        self.total_length = 0.0
        for memory in memories or []:
            self.add(memory)

    def __len__(self) -> int:
        """How many memories the index holds."""
        return len(self.entries)

    @property
    def average_length(self) -> float:
        """The mean weighted length of the indexed memories (BM25's avgdl)."""
        return self.total_length / len(self.entries) if self.entries else 0.0

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
        entry = Entry(
            memory=memory,
            length=length,
            updated=parse_iso(memory.updatedAt).timestamp(),
            terms=frozenset(full) | frozenset(half),
            content=frozenset(term for term in full if term not in STOPWORDS),
        )
        with self.lock:
            self.remove(memory.id)
            for term, frequency in full.items():
                self.postings.setdefault(term, {})[memory.id] = frequency + half.pop(term, 0.0)
            for term, frequency in half.items():
                self.postings.setdefault(term, {})[memory.id] = frequency
                self.partial.setdefault(term, set()).add(memory.id)
            self.entries[memory.id] = entry
            self.total_length += length

    def remove(self, memory_id: str) -> None:
        """Drop a memory from the index; nothing happens if it is not there."""
        with self.lock:
            entry = self.entries.pop(memory_id, None)
            if entry is None:
                return
            self.total_length -= entry.length
            for term in entry.terms:
                posting = self.postings[term]
                del posting[memory_id]
                if not posting:
                    del self.postings[term]
                partial = self.partial.get(term)
                if partial is not None:
                    partial.discard(memory_id)
                    if not partial:
                        del self.partial[term]
            if not self.entries:
                # Floating-point drift must not outlive the memories it came from.
                self.total_length = 0.0

    def level(self, term: str, memory_id: str) -> float:
        """How fully a memory holds a term: 1, HALF (only as a part or inside a pair), or 0."""
        posting = self.postings.get(term)
        if posting is None or memory_id not in posting:
            return 0.0
        partial = self.partial.get(term)
        return HALF if partial is not None and memory_id in partial else 1.0
