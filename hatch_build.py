"""Build metadata shared by both distributions: one version, exact pins between them.

The version is written once, in base/squirrel_mcp/__init__.py. `shared_metadata`
gives it to `squirrel-mcp` (whose `embeddings` extra requires
`squirrel-mcp-embeddings` at exactly that version) and to `squirrel-mcp-embeddings`
(which requires `squirrel-mcp` at exactly that version, plus the third-party
dependencies listed once under `[tool.squirrel-mcp] dependencies` in
embeddings_plugin/pyproject.toml). This file is squirrel-mcp's metadata hook;
embeddings_plugin/hatch_build.py calls the same function.

A wheel built from an sdist takes these fields from the sdist's PKG-INFO, written
when the sdist was built from the checkout (an sdist holds no base/ for the plugin).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

VERSION_FILE = Path(__file__).resolve().parent / "base" / "squirrel_mcp" / "__init__.py"


def read_version() -> str:
    """The `__version__` string of base/squirrel_mcp/__init__.py."""
    match = re.search(r'^__version__ = "([^"]+)"$', VERSION_FILE.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no __version__ in {VERSION_FILE}")
    return match.group(1)


def shared_metadata(root: str, metadata: dict[str, Any]) -> None:
    """Fill in `version` and the exact cross-pins of the distribution whose project root is `root`."""
    if (Path(root) / "PKG-INFO").is_file():
        return  # built from an sdist: hatchling has read the fields from PKG-INFO
    version = read_version()
    metadata["version"] = version
    if metadata["name"] == "squirrel-mcp":
        metadata["optional-dependencies"] = {
            "embeddings": [f"squirrel-mcp-embeddings=={version}"],
            # The sync server (squirrel-mcp-sync): its web framework and ASGI server.
            "server": ["starlette>=0.48", "uvicorn>=0.31.1"],
            # The sync server's PostgreSQL driver; SQLite needs nothing extra.
            "postgres": ["psycopg[binary]>=3.2,<4"],
        }
    else:
        listed = tomllib.loads((Path(root) / "pyproject.toml").read_text())["tool"]["squirrel-mcp"]
        metadata["dependencies"] = [*listed["dependencies"], f"squirrel-mcp=={version}"]


class VersionHook(MetadataHookInterface):
    """squirrel-mcp's metadata hook: the version and the `embeddings` extra's exact pin."""

    PLUGIN_NAME = "custom"

    def update(self, metadata: dict[str, Any]) -> None:
        shared_metadata(self.root, metadata)
