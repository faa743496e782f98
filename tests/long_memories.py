"""The long-memory set (tests/data/long_memories.json): facts inside long memories, and on their own.

Each entry is a long memory of one kind people save (a meeting's notes, a recipe, a
setup, an itinerary, ...), its `paragraphs`, plus one `fact` and a `question` that asks
about the fact without any word of the memory: words alone cannot find it, only its
meaning can. The fact goes first, in the middle (after half of the paragraphs) or last,
so a long memory is 1,500 to 4,000 characters with it; saved as a memory of its own, the
fact keeps the long memory's entity. Everything in it was written for this set.

tests/test_long_memories.py checks those properties and searches the set through the
real server; scripts/bench_long_memories.py measures it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from squirrel_mcp.text.tokens import content_words, document_terms, matches_prefixes, query_words

SET = Path(__file__).parent / "data" / "long_memories.json"
POSITIONS = ("first", "middle", "last")
SHORTEST, LONGEST = 1_500, 4_000


@dataclass(frozen=True)
class LongMemory:
    """One entry of the set."""

    name: str
    entity: str
    question: str
    fact: str
    paragraphs: tuple[str, ...]

    def text(self, position: str | None) -> str:
        """The long memory with its fact at `position` (one of POSITIONS), or without it (None)."""
        paragraphs = list(self.paragraphs)
        if position is not None:
            at = {"first": 0, "middle": len(paragraphs) // 2, "last": len(paragraphs)}[position]
            paragraphs.insert(at, self.fact)
        return "\n\n".join(paragraphs)


def load() -> list[LongMemory]:
    """The set, in file order."""
    data = json.loads(SET.read_text(encoding="utf-8"))
    return [
        LongMemory(
            entry["name"], entry["entity"], entry["question"], entry["fact"], tuple(entry["paragraphs"])
        )
        for entry in data["memories"]
    ]


def shared_words(query: str, text: str) -> list[str]:
    """The query's content words that find `text` by its words: the same term, or one it begins."""
    terms = document_terms(text)
    held = set(terms.full) | set(terms.half)
    shared = []
    for word in content_words(query_words(query)):
        for term in (word.term, *word.parts):
            if term in held or (matches_prefixes(term) and any(other.startswith(term) for other in held)):
                shared.append(term)
    return shared
