"""The tools that write: save, correct, delete and restore a memory.

Each is a plain function over a `ToolContext`, as the reading tools in
squirrel_mcp.server.tools are. Every one of them is idempotent: called again with
the same arguments, it finds the memory already as asked, writes nothing and says so
in a note.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from squirrel_mcp.book.errors import Unchanged
from squirrel_mcp.core.models import (
    MAX_PROJECT,
    Category,
    Entity,
    Keywords,
    MemoryText,
    Reason,
    Revision,
    Tags,
)
from squirrel_mcp.search import duplicates
from squirrel_mcp.server.results import ChangeResult, DuplicateHint, SaveResult
from squirrel_mcp.server.tools import (
    CategoryArg,
    IdArg,
    ToolContext,
    Unset,
    absent_means_unset,
    as_tool_error,
    project_argument,
    session_project,
)

# The most memories a save names as possible duplicates.
LIMIT = 3
# The categories that hold everywhere unless a save says otherwise: who the user is, what they like.
EVERYWHERE = frozenset({"profile", "preference"})

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore
    from squirrel_mcp.plugins.manager import PluginHost


def save_with_duplicates(
    store: MemoryStore,
    *,
    entity: str,
    text: str,
    category: Category,
    tags: list[str],
    keywords: list[str],
    project: str | None = None,
    seen: frozenset[str | None] | None = None,
    host: PluginHost | None = None,
) -> tuple[Revision, bool, list[duplicates.Duplicate]]:
    """Save as save_memory does: (the memory, whether it was written, the memories it may duplicate).

    The fields must have passed save_memory's rules. A memory identical to a stored
    live one writes nothing and is that one (with no duplicates listed); otherwise
    the duplicates are those `duplicates.likely_duplicates` finds among the projects `seen`
    (None: every project), then those `host`'s plugins find close in meaning. The page's
    add form saves through here too, so both follow one set of rules.
    """
    saved, written = store.save_once(
        entity=entity, text=text, category=category, tags=tags, keywords=keywords, project=project
    )
    if not written:
        return saved, False, []

    def keep(memory: Revision) -> bool:
        return seen is None or memory.project in seen

    by_words = duplicates.likely_duplicates(store.index, saved, keep=keep)
    by_meaning = [] if host is None else host.similar(saved, LIMIT, store.live)
    found = duplicates.with_meaning(
        saved, by_words, [(m, value) for m, value in by_meaning if keep(m)], LIMIT
    )
    return saved, True, found


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
    project: Annotated[
        str | Unset,
        Field(
            max_length=MAX_PROJECT,
            description='The project it belongs to; "" for none (it holds everywhere). Absent: this '
            "session's project, except profile and preference memories, which have none.",
            json_schema_extra=absent_means_unset,
        ),
    ] = None,
) -> SaveResult:
    """Save a lasting memory about the user, encrypted.

    Search first: if a memory already says this, correct it with update_memory
    instead. Give an entity, tags and keywords so it is found again. It goes in this
    session's project; give project "" for what holds everywhere (who the user is,
    how they like things done). The answer lists memories the new one may duplicate.
    Saving a memory identical to a stored one in the same project (same entity, text,
    category, tags and keywords) writes nothing and answers the stored one, so a
    retried save stores the fact once.
    """
    if project is not None:
        belongs: str | None = project_argument(project)
    else:
        belongs = None if category in EVERYWHERE else session_project.get()
    with as_tool_error():
        saved, written, duplicates = save_with_duplicates(
            context.store,
            entity=entity,
            text=text,
            category=category,
            tags=tags,
            keywords=keywords,
            project=belongs,
            # Another project's memories are never shown to this session, not even as a hint.
            seen=frozenset({belongs, session_project.get(), None}),
            host=context.plugins,
        )
    if not written:
        return SaveResult(
            memory=saved.memory(),
            possibleDuplicates=[],
            note=f"This memory was stored already (id '{saved.id}', saved {saved.createdAt}): nothing "
            f"was written. To change it, correct it with update_memory(id='{saved.id}').",
        )
    return SaveResult(
        memory=saved.memory(),
        possibleDuplicates=[
            DuplicateHint(
                id=d.memory.id,
                entity=d.memory.entity,
                text=d.memory.text,
                overlap=round(d.overlap, 3),
                meaning=None if d.meaning is None else round(d.meaning, 3),
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
        MemoryText | Unset, Field(description="The corrected text.", json_schema_extra=absent_means_unset)
    ] = None,
    entity: Annotated[
        Entity | Unset, Field(description="The corrected entity.", json_schema_extra=absent_means_unset)
    ] = None,
    category: Annotated[
        Category | Unset, Field(description="The corrected category.", json_schema_extra=absent_means_unset)
    ] = None,
    # Absent keeps the tags; an empty list clears them: no default can say "keep".
    tags: Annotated[
        Tags | Unset,
        Field(description="The new tags (replace the old ones).", json_schema_extra=absent_means_unset),
    ] = None,
    keywords: Annotated[
        Keywords | Unset,
        Field(description="The new keywords (replace the old ones).", json_schema_extra=absent_means_unset),
    ] = None,
    project: Annotated[
        str | Unset,
        Field(
            max_length=MAX_PROJECT,
            description='Move it to this project; "" for none (it holds everywhere).',
            json_schema_extra=absent_means_unset,
        ),
    ] = None,
    reason: Annotated[
        Reason | Unset,
        Field(description="Why it changed, kept in the history.", json_schema_extra=absent_means_unset),
    ] = None,
    expectedRevision: Annotated[
        Annotated[int, Field(ge=1)] | Unset,
        Field(
            description="The revision you read; the correction is refused if it changed since.",
            json_schema_extra=absent_means_unset,
        ),
    ] = None,
) -> ChangeResult:
    """Correct a memory: writes a new revision, the old one stays readable in its history.

    Prefer this to saving a second memory that contradicts the first. A correction
    to what the memory already says writes nothing and says so.
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
    if project is not None:
        changes["project"] = project_argument(project)
    if not changes:
        raise ToolError(
            "nothing to change: give at least one of text, entity, category, tags, keywords, project"
        )

    def unchanged(memory: Revision) -> str:
        since = (
            f" It is at revision {memory.revision}, not {expectedRevision}: it was changed since "
            "you read it, to what you ask."
            if expectedRevision is not None and expectedRevision != memory.revision
            else ""
        )
        return f"Memory {id} already says this: nothing was written.{since}"

    return _change(
        lambda: context.store.update(id, changes=changes, reason=reason, expected_revision=expectedRevision),
        unchanged,
    )


