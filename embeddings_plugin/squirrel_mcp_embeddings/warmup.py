"""The warm-up: one account's vectors, kept current, filled in the background, saved to their file.

`WarmUp` opens the account's vector file (or starts empty, writing REBUILT when the
file cannot be read) and keeps its vectors current: a memory whose revision moved
loses its vector and is queued again, a deleted one is forgotten (`changed`). The
warm-up embeds every memory without a current vector, WARM_UP_BATCH at a time: in
threads of the plugin's own at a lower priority (`start_warm_up`: one per two cores
this process may run on, at least one; each stopped after its batch in progress by
`stop_warm_up`), or in the caller's thread until none is left (`warm_all`). A memory
is embedded from its `recipe`, and one longer than the model's window from each of
its passages too (`passages_of`, passages.py), all in the same batch. The vector file
is written by another thread of the plugin's own (every SAVE_EVERY seconds while
warming up, and when the backlog is done) or by `flush`, so no search waits for the
disk.

The ranker over these vectors is ranker.Hybrid, a WarmUp. Lines written, each at most
once: RUNTIME_FAILED, UNWRITABLE, REBUILT. None holds memory text, a key or a vector.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from squirrel_mcp.plugin_api import MemoryReader, Revision
from squirrel_mcp_embeddings import passages, vectors

# Bumped whenever `recipe` or `passages_of` (passages.py) change: the vector file records it, so
# every memory is embedded again. 1: whole texts only, cut at the model's window; 2: passages too.
RECIPE_VERSION = 2
# The warm-up embeds this many memories at a time: small, so that stopping (at shutdown) and
# a search's turn at the vectors never wait long, large enough to keep the runtime efficient.
WARM_UP_BATCH = 16
# The warm-up thread's scheduling priority (Unix nice, on Linux per thread): lower than the
# searches', so when the cores are contended a search's turn comes first.
WARM_UP_NICE = 10
# While warming up, the vector file is written at most this often (and once when it is done).
SAVE_EVERY = 30.0
# Shutdown waits this long for the batches in progress.
STOP_WAIT = 3.0

RUNTIME_FAILED = (
    "memory: local embeddings failed (runtime); memory search is lexical for the rest of this session"
)
UNWRITABLE = "memory: the vector file could not be written; vectors are kept in memory for this session"
REBUILT = "memory: the vector file could not be read (integrity); it is discarded and rebuilt"

Notice = Callable[[str], None]


class Embeds(Protocol):
    """What the warm-up and the ranking need of a model: embedder.Embedder, or a stand-in in tests."""

    def embed(self, texts: Sequence[str]) -> vectors.Matrix:
        """One L2-normalised float32 row per text."""
        ...

    def fits(self, text: str) -> bool:
        """Whether the model reads all of `text`."""
        ...

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        """The [start, end) characters of each of `text`'s tokens."""
        ...


def warm_up_threads(cores: int | None = None) -> int:
    """How many threads warm up: half the cores this process may run on (`cores`), at least one.

    Each embeds with one runtime thread, so the warm-up keeps at most half the cores busy
    and a search's query embedding always finds one free.
    """
    if cores is None:
        affinity = getattr(os, "sched_getaffinity", None)
        cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, cores // 2)


def recipe(memory: Revision) -> str:
    """The text a memory is embedded from: `entity: text (tags, keywords)`.

    The parenthesis is left out when the memory has neither tags nor keywords.
    """
    extras = ", ".join([*memory.tags, *memory.keywords])
    text = f"{memory.entity}: {memory.text}" if memory.entity else memory.text
    return f"{text} ({extras})" if extras else text


def passages_of(embedder: Embeds, memory: Revision) -> list[str]:
    """The passages a memory is embedded from besides its recipe: none when the model reads it whole.

    Each is `entity: passage` (passages.py cuts the text), as the memory would be embedded
    if it held that passage alone.
    """
    if embedder.fits(recipe(memory)):
        return []
    prefix = f"{memory.entity}: " if memory.entity else ""
    return [prefix + piece for piece in passages.passages(memory.text, embedder.token_offsets(memory.text))]


