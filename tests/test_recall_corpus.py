"""The recall corpus in tests/recall/: its shape, its paraphrase promise, and lexical recall on it.

The corpus is synthetic (tests/recall/README.md). This checker proves what the
recall gate relies on: every paraphrased query shares no content word with any
of its expected memories, every exact-word query shares at least one, and the
ranking set and the scripts set are found by words alone (lexical recall@5 at
least 0.8). Words are compared as the search compares them: the project's own
tokenizer (folding, hyphen parts, character pairs and the characters in them),
stopwords aside. Lexical recall@1, recall@5 and MRR are printed for every set
(run pytest with -s to see them); paraphrased queries are expected to score low
by words, which is what the hybrid gate measures.
"""

from __future__ import annotations

import pytest

from squirrel_mcp.core.models import HALF_LIFE_DAYS
from squirrel_mcp.search import bm25
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.text.stopwords import STOPWORDS
from squirrel_mcp.text.tokens import begins_with, document_terms, matches_prefixes, query_words
from tests.recall.corpus import (
    BY_ID,
    CORPUS,
    NOW,
    QUERIES,
    RANKING,
    SCRIPTS,
    SETS,
    TOP,
    UNANSWERABLE,
    measure,
    revision,
)

FLOOR = 0.8


def memory_words(memory: dict) -> set[str]:
    """Every term a memory is found by (words, hyphen parts, pairs and their characters), stopwords aside."""
    words: set[str] = set()
    for value in [memory["entity"], memory["text"], *memory["tags"], *memory["keywords"]]:
        terms = document_terms(value)
        words.update(terms.full, terms.half)
    return words - STOPWORDS


def query_content_words(query: str) -> set[str]:
    """A query's content words, with hyphen parts and the characters of each pair."""
    words: set[str] = set()
    for word in query_words(query):
        if word.stopword:
            continue
        words.add(word.term)
        words.update(word.parts)
        words.update(document_terms(word.term).half)
    return words - STOPWORDS


# Shape ------------------------------------------------------------------------


def test_corpus_shape() -> None:
    assert len(CORPUS) == 500
    ids = [memory["id"] for memory in CORPUS]
    assert len(set(ids)) == len(ids)
    assert all(len(memory["id"]) == 4 and memory["id"][0] == "r" for memory in CORPUS)
    assert {memory["category"] for memory in CORPUS} == set(HALF_LIFE_DAYS)
    assert all(0 <= memory["ageDays"] <= 3 * 366 for memory in CORPUS)
    # Many memories carry no keywords, as agents often give none.
    assert sum(not memory["keywords"] for memory in CORPUS) >= 100
    # Every memory is valid as the store would hold it.
    assert len({revision(memory).id for memory in CORPUS}) == 500


def test_query_sets_shape() -> None:
    assert len(QUERIES) == 160
    kinds = [query["kind"] for query in QUERIES]
    assert set(kinds) == {"paraphrase", "exact"}
    assert kinds.count("paraphrase") >= 90 and kinds.count("exact") >= 50
    assert len(SCRIPTS) == 10 and len(RANKING) >= 10
    for queries in (QUERIES, RANKING, SCRIPTS):
        ids = [query["id"] for query in queries]
        assert len(set(ids)) == len(ids)
        for query in queries:
            assert query["expected"], query
            assert len(set(query["expected"])) == len(query["expected"]), query
            assert set(query["expected"]) <= BY_ID.keys(), query
    queries = [query["query"].casefold() for query in QUERIES]
    assert len(set(queries)) == len(queries)


def test_the_unanswerable_set_is_twenty_or_more_distinct_questions_expecting_nothing() -> None:
    assert len(UNANSWERABLE) >= 20
    assert len({query["id"] for query in UNANSWERABLE}) == len(UNANSWERABLE)
    assert len({query["query"].casefold() for query in UNANSWERABLE}) == len(UNANSWERABLE)
    assert all(set(query) == {"id", "query"} for query in UNANSWERABLE)


def test_scripts_set_covers_each_script() -> None:
    languages = {query["language"].split()[0] for query in SCRIPTS}
    assert {"German", "French", "Greek", "Russian", "Korean", "Chinese", "Japanese", "Thai"} <= languages


# Words ------------------------------------------------------------------------


@pytest.mark.parametrize("query", [q for q in QUERIES if q["kind"] == "paraphrase"], ids=lambda q: q["id"])
def test_paraphrase_shares_no_content_word(query: dict) -> None:
    words = query_content_words(query["query"])
    assert words, query
    for expected in query["expected"]:
        held = memory_words(BY_ID[expected])
        shared = words & held
        assert not shared, (query["query"], expected, sorted(shared))
        # Nor is one the start of a memory word, as the search's prefix matching would find it.
        starts = {
            (word, term)
            for word in words
            if matches_prefixes(word)
            for term in held
            if begins_with(term, word)
        }
        assert not starts, (query["query"], expected, sorted(starts))


@pytest.mark.parametrize("query", [q for q in QUERIES if q["kind"] == "exact"], ids=lambda q: q["id"])
def test_exact_query_shares_a_content_word(query: dict) -> None:
    words = query_content_words(query["query"])
    for expected in query["expected"]:
        assert words & memory_words(BY_ID[expected]), (query["query"], expected)


def test_the_word_check_sees_hyphen_parts_and_pairs() -> None:
    assert begins_with("university", "uni") and matches_prefixes("uni")
    assert "hole" in query_content_words("hole") & memory_words(BY_ID[RANKING[0]["expected"][0]])
    assert {"wifi", "wi", "fi"} <= query_content_words("Wi-Fi")
    assert "京" in query_content_words("京都") and "京都" in query_content_words("京都")


# Lexical recall ---------------------------------------------------------------


@pytest.fixture(scope="module")
def index() -> SearchIndex:
    return SearchIndex([revision(memory) for memory in CORPUS])


def test_lexical_recall(index: SearchIndex) -> None:
    figures = {}
    for name, queries in SETS.items():
        ranked = [
            [hit.memory.id for hit in bm25.search(index, query["query"], NOW, limit=TOP).hits]
            for query in queries
        ]
        figures[name] = measure(queries, ranked)
    print("\nlexical recall on tests/recall (queries, recall@1, recall@5, MRR)")
    for name, figure in figures.items():
        print(
            f"  {name:<10} {len(SETS[name]):>3}  {figure['recall@1']:.3f}  "
            f"{figure['recall@5']:.3f}  {figure['MRR']:.3f}"
        )
    assert figures["ranking"]["recall@5"] >= FLOOR
    assert figures["scripts"]["recall@5"] >= FLOOR
