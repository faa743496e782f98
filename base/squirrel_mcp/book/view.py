"""The decrypted view of one log: every memory's revisions, the search index, the catalog.

`View` holds what the memory store decrypted and keeps the three things built
from it in step: each memory's `History`, the search index of live memories
(squirrel_mcp.search.index) and the catalog the listings page through
(squirrel_mcp.book.catalog). It knows nothing of storage, keys or locks: the
store hands it records with the function that opens them, under its own lock,
and takes snapshots of it (`capture`) or starts from one (`restore`).
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from squirrel_mcp.book.catalog import Catalog
from squirrel_mcp.book.checkpoint import Repeat
from squirrel_mcp.book.errors import UnknownMemoryError, UnreadableMemoryError
from squirrel_mcp.book.snapshot import State
from squirrel_mcp.core.models import MAX_REVISION, Revision
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.storage import SealedRecord

# A refresh tells its `progress` how far it has got every this many records.
PROGRESS_STEP = 1000
# The unreadable revisions of a memory whose revisions all could be read.
NONE_UNREADABLE: frozenset[int] = frozenset()


@dataclass(slots=True)
class History:
    """All readable revisions of one memory, by number, and which ones were not.

    A memory is served at its newest readable revision. Revisions above it that
    failed their integrity check (damaged, or a record a key holder or the server
    appended) are reported, not served; the next write goes above them all, so
    a damaged newest revision never leaves a memory stuck. A record numbered past
    MAX_REVISION is unreadable too, but the next write does not go above it: no
    storage could hold that number.
    """

    revisions: dict[int, Revision] = field(default_factory=dict)
    # Replaced, never changed in place: the memories with none (nearly all) share one empty set.
    unreadable: frozenset[int] = NONE_UNREADABLE

    def latest_number(self) -> int:
        """The highest revision number stored (to MAX_REVISION), readable or not: the next is one above."""
        return max([n for n in (*self.revisions, *self.unreadable) if n <= MAX_REVISION], default=0)

    def newest_readable(self) -> Revision | None:
        """The revision the memory is served at; None when no revision can be read."""
        return self.revisions[max(self.revisions)] if self.revisions else None

    def unreadable_above(self) -> list[int]:
        """Revision numbers above the newest readable one that failed their integrity check."""
        top = max(self.revisions, default=0)
        return sorted(number for number in self.unreadable if number > top)

    def oldest_first(self) -> list[Revision]:
        """Every readable revision, oldest first."""
        return [self.revisions[n] for n in sorted(self.revisions)]


@contextmanager
def collecting_later() -> Iterator[None]:
    """Pause the cyclic garbage collector while the first pull makes objects by the hundred thousand.

    Each collection it triggers would walk every object made so far, none of them
    garbage (the view keeps them): a third of an open from the snapshot at 100,000
    memories. Reference counting still frees what is dropped meanwhile. At the end the
    objects made are moved out of the collector's sight (`gc.freeze`): otherwise the
    first collection after it walks them all at once (0.4 s at 100,000 memories, on
    the first search's way), and every full collection after that again. They are
    the view's, freed by reference counting when the view drops them. At exit they
    are given back to the collector (`gc.unfreeze`, registered once), so that what
    only the last collection finalizes, such as the vault's SQLite connection (closing
    it checkpoints the WAL), is finalized as it was without the freeze.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        atexit.unregister(gc.unfreeze)  # registered once, however many stores open
        atexit.register(gc.unfreeze)
        if enabled:
            gc.enable()


