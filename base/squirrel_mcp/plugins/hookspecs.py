"""The hooks a squirrel-mcp plugin can implement: markers and specifications only.

A plugin is a module or object with functions marked `@hookimpl`, named like the
specs below, registered through the entry-point group `squirrel_mcp` (see
docs/plugins.md). A plugin imports `hookimpl` and the types below from
`squirrel_mcp.plugin_api`, the one module of squirrel-mcp it needs. An
implementation may accept any subset of a spec's arguments. Hooks only ever gain
arguments, never lose or rename them, so a plugin written today keeps working.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pluggy

from squirrel_mcp.core.config import Config
from squirrel_mcp.core.models import Revision
from squirrel_mcp.plugins.checks import Check
from squirrel_mcp.search.ranking import Candidate, Ranking, RankOptions

if TYPE_CHECKING:
    from squirrel_mcp.book.reader import MemoryReader

hookspec = pluggy.HookspecMarker("squirrel_mcp")
hookimpl = pluggy.HookimplMarker("squirrel_mcp")


@hookspec
def startup(
    config: Config, memories: MemoryReader, log: Callable[[str], None], notice: Callable[[str], None]
) -> None:
    """Called once when the server starts, in the plugin's own background thread.

    Exists so a plugin can load what it needs (a model, a vector file) without
    holding up the MCP handshake: the server answers the client meanwhile, and it
    calls no other hook of this plugin's until `startup` returns. A search that
    comes meanwhile waits for it, READY_WAIT (3 s) at most; past that it is answered
    by words with a note saying search by meaning is starting (docs/plugins.md).

    - `config`: the server's settings, with the passphrase and API key removed.
    - `memories`: read-only access to the decrypted memories (`current()`, `get(id)`,
      `account_id`, `derive_key(purpose)`: a key of the plugin's own, never the data key).
    - `log`: writes one line to stderr prefixed "squirrel-mcp: ". Only the lines
      the design allows (docs/plugins.md); never memory text, a query or a key.
    - `notice`: writes one line to stderr exactly as given, for the lines the docs
      spell out word for word ("memory: local embeddings ready"). Same rules as `log`.
      A plugin may keep `log` and `notice` and call them later (from a search).

    The return value is ignored (return None). Raising sets the plugin aside for
    the session, with one line on stderr.
    """


@hookspec(firstresult=True)
def rank_memories(
    query: str, candidates: Sequence[Candidate], total: int, options: RankOptions
) -> Ranking | None:
    """Called on every search_memory; ranks its hits.

    Exists so a plugin can replace word ranking (e.g. fuse it with meaning). Stops at
    the first non-None result; the built-in lexical ranker runs last, so returning
    None leaves the search to it (a signal turned off, or failed, for the session).
    A ranker that cannot use its signal for this one search (busy, not ready yet)
    answers `rank_by_words(candidates, total, options, note)` instead: the word
    ranking, with a note telling the agent to search again shortly.

    - `query`: the agent's query, as typed. One with no letter or digit in any
      script comes with no candidates; the server adds its note to the answer
      (that the hits were found by meaning alone if the ranking is "hybrid").
    - `candidates`: the memories matching by words and passing the filters, best
      lexical first. Every match when a ranker besides lexical is installed; with
      lexical alone, only the top `options.limit`.
    - `total`: how many memories match by words.
    - `options`: limit, nearMisses, the category and tag filters (its method
      `accepts(memory)` applies them), the search's clock.

    A ranker still preparing (embedding memories in the background) answers with
    what it has, at once, and says so: its `Ranking.note` is added to the result's
    note, and its `Ranking.progress` is sent as a progress notification when the
    request asked for progress.

    Return a `Ranking`, or None to defer. An answer that raises, breaks the rules of
    `Ranking` (unknown ids, scores that are not finite, too many hits, a note longer
    than MAX_NOTE_CHARS, a progress past its total) or takes more
    than 10 s is not used: that search is lexical, the plugin's ranker is set aside
    for the session and one line says so on stderr.
    """


@hookspec(firstresult=True)
def similar_memories(memory: Revision, limit: int) -> list[tuple[str, float]] | None:
    """Called when save_memory (or the page's add form) has stored a new memory.

    Exists so a plugin can name the memories the new one may repeat in other words
    (by meaning), besides those whose texts share most of its words. Stops at the
    first non-None result. It is not waited for: a plugin whose `startup` has not
    returned is not asked.

    - `memory`: the memory just saved (its latest revision).
    - `limit`: the most memories to name.

    Return (memory id, closeness) pairs, closest first: other live memories the plugin
    finds close enough to be duplicates by its own measure, and closeness a cosine
    similarity (-1 to 1). [] names none; None leaves it to words. An answer that
    raises, names an unknown or deleted id or the memory itself, holds a closeness
    that is not finite or more than `limit` pairs, or takes more than 10 s is not
    used: the plugin is set aside for the session, with one line on stderr.
    """


@hookspec
def memories_changed(revisions: Sequence[Revision]) -> None:
    """Called after memories were saved, corrected, deleted, restored or imported.

    Exists so a ranker that keeps state per memory (vectors) stays current without
    polling: it is told of every change, also those another process made to the same
    vault, once this server has read them. Called in the plugin's background thread,
    in order, after `startup`.

    - `revisions`: the latest revision of each memory that changed; a deleted memory
      comes as its tombstone (`deleted` is True).

    The return value is ignored (return None). Raising sets the plugin aside.
    """


@hookspec
def shutdown() -> None:
    """Called once when the server stops (the client closed stdin), after the last search.

    Exists so a plugin can flush state to disk and stop its threads. The server waits
    at most 5 s for every plugin's shutdown together, then exits.

    The return value is ignored (return None).
    """


@hookspec
def register_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Called when the `squirrel-mcp` command line is built, before it reads its arguments.

    Exists so a plugin can add subcommands of its own (`squirrel-mcp diagnose`): they
    are reachable wherever `squirrel-mcp` is, also where an installer exposes only the
    main distribution's scripts (pipx).

    - `commands`: the sub-parsers of `squirrel-mcp`. Add one with
      `commands.add_parser(name, help=...)`, and give it the function to run with
      `set_defaults(run=function)`: it gets the parsed `argparse.Namespace` and
      returns the exit status. A name taken already (a built-in command) is refused.

    The return value is ignored (return None). Raising leaves the plugin's commands
    out, with one line on stderr; the built-in commands still work.
    """


@hookspec
def doctor_checks(config: Config, memories: MemoryReader | None) -> list[Check] | None:
    """Called by `squirrel-mcp doctor`, after its own checks, once per plugin.

    Exists so a plugin can check what only it knows of (a model's files, a vector
    file) and say how to fix it, on the same list as the built-in checks.

    - `config`: the settings, with the passphrase and API key removed.
    - `memories`: read-only access to the unlocked account (for per-account files
      and keys), or None when doctor could not unlock it.

    Return a list of `squirrel_mcp.plugins.checks.Check`, or None for nothing to report.
    A check's `detail` and `fix` must hold no memory text, key or vector. Raising
    is reported as a failed check naming the plugin and the error's type.
    """