# Each memory's whole-text vector (row i for memory i), and each memory's passage vectors.
Embedded = tuple[vectors.Matrix, list[vectors.Matrix]]


def embed_memories(embedder: Embeds, memories: Sequence[Revision]) -> Embedded:
    """The vectors of `memories`: each one's recipe, and each one's passages (none when it fits).

    The recipes are embedded together, as they always were, so a memory that fits the
    model's window gets the very vector it had before passages existed. The passages are
    embedded shortest first, so a batch is padded to about its own length, not the longest's.
    """
    wholes = embedder.embed([recipe(memory) for memory in memories])
    pieces = [passages_of(embedder, memory) for memory in memories]
    flat = [piece for some in pieces for piece in some]
    order = sorted(range(len(flat)), key=lambda n: len(flat[n]))
    made = np.zeros((len(flat), wholes.shape[1]), dtype=np.float32)
    if flat:
        made[order] = embedder.embed([flat[n] for n in order])
    bounds = np.cumsum([0, *map(len, pieces)]).tolist()
    return wholes, [made[start:end] for start, end in itertools.pairwise(bounds)]


def _lower_priority(nice: int) -> None:
    """Lower the calling thread's priority by `nice` (Linux schedules threads one by one).

    Where that is not possible (another system, a sandbox refusing it) nothing changes.
    """
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)


class WarmUp:
    """One account's vectors and the warm-up that fills them; thread-safe (ranker.Hybrid ranks over them)."""

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
        threads: int | None = None,
    ) -> None:
        """Open `memories`' vector file at `path` (or start empty); writes REBUILT if it is unusable.

        Nothing is embedded until `start_warm_up` (or `warm_all`) is called; it embeds in
        `threads` threads (None: `warm_up_threads()`).
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
        # The warm-up: its threads, what wakes them (new work, or stop), and its measured pace.
        self.threads = warm_up_threads() if threads is None else max(1, threads)
        self._warmers: list[threading.Thread] = []
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
        if known is memory:
            # Learnt already (every search hands the same objects): nothing would change.
            held = self.table.revision(memory.id)
            if held == memory.revision or (held is None and memory.id in self.pending):
                return
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

    def _store(self, batch: Sequence[Revision], made: Embedded) -> None:
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
        wholes, pieces = made
        self.table.put_many(
            ((batch[n].id, batch[n].revision) for n in kept), wholes[kept], [pieces[n] for n in kept]
        )
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

    def _embed(self, batch: Sequence[Revision]) -> Embedded:
        """The batch's vectors, outside the lock (searches go on); counts the time for the estimate."""
        began = self._clock()
        made = embed_memories(self._embedder, batch)
        with self._lock:
            self._warm_seconds += self._clock() - began
            self._warm_count += len(batch)
        return made

    def start_warm_up(self) -> None:
        """Embed, in `threads` threads of the plugin's own, every memory without a current vector.

        Startup calls it. Small batches, one per thread at a time, so a search's query
        embedding never waits for the backlog; searches meanwhile rank by meaning what is
        embedded so far. The vector file is written every SAVE_EVERY seconds and when the
        backlog is done.
        """
        if not self._warmers:
            self._more.set()
            self._warmers = [
                threading.Thread(target=self._warm_loop, name="squirrel-mcp-warm-up", daemon=True)
                for _ in range(self.threads)
            ]
            for warmer in self._warmers:
                warmer.start()

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
        """Stop the warm-up threads after the batches they are embedding; wait up to `timeout` s."""
        self._stopping.set()
        self._more.set()
        deadline = time.monotonic() + timeout
        for warmer in self._warmers:
            warmer.join(max(0.0, deadline - time.monotonic()))

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
