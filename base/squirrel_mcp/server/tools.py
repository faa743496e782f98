"""The tools an agent calls: typed module-level functions over a `ToolContext`.

Each tool is a plain function whose first parameter is the `ToolContext` (the
store, once open, and the plugins); its other parameters are the input schema
(`Annotated[..., Field(...)]`, so the JSON schema the agent sees is this code, and
bad arguments are refused before a tool runs) and its docstring the description
the agent reads. Outputs are the Pydantic models of squirrel_mcp.server.results.
Tool descriptions teach the habits of the agent skill
(docs/skill/squirrel-notes/SKILL.md): start with get_context, search before
answering, retry once with nearMisses, correct rather than duplicate.

This module holds the reading tools and what every tool shares; the writing tools are
in squirrel_mcp.server.writing, and squirrel_mcp.server.registry lists them all (`TOOLS`)
with their titles and hints to the host for squirrel_mcp.server.app to register.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, JsonValue
from pydantic.json_schema import SkipJsonSchema

from squirrel_mcp.book.catalog import Filters, Page
from squirrel_mcp.book.errors import MemoryOperationError
from squirrel_mcp.core.models import (
    EVERY_PROJECT,
    HALF_LIFE_DAYS,
    MAX_PROJECT,
    MAX_REVISION,
    Category,
    Entity,
    Memory,
    MemoryId,
    Revision,
    Tags,
)
from squirrel_mcp.core.projects import ProjectError, project_name
from squirrel_mcp.plugins.manager import PluginHost
from squirrel_mcp.server.opening import Opening
from squirrel_mcp.server.refusals import ArgumentRefused
from squirrel_mcp.server.results import (
    ContextResult,
    GetResult,
    LeftOut,
    ListedMemory,
    ListResult,
    ProjectCount,
    RevisionView,
    SearchResult,
    Section,
)
from squirrel_mcp.server.searching import MAX_SEARCH_LIMIT, ProgressReport, join_notes, log_note, run_search

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore

# How a ProjectError's message begins for a name given to a tool, left out where the field is named.
PROJECT_RULE = "a project's name: "

MAX_LIST_LIMIT = 100
# How many profile and how many preference memories get_context returns at most: who the user is
# and how they want things done, while the answer stays small enough to read at the start of every
# session (50 preferences of a few sentences each are already some 35,000 characters).
CONTEXT_SECTION_LIMIT = 50


# Set by SquirrelServer.call_tool for the request it serves; the tool runs in a worker thread
# that inherits it (the SDK runs a plain function through anyio.to_thread, which copies the
# context), so a tool reaches its own request's progress without the SDK in its signature.
request_progress: contextvars.ContextVar[ProgressReport | None] = contextvars.ContextVar(
    "squirrel_request_progress", default=None
)
# The project of the host session a request belongs to (None: none), set by SquirrelServer.serve_session
# for each session: the shared memory process serves hosts in several projects at once.
session_project: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "squirrel_session_project", default=None
)


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
def as_tool_error() -> Iterator[None]:
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
# because strict hosts mishandle `anyOf [T, null]` (some send such inputs as raw strings). None
# is only what an absent input becomes: an explicit null is refused (SquirrelServer.call_tool).
Unset = SkipJsonSchema[None]
# The same bounds as save_memory's tags: a tag no memory can carry is refused, not searched for.
TagsFilter = Annotated[Tags | Unset, Field(description="Only memories carrying every one of these tags.")]


def absent_means_unset(schema: dict[str, JsonValue]) -> None:
    """Drop the `default: null` an Unset input would otherwise show."""
    schema.pop("default", None)


ProjectScope = Annotated[
    str | Unset,
    Field(
        max_length=MAX_PROJECT,
        description="Which project's memories to read besides those with no project (which hold "
        'everywhere): absent, this session\'s project; "*", every project; a name, that project; '
        '"", only those with no project.',
        json_schema_extra=absent_means_unset,
    ),
]


def project_argument(value: str, *, reading: bool = False) -> str | None:
    """A tool's `project` as a project (None: none); the agent's error when it is no project's name.

    `reading`: the tool reads, where "*" (every project) is taken too (before this is called).
    """
    try:
        return project_name(value)
    except ProjectError as error:
        every = ' "*" for every project,' if reading else ""
        raise ArgumentRefused(
            f"`project` {str(error).removeprefix(PROJECT_RULE)}: send a project's name (one line of at most "
            f'{MAX_PROJECT:,} characters),{every} or "" for none, or leave it out'
        ) from None


def projects_read(project: str | None) -> frozenset[str | None] | None:
    """The projects a read with this `project` argument sees (None: every one); see ProjectScope."""
    if project is None:
        return frozenset({session_project.get(), None})
    if project == EVERY_PROJECT:
        return None
    return frozenset({project_argument(project, reading=True), None})


def revision_view(revision: Revision) -> RevisionView:
    """A revision as a history shows it."""
    return RevisionView.model_validate(revision.model_dump(include=set(RevisionView.model_fields)))


def memory_view(revision: Revision) -> Memory:
    """The public view of a revision, not checked again: its fields passed the same rules when read or made.

    Checking costs more than the rest of a listing (every character of the text is looked at).
    """
    return Memory.model_construct(**revision.model_dump(include=set(Memory.model_fields)))


def listed(revision: Revision) -> ListedMemory:
    """A revision as list_memories shows it (not checked again, as `memory_view`)."""
    return ListedMemory.model_construct(**revision.model_dump(include=set(ListedMemory.model_fields)))


def _left_out(section: Section, page: Page, list_with: dict[str, str | int]) -> LeftOut | None:
    """The section's LeftOut when its page holds fewer memories than the section has, else None."""
    if page.total <= len(page.memories):
        return None
    return LeftOut(section=section, shown=len(page.memories), total=page.total, listWith=list_with)


