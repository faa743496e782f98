"""The bounds on one query's work: distinct terms, prefix matches per term and in all.

A query of 250 three-letter prefixes (the tool's 1,000 characters) used to match
thousands of terms and make every memory a hit, and with a ranker installed the
search then walked every prefix match for every hit and word: seconds with the
index lock held. These tests see the bounds in `bm25.plan` and in the hits, in
process and through the real server over stdio with a ranker installed; that
ordinary queries reach none of them, and so rank as before, is checked on the
recall corpus (tests/test_search.py and tests/test_recall_corpus.py are unchanged).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from squirrel_mcp.search import bm25
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.text.stopwords import STOPWORDS
from squirrel_mcp.text.tokens import QueryWord, query_words
from tests.conftest import call, search_when, server_params
from tests.recall.corpus import CORPUS, QUERIES, RANKING, SCRIPTS, revision
from tests.test_plugins import fake_distribution
from tests.test_search import NOW, memory

# Three-letter words that are not stopwords, in a fixed order: "bab", "bac", ...
PREFIXES = [
    "".join(letters)
    for letters in itertools.product("bcdfgklmnprstvz", "aeiou", "bcdfgklmnprstvz")
    if "".join(letters) not in STOPWORDS
]
# 250 of them, 999 characters: the longest such query the search tool takes.
CRAFTED = " ".join(PREFIXES[:250])


def terms_of(planned: bm25.Plan) -> list[str]:
    return list(planned.matches)


def longer(planned: bm25.Plan, term: str) -> list[str]:
    return [match for match in planned.matches[term] if match != term]


def test_the_crafted_query_is_the_longest_the_tool_takes() -> None:
    assert len(CRAFTED) == 999 and len(set(CRAFTED.split())) == 250


def test_a_query_counts_its_first_64_distinct_terms_in_query_order() -> None:
    words = [f"{prefix}word" for prefix in PREFIXES[:100]]
    index = SearchIndex([memory(f"Holds {word}", number=n) for n, word in enumerate(words)])
    # Repeating a word adds no term: the first 64 distinct words count, in query order.
    query = " ".join([words[0], words[0], *words])
    planned = bm25.plan(index, query)
    assert [word.term for word in planned.words] == words[: bm25.MAX_QUERY_TERMS]
    assert terms_of(planned) == words[: bm25.MAX_QUERY_TERMS]
    found = bm25.search(index, query, NOW)
    assert found.total == bm25.MAX_QUERY_TERMS
    assert {hit.memory.text for hit in found.hits} == {f"Holds {word}" for word in words[:64]}
    # The same words in the opposite order keep the other end of the query.
    backwards = bm25.search(index, " ".join(reversed(words)), NOW)
    assert {hit.memory.text for hit in backwards.hits} == {f"Holds {word}" for word in words[36:]}


def test_a_hyphenated_word_at_the_bound_keeps_the_parts_that_fit() -> None:
    index = SearchIndex([memory("Runs a pi-hole and a kalo-mira-vent", number=1)])
    filler = [f"{prefix}word" for prefix in PREFIXES[:62]]
    planned = bm25.plan(index, " ".join([*filler, "kalo-mira-vent", "pi-hole"]))
    # Terms 63 and 64 are the whole word and its first part; the rest is left out.
    assert terms_of(planned)[62:] == ["kalomiravent", "kalo"]
    assert planned.words[-1] == QueryWord("kalomiravent", ("kalo",))
    assert len(terms_of(planned)) == bm25.MAX_QUERY_TERMS
    (hit,) = bm25.search(index, " ".join([*filler, "kalo-mira-vent", "pi-hole"]), NOW).hits
    # The whole word is held; of the 63 content words that count, one.
    assert hit.lexical_score == pytest.approx(1 / 63)


def expanding(prefixes: list[str], count: int) -> SearchIndex:
    """An index where each prefix is a word of its own and begins `count` longer ones, one per memory.

    The longer words are prefix + "x" + a number: 10 of 5 characters, 90 of 6, the rest of 7.
    """
    memories = []
    for prefix in prefixes:
        memories.append(memory(f"Says {prefix} alone", number=len(memories)))
        memories.extend(memory(f"Says {prefix}x{n}", number=len(memories)) for n in range(count))
    return SearchIndex(memories)


def test_a_prefix_finds_its_512_shortest_longer_terms() -> None:
    index = expanding(["kal"], 600)
    planned = bm25.plan(index, "kal")
    assert planned.matches["kal"][0] == "kal"
    # The shortest first, then in sorted order: kalx0-9, kalx10-99, kalx100-511.
    assert longer(planned, "kal") == sorted(f"kalx{n}" for n in range(bm25.MAX_TERM_EXPANSIONS))
    found = bm25.search(index, "kal", NOW)
    assert found.total == 1 + bm25.MAX_TERM_EXPANSIONS
    assert "Says kalx599" not in {hit.memory.text for hit in found.hits}
    # A longer query word still finds the words past the bound.
    assert {hit.memory.text for hit in bm25.search(index, "kalx599", NOW).hits} == {"Says kalx599"}
    assert bm25.search(index, "kalx59", NOW).total == 11


def test_a_query_finds_at_most_2048_longer_terms_given_out_in_query_order() -> None:
    prefixes = ["kal", "lom", "mir", "nev", "pos"]
    index = expanding(prefixes, 600)
    planned = bm25.plan(index, " ".join(prefixes))
    assert planned.expansions == bm25.MAX_QUERY_EXPANSIONS == 4 * bm25.MAX_TERM_EXPANSIONS
    assert [len(longer(planned, prefix)) for prefix in prefixes] == [512, 512, 512, 512, 0]
    # Past the budget a word still finds its own spelling.
    assert planned.matches["pos"] == ["pos"]
    found = bm25.search(index, " ".join(prefixes), NOW)
    assert found.total == 5 + bm25.MAX_QUERY_EXPANSIONS
    texts = {hit.memory.text for hit in found.hits}
    assert "Says pos alone" in texts and "Says posx0" not in texts


def test_the_crafted_query_stays_within_every_bound() -> None:
    # Every memory holds words beginning with many of the prefixes, as a large vault's words do.
    index = SearchIndex(
        [
            memory(" ".join(f"{prefix}{suffix}" for prefix in PREFIXES[n % 7 :: 7][:40]), number=n)
            for n, suffix in enumerate(["", "a", "an", "ing", "ers", "ation"] * 50)
        ]
    )
    planned = bm25.plan(index, CRAFTED)
    assert terms_of(planned) == PREFIXES[: bm25.MAX_QUERY_TERMS]
    assert max(len(longer(planned, term)) for term in planned.matches) <= bm25.MAX_TERM_EXPANSIONS
    assert planned.expansions <= bm25.MAX_QUERY_EXPANSIONS
    # The ranker's path: every match is scored, and the answer is the same each time.
    first = bm25.search(index, CRAFTED, NOW)
    again = bm25.search(index, CRAFTED, NOW)
    assert first.total == len(first.hits) == len(again.hits) > 0
    assert [(hit.memory.id, hit.score, hit.lexical_score) for hit in first.hits] == [
        (hit.memory.id, hit.score, hit.lexical_score) for hit in again.hits
    ]


@pytest.mark.parametrize("queries", [QUERIES, RANKING, SCRIPTS], ids=["queries", "ranking", "scripts"])
def test_no_recall_corpus_query_reaches_a_bound(queries: list[dict[str, object]]) -> None:
    index = SearchIndex([revision(entry) for entry in CORPUS])
    for entry in queries:
        query = str(entry["query"])
        planned = bm25.plan(index, query)
        assert planned.words == query_words(query), query
        assert len(planned.matches) < bm25.MAX_QUERY_TERMS // 4, query
        assert all(len(longer(planned, term)) < bm25.MAX_TERM_EXPANSIONS // 8 for term in planned.matches)


# Through the real server over stdio, with a ranker installed ----------------------

SCORING_RANKER = """
from squirrel_mcp.plugins.hookspecs import hookimpl
from squirrel_mcp.search.ranking import RankedHit, Ranking


