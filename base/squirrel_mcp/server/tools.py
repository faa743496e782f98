"""The MCP server: the tools an agent calls and their typed inputs.

Each tool is a plain function over a `ToolContext` (the unlocked store and the
plugins); `create_server` registers them, with their titles and hints to the host,
and the agent skill as a prompt. The store may still be opening when the server
starts (`Opening`): the handshake and tools/list never wait for it, a tool call does.
Inputs are `Annotated[..., Field(...)]` so the JSON schema the agent sees is this
code, and bad arguments are refused before a tool runs. Outputs are the Pydantic
models of squirrel_mcp.server.results. Tool descriptions teach the habits of the agent
skill (docs/skill/squirrel-notes/SKILL.md): start with get_context, search before
answering, retry once with nearMisses, correct rather than duplicate.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar

import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts import Prompt
from mcp.types import ToolAnnotations
from pydantic import Field, JsonValue, ValidationError
from pydantic.json_schema import SkipJsonSchema

from squirrel_mcp import __version__
from squirrel_mcp.book.catalog import Filters
from squirrel_mcp.book.checkpoint import accept_advice
from squirrel_mcp.book.memories import MemoryOperationError, MemoryStore
from squirrel_mcp.core.models import (
    HALF_LIFE_DAYS,
    Category,
    Entity,
    Keywords,
    Memory,
    MemoryId,
    MemoryText,
    Reason,
    Revision,
    Tags,
)
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.search import bm25 as search
from squirrel_mcp.search.ranking import Progress, RankedHit, RankOptions
from squirrel_mcp.server.results import (
    ChangeResult,
    ContextResult,
    DuplicateHint,
    GetResult,
    ListedMemory,
    ListResult,
    RevisionView,
    SaveResult,
    SearchHit,
    SearchResult,
)
from squirrel_mcp.server.stdio import stdio_transport
from squirrel_mcp.storage import StorageError

INSTRUCTIONS = """\
A private, encrypted memory of the user. Call get_context at the start of a session.
Before answering anything about the user, search_memory; if nothing fits, retry once
with nearMisses: true and check any near miss against the question. Save lasting facts
with a clear entity, tags and keywords so they are found again. When a memory is wrong
or outdated, correct it with update_memory instead of saving a second one."""

MAX_SEARCH_LIMIT = 50
# The note on a query with no letter or digit when a semantic ranker ranked it anyway.
MEANING_ONLY_NOTE = (
    "This query has no letter or digit in any script, so no word of it could match: "
    "any results were found only by meaning."
)
MAX_LIST_LIMIT = 100
# How many problems an invalid-arguments error lists.
MAX_PROBLEMS = 8
# How long a tool call waits for the store to open (scrypt, the storage, a pull, decrypting and
# indexing every memory) before it is answered that the memory is still opening; the opening goes
# on, and a later call gets the memory. Generous: a large vault on a slow, busy machine.
OPEN_WAIT = 120.0
STILL_OPENING = (
    f"the memory is still being opened (unlocking, decrypting, indexing) after {OPEN_WAIT:g} s; "
    "nothing was done: try again in a moment"
)

P = ParamSpec("P")
R = TypeVar("R")

# Reports a search's progress (done, total, message) to the client, when the request asked for it.
ProgressReport = Callable[[Progress, str | None], None]
# Set by SquirrelServer.call_tool for the request it serves; the tool runs in a worker thread
# that inherits it (the SDK runs a plain function through anyio.to_thread, which copies the
# context), so a tool reaches its own request's progress without the SDK in its signature.
_request_progress: contextvars.ContextVar[ProgressReport | None] = contextvars.ContextVar(
    "squirrel_request_progress", default=None
)


class Opening:
    """The memory store as it opens in the background: not yet, opened, or the line saying why not.

    The server answers the handshake while the store opens; every tool call waits
    for it (`wait`). When it cannot be opened, every call gets the one line the
    server printed on stderr (what is wrong, what to change in the MCP config).
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        """A store still opening; or, given `store`, one opened already."""
        self._done = threading.Event()
        self._store = store
        self._failure: str | None = None
        if store is not None:
            self._done.set()

    def opened(self, store: MemoryStore) -> None:
        """The store is open: every waiting and later call uses it."""
        self._store = store
        self._done.set()

    def failed(self, line: str) -> None:
        """The store cannot be opened: every waiting and later call is answered `line`."""
        self._failure = line
        self._done.set()

    def close(self) -> None:
        """At shutdown: an opened store finishes, or writes, its snapshot (`MemoryStore.close`)."""
        if self._store is not None:
            self._store.close()

    def wait(self, timeout: float = OPEN_WAIT) -> MemoryStore:
        """The open store, after waiting up to `timeout` seconds for it; else a ToolError saying why not."""
        if not self._done.wait(timeout):
            raise ToolError(STILL_OPENING)
        if self._store is None:
            raise ToolError(self._failure or "the memory could not be opened")
        return self._store