def delete_memory(
    context: ToolContext,
    id: IdArg,
    reason: Annotated[
        Reason | Unset,
        Field(description="Why it is deleted, kept in the history.", json_schema_extra=absent_means_unset),
    ] = None,
) -> ChangeResult:
    """Forget a memory: it stops appearing in search and context; restore_memory undoes this.

    Nothing is erased: the delete is a tombstone revision, the memory and its
    history stay in the vault, and restore_memory brings it back as it was.
    Deleting a deleted memory writes nothing and says so.
    """
    return _change(
        lambda: context.store.delete(id, reason=reason),
        lambda memory: (
            f"Memory {id} was deleted already: nothing was written. restore_memory(id='{id}') brings it back."
        ),
    )


def restore_memory(context: ToolContext, id: IdArg) -> ChangeResult:
    """Undo delete_memory: the memory comes back as it was.

    Restoring a memory that is not deleted writes nothing and says so.
    """
    return _change(
        lambda: context.store.restore(id),
        lambda memory: f"Memory {id} is not deleted: nothing was written.",
    )


def _change(write: Callable[[], Revision], unchanged: Callable[[Revision], str]) -> ChangeResult:
    """What a correction, delete or restore answers: the revision `write` wrote.

    When the memory already was as asked, `write` wrote nothing: the memory as it is,
    with the note `unchanged` makes of it. Other refusals are the agent's errors.
    """
    with as_tool_error():
        try:
            revision = write()
        except Unchanged as same:
            memory = same.revision
            return ChangeResult(
                memory=memory.memory(),
                deleted=memory.deleted,
                previousRevision=memory.revision,
                note=unchanged(memory),
            )
    return ChangeResult(
        memory=revision.memory(), deleted=revision.deleted, previousRevision=revision.revision - 1
    )
