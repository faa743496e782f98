"""Build metadata shared by both distributions: one version, exact pins between them.

The version is written once, in base/squirrel_mcp/__init__.py. This hook gives it
to `squirrel-mcp` (whose `embeddings` extra requires `squirrel-mcp-embeddings`
at exactly that version) and to `squirrel-mcp-embeddings` (which requires
`squirrel-mcp` at exactly that version, plus the third-party dependencies listed
once under `[tool.squirrel-mcp] dependencies` in embeddings_plugin/pyproject.toml).
embeddings_plugin/pyproject.toml points its hook at this file.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

VERSION_FILE = Path(__file__).parent / "base" / "squirrel_mcp" / "__init__.py"


def read_version() -> str:
    """The `__version__` string of base/squirrel_mcp/__init__.py."""
    match = re.search(r'^__version__ = "([^"]+)"$', VERSION_FILE.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no __version__ in {VERSION_FILE}")
    return match.group(1)


class VersionHook(MetadataHookInterface):
    """Fill in `version` and the exact cross-pins."""

    PLUGIN_NAME = "custom"

    def update(self, metadata: dict[str, Any]) -> None:
        version = read_version()
        metadata["version"] = version
        if metadata["name"] == "squirrel-mcp":
            metadata["optional-dependencies"] = {
                "embeddings": [f"squirrel-mcp-embeddings=={version}"],
                # The sync server's PostgreSQL driver; SQLite needs nothing extra.
                "postgres": ["psycopg[binary]>=3.2,<4"],
            }
        else:
            listed = tomllib.loads((Path(self.root) / "pyproject.toml").read_text())["tool"]["squirrel-mcp"]
            metadata["dependencies"] = [*listed["dependencies"], f"squirrel-mcp=={version}"]
