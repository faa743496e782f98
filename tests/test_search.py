"""Lexical search in process: the word-matching rules, BM25 and decay, the incremental index.

The spec's examples live in MEMORIES and CASES, which tests/test_search_stdio.py
runs again through the real server over stdio.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import HALF_LIFE_DAYS, Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.search import bm25
from squirrel_mcp.search.duplicates import likely_duplicates
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp.text import tokens
from squirrel_mcp.text.stopwords import STOPWORDS
from tests import lexical_reference as reference

NOW = datetime(2026, 6, 1, tzinfo=UTC)

# Every memory's text; each case names the memories it must find by these texts.
MEMORIES = [
    "Crème brûlée is her favourite dessert",
    "Ordered creme caramel twice",
    "Photographed the Straße sign",
    "Walked down the strasse at night",
    "Bought a тёмную куртку",
    "Painted the тёмная комната",
    "서울에 살아요",
    "서울 여행 계획",
    "Runs Pi-hole on the home network",
    "Installs tools with pip and pipx",
    "我住在东京塔附近",
    "猫 is the name of her cat",
    "养了一只猫",
    "京都で抹茶を飲んだ",
    "ชอบกินข้าวเหนียว",
    "ຂ້ອຍມັກກາເຟ",
    "ខ្ញុំចូលចិត្តកាហ្វេ",
    "ကော်ဖီကြိုက်တယ်",
    "Ταξίδι στην Αθήνα",
    "मुझे हिन्दी पसंद है",
    "Allergic to peanuts",
    "Raspberry jam on toast",
    "Prints figurines in 3D",
    "Plays 3ds games",
    "서울에서 일해요",
]

# (rule, query, {memory text: lexicalScore}): exactly these memories match, with these scores.
CASES: list[tuple[str, str, dict[str, float]]] = [
    ("Latin accents folded", "creme", {MEMORIES[0]: 1.0, MEMORIES[1]: 1.0}),
    ("Latin accents folded, other way", "crème", {MEMORIES[0]: 1.0, MEMORIES[1]: 1.0}),
    ("ß folds to ss", "strasse", {MEMORIES[2]: 1.0, MEMORIES[3]: 1.0}),
    ("ß folds to ss, other way", "Straße", {MEMORIES[2]: 1.0, MEMORIES[3]: 1.0}),
    ("no stemming (Cyrillic)", "тёмная", {MEMORIES[5]: 1.0}),
    ("no stemming (Cyrillic), other form", "тёмную", {MEMORIES[4]: 1.0}),
    ("accents on other scripts count", "темная", {}),
    ("no stemming (Korean particle)", "서울", {MEMORIES[7]: 1.0}),
    (
        "Korean by words, three syllables also as a prefix, at half",
        "서울에",
        {MEMORIES[6]: 1.0, MEMORIES[24]: 0.5},
    ),
    ("hyphenated word whole, query without hyphen", "pihole", {MEMORIES[8]: 1.0}),
    ("hyphenated word whole, query with hyphen", "Pi-hole", {MEMORIES[8]: 1.0}),
    ("hyphen part counts half", "hole", {MEMORIES[8]: 0.5}),
    ("two-letter word: only a same-spelled hyphen part, at half", "pi", {MEMORIES[8]: 0.5}),
    ("two-letter word is never a prefix", "ho", {}),
    ("three letters match as a prefix", "net", {MEMORIES[8]: 0.5}),
    ("a prefix counts half, never the whole word", "allerg", {MEMORIES[20]: 0.5}),
    ("a prefix of a hyphenated word, at half", "pihol", {MEMORIES[8]: 0.5}),
    ("a prefix of a hyphen part counts half", "hol", {MEMORIES[8]: 0.5}),
    ("three letters are enough", "ras", {MEMORIES[21]: 0.5}),
    ("two characters match only whole", "3d", {MEMORIES[22]: 1.0}),
    ("a prefix, not a piece", "berry", {}),
    ("Chinese by pairs", "东京", {MEMORIES[10]: 1.0}),
    ("one character counts half in a pair", "东", {MEMORIES[10]: 0.5}),
    ("one character alone counts whole", "猫", {MEMORIES[11]: 1.0, MEMORIES[12]: 0.5}),
    ("Japanese by pairs", "抹茶", {MEMORIES[13]: 1.0}),
    ("Thai by pairs", "ข้าว", {MEMORIES[14]: 1.0}),
    ("Lao by pairs", "ກາເຟ", {MEMORIES[15]: 1.0}),
    ("Khmer by pairs", "កាហ្វេ", {MEMORIES[16]: 1.0}),
    ("Myanmar by pairs", "ကော်ဖီ", {MEMORIES[17]: 1.0}),
    ("Greek by words, case folded", "ΑΘΉΝΑ", {MEMORIES[18]: 1.0}),
    ("Greek accents count", "Αθηνα", {}),
    ("Devanagari words keep their combining marks", "हिन्दी", {MEMORIES[19]: 1.0}),
    ("share of content words held", "crème dessert soufflé", {MEMORIES[0]: 2 / 3, MEMORIES[1]: 1 / 3}),
    ("stopwords alone make no match", "the cat of her", {MEMORIES[11]: 1.0}),
]

# Queries with no letter or digit in any script: a note, no hits, never an error.
UNSEARCHABLE = ["?! 🙂 ...", "🙂", "—", "¿¡", "_", "👍🏽 ###"]


def memory(
    text: str,
    *,
    entity: str = "user",
    category: str = "note",
    tags: tuple[str, ...] = (),
    keywords: tuple[str, ...] = (),
    updated: datetime = NOW,
    number: int = 0,
) -> Revision:
    """A revision as the store would hold it; `number` makes the id."""
    stamp = updated.isoformat().replace("+00:00", "Z")
    return Revision.model_validate(
        {
            "id": f"{number:016x}",
            "entity": entity,
            "text": text,
            "tags": list(tags),
            "keywords": list(keywords),
            "category": category,
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": 1,
            "change": "created",
        }
    )


def run(index: SearchIndex, query: str, **options: object) -> bm25.Outcome:
    return bm25.search(index, query, NOW, **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def vault() -> SearchIndex:
    return SearchIndex([memory(text, number=n) for n, text in enumerate(MEMORIES)])


# The spec's rules -------------------------------------------------------------


@pytest.mark.parametrize(("rule", "query", "expected"), CASES, ids=[case[0] for case in CASES])
def test_spec_examples(vault: SearchIndex, rule: str, query: str, expected: dict[str, float]) -> None:
    outcome = run(vault, query)
    found = {hit.memory.text: hit.lexical_score for hit in outcome.hits}
    assert found == pytest.approx(expected), rule
    assert outcome.total == len(expected) and outcome.note is None


@pytest.mark.parametrize("query", UNSEARCHABLE)
def test_a_query_without_letters_or_digits_gets_a_note(vault: SearchIndex, query: str) -> None:
    outcome = run(vault, query)
    assert outcome.hits == [] and outcome.total == 0
    assert outcome.note is not None and "cannot be searched" in outcome.note


def test_a_digit_alone_is_searchable() -> None:
    index = SearchIndex([memory("Room 7 on the left", number=1)])
    assert [hit.lexical_score for hit in run(index, "7").hits] == [1.0]


def test_fold_drops_latin_accents_only() -> None:
    assert tokens.fold("Crème Brûlée STRASSE Straße Øresund İstanbul ﬁne") == (
        "creme brulee strasse strasse oresund istanbul fine"
    )
    assert tokens.fold("Тёмная Αθήνα") == "тёмная αθήνα"


def test_one_character_counts_half_for_each_pair_holding_it() -> None:
    # Same length, 4 characters each: 东 sits in two pairs in the first, one in the second.
    index = SearchIndex([memory("西东南北", number=1), memory("东西南北", number=2)])
    hits = run(index, "东").hits
    assert [hit.memory.text for hit in hits] == ["西东南北", "东西南北"]
    assert [hit.lexical_score for hit in hits] == [0.5, 0.5]
    assert hits[0].score > hits[1].score


def test_hyphenated_query_parts_count_half_each() -> None:
    index = SearchIndex([memory("A hole in the fence", number=1), memory("Pi and hole, apart", number=2)])
    found = {hit.memory.text: hit.lexical_score for hit in run(index, "Pi-hole").hits}
    assert found == {"A hole in the fence": 0.5, "Pi and hole, apart": 1.0}


def test_a_hyphenated_memory_matches_its_whole_above_a_part() -> None:
    index = SearchIndex([memory("Set up Pi-hole", number=1), memory("Dug a hole", number=2)])
    hits = run(index, "hole").hits
    assert {hit.memory.text: hit.lexical_score for hit in hits} == {"Set up Pi-hole": 0.5, "Dug a hole": 1.0}
    assert hits[0].memory.text == "Dug a hole"


def test_one_letter_query_word_matches_only_the_whole_word_or_a_part() -> None:
    index = SearchIndex(
        [
            memory("Vitamin K every morning", number=1),
            memory("K-pop plans", number=2),
            memory("Kayak", number=3),
        ]
    )
    found = {hit.memory.text: hit.lexical_score for hit in run(index, "k").hits}
    assert found == {"Vitamin K every morning": 1.0, "K-pop plans": 0.5}


def test_which_query_terms_match_as_prefixes() -> None:
    assert tokens.matches_prefixes("ras") and tokens.matches_prefixes("서울에")
    assert not tokens.matches_prefixes("3d") and not tokens.matches_prefixes("서울")
    # Stopwords and pair-script pieces stay exact; a character with its marks counts once.
    assert not tokens.matches_prefixes("the") and not tokens.matches_prefixes("东京塔")
    assert tokens.matches_prefixes("हिन्दी") and not tokens.matches_prefixes("हिन")
    # A prefix is cut between characters, never between a letter and its mark.
    assert tokens.begins_with("raspberry", "ras") and tokens.begins_with("ras", "ras")
    assert not tokens.begins_with("हिन्दी", "हिन्द") and not tokens.begins_with("berry", "raspberry")


def test_an_exact_match_ranks_above_a_prefix_only_match() -> None:
    index = SearchIndex([memory("Plays chessboard games", number=1), memory("Plays chess games", number=2)])
    hits = run(index, "chess").hits
    assert [hit.memory.text for hit in hits] == ["Plays chess games", "Plays chessboard games"]
    # "chess" is only the beginning of "chessboard": a partial match, never the whole word.
    assert [hit.lexical_score for hit in hits] == [1.0, 0.5]
    assert hits[0].score > hits[1].score


def test_many_words_with_the_same_prefix_add_nothing() -> None:
    index = SearchIndex(
        [
            memory("garden plot plot plot", number=1),
            memory("garden gardens gardening gardener", number=2),
            memory("unrelated words only here", number=3),
        ]
    )
    scores = {hit.memory.id: hit.score for hit in run(index, "garden").hits}
    # Same length, the exact word once each: the longer words beginning with it are not summed.
    assert scores[f"{1:016x}"] == pytest.approx(scores[f"{2:016x}"])
    # A memory holding only longer words scores its best one, at PREFIX of its weight.
    alone = SearchIndex(
        [memory("gardens plot plot plot", number=1), memory("garden plot plot plot", number=2)]
    )
    prefixed, exact = (hit.score for hit in sorted(run(alone, "garden").hits, key=lambda hit: hit.memory.id))
    assert prefixed == pytest.approx(bm25.PREFIX * exact)


def test_stopwords_match_only_whole() -> None:
    index = SearchIndex([memory("Reads about theory", number=1), memory("Reads the paper", number=2)])
    assert bm25.plan(index, "the reads").matches == {"the": ["the"], "reads": ["reads"]}


def test_the_sorted_vocabulary_follows_every_change() -> None:
    index = SearchIndex([memory(f"word{n:03d} shared", number=n) for n in range(300)])
    assert index.expand("word29") == [f"word{n}" for n in range(290, 300)]
    for n in range(0, 300, 7):
        index.remove(f"{n:016x}")
    index.add(memory("word2999 brand new", number=1000))
    assert index.vocabulary() == sorted(index.postings)
    assert index.expand("word29") == [f"word{n}" for n in range(290, 300) if n % 7] + ["word2999"]
    assert index.expand("word2999x") == [] and index.expand("zzz") == []


def test_stopwords_are_left_out_of_lexical_score_and_a_query_of_them_only_gets_a_note() -> None:
    index = SearchIndex([memory("The cat sleeps", number=1), memory("Where is the dog", number=2)])
    assert {hit.memory.text: hit.lexical_score for hit in run(index, "the cat").hits} == {
        "The cat sleeps": 1.0
    }
    for query in ("the", "Where is it?", "what's the"):
        outcome = run(index, query)
        assert (outcome.hits, outcome.total, outcome.note) == ([], 0, bm25.ONLY_STOPWORDS_NOTE)
    assert "the" in STOPWORDS and "cat" not in STOPWORDS


def test_the_pieces_a_contraction_leaves_are_stopwords() -> None:
    # "landlord's" is "landlord" and "s": the "s" must not match every memory holding one.
    index = SearchIndex(
        [
            memory("The landlord's number is in the folder", number=1),
            memory("She's at Anna's today", number=2),
        ]
    )
    assert [hit.memory.id for hit in run(index, "landlord's").hits] == [f"{1:016x}"]
    assert {"s", "t", "ll", "ve", "re", "d", "m", "don", "isn"} <= STOPWORDS
    assert len(STOPWORDS) >= 150 and "won" not in STOPWORDS


# BM25, fields and decay ------------------------------------------------------


def test_entity_tags_and_keywords_weigh_more_than_text() -> None:
    index = SearchIndex(
        [
            memory("Talked about piano lessons at length today", number=1),
            memory("Talked about lessons at length today", entity="piano", number=2),
            memory("Talked about lessons at length today", tags=("piano",), number=3),
            memory("Talked about lessons at length today", keywords=("piano",), number=4),
        ]
    )
    hits = run(index, "piano").hits
    assert hits[-1].memory.id == f"{1:016x}"
    assert all(hit.score > hits[-1].score for hit in hits[:-1])


def test_older_memories_rank_lower_by_their_category_half_life() -> None:
    month_ago = NOW - timedelta(days=30)
    index = SearchIndex(
        [
            memory("Dentist on Friday", category="event", updated=month_ago, number=1),
            memory("Dentist is Ruiz", category="profile", updated=month_ago, number=2),
            memory("Dentist at noon", category="event", number=3),
        ]
    )
    by_id = {hit.memory.id: hit.score for hit in run(index, "dentist").hits}
    # An event halves in 30 days; a profile memory never fades.
    assert by_id[f"{1:016x}"] == pytest.approx(by_id[f"{3:016x}"] / 2)
    assert by_id[f"{2:016x}"] == pytest.approx(by_id[f"{3:016x}"])


def test_half_lives_table() -> None:
    assert bm25.decay("event", 30) == pytest.approx(0.5)
    assert bm25.decay("fact", 360) == pytest.approx(0.25)
    assert bm25.decay("profile", 10_000) == 1.0
    assert set(HALF_LIFE_DAYS) == {"profile", "preference", "fact", "project", "note", "event", "task"}


def test_filters_limit_and_total() -> None:
    index = SearchIndex(
        [memory(f"Water the tomatoes {n}", tags=("garden",), number=n) for n in range(5)]
        + [memory("Tomatoes give her a rash", category="profile", tags=("Health",), number=9)]
    )
    outcome = run(index, "tomatoes", limit=2)
    assert outcome.total == 6 and len(outcome.hits) == 2
    only_profile = run(index, "tomatoes", keep=lambda m: m.category == "profile")
    assert [hit.memory.id for hit in only_profile.hits] == [f"{9:016x}"] and only_profile.total == 1


# The incremental index -------------------------------------------------------


def test_the_index_follows_adds_corrections_and_removals() -> None:
    index = SearchIndex()
    index.add(memory("Plays the cello", number=1))
    assert run(index, "cello").total == 1
    corrected = memory("Plays the violin", number=1).model_copy(update={"revision": 2})
    index.add(corrected)
    assert run(index, "cello").total == 0
    assert [hit.memory.revision for hit in run(index, "violin").hits] == [2]
    index.remove(corrected.id)
    assert run(index, "violin").total == 0 and len(index) == 0
    assert index.postings == {} and index.partial == {}
    assert index.vocabulary() == []


def test_a_search_never_tokenizes_the_memories(monkeypatch: pytest.MonkeyPatch) -> None:
    index = SearchIndex([memory(f"Memory number {n} about gardens", number=n) for n in range(50)])

    def refuse(text: str) -> tokens.Terms:
        raise AssertionError("a search tokenized a memory")

    monkeypatch.setattr("squirrel_mcp.search.index.document_terms", refuse)
    assert run(index, "gardens").total == 50


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
    return MemoryStore.create(LocalVault(tmp_path / "v", create=True), "passphrase", kdf=cheap)


def test_the_store_keeps_its_index_current(store: MemoryStore, tmp_path: Path) -> None:
    saved = store.save(entity="user", text="Allergic to peanuts", category="profile", tags=[], keywords=[])
    assert run(store.index, "peanuts").total == 1
    store.update(saved.id, changes={"text": "Allergic to cashews"}, reason="wrong nut")
    assert run(store.index, "peanuts").total == 0 and run(store.index, "cashews").total == 1
    store.delete(saved.id, reason=None)
    assert run(store.index, "cashews").total == 0
    store.restore(saved.id)
    assert run(store.index, "cashews").total == 1
    # Another process's write reaches this store's index at its next refresh.
    other = MemoryStore.unlock(LocalVault(tmp_path / "v", create=False), "passphrase")
    other.save(entity="user", text="Owns a kayak", category="fact", tags=[], keywords=[])
    store.refresh()
    assert run(store.index, "kayak").total == 1


def test_likely_duplicates_share_most_words_of_the_shorter_text() -> None:
    # The pair: tags and keywords that differ, an entity every memory has, a detail added.
    first = memory("Allergic to peanuts", tags=("health",), keywords=("allergy", "food"), number=1)
    second = memory(
        "Is allergic to peanuts; carries an EpiPen",
        tags=("health", "allergy"),
        keywords=("peanut allergy", "epinephrine", "anaphylaxis"),
        number=2,
    )
    # One word in common, whatever the fields around it share: another fact.
    third = memory("Allergic to shellfish", tags=("health",), keywords=("allergy", "food"), number=3)
    # Forms of a word count as one ("allergy", "allergic"; "peanut", "peanuts").
    fourth = memory("Peanut allergy", number=4)
    index = SearchIndex([first, second, third, fourth])
    assert [hit.memory.id for hit in likely_duplicates(index, second)] == [first.id, fourth.id]
    assert [hit.memory.id for hit in likely_duplicates(index, first)] == [second.id, fourth.id]
    assert likely_duplicates(index, third) == []
    # From the shorter side only, as the page's Duplicates asks: the longer one, never the other way.
    assert [hit.memory.id for hit in likely_duplicates(index, first, longer_only=True)] == [
        second.id,
        fourth.id,
    ]
    assert likely_duplicates(index, second, longer_only=True) == []


# Properties --------------------------------------------------------------------

WORDS = [
    "crème", "creme", "Straße", "strasse", "Pi-hole", "pihole", "hole", "pi", "d", "the", "of",
    "тёмная", "тёмную", "서울", "서울에", "东京", "东", "京都", "抹茶", "ข้าว", "αθήνα", "garden",
    "tomatoes", "e-mail", "mail", "7", "gardening", "allerg", "allergic", "서울에서", "hol", "mai",
    "pih", "thermal", "3d", "3ds",
]  # fmt: skip
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
memories = st.lists(
    st.tuples(texts, st.sampled_from(sorted(HALF_LIFE_DAYS)), st.integers(min_value=0, max_value=2000)),
    min_size=1,
    max_size=12,
)
queries = st.one_of(texts, st.text(max_size=20))


def build(entries: list[tuple[str, str, int]]) -> SearchIndex:
    return SearchIndex(
        [
            memory(text, category=category, updated=NOW - timedelta(days=age), number=n)
            for n, (text, category, age) in enumerate(entries)
        ]
    )


@settings(max_examples=200, deadline=None)
@given(memories, queries)
def test_scores_are_finite_non_negative_and_in_order(entries: list[tuple[str, str, int]], query: str) -> None:
    outcome = run(build(entries), query)
    scores = [hit.score for hit in outcome.hits]
    assert all(math.isfinite(score) and score >= 0 for score in scores)
    assert scores == sorted(scores, reverse=True)
    assert outcome.total == len(outcome.hits)


@settings(max_examples=200, deadline=None)
@given(memories, queries)
def test_lexical_score_is_a_share_and_one_exactly_when_every_content_word_is_held(
    entries: list[tuple[str, str, int]], query: str
) -> None:
    index = build(entries)
    wanted = tokens.content_words(tokens.query_words(query))
    for hit in run(index, query).hits:
        assert 0 < hit.lexical_score <= 1
        # Held in full: the memory has the word's full term (a word, a pair, a lone character).
        # A longer word that only begins with it is a partial match, never the whole word.
        fields = [hit.memory.entity, hit.memory.text, *hit.memory.tags, *hit.memory.keywords]
        full_terms = {term for field in fields for term in tokens.document_terms(field).full}

        def held(query_term: str, full_terms: set[str] = full_terms) -> bool:
            return query_term in full_terms

        every_word_held = all(
            held(word.term) or (word.parts and all(held(part) for part in word.parts)) for word in wanted
        )
        assert (hit.lexical_score == 1) == every_word_held


@settings(max_examples=200, deadline=None)
@given(memories, queries, st.floats(min_value=0, max_value=5000), st.floats(min_value=0, max_value=5000))
def test_age_never_raises_a_score(
    entries: list[tuple[str, str, int]], query: str, later: float, more: float
) -> None:
    index = build(entries)
    sooner = {hit.memory.id: hit.score for hit in bm25.search(index, query, NOW + timedelta(days=later)).hits}
    afterwards = bm25.search(index, query, NOW + timedelta(days=later + more)).hits
    for hit in afterwards:
        assert hit.score <= sooner[hit.memory.id]


@given(st.sampled_from(sorted(HALF_LIFE_DAYS)), st.floats(0, 1e6), st.floats(0, 1e6))
def test_decay_never_rises_with_age(category: str, age: float, more: float) -> None:
    assert 0 <= bm25.decay(category, age + more) <= bm25.decay(category, age) <= 1


@settings(max_examples=100, deadline=None)
@given(memories, st.lists(st.integers(min_value=0, max_value=11), max_size=6), texts)
def test_incremental_updates_equal_a_fresh_index(
    entries: list[tuple[str, str, int]], removed: list[int], query: str
) -> None:
    index = build(entries)
    index.vocabulary()  # sorted now, so the removals below are taken out one by one
    gone = {f"{n:016x}" for n in removed}
    for memory_id in gone:
        index.remove(memory_id)
    fresh = SearchIndex()
    for n, (text, category, age) in enumerate(entries):
        if f"{n:016x}" not in gone:
            fresh.add(memory(text, category=category, updated=NOW - timedelta(days=age), number=n))
    # The weights differ in the last digits: each index folds the decay to its own epoch.
    assert {term: set(index.holders(term)) for term in index.postings} == {
        term: set(fresh.holders(term)) for term in fresh.postings
    }
    assert {term: index.partly_held(term) for term in index.partial} == {
        term: fresh.partly_held(term) for term in fresh.partial
    }
    assert index.vocabulary() == sorted(index.postings) and fresh.vocabulary() == sorted(fresh.postings)
    # Ties may fall either way by a last digit, so compare scores by memory.
    got = {hit.memory.id: hit.score for hit in run(index, query).hits}
    want = {hit.memory.id: hit.score for hit in run(fresh, query).hits}
    assert got == pytest.approx(want)


@settings(max_examples=100, deadline=None)
@given(memories)
def test_likely_duplicates_finds_every_memory_sharing_most_of_the_shorter_text(
    entries: list[tuple[str, str, int]],
) -> None:
    index = build(entries)
    new = index.memory(f"{0:016x}")
    assert new is not None
    plain = reference.ReferenceIndex(index.epoch)
    for n in range(len(entries)):
        other = index.memory(f"{n:016x}")
        assert other is not None
        plain.add(other)
    found = likely_duplicates(index, new)
    expected = reference.likely_duplicates(plain, new)
    assert [(hit.memory.id, hit.score) for hit in found] == [(hit.memory.id, hit.score) for hit in expected]
