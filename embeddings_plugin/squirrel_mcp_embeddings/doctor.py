"""The embeddings plugin's lines in `squirrel-mcp doctor`: the model's files, the vector file.

Checks without starting the model: each model file's size and SHA-256 against the
packaged manifest (as every start does), and whether this account's vector file
can be read with its key, or written where it will go. Paths and counts only.
"""

from __future__ import annotations

import os
from pathlib import Path

from squirrel_mcp.plugin_api import Check, MemoryReader
from squirrel_mcp_embeddings import vectors
from squirrel_mcp_embeddings.integrity import (
    MODEL_DIR_VARIABLE,
    Manifest,
    ModelNotLoaded,
    model_dir,
    read_checked,
    read_manifest,
)

REINSTALL = "reinstall squirrel-mcp-embeddings (e.g. `pipx install --force 'squirrel-mcp[embeddings]'`)"


def check_model() -> tuple[Check, Manifest | None]:
    """Every model file is there with the manifest's size and SHA-256."""
    directory = model_dir()
    try:
        manifest = read_manifest()
        read_checked(manifest, directory)
    except ModelNotLoaded as error:
        fix = REINSTALL
        if os.environ.get(MODEL_DIR_VARIABLE):
            fix = f"restore the file in the directory {MODEL_DIR_VARIABLE} names, or unset it"
        detail = f"{error.reason}: {error.file}" if error.file else error.reason
        return Check("model verified", False, f"not loadable ({detail}) in {directory}", fix), None
    files = len(manifest.files)
    return Check("model verified", True, f"{manifest.model}: {files} files match the manifest"), manifest


def _writable_ancestor(path: Path) -> bool:
    """Whether the nearest existing directory above `path` can be written (to create the rest)."""
    for parent in path.parents:
        if parent.exists():
            return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)
    return False


def check_vector_file(memories: MemoryReader, stamp: vectors.Stamp) -> Check:
    """Whether the account's vector file reads with its key, or can be written where it will go."""
    path = vectors.vector_path(memories.account_id)
    fix_dir = f"make {path.parent} writable, or set {vectors.CACHE_DIR_VARIABLE} to a directory that is"
    if not path.exists():
        if not _writable_ancestor(path):
            return Check("vector file", False, f"{path.parent} cannot be written", fix_dir)
        return Check("vector file", True, f"none yet at {path}; the first search with the server writes it")
    try:
        table = vectors.load(path, memories.derive_key(vectors.KEY_PURPOSE), memories.account_id, stamp)
    except vectors.VectorFileError as error:
        return Check(
            "vector file",
            False,
            f"{path} cannot be used ({error})",
            "nothing is lost: the server discards and rebuilds it at its next start (or delete it)",
        )
    count = 0 if table is None else len(table)
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        return Check("vector file", False, f"{path} holds {count} vectors but cannot be replaced", fix_dir)
    return Check("vector file", True, f"{count} vectors of {len(memories.current())} memories in {path}")