@dataclass(frozen=True)
class ToolContext:
    """What every tool works on: the memory store (once open) and the plugins that rank search hits."""

    opening: Opening
    plugins: PluginHost

    @property
    def store(self) -> MemoryStore:
        """The unlocked store (the server's call_tool waited for it before the tool ran)."""
        return self.opening.wait()


@contextmanager
def _as_tool_error() -> Iterator[None]:
    """Turn a refused operation (unknown id, stale revision) into the agent's error message."""
    try:
        yield
    except MemoryOperationError as error:
        raise ToolError(str(error)) from None


IdArg = Annotated[
    MemoryId, Field(description="The memory's id, as returned by save_memory or search_memory.")
]
CategoryArg = Annotated[
    Category,
    Field(
        description="profile (who the user is; never fades), preference (fades over years), "
        "fact, project, note (months), event, task (weeks)."
    ),
]
# An input whose absence means something no value of its type can say: no filter on this field,
# no change to it, no reason given. The schema shows the plain type, neither null nor a default,
# because strict hosts mishandle `anyOf [T, null]` (some send such inputs as raw strings). An
# explicit null is still accepted, as it was, for hosts that send one for every input left out.
Unset = SkipJsonSchema[None]
# The same bounds as save_memory's tags: a tag no memory can carry is refused, not searched for.
TagsFilter = Annotated[Tags | Unset, Field(description="Only memories carrying every one of these tags.")]


def _absent_means_unset(schema: dict[str, JsonValue]) -> None:
    """Drop the `default: null` an Unset input would otherwise show."""
    schema.pop("default", None)


def log_note(store: MemoryStore) -> str | None:
    """The note of get_context and search_memory when the log no longer extends this machine's checkpoint."""
    problem = store.log_problem
    if problem is None:
        return None
    return (
        f"Log integrity check failed: {problem}. These answers come from the log as it is now. "
        "Saving, correcting, deleting and restoring memories are refused until the user accepts "
        f"this log: tell the user. {accept_advice()}."
    )


def _notes(*notes: str | None) -> str | None:
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


def _revision_view(revision: Revision) -> RevisionView:
    return RevisionView.model_validate(revision.model_dump(include=set(RevisionView.model_fields)))


def _view(revision: Revision) -> Memory:
    """The public view of a revision, not checked again: its fields passed the same rules when read or made.

    Checking costs more than the rest of a listing (every character of the text is looked at).
    """
    return Memory.model_construct(**revision.model_dump(include=set(Memory.model_fields)))


def _listed(revision: Revision) -> ListedMemory:
    """A revision as list_memories shows it (not checked again, as `_view`)."""
    return ListedMemory.model_construct(**revision.model_dump(include=set(ListedMemory.model_fields)))


def describe_invalid(tool: str, error: ValidationError) -> str:
    """A validation error without the rejected values: they may be memory text."""
    problems = [
        f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
        for e in error.errors(include_input=False)
    ]
    # Forty bad tags make forty problems; the first few say what to fix.
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS:] = [f"and {len(problems) - MAX_PROBLEMS} more"]
    return f"invalid arguments for {tool}: " + "; ".join(problems)


