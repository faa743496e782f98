"""The built-in ranker: the word search's own order, as a plugin like any other.

It is registered always and tried last (`trylast`), so any installed ranker
answers first and a ranker that returns None, fails or is absent leaves this one.
It is also the smallest complete example of a `rank_memories` implementation.
"""

from __future__ import annotations

from collections.abc import Sequence

from squirrel_mcp.plugin_api import Candidate, Ranking, RankOptions, hookimpl, rank_by_words


@hookimpl(trylast=True)
def rank_memories(candidates: Sequence[Candidate], total: int, options: RankOptions) -> Ranking:
    """The candidates in lexical order, cut to the limit; no near misses, no semantic score."""
    return rank_by_words(candidates, total, options)
