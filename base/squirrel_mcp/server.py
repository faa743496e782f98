"""The MCP server: the tools an agent calls, their typed inputs and structured outputs.

Inputs are `Annotated[..., Field(...)]` so the JSON schema the agent sees is this
code, and bad arguments are refused before a tool runs. Outputs are Pydantic
models. Tool descriptions teach the habits of the agent skill
(docs/skill/squirrel-notes/SKILL.md): start with get_context, search before
answering, retry once with nearMisses, correct rather than duplicate.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from squirrel_mcp import __version__, search
from squirrel_mcp.memories import MemoryOperationError, MemoryReader, MemoryStore
from squirrel_mcp.models import (
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
from squirrel_mcp.plugins import PluginHost, get_plugin_manager
from squirrel_mcp.ranking import Candidate, RankedHit, RankOptions
from squirrel_mcp.stdio import stdio_transport
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


class _DropNone(BaseModel):
    """A model whose optional keys are left out of the output when they are None."""

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None or key in self._keep}

    # Keys that stay even when None (semanticScore is null without a semantic ranker).
    _keep: ClassVar[frozenset[str]] = frozenset()


class DuplicateHint(BaseModel):
    """A memory the new one may repeat."""

    id: str
    entity: str
    text: str
    overlap: float = Field(description="Share of words the two memories have in common, 0-1.")


class SaveResult(_DropNone):
    """What save_memory returns."""

    memory: Memory
    possibleDuplicates: list[DuplicateHint] = Field(
        description="Memories that may say the same thing. If one does, correct it with "
        "update_memory and delete the new one, rather than keep both."
    )
    note: str | None = None


class SearchHit(_DropNone):
    """A memory found by search_memory, with its scores."""

    _keep: ClassVar[frozenset[str]] = frozenset({"semanticScore"})

    id: str
    entity: str
    text: str
    tags: list[str]
    keywords: list[str]
    category: Category
    createdAt: str
    updatedAt: str
    revision: int
    score: float = Field(description="Orders this response only; higher ranks first.")
    lexicalScore: float = Field(description="Share of the query's content words the memory holds, 0-1.")
    semanticScore: float | None = Field(
        description="Cosine similarity to the query, -1 to 1; null when no semantic ranker ran."
    )
    nearMiss: bool | None = Field(
        default=None, description="Present and true only on near misses: a candidate to check, not an answer."
    )


class SearchResult(_DropNone):
    """What search_memory returns."""

    results: list[SearchHit]
    total: int = Field(description="How many memories matched (near misses not counted).")
    ranking: Literal["lexical", "hybrid"]
    note: str | None = None


class RevisionView(_DropNone):
    """One revision in a memory's history."""

    revision: int
    change: str
    updatedAt: str
    deleted: bool
    entity: str
    text: str
    tags: list[str]
    keywords: list[str]
    category: Category
    reason: str | None = None


class GetResult(_DropNone):
    """What get_memory returns."""

    memory: Memory
    deleted: bool = Field(description="True when the memory is deleted (restore_memory undoes it).")
    history: list[RevisionView] | None = Field(default=None, description="Every revision, oldest first.")
    note: str | None = Field(
        default=None, description="Present when newer revisions failed their integrity check."
    )


class ContextResult(BaseModel):
    """What get_context returns."""

    profile: list[Memory] = Field(description="Who the user is.")
    preferences: list[Memory] = Field(description="What the user likes and how they want things done.")
    recent: list[Memory] = Field(description="The most recently saved or corrected other memories.")
    counts: dict[str, int] = Field(description="Memories per category.")
    total: int
    unreadable: list[str] = Field(
        description="Ids of memories whose stored records all failed their integrity check."
    )
    olderRevision: list[str] = Field(
        description="Ids of memories shown at an older revision: their newest failed its integrity check."
    )


class ChangeResult(BaseModel):
    """What update_memory, delete_memory and restore_memory return."""

    memory: Memory
    deleted: bool
    previousRevision: int


class ListedMemory(Memory):
    """A memory in list_memories, with whether it is deleted."""

    deleted: bool


