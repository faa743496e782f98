"""What search_memory answers: the words' matches, ranked by the plugins, with the notes.

`run_search` is the tool's whole work, without MCP: the recall gate, the
diagnostic, the CLI's `search` and the page call it too, so what they measure
or show is what an agent gets.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from squirrel_mcp.core.models import Category, Revision
from squirrel_mcp.plugins.manager import PluginHost
from squirrel_mcp.search import bm25
from squirrel_mcp.search.ranking import Progress, RankedHit, RankOptions
from squirrel_mcp.server.results import SearchHit, SearchResult

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore

MAX_SEARCH_LIMIT = 50
# The note on a query with no letter or digit when a semantic ranker ranked it anyway.
MEANING_ONLY_NOTE = (
    "This query has no letter or digit in any script, so no word of it could match: "
    "any results were found only by meaning."
)
# The same for a query of common words only.
STOPWORDS_MEANING_NOTE = (
    "This query holds only common words (such as 'the', 'is', 'what'), so no word of it was "
    "matched: any results were found only by meaning."
)
MEANING_NOTES = {bm25.NO_WORDS_NOTE: MEANING_ONLY_NOTE, bm25.ONLY_STOPWORDS_NOTE: STOPWORDS_MEANING_NOTE}


# Reports a search's progress (done, total, message) to the client, when the request asked for it.
ProgressReport = Callable[[Progress, str | None], None]


def log_note(store: MemoryStore) -> str | None:
    """The note of get_context and search_memory when the log no longer extends this machine's checkpoint."""
    problem = store.log_problem
    if problem is None:
        return None
    from squirrel_mcp.book.checkpoint import accept_advice

    return (
        f"Log integrity check failed: {problem}. These answers come from the log as it is now. "
        "Saving, correcting, deleting and restoring memories are refused until the user accepts "
        f"this log: tell the user. {accept_advice()}."
    )


def join_notes(*notes: str | None) -> str | None:
    """Notes joined into one, or None when there is none."""
    given = [note for note in notes if note is not None]
    return " ".join(given) if given else None


def _hit_view(memory: Revision, hit: RankedHit) -> SearchHit:
    return SearchHit(
        **memory.memory().model_dump(),
        score=round(hit.score, 6),
        lexicalScore=round(hit.lexical_score, 6),
        semanticScore=None if hit.semantic_score is None else round(hit.semantic_score, 6),
        nearMiss=True if hit.near_miss else None,
    )


def run_search(
    store: MemoryStore,
    host: PluginHost,
    query: str,
    *,
    limit: int,
    category: Category | None = None,
    tags: list[str] | None = None,
    near_misses: bool = False,
    projects: frozenset[str | None] | None = None,
    now: datetime,
    progress: ProgressReport | None = None,
) -> SearchResult:
    """What search_memory answers, as of `now`: the words' matches, ranked by the plugins.

    The tool calls this; so do the recall gate and the diagnostic, so what they
    measure is what an agent gets. `projects`: the projects searched (None in it: the
    memories with no project; None: every project). A ranker still preparing adds its note to the
    answer's, and its progress goes to `progress` (the request's, when it asked).
    """
    store.refresh_if_stale()
    options = RankOptions(
        limit=limit,
        near_misses=near_misses,
        category=category,
        tags=tuple(tags or ()),
        now=now,
        projects=projects,
    )
    # Another ranker may rank any word match, so it gets all of them; lexical needs the top `limit`.
    everything = host.has_rankers()
    # The projects are kept by the index's sets of documents; a category or tags, memory by memory.
    by_memory = category is not None or bool(tags)
    outcome = bm25.search(
        store.index,
        query,
        now,
        limit=None if everything else limit,
        keep=options.accepts if by_memory else None,
        projects=projects,
    )
    if outcome.note is not None and not everything:
        return SearchResult(
            results=[], total=0, ranking="lexical", note=join_notes(log_note(store), outcome.note)
        )
    ranked = host.rank(query, outcome.hits, outcome.total, options, store.live)
    found = {candidate.memory.id: candidate.memory for candidate in outcome.hits}
    views = []
    for hit in ranked.hits:
        memory = found.get(hit.memory_id) or store.live(hit.memory_id)
        # check_ranking made sure of it; a memory deleted since then is simply left out.
        if memory is not None:
            views.append(_hit_view(memory, hit))
    note = outcome.note
    if note is not None and ranked.ranking == "hybrid":
        # The note says the query cannot be searched by words, and that any hit came by meaning.
        note = MEANING_NOTES.get(note, note)
    if ranked.progress is not None and progress is not None:
        progress(ranked.progress, ranked.note)
    return SearchResult(
        results=views,
        total=ranked.total,
        ranking=ranked.ranking,
        note=join_notes(log_note(store), note, ranked.note),
    )
