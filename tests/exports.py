"""Export files for tests: the envelope `squirrel-mcp import` reads, around memories a test made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXPORTED_AT = "2026-11-30T00:00:00.000Z"


def export_of(memories: list[dict[str, Any]], exported_at: str = EXPORTED_AT) -> dict[str, Any]:
    """An export file's content holding `memories` (each `{"id": ..., "revisions": [...]}`)."""
    return {
        "format": "squirrel-mcp-export",
        "version": 1,
        "exportedAt": exported_at,
        "exportedBy": "tests",
        "memories": memories,
    }


def one_revision_each(revisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Memories of an export file, each holding one of `revisions` as its only revision."""
    return [{"id": revision["id"], "revisions": [revision]} for revision in revisions]


def write_export(path: Path, memories: list[dict[str, Any]], exported_at: str = EXPORTED_AT) -> Path:
    """`path`, written as an export file holding `memories`."""
    path.write_text(json.dumps(export_of(memories, exported_at)), encoding="utf-8")
    return path
