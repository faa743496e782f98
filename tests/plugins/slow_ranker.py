"""A ranker whose start-up takes as long as SLOW_RANKER_STARTUP says (seconds), like a model loading.

Once started it ranks the word matches in their own order and labels the answer
"hybrid", so a test can tell whether a search was ranked by it or by words alone.
Installed for a server as the plugin `slow` (tests/conftest.py's `plugin_path`). It
is written as a third party's ranker of an earlier release would be, with nothing
added to the plugin API since: the server's wait for its start-up needs none.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from squirrel_mcp.plugin_api import Candidate, RankedHit, Ranking, RankOptions, hookimpl


@hookimpl
def startup() -> None:
    """Take the time a model would take to load."""
    time.sleep(float(os.environ.get("SLOW_RANKER_STARTUP", "0")))


@hookimpl
def rank_memories(candidates: Sequence[Candidate], total: int, options: RankOptions) -> Ranking:
    """The word order, labelled "hybrid": proof that this ranker answered."""
    return Ranking(
        hits=[RankedHit(c.memory.id, c.score, c.lexical_score) for c in candidates[: options.limit]],
        total=total,
        ranking="hybrid",
    )