class ListResult(BaseModel):
    """What list_memories returns."""

    memories: list[ListedMemory]
    total: int = Field(description="How many memories pass the filters, across all pages.")
    offset: int
    limit: int


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
TagsFilter = Annotated[
    list[str] | None, Field(description="Only memories carrying every one of these tags.", max_length=20)
]


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


def _has_tags(memory: Revision, tags: list[str] | None) -> bool:
    if not tags:
        return True
    held = {tag.casefold() for tag in memory.tags}
    return all(tag.casefold() in held for tag in tags)


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
) -> SearchResult:
    """What search_memory answers, as of `now`: the words' matches, ranked by the plugins.

    The tool calls this; so do the recall gate and the diagnostic, so what they
    measure is what an agent gets.
    """
    store.refresh_if_stale()

    def accepts(memory: Revision) -> bool:
        return (category is None or memory.category == category) and _has_tags(memory, tags)

    # Another ranker may rank any word match, so it gets all of them; lexical needs the top `limit`.
    everything = host.has_rankers()
    outcome = search.search(store.index, query, now, limit=None if everything else limit, keep=accepts)
    if outcome.note is not None and not everything:
        return SearchResult(results=[], total=0, ranking="lexical", note=outcome.note)
    candidates = [Candidate(hit.memory, hit.score, hit.lexical_score) for hit in outcome.hits]
    options = RankOptions(
        limit=limit,
        near_misses=near_misses,
        category=category,
        tags=tuple(tags or ()),
        now=now,
        accepts=accepts,
    )
    reader = MemoryReader(store)
    ranked = host.rank(query, candidates, outcome.total, options, reader.get)
    found = {candidate.memory.id: candidate.memory for candidate in candidates}
    views = []
    for hit in ranked.hits:
        memory = found.get(hit.memory_id) or reader.get(hit.memory_id)
        # check_ranking made sure of it; a memory deleted since then is simply left out.
        if memory is not None:
            views.append(_hit_view(memory, hit))
    note = outcome.note
    if note is not None and ranked.ranking == "hybrid":
        # The spec: the note says the query cannot be searched, unless the semantic ranking ran.
        note = MEANING_ONLY_NOTE
    return SearchResult(results=views, total=ranked.total, ranking=ranked.ranking, note=note)


class SquirrelServer(MCPServer):
    """MCPServer whose argument errors never echo the arguments back, and that answers every bad line."""

    async def run_stdio_async(self) -> None:
        """Serve over stdio through squirrel_mcp.stdio.

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
        cause and never a key or memory text.
        """
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