def _left_out_note(cut: list[LeftOut]) -> str | None:
    """The sentence saying which sections were cut and how to list the rest, or None."""
    if not cut:
        return None
    parts = []
    for section in cut:
        arguments = json.dumps(section.listWith)
        how = (
            f"list_memories {arguments}" if section.listWith else "list_memories (every memory, newest first)"
        )
        parts.append(
            f"{section.section} shows {section.shown} of {section.total}, {section.total - section.shown} "
            f"left out: {how} lists them"
        )
    return "Cut at their bounds: " + "; ".join(parts) + "."


def get_context(
    context: ToolContext,
    recent: Annotated[int, Field(ge=0, le=50, description="How many recent memories to include.")] = 10,
    project: ProjectScope = None,
) -> ContextResult:
    """Start every session here: who the user is, their preferences, what changed lately.

    Returns profile and preference memories, the most recent other memories and
    counts by category, of this session's project (`project` in the answer) and the
    memories with no project; `projects` counts every project's memories. Profile
    and preferences hold at most 50 memories each, most recently changed first, so
    that the answer stays small enough to read at the start of every session; when a
    section has more, leftOut says how many were left out and which list_memories
    call lists them. Then search_memory before answering a question about the user.
    """
    projects = projects_read(project)
    others = frozenset(HALF_LIFE_DAYS) - {"profile", "preference"}
    bound = CONTEXT_SECTION_LIMIT
    scope: dict[str, str | int] = {} if project is None else {"project": project}
    with context.store.reading() as catalog:
        # Each list costs about its length, not a sort of every memory: the catalog keeps the order.
        profile = catalog.page(Filters(categories=frozenset({"profile"}), projects=projects), 0, bound)
        preferences = catalog.page(Filters(categories=frozenset({"preference"}), projects=projects), 0, bound)
        latest = catalog.page(Filters(categories=others, projects=projects), 0, recent)
        counts = catalog.live_counts_in(projects)
        counted = {category: counts.get(category, 0) for category in HALF_LIFE_DAYS}
        per_project = _project_counts(catalog.live_project_counts())
        unreadable, older = context.store.unreadable_ids(), context.store.older_revision_ids()
    cut = [
        section
        for section in (
            _left_out("profile", profile, {"category": "profile", "offset": bound, **scope}),
            _left_out("preferences", preferences, {"category": "preference", "offset": bound, **scope}),
            # The other categories mixed: no one filter lists them alone.
            _left_out("recent", latest, scope),
        )
        if section is not None
    ]
    return ContextResult(
        profile=[memory_view(memory) for memory in profile.memories],
        preferences=[memory_view(memory) for memory in preferences.memories],
        recent=[memory_view(memory) for memory in latest.memories],
        counts=counted,
        total=sum(counted.values()),
        project=session_project.get(),
        projects=per_project,
        unreadable=unreadable,
        olderRevision=older,
        leftOut=cut,
        note=join_notes(
            opening_note(context.opening, sum(counted.values())), log_note(context.store), _left_out_note(cut)
        ),
    )


