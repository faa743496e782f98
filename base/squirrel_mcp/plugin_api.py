"""Everything a squirrel-mcp plugin imports, in one module.

A plugin (a ranker, a start-up plugin, a command) needs nothing of squirrel-mcp
but this module, the way an llm or datasette plugin needs only `llm.hookimpl` or
`datasette.hookimpl`:

    from squirrel_mcp.plugin_api import Candidate, RankedHit, Ranking, RankOptions, hookimpl

- `hookimpl`: the marker for a hook implementation (the hooks are specified in
  `squirrel_mcp.plugins.hookspecs`; docs/plugins.md is their reference).
- `rank_memories` gets `Candidate`s and a `RankOptions`, and answers a `Ranking`
  of `RankedHit`s labelled with a `RankingLabel`; at most `MAX_NEAR_MISSES` near misses.
  While it is still preparing, a ranker can add a note for the agent (at most
  `MAX_NOTE_CHARS`) and its `Progress`, sent to a request that asked for progress.
- `startup` gets a `Config` and a `MemoryReader`; `memories_changed` gets `Revision`s.
- `doctor_checks` answers `Check`s: one line of `squirrel-mcp doctor` each.
- `decay` and `age_days`: the recency weight the word ranking multiplies by, for a
  ranker that fades its own signal the same way.
- For a plugin's tests: `get_plugin_manager` (the hook specs and the built-in
  ranker, nothing installed) and `PluginHost`, which calls the hooks as the server
  does and checks a ranker's answer by the same rules.

Names here only ever gain fields and arguments, like the hooks, so a plugin
written against this module keeps working.
"""

from __future__ import annotations

from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.models import Revision
from squirrel_mcp.plugins.checks import Check
from squirrel_mcp.plugins.hookspecs import hookimpl
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.search.bm25 import age_days, decay
from squirrel_mcp.search.ranking import (
    MAX_NEAR_MISSES,
    MAX_NOTE_CHARS,
    Candidate,
    Progress,
    RankedHit,
    Ranking,
    RankingLabel,
    RankOptions,
)

__all__ = [
    "MAX_NEAR_MISSES",
    "MAX_NOTE_CHARS",
    "Candidate",
    "Check",
    "Config",
    "MemoryReader",
    "PluginHost",
    "Progress",
    "RankOptions",
    "RankedHit",
    "Ranking",
    "RankingLabel",
    "Revision",
    "age_days",
    "decay",
    "get_plugin_manager",
    "hookimpl",
]
