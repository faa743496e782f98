"""The model's manifest, the size and SHA-256 check of its files, and the start-up line.

Every start reads each model file once, checks it against the packaged
model-manifest.json, and keeps those bytes: embedder.py hands the runtime exactly
what was checked, so a file replaced on disk after the check is never loaded.
A copy named by SQUIRREL_MEMORY_MODEL_DIR is checked against the same packaged
manifest (a directory cannot vouch for itself).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

PACKAGED_MODEL_DIR = Path(__file__).resolve().parent / "model"
MANIFEST_NAME = "model-manifest.json"
MODEL_DIR_VARIABLE = "SQUIRREL_MEMORY_MODEL_DIR"

Reason = Literal["manifest", "missing", "integrity", "runtime"]


class ModelNotLoaded(Exception):
    """The model was refused or could not start; search stays lexical.

    `reason` is one of manifest, missing, integrity, runtime; `file` names the
    file at fault for the first three and is None for runtime.
    """

    def __init__(self, reason: Reason, file: str | None = None) -> None:
        super().__init__(f"{reason}: {file}" if file else reason)
        self.reason: Reason = reason
        self.file = file if reason != "runtime" else None


def status_line(error: ModelNotLoaded | None) -> str:
    """The one start-up line (docs/hybrid.md; no path, text or vector in it)."""
    if error is None:
        return "memory: local embeddings ready"
    detail = f"{error.reason}: {error.file}" if error.file else error.reason
    return f"memory: local embeddings were not loaded ({detail}); memory search is lexical only"


@dataclass(frozen=True)
class FileEntry:
    """One model file as the manifest pins it."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """The fields of model-manifest.json that loading and ranking use."""

    model: str
    dimensions: int
    max_tokens: int
    pad_token: str
    min_similarity: float
    semantic_span: float
    onnx_file: str
    onnx_inputs: tuple[str, ...]
    onnx_output: str
    tokenizer_file: str
    files: tuple[FileEntry, ...]


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    # bool is an int in Python; no manifest field is meant to be one.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(key)
    return value


def _entry(data: Any) -> FileEntry:
    if not isinstance(data, dict):
        raise ValueError("files")
    name, size, digest = _field(data, "name", str), _field(data, "size", int), _field(data, "sha256", str)
    # A bare name only: a manifest must not reach outside the model directory.
    if Path(name).name != name or name in {"", ".", ".."}:
        raise ValueError("name")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or size < 0:
        raise ValueError("sha256")
    return FileEntry(name, size, digest)


def parse_manifest(text: str) -> Manifest:
    """A Manifest from the JSON text; ValueError for anything missing, null or malformed.

    A null size or hash (a manifest that could not be pinned) is refused here: a
    file whose hash is unknown cannot be checked, so it is never trusted.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("manifest")
    if data.get("pooling") != "mean" or data.get("normalization") != "l2":
        raise ValueError("pooling")
    onnx = _field(data, "onnx", dict)
    inputs = _field(onnx, "inputs", list)
    if not inputs or not all(isinstance(name, str) for name in inputs):
        raise ValueError("inputs")
    files = tuple(_entry(item) for item in _field(data, "files", list))
    names = {entry.name for entry in files}
    manifest = Manifest(
        model=_field(data, "model", str),
        dimensions=_field(data, "dimensions", int),
        max_tokens=_field(data, "maxTokens", int),
        pad_token=_field(data, "padToken", str),
        min_similarity=float(_field(data, "minSimilarity", (int, float))),
        semantic_span=float(_field(data, "semanticSpan", (int, float))),
        onnx_file=_field(onnx, "file", str),
        onnx_inputs=tuple(inputs),
        onnx_output=_field(onnx, "output", str),
        tokenizer_file=_field(data, "tokenizer", str),
        files=files,
    )
    if len(names) != len(files) or not {manifest.onnx_file, manifest.tokenizer_file} <= names:
        raise ValueError("files")
    if manifest.dimensions <= 0 or manifest.max_tokens <= 0:
        raise ValueError("dimensions")
    return manifest


def read_manifest(path: Path = PACKAGED_MODEL_DIR / MANIFEST_NAME) -> Manifest:
    """The manifest at path (default: the packaged one), or ModelNotLoaded("manifest")."""
    try:
        return parse_manifest(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelNotLoaded("manifest", path.name) from error


def model_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """SQUIRREL_MEMORY_MODEL_DIR when set (and not empty), else the package's model/."""
    chosen = environ.get(MODEL_DIR_VARIABLE)
    return Path(chosen) if chosen else PACKAGED_MODEL_DIR


def read_checked(manifest: Manifest, directory: Path) -> dict[str, bytes]:
    """Each manifest file's bytes, read once and checked; ModelNotLoaded("missing"/"integrity") if not."""
    checked: dict[str, bytes] = {}
    for entry in manifest.files:
        try:
            data = (directory / entry.name).read_bytes()
        except FileNotFoundError as error:
            raise ModelNotLoaded("missing", entry.name) from error
        except OSError as error:
            # There but unreadable (a directory in its place, no permission): not the file we pinned.
            raise ModelNotLoaded("integrity", entry.name) from error
        if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise ModelNotLoaded("integrity", entry.name)
        checked[entry.name] = data
    return checked