def run_search(
    store: MemoryStore,
    host: PluginHost,
    query: str,
    *,
    limit: int,
    category: Category | None = None,
    tags: list[str] | None = None,
    near_misses: bool = False,
    now: datetime,
    progress: ProgressReport | None = None,
) -> SearchResult:
    """What search_memory answers, as of `now`: the words' matches, ranked by the plugins.

    The tool calls this; so do the recall gate and the diagnostic, so what they
    measure is what an agent gets. A ranker still preparing adds its note to the
    answer's, and its progress goes to `progress` (the request's, when it asked).
    """
    store.refresh_if_stale()
    options = RankOptions(
        limit=limit, near_misses=near_misses, category=category, tags=tuple(tags or ()), now=now
    )
    # Another ranker may rank any word match, so it gets all of them; lexical needs the top `limit`.
    everything = host.has_rankers()
    outcome = search.search(
        store.index,
        query,
        now,
        limit=None if everything else limit,
        keep=options.accepts if options.filtered else None,
    )
    if outcome.note is not None and not everything:
        return SearchResult(
            results=[], total=0, ranking="lexical", note=_notes(log_note(store), outcome.note)
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
        # The spec: the note says the query cannot be searched, unless the semantic ranking ran.
        note = MEANING_ONLY_NOTE
    if ranked.progress is not None and progress is not None:
        progress(ranked.progress, ranked.note)
    return SearchResult(
        results=views,
        total=ranked.total,
        ranking=ranked.ranking,
        note=_notes(log_note(store), note, ranked.note),
    )


class SquirrelServer(MCPServer):
    """MCPServer whose argument errors never echo the arguments back, and that answers every bad line.

    Its tools wait for the store to open; everything else is answered at once.
    """

    def __init__(self, opening: Opening) -> None:
        """A server whose tools work on the store `opening` opens."""
        super().__init__(
            name="squirrel-mcp", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
        )
        self.opening = opening

    async def run_stdio_async(self) -> None:
        """Serve over stdio through squirrel_mcp.server.stdio.

        It answers the lines the SDK would drop, and at the end of input every
        request read before it (within a bound), where the SDK cancels them.
        """
        async with stdio_transport() as (read_stream, write_stream):
            await self._lowlevel_server.run(
                read_stream, write_stream, self._lowlevel_server.create_initialization_options()
            )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        """Call a tool; argument errors name the fields and rules, not the values.

        A storage failure (the sync server unreachable, a key refused) is the
        user's to fix, not a crash: the agent gets its message, which names the
        cause and never a key or memory text. Every call first waits for the
        store to open, off the event loop so that other requests are answered
        meanwhile; if it could not be opened, every call gets the reason, even
        one with bad arguments.
        """
        await anyio.to_thread.run_sync(self.opening.wait, abandon_on_cancel=True)
        token = _request_progress.set(None if context is None else _progress_reporter(context))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, ValidationError):
                raise ToolError(describe_invalid(name, error.__cause__)) from error.__cause__
            if isinstance(error.__cause__, StorageError):
                # The vault went bad while serving: the agent hears what, rather than the
                # SDK's bare "Error executing tool" (and no traceback goes to the log).
                raise ToolError(str(error.__cause__)) from error.__cause__
            known = sorted(tool.name for tool in await self.list_tools())
            if name not in known:
                # The SDK's message repeats the name, whatever its length or content.
                raise ToolError(f"unknown tool; this server's tools are {', '.join(known)}") from None
            raise
        finally:
            _request_progress.reset(token)


def _progress_reporter(context: Context[Any, Any]) -> ProgressReport:
    """Send a progress notification for the request `context` serves, from the tool's worker thread.

    The SDK sends nothing when the request carried no progress token.
    """

    def report(progress: Progress, message: str | None) -> None:
        anyio.from_thread.run(context.report_progress, progress.done, progress.total, message)

    return report


