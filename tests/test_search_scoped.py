"""A search scoped to projects ranks exactly as the plain search filtering memory by memory.

The index keeps each project's documents as a set, so a scoped search keeps its
matches by set intersection (`bm25.search(..., projects=...)`). On the generated
vaults of tests/test_search_reference.py, each memory put in one of three projects
or in none, every scoped query's hits, scores, lexicalScores and total must equal
those of tests/lexical_reference.py's plain search with a filter that asks each
memory its project, to the last bit: alone or with a category filter, with and
without a limit, before and after memories are corrected into other projects,
removed (enough that the index numbers its documents afresh) and added, and on an
index loaded from its image.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from squirrel_mcp.core.models import Revision
from squirrel_mcp.search import bm25
from squirrel_mcp.search.index import SearchIndex
from tests import lexical_reference as reference
from tests.test_search_reference import queries, revision, vocabulary

NOW = datetime(2026, 6, 1, tzinfo=UTC)
PROJECTS = ["github.com/acme/api", "github.com/acme/web", "/home/ada/notes"]
SCOPES: list[frozenset[str | None]] = [
    frozenset({PROJECTS[0], None}),
    frozenset({PROJECTS[1], None}),
    frozenset({None}),
    frozenset({PROJECTS[2]}),
    frozenset({*PROJECTS, None}),
    frozenset({"github.com/acme/nowhere", None}),
    frozenset(),
]


def placed(rng: random.Random, memory: Revision) -> Revision:
    """`memory` in one of PROJECTS, or in none (a fifth of them)."""
    project = None if rng.random() < 0.2 else rng.choice(PROJECTS)
    return memory.model_copy(update={"project": project})


def recent(memory: Revision) -> bool:
    return memory.category in ("event", "task", "note")


def same_scoped(
    index: SearchIndex,
    plain: reference.ReferenceIndex,
    query: str,
    projects: frozenset[str | None],
    limit: int | None,
    keep: Callable[[Revision], bool] | None = None,
) -> None:
    got = bm25.search(index, query, NOW, limit=limit, keep=keep, projects=projects)

    def inside(memory: Revision) -> bool:
        return memory.project in projects and (keep is None or keep(memory))

    want = reference.search(plain, query, NOW, limit=limit, keep=inside)
    assert [(hit.memory.id, hit.memory.revision, hit.score, hit.lexical_score) for hit in got.hits] == [
        (hit.memory.id, hit.memory.revision, hit.score, hit.lexical_score) for hit in want.hits
    ], (query, sorted(map(str, projects)), limit)
    assert got.total == want.total, (query, sorted(map(str, projects)), limit)
    assert (got.note is None) == (want.note is None), query


def every_scope(index: SearchIndex, plain: reference.ReferenceIndex, texts: list[str]) -> None:
    for query in texts:
        for projects in SCOPES:
            same_scoped(index, plain, query, projects, limit=10)
        same_scoped(index, plain, query, SCOPES[0], limit=None)
        same_scoped(index, plain, query, SCOPES[0], limit=1)
        same_scoped(index, plain, query, SCOPES[1], limit=10, keep=recent)


@pytest.mark.parametrize("seed", [3, 4])
def test_a_scoped_search_ranks_as_the_plain_search_filtering_each_memory(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A date ahead of the clock counts as the clock's now: one clock for both, so both count alike.
    clock = time.time()
    monkeypatch.setattr(time, "time", lambda: clock)
    rng = random.Random(seed)
    words = vocabulary(rng)
    memories = [placed(rng, revision(rng, number, words)) for number in range(1000)]
    index = SearchIndex(memories)
    plain = reference.ReferenceIndex(index.epoch)
    for memory in memories:
        plain.add(memory)
    texts = queries(rng, words, memories)
    assert {memory.project for memory in memories} == {*PROJECTS, None}
    every_scope(index, plain, texts)
    # The index's sets of each project's documents are made by now: corrections that move
    # memories between projects, removals past renumbering, and new memories must keep them right.
    for number in rng.sample(range(1000), 200):
        corrected = placed(rng, revision(rng, number, words, revision=2))
        index.add(corrected)
        plain.add(corrected)
    every_scope(index, plain, texts[:20])
    for number in rng.sample(range(1000), 900):
        index.remove(f"{number:016x}")
        plain.remove(f"{number:016x}")
    for number in range(1000, 1100):
        memory = placed(rng, revision(rng, number, words))
        index.add(memory)
        plain.add(memory)
    assert len(index) == len(plain.memories) == 200
    assert len(index.docs) < 1000, "the holes were closed"
    every_scope(index, plain, texts)
    loaded = SearchIndex.from_image(index.image(), plain.memories)
    every_scope(loaded, plain, texts)
