"""The local model: ONNX Runtime and the tokenizer started from checked bytes, and embed().

    embedder = load()                      # ModelNotLoaded(reason, file) if refused
    vectors = embedder.embed(["text", ...])  # float32, one L2-normalised row per text
    embedder.fits(text)                    # whether the model reads all of it (256 tokens)

The graph returns token embeddings; the mean over real tokens (weighted by the
attention mask, so padding never counts) and the L2 normalisation happen here,
as sentence-transformers does for this model.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from squirrel_mcp_embeddings.integrity import (
    MANIFEST_NAME,
    PACKAGED_MODEL_DIR,
    Manifest,
    ModelNotLoaded,
    model_dir,
    read_checked,
    read_manifest,
)

BATCH_SIZE = 32
# What embed() can feed; a graph may declare any subset (gte-small and MiniLM take all three).
INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})

Vectors = npt.NDArray[np.float32]


def import_runtime() -> ModuleType:
    """The onnxruntime module with its telemetry off; ModelNotLoaded("runtime") if it cannot load.

    The official Linux and macOS builds report usage unless ORT_DISABLE_TELEMETRY=1
    is set before the library loads; it is set whatever the environment says. If
    something imported onnxruntime earlier, the variable came too late, so the
    runtime's own switch is thrown as well.
    """
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"
    try:
        runtime = importlib.import_module("onnxruntime")
        runtime.disable_telemetry_events()
    except (ImportError, OSError, AttributeError) as error:
        raise ModelNotLoaded("runtime") from error
    return runtime


def mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> Vectors:
    """L2-normalised mean of each row's token vectors, counting only tokens whose mask is 1."""
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    means = summed / counts
    norms = np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    unit: Vectors = (means / norms).astype(np.float32)
    return unit


def start_session(runtime: ModuleType, files: dict[str, bytes], name: str, options: Any) -> Any:
    """An inference session on the checked bytes `files[name]`, which it takes out of `files`.

    Given bytes, the runtime copies them and parses the copy, so three copies of the
    weights would be alive at once (about 260 MB of peak memory for a 90 MB model).
    Where the OS has sealed anonymous files (Linux), the bytes go into one instead and
    are dropped; the file is sealed against any change before the runtime reads it from
    its descriptor's path, so what runs is still exactly what was checked.
    """
    model = files.pop(name)
    if sys.platform != "linux":
        return runtime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    import fcntl  # Linux only, like memfd_create

    descriptor = os.memfd_create("squirrel-model", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with open(descriptor, "wb", closefd=False) as file:
            file.write(model)
        del model
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(descriptor, fcntl.F_ADD_SEALS, seals)
        return runtime.InferenceSession(
            f"/proc/self/fd/{descriptor}", sess_options=options, providers=["CPUExecutionProvider"]
        )
    finally:
        os.close(descriptor)


class Embedder:
    """A started model: tokenizer and inference session built from checked bytes."""

    def __init__(self, manifest: Manifest, files: dict[str, bytes], threads: int | None = None) -> None:
        """Start the runtime on `files` (already checked); ModelNotLoaded("runtime") if it cannot.

        `threads`: how many threads one inference may use (None: the runtime's default,
        one per core). Concurrent `embed` calls are safe; each runs on its caller's thread
        when `threads` is 1.
        """
        self.manifest = manifest
        runtime = import_runtime()
        try:
            from tokenizers import Tokenizer  # imported with the runtime, not at server start

            tokenizer = Tokenizer.from_str(files[manifest.tokenizer_file].decode("utf-8"))
            # The same tokenizer uncut and unpadded (the file sets both), to count a text's tokens
            # and find where its passages start and end.
            counter = Tokenizer.from_str(files[manifest.tokenizer_file].decode("utf-8"))
            counter.no_truncation()
            counter.no_padding()
            # Truncate at the model's limit; pad each batch only to its longest text.
            tokenizer.enable_truncation(max_length=manifest.max_tokens)
            pad_id = tokenizer.token_to_id(manifest.pad_token)
            if pad_id is None:
                raise ValueError(f"no {manifest.pad_token} in the tokenizer")
            tokenizer.enable_padding(pad_id=pad_id, pad_token=manifest.pad_token)
            options = runtime.SessionOptions()
            options.log_severity_level = 3  # errors only: the runtime must not write to stderr per call
            if threads is not None:
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = threads
            # No arena: it keeps the largest batch's buffers for the whole session.
            options.enable_cpu_mem_arena = False
            session = start_session(runtime, files, manifest.onnx_file, options)
            declared = {item.name for item in session.get_inputs()}
            outputs = {item.name for item in session.get_outputs()}
        except Exception as error:
            # The runtime's and the tokenizer's own error types vary by version and
            # platform; whichever it is, the model did not start, and the caller falls
            # back to lexical search with reason "runtime".
            raise ModelNotLoaded("runtime") from error
        if not declared <= INPUTS & set(manifest.onnx_inputs) or manifest.onnx_output not in outputs:
            raise ModelNotLoaded("runtime")
        self._tokenizer = tokenizer
        self._counter = counter
        self._session: Any = session
        self._inputs = declared
        # One real run before "ready", so a graph that loads but cannot run is refused now.
        if self.embed(["ready"]).shape != (1, manifest.dimensions):
            raise ModelNotLoaded("runtime")

    def embed(self, texts: Sequence[str], batch_size: int = BATCH_SIZE) -> Vectors:
        """One L2-normalised float32 row per text, each truncated at the model's max tokens.

        A text's vector does not depend on the batch it is in (beyond float rounding).
        """
        out = np.empty((len(texts), self.manifest.dimensions), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            encodings = self._tokenizer.encode_batch(list(texts[start : start + batch_size]))
            columns = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            feeds = {name: columns[name] for name in self._inputs}
            (hidden,) = self._session.run([self.manifest.onnx_output], feeds)
            out[start : start + len(encodings)] = mean_pool(hidden, columns["attention_mask"])
        return out

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        """The [start, end) characters of each of `text`'s tokens, all of them (no cut, no special tokens)."""
        offsets: list[tuple[int, int]] = self._counter.encode(text, add_special_tokens=False).offsets
        return offsets

    def fits(self, text: str) -> bool:
        """Whether the model reads all of `text`: its tokens and the two special ones fit its window."""
        return len(self._counter.encode(text, add_special_tokens=False).ids) + 2 <= self.manifest.max_tokens


def load(
    manifest_path: Path | None = None, directory: Path | None = None, threads: int | None = None
) -> Embedder:
    """Check the model files against the packaged manifest and start the model on those bytes.

    directory defaults to SQUIRREL_MEMORY_MODEL_DIR, else the package's model/;
    `threads` is the runtime's threads per inference (None: its default).
    Raises ModelNotLoaded with reason manifest, missing, integrity or runtime.
    """
    manifest = read_manifest(manifest_path or PACKAGED_MODEL_DIR / MANIFEST_NAME)
    files = read_checked(manifest, directory or model_dir())
    return Embedder(manifest, files, threads)