class View:
    """What one store decrypted of its log, with the index and catalog built from it."""

    def __init__(self) -> None:
        """An empty view: no record applied yet."""
        self.histories: dict[str, History] = {}
        # How many records of the log the view holds.
        self.count = 0
        # Search's view of the latest live revisions, updated as they are decrypted.
        self.index = SearchIndex()
        # The listings' view: every memory's newest readable revision in order (catalog.py),
        # and which memories cannot be read at all, or only at an older revision.
        self.catalog = Catalog()
        self.unreadable: set[str] = set()
        self.older: set[str] = set()

    def apply(
        self,
        records: list[SealedRecord],
        open_record: Callable[[SealedRecord], Revision | None],
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[list[Revision], list[Repeat]]:
        """Open `records`, pulled in log order, into the view.

        Returns the latest revisions of the memories that changed, and the records
        that repeat a (memory, revision) the view already holds. Storage holds each
        pair once, so a repeat is a record replaced behind this machine's back: it
        is not opened, the first record of the pair stays, and the store reports
        the log as diverged.
        """
        start = self.count
        self.count += len(records)
        repeats: list[Repeat] = []
        for done, record in enumerate(records, 1):
            if progress is not None and done % PROGRESS_STEP == 0:
                progress(done, len(records))
            history = self.histories.setdefault(record.memory_id, History())
            if record.revision in history.revisions or record.revision in history.unreadable:
                repeats.append(Repeat(start + done - 1, record.memory_id, record.revision))
                continue
            revision = open_record(record)
            if revision is None:
                history.unreadable = history.unreadable | {record.revision}
            else:
                history.revisions[record.revision] = revision
        changed = []
        newest: dict[str, Revision | None] = {}
        for memory_id in {record.memory_id for record in records}:
            history = self.histories[memory_id]
            latest = newest[memory_id] = history.newest_readable()
            self._note_readability(memory_id, history)
            if latest is None or latest.deleted:
                self.index.remove(memory_id)
            else:
                self.index.add(latest)
            if latest is not None:
                changed.append(latest)
        self.catalog.update(newest)
        if progress is not None and records:
            progress(len(records), len(records))
        return changed, repeats

    def _note_readability(self, memory_id: str, history: History) -> None:
        """Keep `unreadable` and `older` current for a memory that changed."""
        for ids, member in (
            (self.unreadable, not history.revisions),
            (self.older, bool(history.revisions and history.unreadable_above())),
        ):
            if member:
                ids.add(memory_id)
            else:
                ids.discard(memory_id)

    def restore(self, state: State) -> bool:
        """Take the histories, index and catalog from a snapshot's state; False if they do not fit."""
        histories: dict[str, History] = {}
        newest: dict[str, Revision | None] = {}
        live: dict[str, Revision] = {}
        for memory_id, revisions, unreadable in state.histories:
            # Oldest first (capture): the last is the newest readable.
            latest = newest[memory_id] = revisions[-1] if revisions else None
            history = History({r.revision: r for r in revisions} if len(revisions) > 1 else {})
            if latest is not None:
                history.revisions[latest.revision] = latest
                if not latest.deleted:
                    live[memory_id] = latest
            if unreadable:
                history.unreadable = frozenset(unreadable)
            histories[memory_id] = history
        try:
            index = SearchIndex.from_image(state.index, live)
        except (ValueError, KeyError):
            return False
        if len(index) != len(live):
            return False
        self.histories, self.index = histories, index
        # What _note_readability would find for each memory, without a call per memory.
        self.unreadable = {i for i, history in histories.items() if not history.revisions}
        self.older = {
            i
            for i, history in histories.items()
            if history.unreadable and history.revisions and history.unreadable_above()
        }
        # In the order capture wrote them, oldest change first: the catalog's sort finds them sorted.
        self.catalog.update(newest)
        self.count = state.count
        return True

    def capture(self, link: bytes) -> State:
        """The state the view holds now, the chain's `link` after its records (for a snapshot)."""
        # Oldest change first, as the catalog orders them (then those with no readable revision):
        # restore gives them to the catalog in this order, which its sort then finds in place.
        order = [revision.id for revision in reversed(self.catalog.newest_first(include_deleted=True))]
        order += self.unreadable
        histories = []
        for memory_id in order:
            history = self.histories[memory_id]
            histories.append((memory_id, history.oldest_first(), sorted(history.unreadable)))
        return State(self.count, link, histories, self.index.image())

    def latest(self, memory_id: str) -> Revision:
        """The newest readable revision of a memory; UnknownMemoryError or UnreadableMemoryError."""
        history = self.histories.get(memory_id)
        if history is None:
            raise UnknownMemoryError(memory_id)
        latest = history.newest_readable()
        if latest is None:
            raise UnreadableMemoryError(memory_id)
        return latest

    def compare(self, revisions: list[Revision]) -> tuple[list[Revision], int, list[int]]:
        """An exported memory's revisions against the view: (missing, present count, conflicting numbers)."""
        history = self.histories.get(revisions[0].id, History())
        missing: list[Revision] = []
        present = 0
        conflicts: list[int] = []
        for revision in revisions:
            mine = history.revisions.get(revision.revision)
            if mine is None and revision.revision not in history.unreadable:
                missing.append(revision)
            elif mine == revision:
                present += 1
            else:
                conflicts.append(revision.revision)
        return missing, present, conflicts
