"""Export and import: every memory with its whole history, as plaintext JSON.

For backups and for moving to another machine. The file is plaintext by design
(it is what the user owns); it is written owner-only. Import is idempotent: a
revision the vault already holds with the same content is skipped, one it
holds with different content is reported as a conflict and left alone.

A damaged record does not stop a backup: the export holds every revision that
can be read, and names the ones left out (by memory id and revision number,
never by content) so the caller can report them. A memory's revisions are then
numbered with a gap (1, 3, ...), and import takes them as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from squirrel_mcp import __version__
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import MemoryId, Revision, now_iso

FORMAT = "squirrel-mcp-export"
EXPORT_VERSION = 1


class ExportedMemory(BaseModel):
    """One memory's history, oldest revision first (a revision left out leaves a gap in the numbers)."""

    id: MemoryId
    revisions: list[Revision] = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> ExportedMemory:
        numbers = [revision.revision for revision in self.revisions]
        if numbers != sorted(set(numbers)):
            raise ValueError(f"memory {self.id}: revisions must be in increasing order, each once")
        if any(revision.id != self.id for revision in self.revisions):
            raise ValueError(f"memory {self.id}: a revision carries another id")
        return self


class ExportFile(BaseModel):
    """The whole export file."""

    format: Literal["squirrel-mcp-export"]
    version: Literal[1]
    exportedAt: str
    exportedBy: str
    memories: list[ExportedMemory]


class ImportFileError(Exception):
    """The file is not a valid squirrel-mcp export."""


@dataclass
class ImportReport:
    """What an import did."""

    memories: int = 0
    added: int = 0
    present: int = 0
    conflicts: int = 0


@dataclass(frozen=True)
class Export:
    """An export file's bytes, and what it had to leave out."""

    data: bytes
    #: One line per memory with revisions left out: its id and their numbers, never content.
    gaps: list[str]


def export_json(store: MemoryStore) -> Export:
    """Every readable revision of every memory, as indented JSON, and the gaps (see Export)."""
    histories = list(store.all_revisions())
    exported = ExportFile(
        format=FORMAT,
        version=1,
        exportedAt=now_iso(),
        exportedBy=f"squirrel-mcp {__version__}",
        memories=[ExportedMemory(id=history[0].id, revisions=history) for history in histories],
    )
    return Export(exported.model_dump_json(indent=2).encode() + b"\n", _gaps(histories, store))


def _gaps(histories: list[list[Revision]], store: MemoryStore) -> list[str]:
    """Which revisions the export lacks, one line per memory: their numbers, never content.

    Below a memory's newest readable revision they are the numbers skipped; above it,
    the store names the newer revisions that failed their integrity check.
    """
    unreadable: dict[str, list[int]] = {}
    for history in histories:
        memory_id = history[0].id
        numbers = {revision.revision for revision in history}
        missing = [n for n in range(1, max(numbers)) if n not in numbers] + store.unreadable_above(memory_id)
        if missing:
            unreadable[memory_id] = missing
    lines = {
        memory_id: f"revision{'s' if len(numbers) > 1 else ''} {', '.join(str(n) for n in numbers)}"
        for memory_id, numbers in unreadable.items()
    }
    for memory_id in store.unreadable_ids():
        lines[memory_id] = "every revision"
    return [f"memory {memory_id}: {lines[memory_id]}" for memory_id in sorted(lines)]


# What an error about a field the model does not define says in place of the field's name.
UNDEFINED_FIELD = "holds a field that is not defined there"


def _place_and_rule(error: ErrorDetails) -> tuple[str, str]:
    """Where a validation error is, and the rule broken, naming no value and no key from the data.

    Pydantic's locations are field names and list indices, except an unknown field's,
    which is a key of the file (it may be anything, memory text too): that error names
    the object holding it instead.
    """
    location, rule = list(error["loc"]), error["msg"]
    if error["type"] == "extra_forbidden":
        location, rule = location[:-1], UNDEFINED_FIELD
    return ".".join(str(part) for part in location) or "(top level)", rule


def field_locations(error: ValidationError) -> str:
    """The places a validation error names, without the values (they may be memory text)."""
    details = error.errors(include_url=False, include_input=False, include_context=False)
    places = sorted({_place_and_rule(e)[0] for e in details})
    more = f" and {len(places) - 10} more" if len(places) > 10 else ""
    return ", ".join(places[:10]) + more


def problems(error: ValidationError, limit: int = 10) -> str:
    """Each place a validation error names with the rule it broke, never the value (it may be memory text)."""
    details = error.errors(include_url=False, include_input=False, include_context=False)
    found = sorted({"{} ({})".format(*_place_and_rule(e)) for e in details})
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return "; ".join(found[:limit]) + more


def parse_export(data: bytes, name: str = "the file") -> ExportFile:
    """The export file in `data`, checked; ImportFileError says in words what is wrong with it.

    The message names the file (`name`), what it is not (JSON, an export, a version
    this squirrel-mcp reads) or the fields at fault and their rules, never a value.
    """
    try:
        loaded = json.loads(data)
    except UnicodeDecodeError:
        raise ImportFileError(f"{name} is not UTF-8 text, so not a {FORMAT} file") from None
    except json.JSONDecodeError as error:
        raise ImportFileError(
            f"{name} is not JSON (line {error.lineno}, column {error.colno}), so not a {FORMAT} file"
        ) from None
    except RecursionError:
        # Python's parser recurses once per level: arrays or objects a thousand deep stop it.
        raise ImportFileError(
            f"{name} holds JSON nested too deeply to read, so not a {FORMAT} file"
        ) from None
    if not isinstance(loaded, dict) or loaded.get("format") != FORMAT:
        raise ImportFileError(
            f'{name} is not a squirrel-mcp export: it lacks "format": "{FORMAT}" '
            "(`squirrel-mcp export` writes one; `import --from server-memory` reads the official "
            "memory server's file)"
        )
    if loaded.get("version") != EXPORT_VERSION:
        raise ImportFileError(
            f"{name} is a {FORMAT} file of a version this squirrel-mcp does not read "
            f"(it reads version {EXPORT_VERSION}); a newer squirrel-mcp may read it"
        )
    try:
        return ExportFile.model_validate(loaded)
    except ValidationError as error:
        raise ImportFileError(
            f"{name} is not a valid {FORMAT} file; problems at: {problems(error)}"
        ) from None


def import_export(
    store: MemoryStore, parsed: ExportFile, progress: Callable[[int, int], None] | None = None
) -> ImportReport:
    """Add the revisions of a checked export file that the vault lacks (`MemoryStore.import_histories`).

    `progress` is told how many of the file's memories are done, as appends land.
    """
    report = ImportReport()
    histories = [memory.revisions for memory in parsed.memories]
    for added, present, conflicts in store.import_histories(histories, progress):
        report.memories += 1
        report.added += added
        report.present += present
        report.conflicts += len(conflicts)
    return report
