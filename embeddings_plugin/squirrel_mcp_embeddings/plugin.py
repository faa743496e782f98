"""The squirrel-mcp plugin: loads the model at start-up, keeps the vectors, ranks by words and meaning.

Registered as the entry point `embeddings` of the group `squirrel_mcp`. Its hooks:

- `startup` (in the plugin's background thread): unless SQUIRREL_MEMORY_EMBEDDINGS=0,
  checks and starts the model, opens the account's vector file, writes the one
  start-up line (docs/hybrid.md) and starts the warm-up: a thread of the plugin's own
  that embeds every memory without a current vector, a small batch at a time. Until
  startup returns, search is lexical.
- `memories_changed`: a memory whose revision moved loses its vector and is queued for
  the warm-up; a deleted one is forgotten.
- `rank_memories`: embeds the query and ranks with `fusion.fuse` over the vectors so
  far, at once; while the warm-up is not done, the answer's note says how far it is
  and about how long it still needs. A runtime failure answers None (lexical), says
  so once, and the session stays lexical.
- `shutdown`: stops the warm-up after its batch in progress and writes the vector file
  if it changed (while running, a thread of the plugin's own writes it, so no search
  waits for the disk).
- `doctor_checks`: for `squirrel-mcp doctor`, whether the model's files match the manifest
  and whether this account's vector file can be read (or written), without starting the model.

Lines written, each at most once: the start-up line, RUNTIME_FAILED, UNWRITABLE,
REBUILT. None holds memory text, a query, a key or a vector.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from squirrel_mcp.plugin_api import (
    MAX_NEAR_MISSES,
    Candidate,
    Check,
    MemoryReader,
    Progress,
    RankedHit,
    Ranking,
    RankOptions,
    Revision,
    age_days,
    decay,
    hookimpl,
)
from squirrel_mcp_embeddings import fusion, vectors
from squirrel_mcp_embeddings.integrity import MANIFEST_NAME, PACKAGED_MODEL_DIR, ModelNotLoaded, status_line

if TYPE_CHECKING:
    # Only for the type: importing embedder starts onnxruntime, which startup does in the background.
    from squirrel_mcp_embeddings.embedder import Embedder

ENABLED_VARIABLE = "SQUIRREL_MEMORY_EMBEDDINGS"
# Bumped whenever `recipe` changes: the vector file records it, so every memory is embedded again.
RECIPE_VERSION = 1
# The warm-up embeds this many memories at a time: small, so that stopping (at shutdown) and
# a search's turn at the vectors never wait long, large enough to keep the runtime efficient.
WARM_UP_BATCH = 16
# The runtime's threads per inference: one, so the warm-up keeps one core busy and a search's
# query embedding runs beside it on another (docs/benchmarks/warmup.md measures both).
RUNTIME_THREADS = 1
# The warm-up thread's scheduling priority (Unix nice, on Linux per thread): lower than the
# searches', so when the cores are contended a search's turn comes first.
WARM_UP_NICE = 10
# While warming up, the vector file is written at most this often (and once when it is done).
SAVE_EVERY = 30.0
# Of a search's word matches still without a vector, this many are embedded next.
URGENT = 64
# Shutdown waits this long for the batch in progress.
STOP_WAIT = 3.0
# A search that finds the vectors busy (another search ranking, the file being copied) waits this
# long, then answers lexically: waiting longer could pass the host's 10 s bound on a ranker.
LOCK_WAIT = 1.0

OFF = "memory: local embeddings are turned off (SQUIRREL_MEMORY_EMBEDDINGS=0); memory search is lexical only"
RUNTIME_FAILED = (
    "memory: local embeddings failed (runtime); memory search is lexical for the rest of this session"
)
UNWRITABLE = "memory: the vector file could not be written; vectors are kept in memory for this session"
REBUILT = "memory: the vector file could not be read (integrity); it is discarded and rebuilt"

Notice = Callable[[str], None]


class Embeds(Protocol):
    """What ranking needs of a model: embedder.Embedder, or a stand-in in tests."""

    def embed(self, texts: Sequence[str]) -> vectors.Matrix:
        """One L2-normalised float32 row per text."""
        ...


def recipe(memory: Revision) -> str:
    """The text a memory is embedded from: `entity: text (tags, keywords)`.

    The parenthesis is left out when the memory has neither tags nor keywords.
    """
    extras = ", ".join([*memory.tags, *memory.keywords])
    text = f"{memory.entity}: {memory.text}" if memory.entity else memory.text
    return f"{text} ({extras})" if extras else text


def _lower_priority(nice: int) -> None:
    """Lower the calling thread's priority by `nice` (Linux schedules threads one by one).

    Where that is not possible (another system, a sandbox refusing it) nothing changes.
    """
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)


def _duration(seconds: float) -> str:
    """A rough duration for a person: "40 s", "3 min", "2 h"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def manifest_sha256(path: Path = PACKAGED_MODEL_DIR / MANIFEST_NAME) -> str:
    """The SHA-256 of the packaged manifest: a new manifest means new vectors."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Hybrid:
    """One account's vectors, the warm-up that fills them, the fused ranker over them; thread-safe."""

    def __init__(
        self,
        embedder: Embeds,
        memories: MemoryReader,
        notice: Notice,
        *,
        stamp: vectors.Stamp,
        floor: float,
        span: float,
        path: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Open `memories`' vector file at `path` (or start empty); writes REBUILT if it is unusable.

        Nothing is embedded until `start_warm_up` (or `warm_all`) is called.
        """
        self._embedder = embedder
        self._memories = memories
        self._notice = notice
        self.stamp = stamp
        self.floor, self.span = floor, span
        self.path = path
        self._clock = clock
        self._key = memories.derive_key(vectors.KEY_PURPOSE)
        self._lock = threading.Lock()
        # Notified (under _lock) each time a batch is stored: warm_all waits on it for batches in flight.
        self._stored = threading.Condition(self._lock)
        # Held while a snapshot is taken and written, so a newer snapshot never lands first.
        self._file_lock = threading.Lock()
        self._wake = threading.Event()
        self._saver: threading.Thread | None = None
        # The warm-up: its thread, what wakes it (new work, or stop), and its measured pace.
        self._warmer: threading.Thread | None = None
        self._more = threading.Event()
        self._stopping = threading.Event()
        self._warm_seconds = 0.0
        self._warm_count = 0
        # Memories taken off the queue whose vectors are not stored yet.
        self._in_flight = 0
        self.failed = False
        # Set by close(): no search ranks and no file is written afterwards.
        self._closed = False
        self._writable = True
        self._dirty = False
        # How many memories were embedded (by the warm-up or warm_all): tests and benchmarks read it.
        self.embedded = 0
        self.live: dict[str, Revision] = {memory.id: memory for memory in memories.current()}
        try:
            table = vectors.load(path, self._key, memories.account_id, stamp)
        except vectors.VectorFileError:
            notice(REBUILT)
            table = None
            self._dirty = True
        self.table = table if table is not None else vectors.VectorTable(stamp.dimensions)
        for memory_id, revision in list(zip(self.table.ids, self.table.revisions, strict=True)):
            memory = self.live.get(memory_id)
            if memory is None or memory.revision != revision:
                self.table.remove(memory_id)
                self._dirty = True
        # Memories without a current vector, and the order the warm-up takes them in (a
        # search's word matches go to the front; an id no longer pending is skipped).
        self.pending: dict[str, None] = dict.fromkeys(
            memory_id for memory_id in self.live if memory_id not in self.table
        )
        self._queue: collections.deque[str] = collections.deque(self.pending)
        # Room for every memory now, so the warm-up never copies the matrix to grow it.
        self.table.reserve(len(self.live))

    # Keeping current ----------------------------------------------------------

    def _learn(self, memory: Revision) -> None:
        """Record a memory's latest revision; its vector goes when the revision moved. Under the lock."""
        known = self.live.get(memory.id)
        if known is not None and known.revision > memory.revision:
            return
        if memory.deleted:
            self.live.pop(memory.id, None)
            self.pending.pop(memory.id, None)
        else:
            self.live[memory.id] = memory
            if self.table.revision(memory.id) != memory.revision and memory.id not in self.pending:
                self.pending[memory.id] = None
                self._queue.append(memory.id)
                self._more.set()
        if memory.id in self.table and self.table.revision(memory.id) != memory.revision:
            self.table.remove(memory.id)
            self._dirty = True

    def changed(self, revisions: Sequence[Revision]) -> None:
        """memories_changed: forget the vectors of memories that changed or went; embed the new ones."""
        with self._lock:
            for memory in revisions:
                self._learn(memory)

    # The warm-up --------------------------------------------------------------

    def _next_batch(self) -> list[Revision]:
        """Up to WARM_UP_BATCH pending memories, in queue order, taken off the queue. Under the lock."""
        batch: dict[str, Revision] = {}
        while self._queue and len(batch) < WARM_UP_BATCH:
            memory_id = self._queue.popleft()
            if memory_id in self.pending:
                batch[memory_id] = self.live[memory_id]
        self._in_flight += len(batch)
        return list(batch.values())

    def _store(self, batch: Sequence[Revision], made: vectors.Matrix) -> None:
        """Keep the vectors of a batch whose memories did not change meanwhile. Under the lock."""
        kept = []
        for n, memory in enumerate(batch):
            if memory.id not in self.pending:
                continue
            latest = self.live[memory.id]
            if latest.revision == memory.revision:
                kept.append(n)
            else:
                # Changed while it was embedded: queued again, at its new revision.
                self._queue.append(memory.id)
        self.table.put_many(((batch[n].id, batch[n].revision) for n in kept), made[kept])
        for n in kept:
            del self.pending[batch[n].id]
        self.embedded += len(kept)
        self._in_flight -= len(batch)
        self._dirty = self._dirty or bool(kept)
        self._stored.notify_all()

    def _give_back(self, batch: Sequence[Revision]) -> None:
        """A batch that was not embedded goes back to the front of the queue."""
        with self._lock:
            self._in_flight -= len(batch)
            self._queue.extendleft(reversed([memory.id for memory in batch]))
            self._stored.notify_all()

    def _embed(self, batch: Sequence[Revision]) -> vectors.Matrix:
        """The batch's vectors, outside the lock (searches go on); counts the time for the estimate."""
        began = self._clock()
        made = self._embedder.embed([recipe(memory) for memory in batch])
        with self._lock:
            self._warm_seconds += self._clock() - began
            self._warm_count += len(batch)
        return made

    def start_warm_up(self) -> None:
        """Embed, in a thread of the plugin's own, every memory without a current vector (startup calls it).

        Small batches, one at a time, so a search's query embedding never waits for the
        backlog; searches meanwhile rank by meaning what is embedded so far. The vector
        file is written every SAVE_EVERY seconds and when the backlog is done.
        """
        if self._warmer is None:
            self._more.set()
            self._warmer = threading.Thread(target=self._warm_loop, name="squirrel-mcp-warm-up", daemon=True)
            self._warmer.start()

    def _warm_loop(self) -> None:
        _lower_priority(WARM_UP_NICE)
        saved_at = self._clock()
        while not self._stopping.is_set():
            with self._lock:
                # Cleared before looking, so work added after the look wakes the wait below.
                self._more.clear()
                batch = [] if self.failed or self._closed else self._next_batch()
                dirty = self._dirty
            if not batch:
                if dirty:
                    self._save_soon()
                self._more.wait()
                continue
            try:
                made = self._embed(batch)
            except Exception:
                self._give_back(batch)
                self._runtime_failed()
                return
            with self._lock:
                self._store(batch, made)
            if self._clock() - saved_at >= SAVE_EVERY:
                saved_at = self._clock()
                self._save_soon()

    def stop_warm_up(self, timeout: float = STOP_WAIT) -> None:
        """Stop the warm-up thread after the batch it is embedding; wait for it up to `timeout` s."""
        self._stopping.set()
        self._more.set()
        if self._warmer is not None:
            self._warmer.join(timeout)

    def _runtime_failed(self) -> None:
        """The runtime raised: the rest of the session is lexical, said once."""
        with self._lock:
            if self.failed:
                return
            self.failed = True
        # The runtime's error types vary by version and platform; whichever it is, search is
        # lexical from here (docs/hybrid.md).
        self._notice(RUNTIME_FAILED)

    def warm_all(self) -> None:
        """Embed every memory without a current vector now, in this thread, however long it takes.

        Alongside the warm-up thread, if it runs (they take turns over the queue); returns
        once nothing is pending. The recall gate and the diagnostic call it first, so no
        result depends on how fast the machine was. A runtime failure raises.
        """
        while True:
            with self._lock:
                batch = self._next_batch()
                if not batch:
                    if not self.pending or self.failed or self._closed:
                        break
                    if self._in_flight:
                        # The warm-up thread holds the rest: wait for it to store them.
                        self._stored.wait()
                    else:
                        # Pending yet queued nowhere cannot happen; if it did, queue them again.
                        self._queue.extend(self.pending)
                    continue
            try:
                made = self._embed(batch)
            except BaseException:
                self._give_back(batch)
                raise
            with self._lock:
                self._store(batch, made)
        with self._lock:
            dirty = self._dirty
        if dirty:
            self._save_soon()

    def _note(self, progress: Progress) -> str:
        """A search's note while the warm-up is not done: how far, about how long still. Under the lock."""
        left = progress.total - progress.done
        if self._warm_count:
            seconds = left * self._warm_seconds / self._warm_count
            when = f"about {_duration(seconds)} until all are"
        else:
            when = "how long until all are is not known yet"
        return (
            f"Search by meaning is warming up: {progress.done:,} of {progress.total:,} memories are "
            f"searchable by meaning so far, the rest by their words only; {when}."
        )

    def _cosines(self, vector: vectors.Matrix) -> vectors.Matrix:
        """Every row's cosine to `vector`: one matrix product over the contiguous rows. Under the lock."""
        cosines: vectors.Matrix = np.clip(self.table.matrix() @ vector, -1.0, 1.0)
        return cosines

    def cosines(self, query: str) -> dict[str, float]:
        """The query's cosine to every memory that has a current vector, by memory id."""
        with self._lock:
            vector = self._embedder.embed([query])[0]
            values = self._cosines(vector)
            return {memory_id: float(value) for memory_id, value in zip(self.table.ids, values, strict=True)}

    # Ranking ------------------------------------------------------------------

    def rank(
        self, query: str, candidates: Sequence[Candidate], total: int, options: RankOptions
    ) -> Ranking | None:
        """The fused ranking over the vectors so far; None (lexical) after a runtime failure or a LOCK_WAIT.

        Never embeds the backlog: while memories are still pending, their word matches are
        ranked by words (no semanticScore), the first URGENT of them go to the front of the
        warm-up's queue, and the answer carries a note and its progress.
        """
        if self.failed or not self._lock.acquire(timeout=LOCK_WAIT):
            return None
        try:
            if self._closed:
                return None
            for candidate in candidates:
                self._learn(candidate.memory)
            waiting = [candidate.memory.id for candidate in candidates if candidate.memory.id in self.pending]
            # Reversed, so the best word match ends up first in the queue.
            self._queue.extendleft(reversed(waiting[:URGENT]))
            try:
                query_vector = self._embedder.embed([query])[0]
            except Exception:
                ranking = None
            else:
                ranking = self._fused(query_vector, candidates, total, options)
                if self.pending:
                    progress = Progress(len(self.live) - len(self.pending), len(self.live))
                    ranking = dataclasses.replace(ranking, note=self._note(progress), progress=progress)
        finally:
            self._lock.release()
        if ranking is None:
            self._runtime_failed()
        return ranking

    def _fused(
        self, query_vector: vectors.Matrix, candidates: Sequence[Candidate], total: int, options: RankOptions
    ) -> Ranking:
        ids = self.table.ids
        cosines = self._cosines(query_vector)
        lexical = {candidate.memory.id: candidate.lexical_score for candidate in candidates}
        found: dict[str, float] = {}
        for candidate in candidates:
            at = self.table.row(candidate.memory.id)
            if at is not None and self.table.revisions[at] == candidate.memory.revision:
                found[candidate.memory.id] = float(cosines[at])
        memories = {candidate.memory.id: candidate.memory for candidate in candidates}

        def admissible(n: int) -> bool:
            """A memory found by meaning only may be returned: live, current vector, passes the filters."""
            memory_id = ids[n]
            if memory_id in lexical:
                return False
            # Through the reader, as the server checks: a memory gone since must not be named.
            memory = self._memories.get(memory_id)
            if memory is None or memory.revision != self.table.revisions[n]:
                return False
            if options.filtered and not options.accepts(memory):
                return False
            memories[memory_id] = memory
            return True

        for n in np.flatnonzero(cosines >= self.floor):
            if admissible(int(n)):
                found[ids[n]] = float(cosines[n])
        if options.near_misses:
            wanted = 0
            below = np.flatnonzero(cosines < self.floor)
            for n in below[np.argsort(-cosines[below], kind="stable")]:
                if wanted == MAX_NEAR_MISSES:
                    break
                if admissible(int(n)):
                    found[ids[n]] = float(cosines[n])
                    wanted += 1
        decays = {
            memory_id: decay(memory.category, age_days(memory, options.now))
            for memory_id, memory in memories.items()
        }
        hits, members = fusion.fuse(
            lexical,
            found,
            decays,
            floor=self.floor,
            span=self.span,
            limit=options.limit,
            near_misses=MAX_NEAR_MISSES if options.near_misses else 0,
            order=[candidate.memory.id for candidate in candidates],
        )
        return Ranking(
            hits=[
                RankedHit(hit.memory_id, hit.score, hit.lexical_score, hit.semantic_score, hit.near_miss)
                for hit in hits
            ],
            total=total + members - len(lexical),
            ranking="hybrid",
        )

    # The file -----------------------------------------------------------------

    def close(self) -> None:
        """Stop for good: wait for a search or a write in progress; none starts afterwards.

        The diagnostic calls it before deleting its temporary vector directory, so
        no late write can make the directory again.
        """
        self.stop_warm_up()
        with self._file_lock, self._lock:
            self._closed = True

    def _save_soon(self) -> None:
        """Have the plugin's saver thread write the file: a search does not wait for the disk."""
        if self._saver is None:
            self._saver = threading.Thread(target=self._save_loop, name="squirrel-mcp-vectors", daemon=True)
            self._saver.start()
        self._wake.set()

    def _save_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write the vector file now if it changed since it was last written (once written, returns)."""
        with self._file_lock:
            with self._lock:
                if self._closed or not self._dirty or not self._writable:
                    return
                # The file's bytes (one copy of the rows), so searches go on while it is sealed and written.
                plaintext = self.table.plaintext(self.stamp)
                self._dirty = False
            try:
                vectors.seal_and_write(self.path, plaintext, self._key, self._memories.account_id)
            except OSError:
                self._writable = False
                self._notice(UNWRITABLE)


class EmbeddingsPlugin:
    """The hook implementations; one instance, `plugin`, is the registered entry point."""

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
        from squirrel_mcp_embeddings import embedder  # onnxruntime loads here, in the background

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
    def shutdown(self) -> None:
        """Stop the warm-up after its batch in progress, then write the vector file if it changed."""
        if self.hybrid is not None:
            self.hybrid.stop_warm_up()
            self.hybrid.flush()

    @hookimpl
    def doctor_checks(self, memories: MemoryReader | None) -> list[Check]:
        """`squirrel-mcp doctor`: the model's files, then this account's vector file once unlocked."""
        from squirrel_mcp_embeddings import doctor  # only doctor needs it

        if os.environ.get(ENABLED_VARIABLE, "").strip() == "0":
            return [Check("embeddings", True, f"turned off by {ENABLED_VARIABLE}=0; search is by words only")]
        model, manifest = doctor.check_model()
        if manifest is None or memories is None:
            return [model]
        stamp = vectors.Stamp(manifest.model, manifest_sha256(), RECIPE_VERSION, manifest.dimensions)
        return [model, doctor.check_vector_file(memories, stamp)]

    @hookimpl
    def register_commands(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """`squirrel-mcp diagnose queries.json`: the recall diagnostic, wherever squirrel-mcp is."""
        command = commands.add_parser("diagnose", help=DIAGNOSE_HELP, description=DIAGNOSE_HELP)
        add_diagnose_arguments(command)
        command.set_defaults(run=run_diagnose)


DIAGNOSE_HELP = (
    "For queries you choose, where the memory you expected ranks "
    "(prints ids, ranks and scores only, never memory text)."
)


def add_diagnose_arguments(parser: argparse.ArgumentParser) -> None:
    """The diagnostic's arguments, on `squirrel-mcp diagnose` and on `squirrel-mcp-diagnose`."""
    parser.add_argument("queries", type=Path, help='a JSON list of {"query": ..., "expect": ...}')


def run_diagnose(args: argparse.Namespace) -> int:
    """Run the diagnostic on the parsed `squirrel-mcp diagnose` arguments (it ends the process)."""
    # Imported here: it imports the server, which the other commands do not need.
    from squirrel_mcp_embeddings import diagnose

    diagnose.main([str(args.queries)])


plugin = EmbeddingsPlugin()