def get_context(
    context: ToolContext,
    recent: Annotated[int, Field(ge=0, le=50, description="How many recent memories to include.")] = 10,
) -> ContextResult:
    """Start every session here: who the user is, their preferences, what changed lately.

    Returns profile and preference memories, the most recent other memories and
    counts by category. Then search_memory before answering a question about the user.
    """
    others = frozenset(HALF_LIFE_DAYS) - {"profile", "preference"}
    with context.store.reading() as catalog:
        # Each list costs about its length, not a sort of every memory: the catalog keeps the order.
        profile = catalog.page(Filters(categories=frozenset({"profile"})), 0, 50).memories
        preferences = catalog.page(Filters(categories=frozenset({"preference"})), 0, 50).memories
        latest = catalog.page(Filters(categories=others), 0, recent).memories
        counts = catalog.live_counts()
        counted = {category: counts.get(category, 0) for category in HALF_LIFE_DAYS}
        total = catalog.live_count
        unreadable, older = context.store.unreadable_ids(), context.store.older_revision_ids()
    return ContextResult(
        profile=[_view(memory) for memory in profile],
        preferences=[_view(memory) for memory in preferences],
        recent=[_view(memory) for memory in latest],
        counts=counted,
        total=total,
        unreadable=unreadable,
        olderRevision=older,
        note=log_note(context.store),
    )


def search_memory(
    context: ToolContext,
    query: Annotated[
        str, Field(min_length=1, max_length=1000, description="What to look for, in the user's words.")
    ],
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT, description="Most results to return.")] = 10,
    category: Annotated[
        Category | Unset,
        Field(description="Only memories of this category.", json_schema_extra=_absent_means_unset),
    ] = None,
    tags: TagsFilter = [],  # noqa: B006
    nearMisses: Annotated[
        bool,
        Field(
            description="Also return up to 3 closest memories that did not match. Use once, on a "
            "retry after an empty or unhelpful search; treat a near miss as a candidate to check."
        ),
    ] = False,
) -> SearchResult:
    """Search the user's memories before answering anything about them.

    Hits come in rank order with absolute scores (lexicalScore, semanticScore); a
    low score means lower confidence, not a wrong answer, so check low hits against
    the question. If nothing fits, retry once with nearMisses: true.
    """
    return run_search(
        context.store,
        context.plugins,
        query,
        limit=limit,
        category=category,
        tags=tags,
        near_misses=nearMisses,
        now=datetime.now(UTC),
        progress=_request_progress.get(),
    )


def save_memory(
    context: ToolContext,
    text: Annotated[
        MemoryText, Field(description="The memory: one fact, preference or event, self-contained.")
    ],
    entity: Annotated[
        Entity,
        Field(description="Who or what it is about, e.g. 'user', 'Anna (sister)', 'home network'."),
    ] = "user",
    category: CategoryArg = "note",
    tags: Annotated[Tags, Field(description="Short labels, e.g. ['health', 'food'].")] = [],  # noqa: B006
    keywords: Annotated[
        Keywords, Field(description="Other words it should be found by: synonyms, names, abbreviations.")
    ] = [],  # noqa: B006
) -> SaveResult:
    """Save a lasting memory about the user, encrypted.

    Search first: if a memory already says this, correct it with update_memory
    instead. Give an entity, tags and keywords so it is found again. The answer
    lists memories the new one may duplicate.
    """
    with _as_tool_error():
        saved = context.store.save(entity=entity, text=text, category=category, tags=tags, keywords=keywords)
    duplicates = search.likely_duplicates(context.store.index, saved)
    return SaveResult(
        memory=saved.memory(),
        possibleDuplicates=[
            DuplicateHint(
                id=d.memory.id, entity=d.memory.entity, text=d.memory.text, overlap=round(d.score, 3)
            )
            for d in duplicates
        ],
        note=(
            "Similar memories exist. If one says the same thing, correct it with update_memory "
            f"and delete this one with delete_memory(id='{saved.id}')."
            if duplicates
            else None
        ),
    )