def create_server(store: MemoryStore, plugins: PluginHost | None = None) -> MCPServer:
    """The MCP server with every tool bound to an unlocked memory store.

    `plugins` ranks search hits; without it only the built-in lexical ranker does.
    The tools and their schemas are the same whatever plugins are installed.
    """
    host = plugins or PluginHost(get_plugin_manager())
    server: MCPServer = SquirrelServer(
        name="squirrel-mcp", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    def guarded(operation: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return operation(*args, **kwargs)
        except MemoryOperationError as error:
            raise ToolError(str(error)) from None

    @server.tool()
    def get_context(
        recent: Annotated[int, Field(ge=0, le=50, description="How many recent memories to include.")] = 10,
    ) -> ContextResult:
        """Start every session here: who the user is, their preferences, what changed lately.

        Returns profile and preference memories, the most recent other memories and
        counts by category. Then search_memory before answering a question about the user.
        """
        memories = store.current()

        def first(count: int, wanted: Callable[[Revision], bool]) -> list[Memory]:
            # Chosen before they are turned into views: a large vault must not pay for every one.
            return [memory.memory() for memory in itertools.islice(filter(wanted, memories), count)]

        counts = Counter[str](m.category for m in memories)
        return ContextResult(
            profile=first(50, lambda m: m.category == "profile"),
            preferences=first(50, lambda m: m.category == "preference"),
            recent=first(recent, lambda m: m.category not in ("profile", "preference")),
            counts={category: counts[category] for category in HALF_LIFE_DAYS},
            total=len(memories),
            unreadable=store.unreadable_ids(),
            olderRevision=store.older_revision_ids(),
        )

    @server.tool()
    def search_memory(
        query: Annotated[
            str, Field(min_length=1, max_length=1000, description="What to look for, in the user's words.")
        ],
        limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT, description="Most results to return.")] = 10,
        category: Annotated[Category | None, Field(description="Only memories of this category.")] = None,
        tags: TagsFilter = None,
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
            store,
            host,
            query,
            limit=limit,
            category=category,
            tags=tags,
            near_misses=nearMisses,
            now=datetime.now(UTC),
        )

    @server.tool()
    def save_memory(
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
        saved = store.save(entity=entity, text=text, category=category, tags=tags, keywords=keywords)
        duplicates = search.likely_duplicates(store.index, saved)
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

    @server.tool()
    def update_memory(
        id: IdArg,
        text: Annotated[MemoryText | None, Field(description="The corrected text.")] = None,
        entity: Annotated[Entity | None, Field(description="The corrected entity.")] = None,
        category: Annotated[Category | None, Field(description="The corrected category.")] = None,
        tags: Annotated[Tags | None, Field(description="The new tags (replace the old ones).")] = None,
        keywords: Annotated[
            Keywords | None, Field(description="The new keywords (replace the old ones).")
        ] = None,
        reason: Annotated[Reason | None, Field(description="Why it changed, kept in the history.")] = None,
        expectedRevision: Annotated[
            int | None,
            Field(ge=1, description="The revision you read; the correction is refused if it changed since."),
        ] = None,
    ) -> ChangeResult:
        """Correct a memory: writes a new revision, the old one stays readable in its history.

        Prefer this to saving a second memory that contradicts the first.
        """
        changes = {
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
        revision = guarded(
            store.update, id, changes=changes, reason=reason, expected_revision=expectedRevision
        )
        return ChangeResult(memory=revision.memory(), deleted=False, previousRevision=revision.revision - 1)

    @server.tool()
    def get_memory(
        id: IdArg,
        history: Annotated[bool, Field(description="Also return every earlier revision.")] = False,
    ) -> GetResult:
        """Read one memory by id, optionally with its full history of corrections."""
        latest = guarded(store.get, id)
        skipped = store.unreadable_above(id)
        return GetResult(
            memory=latest.memory(),
            deleted=latest.deleted,
            history=[_revision_view(r) for r in guarded(store.history, id)] if history else None,
            note=(
                f"Revision {', '.join(map(str, skipped))} of this memory failed its integrity check "
                f"(damaged or tampered with), so this is revision {latest.revision}, the newest readable "
                f"one. A correction or delete writes revision {skipped[-1] + 1} on top of it."
                if skipped
                else None
            ),
        )

    @server.tool()
    def delete_memory(
        id: IdArg,
        reason: Annotated[Reason | None, Field(description="Why it is deleted, kept in the history.")] = None,
    ) -> ChangeResult:
        """Forget a memory. It stops appearing in search; restore_memory undoes this."""
        revision = guarded(store.delete, id, reason=reason)
        return ChangeResult(memory=revision.memory(), deleted=True, previousRevision=revision.revision - 1)

    @server.tool()
    def restore_memory(id: IdArg) -> ChangeResult:
        """Undo delete_memory: the memory comes back as it was."""
        revision = guarded(store.restore, id)
        return ChangeResult(memory=revision.memory(), deleted=False, previousRevision=revision.revision - 1)

    @server.tool()
    def list_memories(
        category: Annotated[Category | None, Field(description="Only memories of this category.")] = None,
        tags: TagsFilter = None,
        entity: Annotated[
            Entity | None, Field(description="Only memories about this entity (ignoring case).")
        ] = None,
        includeDeleted: Annotated[bool, Field(description="Also list deleted memories.")] = False,
        offset: Annotated[int, Field(ge=0, le=1_000_000, description="How many to skip (paging).")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_LIST_LIMIT, description="Page size.")] = 20,
    ) -> ListResult:
        """List memories, most recently changed first, with filters and paging."""
        matching = [
            m
            for m in store.current(include_deleted=includeDeleted)
            if (category is None or m.category == category)
            and _has_tags(m, tags)
            and (entity is None or m.entity.casefold() == entity.casefold())
        ]
        page = matching[offset : offset + limit]
        return ListResult(
            memories=[ListedMemory(**m.memory().model_dump(), deleted=m.deleted) for m in page],
            total=len(matching),
            offset=offset,
            limit=limit,
        )

    return server
