"""squirrel-mcp-embeddings' build hooks: the shared metadata, and a check of the model it packs.

The metadata (one version with squirrel-mcp, exact pins between the two) comes from
the repository's ../hatch_build.py in a checkout; a wheel built from this
distribution's sdist reads it from the sdist's PKG-INFO instead.

The wheel carries the model files (squirrel_mcp_embeddings/model/, put there by
model/fetch.py, never in git). The build refuses to pack them unless every file the
packaged manifest names is there with its size and SHA-256, so a wheel can never
ship a model that its own start-up check would refuse, or none at all.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.metadata.plugin.interface import MetadataHookInterface

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "squirrel_mcp_embeddings" / "model"


class PluginMetadataHook(MetadataHookInterface):
    """The version and the exact pin on squirrel-mcp, from the repository's shared hook."""

    PLUGIN_NAME = "custom"

    def update(self, metadata: dict[str, Any]) -> None:
        if (Path(self.root) / "PKG-INFO").is_file():
            return  # built from the sdist: hatchling has read the fields from PKG-INFO
        spec = importlib.util.spec_from_file_location("squirrel_mcp_shared", HERE.parent / "hatch_build.py")
        assert spec is not None
        assert spec.loader is not None
        shared = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shared)
        shared.shared_metadata(self.root, metadata)


class ModelCheckHook(BuildHookInterface):  # type: ignore[type-arg]
    """Refuse to build when the model files do not match the packaged manifest."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        problem = model_problem(MODEL_DIR)
        if problem is not None:
            raise RuntimeError(
                f"refusing to build squirrel-mcp-embeddings: {problem} (run `nox -s fetch_model`)"
            )


def model_problem(directory: Path) -> str | None:
    """What is wrong with the model files in `directory`, or None when all match the manifest."""
    manifest_path = directory / "model-manifest.json"
    if not manifest_path.is_file():
        return f"no model manifest at {manifest_path}"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["files"]:
        path = directory / entry["name"]
        if not path.is_file():
            return f"the model file {entry['name']} is missing"
        if path.stat().st_size != entry["size"]:
            return f"the model file {entry['name']} has the wrong size"
        digest = hashlib.sha256()
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != entry["sha256"]:
            return f"the model file {entry['name']} does not match its SHA-256"
    return None
