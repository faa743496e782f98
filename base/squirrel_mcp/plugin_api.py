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
  A ranker that cannot use its own signal for one search (busy, not ready) answers
  `rank_by_words(candidates, total, options, note)`: the word order, saying why.
- `startup` gets a `Config` and a `MemoryReader`; `memories_changed` gets `Revision`s.
- `doctor_checks` answers `Check`s: one line of `squirrel-mcp doctor` each.
- `decay` and `age_days`: the recency weight the word ranking multiplies by, for a
  ranker that fades its own signal the same way.
- For a plugin's tests: `get_plugin_manager` (the hook specs and the built-in
  ranker, nothing installed) and `PluginHost`, which calls the hooks as the server
  does and checks a ranker's answer by the same rules.
- `__version__`: squirrel-mcp's version (a plugin released with it reports the same).
- For a file a plugin keeps encrypted under its `derive_key` key: `seal_in_place`
  and `open_in_place` (AES-256-GCM inside one buffer: `SEALED_PREFIX` bytes of room
  before the plaintext, `TAG_BYTES` after; `DecryptionError` when the key, the
  associated data or a byte is wrong), and `atomic_write`, which replaces a file
  whole or not at all.
- For a plugin's own command that searches as `search_memory` does (the embeddings
  plugin's `squirrel-mcp diagnose`): `open_store` unlocks the account as the
  commands do and returns a `MemoryStore` (`MemoryReader`'s writable store);
  `UserError` and the rest of `USER_ERRORS` are the errors to print as one line;
  `run_search` is the function behind `search_memory` (at most `MAX_SEARCH_LIMIT`
  results), answering a `SearchResult`; `fold` folds case and Latin accents as
  the word search does.

Names here only ever gain fields and arguments, like the hooks, so a plugin
written against this module keeps working.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from squirrel_mcp import __version__
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.files import atomic_write
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
    rank_by_words,
)
from squirrel_mcp.server.results import SearchResult
from squirrel_mcp.server.searching import MAX_SEARCH_LIMIT, run_search
from squirrel_mcp.text.tokens import fold

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore
    from squirrel_mcp.book.reader import MemoryReader
    from squirrel_mcp.cli.unlock import USER_ERRORS, UserError, open_store
    from squirrel_mcp.keys.crypto import (
        SEALED_PREFIX,
        TAG_BYTES,
        DecryptionError,
        open_in_place,
        seal_in_place,
    )

# Names whose modules are imported on first use: the vault's code (storage, cryptography,
# the unlock) is not needed to register a plugin, and a server registers its plugins
# before it answers the handshake.
_ON_FIRST_USE = {
    "MemoryStore": "squirrel_mcp.book.memories",
    "MemoryReader": "squirrel_mcp.book.reader",
    "USER_ERRORS": "squirrel_mcp.cli.unlock",
    "UserError": "squirrel_mcp.cli.unlock",
    "open_store": "squirrel_mcp.cli.unlock",
    "SEALED_PREFIX": "squirrel_mcp.keys.crypto",
    "TAG_BYTES": "squirrel_mcp.keys.crypto",
    "DecryptionError": "squirrel_mcp.keys.crypto",
    "open_in_place": "squirrel_mcp.keys.crypto",
    "seal_in_place": "squirrel_mcp.keys.crypto",
}


def __getattr__(name: str) -> Any:
    """A name of `_ON_FIRST_USE`, imported from its module the first time it is asked for."""
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_NEAR_MISSES",
    "MAX_NOTE_CHARS",
    "MAX_SEARCH_LIMIT",
    "SEALED_PREFIX",
    "TAG_BYTES",
    "USER_ERRORS",
    "Candidate",
    "Check",
    "Config",
    "DecryptionError",
    "MemoryReader",
    "MemoryStore",
    "PluginHost",
    "Progress",
    "RankOptions",
    "RankedHit",
    "Ranking",
    "RankingLabel",
    "Revision",
    "SearchResult",
    "UserError",
    "__version__",
    "age_days",
    "atomic_write",
    "decay",
    "fold",
    "get_plugin_manager",
    "hookimpl",
    "open_in_place",
    "open_store",
    "rank_by_words",
    "run_search",
    "seal_in_place",
]