def update_memory(
    context: ToolContext,
    id: IdArg,
    text: Annotated[
        MemoryText | Unset, Field(description="The corrected text.", json_schema_extra=_absent_means_unset)
    ] = None,
    entity: Annotated[
        Entity | Unset, Field(description="The corrected entity.", json_schema_extra=_absent_means_unset)
    ] = None,
    category: Annotated[
        Category | Unset, Field(description="The corrected category.", json_schema_extra=_absent_means_unset)
    ] = None,
    # Absent keeps the tags; an empty list clears them: no default can say "keep".
    tags: Annotated[
        Tags | Unset,
        Field(description="The new tags (replace the old ones).", json_schema_extra=_absent_means_unset),
    ] = None,
    keywords: Annotated[
        Keywords | Unset,
        Field(description="The new keywords (replace the old ones).", json_schema_extra=_absent_means_unset),
    ] = None,
    reason: Annotated[
        Reason | Unset,
        Field(description="Why it changed, kept in the history.", json_schema_extra=_absent_means_unset),
    ] = None,
    expectedRevision: Annotated[
        Annotated[int, Field(ge=1)] | Unset,
        Field(
            description="The revision you read; the correction is refused if it changed since.",
            json_schema_extra=_absent_means_unset,
        ),
    ] = None,
) -> ChangeResult:
    """Correct a memory: writes a new revision, the old one stays readable in its history.

    Prefer this to saving a second memory that contradicts the first.
    """
    changes: dict[str, object] = {
        key: value
        for key, value in (
            ("text", text),
            ("entity", entity),
            ("category", category),
            ("tags", tags),
            ("keywords", keywords),
        )
        if value is not None
    }
    if not changes:
        raise ToolError("nothing to change: give at least one of text, entity, category, tags, keywords")
    with _as_tool_error():
        revision = context.store.update(
            id, changes=changes, reason=reason, expected_revision=expectedRevision
        )
    return ChangeResult(memory=revision.memory(), deleted=False, previousRevision=revision.revision - 1)


def get_memory(
    context: ToolContext,
    id: IdArg,
    history: Annotated[bool, Field(description="Also return every earlier revision.")] = False,
) -> GetResult:
    """Read one memory by id, optionally with its full history of corrections."""
    with _as_tool_error():
        latest = context.store.get(id)
        skipped = context.store.unreadable_above(id)
        revisions = context.store.history(id) if history else None
    return GetResult(
        memory=latest.memory(),
        deleted=latest.deleted,
        history=None if revisions is None else [_revision_view(r) for r in revisions],
        note=(
            f"Revision {', '.join(map(str, skipped))} of this memory failed its integrity check "
            f"(damaged or tampered with), so this is revision {latest.revision}, the newest readable "
            f"one. A correction or delete writes revision {skipped[-1] + 1} on top of it."
            if skipped
            else None
        ),
    )


def delete_memory(
    context: ToolContext,
    id: IdArg,
    reason: Annotated[
        Reason | Unset,
        Field(description="Why it is deleted, kept in the history.", json_schema_extra=_absent_means_unset),
    ] = None,
) -> ChangeResult:
    """Forget a memory: it stops appearing in search and context; restore_memory undoes this.

    Nothing is erased: the delete is a tombstone revision, the memory and its
    history stay in the vault, and restore_memory brings it back as it was.
    """
    with _as_tool_error():
        revision = context.store.delete(id, reason=reason)
    return ChangeResult(memory=revision.memory(), deleted=True, previousRevision=revision.revision - 1)


def restore_memory(context: ToolContext, id: IdArg) -> ChangeResult:
    """Undo delete_memory: the memory comes back as it was."""
    with _as_tool_error():
        revision = context.store.restore(id)
    return ChangeResult(memory=revision.memory(), deleted=False, previousRevision=revision.revision - 1)


