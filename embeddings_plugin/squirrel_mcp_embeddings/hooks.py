"""The hooks of search by meaning: the model, the vector file and the ranker tied to squirrel-mcp.

- `startup` (in the plugin's background thread): unless SQUIRREL_MEMORY_EMBEDDINGS=0,
  checks and starts the model, opens the account's vector file, writes the one
  start-up line (docs/hybrid.md) and starts the warm-up: a thread of the plugin's own
  that embeds every memory without a current vector, a small batch at a time. A
  search that comes before startup returns waits for it (the server's READY_WAIT,
  3 s), then is answered by words with a note saying search by meaning is starting.
- `memories_changed`: a memory whose revision moved loses its vector and is queued for
  the warm-up; a deleted one is forgotten.
- `rank_memories`: embeds the query and ranks with `fusion.fuse` over the vectors so
  far, at once; while the warm-up is not done, the answer's note says how far it is
  and about how long it still needs. A runtime failure answers None (lexical), says
  so once, and the session stays lexical.
- `similar_memories`: embeds a memory just saved and names those whose vectors are
  close to it (ranker.DUPLICATE_COSINE), for save_memory's possible duplicates.
- `shutdown`: stops the warm-up after its batch in progress and writes the vector file
  if it changed (while running, a thread of the plugin's own writes it, so no search
  waits for the disk).
- `doctor_checks`: for `squirrel-mcp doctor`, whether the model's files match the manifest
  and whether this account's vector file can be read (or written), without starting the model.

The vectors and the warm-up are warmup.py's, the ranking ranker.py's; plugin.py adds the
`diagnose` command. Lines written, each at most once: the start-up line (or OFF), and
warmup.py's RUNTIME_FAILED, UNWRITABLE, REBUILT. None holds memory text, a query, a key
or a vector.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from squirrel_mcp.plugin_api import (
    Candidate,
    Check,
    Ranking,
    RankOptions,
    Revision,
    hookimpl,
)
from squirrel_mcp_embeddings.integrity import MANIFEST_NAME, PACKAGED_MODEL_DIR, ModelNotLoaded, status_line

if TYPE_CHECKING:
    # Only for the types. The modules themselves are imported by the hooks that use them,
    # in the plugin's background thread: registering the plugin, which the server does
    # before it answers the handshake, imports neither NumPy nor onnxruntime (embedder).
    from squirrel_mcp.plugin_api import MemoryReader
    from squirrel_mcp_embeddings.embedder import Embedder
    from squirrel_mcp_embeddings.ranker import Hybrid
    from squirrel_mcp_embeddings.warmup import Notice

ENABLED_VARIABLE = "SQUIRREL_MEMORY_EMBEDDINGS"
# The runtime's threads per inference: one, so the warm-up keeps one core busy and a search's
# query embedding runs beside it on another (docs/benchmarks/warmup.md measures both).
RUNTIME_THREADS = 1

OFF = "memory: local embeddings are turned off (SQUIRREL_MEMORY_EMBEDDINGS=0); memory search is lexical only"


def manifest_sha256(path: Path = PACKAGED_MODEL_DIR / MANIFEST_NAME) -> str:
    """The SHA-256 of the packaged manifest: a new manifest means new vectors."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class EmbeddingsHooks:
    """The hook implementations of search by meaning; plugin.EmbeddingsPlugin adds the `diagnose` command."""

    def __init__(self, load: Callable[[], Embedder] | None = None) -> None:
        """`load` starts the model (default: embedder.load, which checks it first)."""
        self._load = load
        self.hybrid: Hybrid | None = None

    @hookimpl
    def startup(self, memories: MemoryReader, notice: Notice) -> None:
        """Load the model and the vector file, then say once whether embeddings are ready."""
        if os.environ.get(ENABLED_VARIABLE, "").strip() == "0":
            notice(OFF)
            return
        from squirrel_mcp_embeddings import (
            embedder,  # onnxruntime loads here, in the background
            vectors,
        )
        from squirrel_mcp_embeddings.ranker import Hybrid
        from squirrel_mcp_embeddings.warmup import RECIPE_VERSION

        try:
            model = (self._load or functools.partial(embedder.load, threads=RUNTIME_THREADS))()
        except ModelNotLoaded as error:
            notice(status_line(error))
            return
        manifest = model.manifest
        notice(status_line(None))
        hybrid = Hybrid(
            model,
            memories,
            notice,
            stamp=vectors.Stamp(manifest.model, manifest_sha256(), RECIPE_VERSION, manifest.dimensions),
            floor=manifest.min_similarity,
            span=manifest.semantic_span,
            path=vectors.vector_path(memories.account_id),
        )
        hybrid.start_warm_up()
        self.hybrid = hybrid

    @hookimpl
    def memories_changed(self, revisions: Sequence[Revision]) -> None:
        """Forget the vectors of memories whose revision moved."""
        if self.hybrid is not None:
            self.hybrid.changed(revisions)

    @hookimpl
    def rank_memories(
        self, query: str, candidates: Sequence[Candidate], total: int, options: RankOptions
    ) -> Ranking | None:
        """The fused ranking; None (lexical) when embeddings are off, refused or failed."""
        if self.hybrid is None:
            return None
        return self.hybrid.rank(query, candidates, total, options)

    @hookimpl
    def similar_memories(self, memory: Revision, limit: int) -> list[tuple[str, float]] | None:
        """The memories close in meaning to one just saved; None (words alone) when off or failed."""
        if self.hybrid is None:
            return None
        return self.hybrid.similar(memory, limit)

    @hookimpl
    def shutdown(self) -> None:
        """Stop the warm-up after its batch in progress, then write the vector file if it changed."""
        if self.hybrid is not None:
            self.hybrid.stop_warm_up()
            self.hybrid.flush()

    @hookimpl
    def doctor_checks(self, memories: MemoryReader | None) -> list[Check]:
        """`squirrel-mcp doctor`: the model's files, then this account's vector file once unlocked."""
        from squirrel_mcp_embeddings import doctor, vectors  # only doctor needs them
        from squirrel_mcp_embeddings.warmup import RECIPE_VERSION

        if os.environ.get(ENABLED_VARIABLE, "").strip() == "0":
            return [Check("embeddings", True, f"turned off by {ENABLED_VARIABLE}=0; search is by words only")]
        model, manifest = doctor.check_model()
        if manifest is None or memories is None:
            return [model]
        stamp = vectors.Stamp(manifest.model, manifest_sha256(), RECIPE_VERSION, manifest.dimensions)
        return [model, doctor.check_vector_file(memories, stamp)]
