"""A toy ranker for squirrel-mcp: the word matches in reverse, weakest first.

It shows the shape of a ranking plugin and nothing more: a module with functions
marked `@hookimpl`, registered by the entry point in pyproject.toml, importing
from squirrel-mcp only its plugin API (`squirrel_mcp.plugin_api`). Its "other
signal" is 1 - lexicalScore, reported as semanticScore, so the label is "hybrid".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from squirrel_mcp.plugin_api import Candidate, Config, MemoryReader, RankedHit, Ranking, RankOptions, hookimpl

_ready = False


@hookimpl
def startup(config: Config, memories: MemoryReader, log: Callable[[str], None]) -> None:
    """Nothing to load; a real ranker would start loading its model in a thread here."""
    global _ready
    _ready = True


@hookimpl
def rank_memories(candidates: Sequence[Candidate], total: int, options: RankOptions) -> Ranking | None:
    """The candidates weakest first, cut to the limit; None (lexical) before start-up."""
    if not _ready:
        return None
    weakest_first = list(reversed(candidates))[: options.limit]
    count = len(weakest_first)
    return Ranking(
        hits=[
            RankedHit(
                memory_id=candidate.memory.id,
                # Scores must fall in the order given: the first hit gets the highest.
                score=float(count - position),
                lexical_score=candidate.lexical_score,
                semantic_score=1.0 - candidate.lexical_score,
            )
            for position, candidate in enumerate(weakest_first)
        ],
        total=total,
        ranking="hybrid",
    )