def list_memories(
    context: ToolContext,
    category: Annotated[
        Category | Unset,
        Field(description="Only memories of this category.", json_schema_extra=_absent_means_unset),
    ] = None,
    tags: TagsFilter = [],  # noqa: B006
    entity: Annotated[
        Entity | Unset,
        Field(
            description="Only memories about this entity (ignoring case).",
            json_schema_extra=_absent_means_unset,
        ),
    ] = None,
    includeDeleted: Annotated[bool, Field(description="Also list deleted memories.")] = False,
    offset: Annotated[int, Field(ge=0, le=1_000_000, description="How many to skip (paging).")] = 0,
    limit: Annotated[int, Field(ge=1, le=MAX_LIST_LIMIT, description="Page size.")] = 20,
) -> ListResult:
    """List memories, most recently changed first, with filters and paging."""
    filters = Filters(
        categories=None if category is None else frozenset({category}),
        entity=entity,
        tags=tuple(tags or ()),
        include_deleted=includeDeleted,
    )
    with context.store.reading() as catalog:
        page = catalog.page(filters, offset, limit)
    return ListResult(
        memories=[_listed(memory) for memory in page.memories],
        total=page.total,
        offset=offset,
        limit=limit,
    )


@dataclass(frozen=True)
class ToolSpec:
    """A tool as registered: its function, the title a host shows, and its hints to the host."""

    function: Callable[Concatenate[ToolContext, ...], object]
    title: str
    annotations: ToolAnnotations


# Every tool works on the user's own vault only, so none is open-world. None is destructive:
# a save adds a memory, a correction keeps the old revision in the history, a delete writes a
# tombstone that restore_memory undoes; nothing is ever erased. Repeating a delete or a restore
# with the same id changes nothing more (the second is refused: already deleted, not deleted),
# so both are idempotent; a second save adds a second memory and a second identical correction
# a second revision, so those are not.
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
TOGGLES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

# The tools in the order tools/list shows them.
TOOLS = (
    ToolSpec(get_context, "Get the user's context", READS),
    ToolSpec(search_memory, "Search memories", READS),
    ToolSpec(save_memory, "Save a memory", ADDS),
    ToolSpec(update_memory, "Correct a memory", ADDS),
    ToolSpec(get_memory, "Read a memory", READS),
    ToolSpec(delete_memory, "Delete a memory (restorable)", TOGGLES),
    ToolSpec(restore_memory, "Restore a deleted memory", TOGGLES),
    ToolSpec(list_memories, "List memories", READS),
)
SKILL_NAME = "squirrel-notes"


def skill() -> str:
    """The agent skill: the habits that make this memory useful (start with get_context, ...)."""
    return (resources.files("squirrel_mcp") / "skill" / "SKILL.md").read_text(encoding="utf-8")


def _bind(tool: Callable[Concatenate[ToolContext, P], R], context: ToolContext) -> Callable[P, R]:
    """The tool with its context filled in, so its signature shows only the agent's arguments."""
    bound = functools.partial(tool, context)
    # The SDK names the tool and its argument model after `__name__`, which a partial lacks;
    # functools.update_wrapper would also set `__wrapped__`, whose signature shows the context.
    bound.__name__ = tool.__name__  # type: ignore[attr-defined]
    return bound


def create_server(store: MemoryStore | Opening, plugins: PluginHost | None = None) -> MCPServer:
    """The MCP server with every tool bound to a memory store, unlocked or still opening.

    `plugins` ranks search hits; without it only the built-in lexical ranker does.
    The tools and their schemas are the same whatever plugins are installed.
    """
    opening = store if isinstance(store, Opening) else Opening(store)
    context = ToolContext(opening, plugins or PluginHost(get_plugin_manager()))
    server = SquirrelServer(opening)
    for tool in TOOLS:
        server.add_tool(
            _bind(tool.function, context),
            title=tool.title,
            description=inspect.cleandoc(tool.function.__doc__ or ""),
            annotations=tool.annotations,
        )
    server.add_prompt(
        Prompt.from_function(
            skill,
            name=SKILL_NAME,
            title="How to use this memory",
            description="The agent skill: start with get_context, search before answering, retry "
            "once with nearMisses, save memories that will be found again, correct rather than duplicate.",
        )
    )
    # The SDK serves resources on every server; this one has none, so it neither serves
    # nor announces them (capabilities are derived from the methods served).
    for method in [m for m in server._lowlevel_server._request_handlers if m.startswith("resources/")]:
        del server._lowlevel_server._request_handlers[method]
    return server