def opening_note(opening: Opening, total: int) -> str | None:
    """The note of the first get_context after the opening made a new vault, while it holds `total` = 0.

    Said once: the agent hears that its memory is empty because it is new. Once memories
    were saved, there is nothing to explain.
    """
    news = opening.take_news()
    if news is None or total:
        return None
    return f"{news[0].upper()}{news[1:]} as this server started: it holds no memories yet."


def _project_counts(counts: Mapping[str | None, int]) -> list[ProjectCount]:
    """Each project's count: the memories with no project first, then the largest, then by name."""
    ordered = sorted(counts.items(), key=lambda item: (item[0] is not None, -item[1], item[0] or ""))
    return [ProjectCount(project=project, count=count) for project, count in ordered if count]


def search_memory(
    context: ToolContext,
    query: Annotated[
        str, Field(min_length=1, max_length=1000, description="What to look for, in the user's words.")
    ],
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT, description="Most results to return.")] = 10,
    category: Annotated[
        Category | Unset,
        Field(description="Only memories of this category.", json_schema_extra=absent_means_unset),
    ] = None,
    tags: TagsFilter = [],  # noqa: B006
    nearMisses: Annotated[
        bool,
        Field(
            description="Also return up to 3 closest memories that did not match. Use once, on a "
            "retry after an empty or unhelpful search; treat a near miss as a candidate to check."
        ),
    ] = False,
    project: ProjectScope = None,
) -> SearchResult:
    """Search the user's memories before answering anything about them.

    Hits come in rank order with absolute scores (lexicalScore, semanticScore); a
    low score means lower confidence, not a wrong answer, so check low hits against
    the question. If nothing fits, retry once with nearMisses: true. It searches this
    session's project and the memories with no project; project "*" searches every one.
    """
    return run_search(
        context.store,
        context.plugins,
        query,
        limit=limit,
        category=category,
        tags=tags,
        near_misses=nearMisses,
        projects=projects_read(project),
        now=datetime.now(UTC),
        progress=request_progress.get(),
    )


def get_memory(
    context: ToolContext,
    id: IdArg,
    history: Annotated[bool, Field(description="Also return every earlier revision.")] = False,
) -> GetResult:
    """Read one memory by id, optionally with its full history of corrections."""
    with as_tool_error():
        latest = context.store.get(id)
        skipped = context.store.unreadable_above(id)
        following = context.store.next_revision(id)
        revisions = context.store.history(id) if history else None
    return GetResult(
        memory=latest.memory(),
        deleted=latest.deleted,
        history=None if revisions is None else [revision_view(r) for r in revisions],
        note=(
            f"Revision {', '.join(map(str, skipped))} of this memory failed its integrity check "
            f"(damaged or tampered with), so this is revision {latest.revision}, the newest readable "
            f"one. {next_write(following)}"
            if skipped
            else None
        ),
    )


def next_write(number: int) -> str:
    """What the note of a memory served at an older revision says a change would do."""
    if number > MAX_REVISION:
        return f"It holds revision {MAX_REVISION}, the highest a record can have, so it cannot be changed."
    return f"A correction or delete writes revision {number} on top of it."


def list_memories(
    context: ToolContext,
    category: Annotated[
        Category | Unset,
        Field(description="Only memories of this category.", json_schema_extra=absent_means_unset),
    ] = None,
    tags: TagsFilter = [],  # noqa: B006
    entity: Annotated[
        Entity | Unset,
        Field(
            description="Only memories about this entity (ignoring case).",
            json_schema_extra=absent_means_unset,
        ),
    ] = None,
    includeDeleted: Annotated[bool, Field(description="Also list deleted memories.")] = False,
    offset: Annotated[int, Field(ge=0, le=1_000_000, description="How many to skip (paging).")] = 0,
    limit: Annotated[int, Field(ge=1, le=MAX_LIST_LIMIT, description="Page size.")] = 20,
    project: ProjectScope = None,
) -> ListResult:
    """List memories, most recently changed first, with filters and paging.

    It lists this session's project and the memories with no project; project "*" lists every one.
    """
    filters = Filters(
        categories=None if category is None else frozenset({category}),
        projects=projects_read(project),
        entity=entity,
        tags=tuple(tags or ()),
        include_deleted=includeDeleted,
    )
    with context.store.reading() as catalog:
        page = catalog.page(filters, offset, limit)
    return ListResult(
        memories=[listed(memory) for memory in page.memories],
        total=page.total,
        offset=offset,
        limit=limit,
    )
