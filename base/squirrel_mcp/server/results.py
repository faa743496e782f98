"""What the tools return: the structured outputs an agent reads, one Pydantic model per answer.

Field names are camelCase because that is what agents see; the field
descriptions become the tools' output schemas.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from squirrel_mcp.core.models import Category, Memory


class _DropNone(BaseModel):
    """A model whose optional keys are left out of the output when they are None."""

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None or key in self._keep}

    # Keys that stay even when None (semanticScore is null without a semantic ranker).
    _keep: ClassVar[frozenset[str]] = frozenset()


class DuplicateHint(_DropNone):
    """A memory the new one may repeat."""

    id: str
    entity: str
    text: str
    overlap: float = Field(description="Share of the shorter text's words the other text holds, 0-1.")
    meaning: float | None = Field(
        default=None,
        description="Closeness in meaning (cosine similarity, -1 to 1); present only when a plugin "
        "that searches by meaning named this memory.",
    )


class SaveResult(_DropNone):
    """What save_memory returns."""

    memory: Memory = Field(
        description="The memory saved; or, when one just like it was stored already, that one."
    )
    possibleDuplicates: list[DuplicateHint] = Field(
        description="Memories that may say the same thing. If one does, correct it with "
        "update_memory and delete the new one, rather than keep both."
    )
    note: str | None = Field(
        default=None,
        description="Present when the memory was stored already (nothing was written) or similar "
        "memories exist: what to do.",
    )


class SearchHit(_DropNone):
    """A memory found by search_memory, with its scores."""

    _keep: ClassVar[frozenset[str]] = frozenset({"semanticScore", "project"})

    id: str
    entity: str
    text: str
    tags: list[str]
    keywords: list[str]
    category: Category
    project: str | None = Field(description="The project it belongs to; null: it holds everywhere.")
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
    note: str | None = Field(
        default=None,
        description="Present when the query cannot be searched as given, search by meaning is still "
        "starting or warming up, or the log as a whole failed its check: what was found and what to do.",
    )


class RevisionView(_DropNone):
    """One revision in a memory's history (its project always shown, null for none: a move shows)."""

    _keep: ClassVar[frozenset[str]] = frozenset({"project"})

    revision: int
    change: str
    updatedAt: str
    deleted: bool
    entity: str
    text: str
    tags: list[str]
    keywords: list[str]
    category: Category
    project: str | None = None
    reason: str | None = None


class GetResult(_DropNone):
    """What get_memory returns."""

    memory: Memory
    deleted: bool = Field(description="True when the memory is deleted (restore_memory undoes it).")
    history: list[RevisionView] | None = Field(default=None, description="Every revision, oldest first.")
    note: str | None = Field(
        default=None, description="Present when newer revisions failed their integrity check."
    )


Section = Literal["profile", "preferences", "recent"]


class LeftOut(BaseModel):
    """A section of get_context cut at its bound: how many it left out, and how to list them."""

    section: Section
    shown: int
    total: int = Field(description="How many memories the section would hold uncut.")
    listWith: dict[str, str | int] = Field(
        description="The list_memories arguments that list the section's memories, from the first "
        "left out (no category for recent: every memory, most recently changed first)."
    )


class ProjectCount(BaseModel):
    """How many memories a project holds."""

    project: str | None = Field(description="The project's name; null: the memories with no project.")
    count: int


class ContextResult(_DropNone):
    """What get_context returns."""

    _keep: ClassVar[frozenset[str]] = frozenset({"project"})

    profile: list[Memory] = Field(description="Who the user is.")
    preferences: list[Memory] = Field(description="What the user likes and how they want things done.")
    recent: list[Memory] = Field(description="The most recently saved or corrected other memories.")
    counts: dict[str, int] = Field(description="Memories per category, of the projects read.")
    total: int = Field(description="Memories in the projects read.")
    project: str | None = Field(
        description="This session's project (a repository's identity, a folder or a name); null: none."
    )
    projects: list[ProjectCount] = Field(
        description="Memories per project, every project (those with no project first, then the largest)."
    )
    unreadable: list[str] = Field(
        description="Ids of memories whose stored records all failed their integrity check."
    )
    olderRevision: list[str] = Field(
        description="Ids of memories shown at an older revision: their newest failed its integrity check."
    )
    leftOut: list[LeftOut] = Field(
        description="The sections cut at their bound, with how many were left out and how to list them."
    )
    note: str | None = Field(
        default=None,
        description="Present when a section was cut (how many were left out, how to list them) or the "
        "log as a whole failed its check (records removed, an older copy, a different history).",
    )


class ChangeResult(_DropNone):
    """What update_memory, delete_memory and restore_memory return."""

    memory: Memory = Field(description="The memory as it is now.")
    deleted: bool
    previousRevision: int = Field(
        description="The memory's revision before this call: memory.revision when nothing was written."
    )
    note: str | None = Field(
        default=None,
        description="Present when the memory already was as asked: nothing was written.",
    )


class ListedMemory(Memory):
    """A memory in list_memories, with whether it is deleted."""

    deleted: bool


class ListResult(BaseModel):
    """What list_memories returns."""

    memories: list[ListedMemory]
    total: int = Field(description="How many memories pass the filters, across all pages.")
    offset: int
    limit: int
