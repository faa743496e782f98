"""The compact index ranks exactly as a plain search does: the same hits, the same numbers.

tests/lexical_reference.py is the word search written plainly (postings as dicts,
weights summed memory by memory, prefixes found by scanning every term). On
generated vaults (words that share prefixes, hyphens, stopwords, accents, pairs,
memories from the distant past and from the future), every query's hits, scores,
lexicalScores and total must equal the reference's to the last bit, with and
without a limit or a filter, before and after corrections and removals (enough
of them that the index numbers its documents afresh).
"""

from __future__ import annotations

import random
import string
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squirrel_mcp.core.models import HALF_LIFE_DAYS, Revision
from squirrel_mcp.search import bm25
from squirrel_mcp.search.duplicates import likely_duplicates
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.text.tokens import document_terms
from tests import lexical_reference as reference

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vi", "do", "ba", "ge"]
STOP = ["the", "of", "and", "a", "to", "in", "is", "her", "with"]
OTHER = [
    "crème", "Straße", "Pi-hole", "pi", "hole", "e-mail", "东京塔", "猫", "서울에서", "서울",
    "тёмная", "3d", "3ds", "x-ray-vision", "ข้าวเหนียว", "Ångström", "naïve",
]  # fmt: skip


def vocabulary(rng: random.Random) -> list[str]:
    """Pseudo-words of 2 to 4 syllables: many share their first three letters."""
    words = {"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(600)}
    return sorted(words)


def word(rng: random.Random, words: list[str]) -> str:
    """A word, common ones far more often (roughly Zipf), sometimes hyphenated or from another script."""
    roll = rng.random()
    if roll < 0.25:
        return rng.choice(STOP)
    if roll < 0.3:
        return rng.choice(OTHER)
    if roll < 0.35:
        return f"{pick(rng, words)}-{pick(rng, words)}"
    return pick(rng, words)


def pick(rng: random.Random, words: list[str]) -> str:
    return words[min(len(words) - 1, int(rng.paretovariate(1.0)) - 1)]


def revision(rng: random.Random, number: int, words: list[str], revision: int = 1) -> Revision:
    """One memory, mostly from the last four years, a few from 1900 (decayed to nothing) or the future."""
    roll = rng.random()
    if roll < 0.03:
        updated = datetime(1900, 1, 1, tzinfo=UTC)
    elif roll < 0.06:
        updated = datetime.now(UTC) + timedelta(days=400)
    else:
        updated = NOW - timedelta(days=rng.uniform(0, 1500))
    stamp = updated.isoformat().replace("+00:00", "Z")
    return Revision.model_validate(
        {
            "id": f"{number:016x}",
            "entity": rng.choice(["user", "Anna Lo", f"{pick(rng, words).title()}"]),
            "text": " ".join(word(rng, words) for _ in range(rng.randint(1, 30))).capitalize(),
            "tags": list(dict.fromkeys(word(rng, words) for _ in range(rng.randint(0, 2)))),
            "keywords": list(dict.fromkeys(word(rng, words) for _ in range(rng.randint(0, 3)))),
            "category": rng.choice(sorted(HALF_LIFE_DAYS)),
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": revision,
            "change": "created" if revision == 1 else "corrected",
        }
    )


def queries(rng: random.Random, words: list[str], memories: list[Revision]) -> list[str]:
    """Words, prefixes, hyphenated words, stopwords alone, other scripts, and one query past the bounds."""
    found = []
    for _ in range(80):
        count = rng.randint(1, 4)
        if rng.random() < 0.5:
            texts = rng.choice(memories).text.split()
            chosen = rng.sample(texts, min(count, len(texts)))
        else:
            chosen = [word(rng, words) for _ in range(count)]
        # Cut some words short, so they match as prefixes.
        found.append(" ".join(w[: rng.randint(3, 5)] if rng.random() < 0.3 else w for w in chosen))
    found += ["the of", "the kalo", "pi-hole", "pi hole", "hol", "猫", "东", "서울", "ka", "kal", "3d"]
    found.append(" ".join(sorted({w[:3] for w in words})[:80]))
    return found


def same(index: SearchIndex, plain: reference.ReferenceIndex, query: str, **options: object) -> None:
    got = bm25.search(index, query, NOW, **options)  # type: ignore[arg-type]
    want = reference.search(plain, query, NOW, **options)  # type: ignore[arg-type]
    assert [(hit.memory.id, hit.memory.revision, hit.score, hit.lexical_score) for hit in got.hits] == [
        (hit.memory.id, hit.memory.revision, hit.score, hit.lexical_score) for hit in want.hits
    ], query
    assert got.total == want.total, query


def every_way(index: SearchIndex, plain: reference.ReferenceIndex, texts: list[str]) -> None:
    def recent(memory: Revision) -> bool:
        return memory.category in ("event", "task", "note")

    for query in texts:
        same(index, plain, query)
        same(index, plain, query, limit=10)
        same(index, plain, query, limit=1)
        same(index, plain, query, limit=10, keep=recent)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_compact_index_ranks_as_the_plain_search(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A date ahead of the clock counts as the clock's now: one clock for both, so both count alike.
    clock = time.time()
    monkeypatch.setattr(time, "time", lambda: clock)
    rng = random.Random(seed)
    words = vocabulary(rng)
    memories = [revision(rng, number, words) for number in range(1000)]
    index = SearchIndex(memories)
    plain = reference.ReferenceIndex(index.epoch)
    for memory in memories:
        plain.add(memory)
    texts = queries(rng, words, memories)
    every_way(index, plain, texts)
    # Corrections, then removals: more holes than live memories, so the documents are renumbered.
    for number in rng.sample(range(1000), 200):
        corrected = revision(rng, number, words, revision=2)
        index.add(corrected)
        plain.add(corrected)
    removed = rng.sample(range(1000), 900)
    for number in removed:
        index.remove(f"{number:016x}")
        plain.remove(f"{number:016x}")
    for number in range(1000, 1100):
        memory = revision(rng, number, words)
        index.add(memory)
        plain.add(memory)
    assert len(index) == len(plain.memories) == 200
    assert len(index.docs) < 1000, "the holes were closed"
    every_way(index, plain, texts)
    for memory in list(plain.memories.values())[:100]:
        got = likely_duplicates(index, memory)
        want = reference.likely_duplicates(plain, memory)
        assert [(hit.memory.id, hit.score) for hit in got] == [(hit.memory.id, hit.score) for hit in want]
        # From the shorter side, as the page's Duplicates asks: those at least as long.
        longer = likely_duplicates(index, memory, limit=len(index), longer_only=True)
        size = len(reference.text_words(memory))
        every = reference.likely_duplicates(plain, memory, limit=len(index))
        assert [hit.memory.id for hit in longer] == [
            hit.memory.id for hit in every if len(reference.text_words(hit.memory)) >= size
        ]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable, max_size=60))
def test_ascii_text_is_cut_as_any_other(text: str) -> None:
    # A middle dot is no word character and is not ASCII, so it sends the text down the general path.
    assert document_terms(text) == document_terms("\u00b7 " + text)