@hookimpl
def rank_memories(candidates, total, options):
    # Scores every candidate, as a ranker by meaning does, then keeps the best.
    scored = sorted(candidates, key=lambda c: (-(c.lexical_score + len(c.memory.text) / 1e6), c.memory.id))
    best = scored[: options.limit]
    return Ranking(
        [RankedHit(c.memory.id, float(len(best) - n), c.lexical_score, 0.5) for n, c in enumerate(best)],
        total,
        "hybrid",
    )
"""


@pytest.mark.anyio
async def test_the_crafted_query_answers_normally_through_the_server_with_a_ranker(
    tmp_path: Path, vault_env: dict[str, str]
) -> None:
    where = tmp_path / "site"
    where.mkdir()
    fake_distribution(where, "scoring", "scoring_ranker", SCORING_RANKER)
    env = {**vault_env, "PYTHONPATH": str(where), "SQUIRREL_MCP_PLUGINS": "scoring"}
    # Memories holding words that begin with the query's first prefixes, and one holding
    # only a word beginning with its last: past the 64 terms that count.
    texts = [" ".join(f"{prefix}ing" for prefix in PREFIXES[n : n + 8]) for n in range(0, 64, 8)]
    texts.append(f"Mentions {PREFIXES[249]}ing only")
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as errlog:
        async with Client(stdio_client(server_params(env), errlog=errlog)) as client:
            for text in texts:
                await call(client, "save_memory", text=text, category="fact")
            found = await search_when(client, "hybrid", query=CRAFTED, limit=20)
    assert found["ranking"] == "hybrid", errors.read_text()
    assert "note" not in found
    assert found["total"] == 8
    assert sorted(hit["text"] for hit in found["results"]) == sorted(texts[:8])
    # Each memory holds 8 of the 64 content words that count, each as the beginning of a
    # longer word ("babing" for "bab"): a partial match, half a word.
    assert [hit["lexicalScore"] for hit in found["results"]] == pytest.approx([8 / 64 / 2] * 8)
    assert "set aside" not in errors.read_text()
