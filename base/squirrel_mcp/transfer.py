"""Export and import: every memory with its whole history, as plaintext JSON.

For backups and for moving to another machine. The file is plaintext by design
(it is what the user owns); it is written owner-only. Import is idempotent: a
revision the vault already holds with the same content is skipped, one it
holds with different content is reported as a conflict and left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from squirrel_mcp import __version__
from squirrel_mcp.memories import MemoryStore
from squirrel_mcp.models import MemoryId, Revision, now_iso

FORMAT = "squirrel-mcp-export"


class ExportedMemory(BaseModel):
    """One memory's history, oldest revision first."""

    id: MemoryId
    revisions: list[Revision] = Field(min_length=1)

    @model_validator(mode="after")
    def _contiguous(self) -> ExportedMemory:
        numbers = [revision.revision for revision in self.revisions]
        if numbers != list(range(1, len(numbers) + 1)):
            raise ValueError(f"memory {self.id}: revisions must be numbered 1, 2, 3, ... in order")
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


def export_json(store: MemoryStore) -> bytes:
    """Every readable revision of every memory, as indented JSON."""
    exported = ExportFile(
        format=FORMAT,
        version=1,
        exportedAt=now_iso(),
        exportedBy=f"squirrel-mcp {__version__}",
        memories=[ExportedMemory(id=history[0].id, revisions=history) for history in store.all_revisions()],
    )
    return exported.model_dump_json(indent=2).encode() + b"\n"


def import_json(store: MemoryStore, data: bytes) -> ImportReport:
    """Add the file's revisions the vault lacks; see the module docstring."""
    try:
        parsed = ExportFile.model_validate_json(data)
    except ValidationError as error:
        # Locations only: the values are memory text.
        places = sorted({".".join(str(part) for part in e["loc"]) for e in error.errors()})
        raise ImportFileError(f"not a valid {FORMAT} file; problems at: {', '.join(places[:10])}") from None
    report = ImportReport()
    for memory in parsed.memories:
        added, present, conflicts = store.import_history(memory.revisions)
        report.memories += 1
        report.added += added
        report.present += present
        report.conflicts += len(conflicts)
    return report
