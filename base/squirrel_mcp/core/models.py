"""What a memory is: its fields, its categories, and the rules its text obeys.

These models are the wire format twice over: the plaintext sealed in each
record, and the structured output the tools return. Field names are camelCase
because that is what agents see.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from squirrel_mcp.core.projects import EVERY_PROJECT as EVERY_PROJECT
from squirrel_mcp.core.projects import MAX_PROJECT as MAX_PROJECT
from squirrel_mcp.core.projects import checked_name

# Recency half-life of each category, in days (None: never fades). One table,
# documented in docs/search.md. Who the user is does not age; what they like
# changes over years; facts, projects and notes over months; events and tasks
# are about now.
HALF_LIFE_DAYS: dict[str, float | None] = {
    "profile": None,
    "preference": 730.0,
    "fact": 180.0,
    "project": 180.0,
    "note": 180.0,
    "event": 30.0,
    "task": 30.0,
}
Category = Literal["profile", "preference", "fact", "project", "note", "event", "task"]

# The highest revision number. Storage keeps revisions in INTEGER columns: 64 bits in SQLite
# (the vault), 32 in PostgreSQL (the sync server), so this is what both hold and what the
# sync API takes (storage/wire.py). A record, an export or a request past it is refused where
# it enters: a revision this code could never write, which would leave a memory whose next
# revision cannot be stored.
MAX_REVISION = 2**31 - 1
MAX_TEXT = 4000
MAX_ENTITY = 200
MAX_TAG = 64
MAX_TAGS = 20
MAX_KEYWORDS = 30
MAX_REASON = 500

# Control characters other than tab and newlines have no place in a memory, and
# a lone surrogate (legal in JSON, not in UTF-8) cannot be stored. Unicode's control
# characters (category Cc) are U+0000-U+001F and U+007F-U+009F, a set the standard
# promises never to change: these, less tab, line feed and carriage return, checked in
# C by one regular expression, since every record is checked again at each unlock.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _printable(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


def _single_line(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("must be a single line")
    return value


def _unique(values: list[str]) -> list[str]:
    """Drop repeats that differ only in case, keeping the first spelling."""
    seen: set[str] = set()
    kept = []
    for value in values:
        if value.casefold() not in seen:
            seen.add(value.casefold())
            kept.append(value)
    return kept


MemoryText = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT),
    AfterValidator(_printable),
]
Entity = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_ENTITY),
    AfterValidator(_printable),
    AfterValidator(_single_line),
]
Tag = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TAG),
    AfterValidator(_printable),
    AfterValidator(_single_line),
]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS), AfterValidator(_unique)]


# A project's name (squirrel_mcp.core.projects says the rules).
ProjectName = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_PROJECT),
    AfterValidator(checked_name),
]
Keywords = Annotated[list[Tag], Field(max_length=MAX_KEYWORDS), AfterValidator(_unique)]
Reason = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_REASON),
    AfterValidator(_printable),
]
Change = Literal["created", "corrected", "deleted", "restored"]


def now_iso(timespec: Literal["milliseconds", "microseconds"] = "milliseconds") -> str:
    """The current UTC time as ISO 8601 (RFC 3339) text ending in "Z".

    Memories are stamped to the millisecond; the sync server stamps what it
    stores to the microsecond.
    """
    return datetime.now(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_iso(value: str) -> datetime:
    """Parse a timestamp written by `now_iso` (or any ISO 8601 with a zone)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _timestamp(value: str) -> str:
    try:
        parsed = parse_iso(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 timestamp") from None
    if parsed.tzinfo is None:
        raise ValueError("must carry a time zone")
    return value


Timestamp = Annotated[str, AfterValidator(_timestamp)]
# A memory's id: 16 lowercase hex digits.
MEMORY_ID_PATTERN = r"^[0-9a-f]{16}$"
MemoryId = Annotated[str, StringConstraints(pattern=MEMORY_ID_PATTERN)]


class Memory(BaseModel):
    """A memory as the agent sees it: its current revision."""

    model_config = ConfigDict(extra="forbid")

    id: MemoryId = Field(description="Stable id; pass it to get_memory, update_memory, delete_memory.")
    entity: Entity = Field(description="Who or what the memory is about.")
    text: MemoryText = Field(description="The memory itself.")
    tags: Tags = Field(default_factory=list, description="Short labels.")
    keywords: Keywords = Field(default_factory=list, description="Words the memory should be found by.")
    category: Category = Field(description="Kind of memory; sets how fast it fades in search.")
    project: ProjectName | None = Field(
        default=None,
        description="The project it belongs to (a repository's identity such as 'github.com/acme/api', "
        "a folder, or a name); null: it holds everywhere.",
    )
    createdAt: Timestamp = Field(description="When the memory was first saved (UTC).")
    updatedAt: Timestamp = Field(description="When this revision was written (UTC).")
    revision: int = Field(
        ge=1, le=MAX_REVISION, description="1 when saved, +1 on every correction, delete or restore."
    )


class Revision(Memory):
    """One stored revision: the memory plus what changed. This is what a record seals."""

    change: Change = Field(description="What this revision did.")
    deleted: bool = Field(default=False, description="True when this revision is a tombstone.")
    reason: Reason | None = Field(default=None, description="Why the memory was corrected or deleted.")

    def memory(self) -> Memory:
        """The public view of this revision."""
        return Memory.model_validate(self.model_dump(include=set(Memory.model_fields)))


# The set of names pydantic keeps on each model for the fields given to it: 728 bytes a
# revision, 73 MB at 100,000 memories. A revision read from a record or a snapshot has
# every field given, so it can hold this one set. Pydantic only ever adds to a model's
# set (when a field is assigned), and adding a field's name to a set that already holds
# every field's name leaves it as it was; model_copy copies the set before it updates it.
EVERY_FIELD: set[str] = set(Revision.model_fields)


# A memory with no project is sealed without the field (as before projects were), so the same
# set less "project" is every field too.
_EVERY_FIELD_BUT_PROJECT = EVERY_FIELD - {"project"}


def sharing_fields_set(revision: Revision) -> Revision:
    """`revision`, holding the shared EVERY_FIELD when every field was given to it (a project aside)."""
    given = revision.__pydantic_fields_set__
    if given in (EVERY_FIELD, _EVERY_FIELD_BUT_PROJECT):
        object.__setattr__(revision, "__pydantic_fields_set__", EVERY_FIELD)
    return revision
