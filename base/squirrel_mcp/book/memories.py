"""The unlocked memory book: decrypts records, keeps history, writes revisions.

Every backend is an append-only log of sealed revisions. This module holds the
decrypted view of that log in memory (the server's working set; search runs over
it) and turns the agent's operations into new revisions. Before each operation
it pulls what other processes appended since its last look, so two servers on
one vault see each other's writes at their next call. A backend whose pulls cost
a round trip (the remote API) sets `pull_interval`: reads within that many
seconds of the last pull use the view as it is, while a write always pulls
first, so its conflict check sees the latest revision storage holds.
"""

from __future__ import annotations

import gc
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from pydantic import ValidationError

from squirrel_mcp.book.catalog import Catalog
from squirrel_mcp.book.checkpoint import LogWatch, Place
from squirrel_mcp.book.snapshot import Snapshots, State
from squirrel_mcp.core.models import Category, Change, Revision, now_iso
from squirrel_mcp.keys import crypto
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.storage import Account, RevisionConflict, SealedRecord, Storage
from squirrel_mcp.storage.wire import MAX_RECORDS_PER_APPEND

# The most records one append of an import holds: what the sync contract takes in one request.
IMPORT_BATCH = MAX_RECORDS_PER_APPEND
# A refresh tells its `progress` how far it has got every this many records.
PROGRESS_STEP = 1000


class MemoryOperationError(Exception):
    """An operation the agent asked for cannot be done; the message says why."""


class NoAccountError(Exception):
    """The storage holds no account yet."""


class UnknownMemoryError(MemoryOperationError):
    """No memory has this id."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(f"no memory has the id {memory_id!r}")


class UnreadableMemoryError(MemoryOperationError):
    """A record of this memory failed to decrypt (damaged or tampered with)."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(f"memory {memory_id} is unreadable: its stored record failed its integrity check")


class ConflictError(MemoryOperationError):
    """Someone else changed the memory since the caller read it."""


class LogDivergedError(MemoryOperationError):
    """The log no longer extends what this machine saw of it: nothing is written until the user accepts it."""


@dataclass
class _History:
    """All readable revisions of one memory, by number, and which ones were not.

    A memory is served at its newest readable revision. Revisions above it that
    failed their integrity check (damaged, or a record a key holder or the server
    appended) are reported, not served; the next write goes above them all, so
    a damaged newest revision never leaves a memory stuck.
    """

    revisions: dict[int, Revision] = field(default_factory=dict)
    unreadable: set[int] = field(default_factory=set)

    def latest_number(self) -> int:
        """The highest revision number stored, readable or not: the next write is one above."""
        return max([*self.revisions, *self.unreadable], default=0)

    def newest_readable(self) -> Revision | None:
        """The revision the memory is served at; None when no revision can be read."""
        return self.revisions[max(self.revisions)] if self.revisions else None

    def unreadable_above(self) -> list[int]:
        """Revision numbers above the newest readable one that failed their integrity check."""
        top = max(self.revisions, default=0)
        return sorted(number for number in self.unreadable if number > top)


@contextmanager
def _collecting_later() -> Iterator[None]:
    """Pause the cyclic garbage collector while the first pull makes objects by the hundred thousand.

    Each collection it triggers would walk every object made so far, none of them
    garbage (the view keeps them): a third of an open from the snapshot at 100,000
    memories. Reference counting still frees what is dropped meanwhile.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def new_memory_id() -> str:
    """A random 64-bit id in hex: short for an agent to quote, unique enough for one person."""
    return secrets.token_hex(8)


class MemoryStore:
    """The decrypted, in-memory view of one account, and the operations on it."""

    def __init__(
        self,
        storage: Storage,
        account_id: str,
        data_key: bytes,
        checkpoints: Place | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Use `unlock` or `create` rather than this.

        With `checkpoints`, the log is checked against this machine's checkpoint
        there (squirrel_mcp.book.checkpoint), and the state decrypted is kept in a
        snapshot there to open faster (squirrel_mcp.book.snapshot); without, neither
        (unit tests).
        """
        self._storage = storage
        self.account_id = account_id
        self._key = data_key
        self._histories: dict[str, _History] = {}
        self._cursor = 0
        # How many records of the log the view holds.
        self._count = 0
        self._pulled_at: float | None = None
        # Search's view of the latest live revisions, updated as they are decrypted.
        self.index = SearchIndex()
        # The listings' view: every memory's newest readable revision in order (catalog.py),
        # and which memories cannot be read at all, or only at an older revision.
        self._catalog = Catalog()
        self._unreadable: set[str] = set()
        self._older: set[str] = set()
        # Tools run in worker threads; one lock keeps read-modify-append atomic here.
        self._lock = threading.RLock()
        # Told of the latest revisions of the memories each refresh found changed
        # (plugins, through their memories_changed hook). Called under the lock: be quick.
        self.listeners: list[Callable[[Sequence[Revision]], None]] = []
        self._watch = None if checkpoints is None else LogWatch.of(checkpoints, account_id, data_key)
        self._snapshots = None if checkpoints is None else Snapshots.of(checkpoints, account_id, data_key)
        # Told (records decrypted, records pulled) as a refresh goes: the commands' progress bar.
        self.progress = progress
        self._open_log()
        if self._watch is not None:
            self._watch.opened()

    @classmethod
    def unlock(
        cls,
        storage: Storage,
        passphrase: str,
        checkpoints: Place | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> MemoryStore:
        """Open an existing account; WrongPassphraseError or NoAccountError if it cannot.

        `progress` becomes the store's `progress`: told how far each refresh has got.
        """
        account = storage.load_account()
        if account is None:
            raise NoAccountError("this vault has no account yet")
        data_key = crypto.unwrap_data_key(
            passphrase, account.kdf, account.account_id, account.wrapped_data_key
        )
        return cls(storage, account.account_id, data_key, checkpoints, progress=progress)

    @classmethod
    def create(
        cls,
        storage: Storage,
        passphrase: str,
        kdf: crypto.KdfParams | None = None,
        checkpoints: Place | None = None,
    ) -> MemoryStore:
        """Create a new account with a fresh data key wrapped under the passphrase.

        `kdf` defaults to fresh strong parameters; unit tests pass cheaper ones.
        """
        account_id = secrets.token_hex(16)
        kdf = kdf or crypto.KdfParams.new()
        data_key = crypto.new_data_key()
        wrapped = crypto.wrap_data_key(passphrase, kdf, account_id, data_key)
        storage.create_account(Account(account_id, kdf, wrapped))
        return cls(storage, account_id, data_key, checkpoints)

    # Reading -----------------------------------------------------------------

    def refresh_if_stale(self) -> None:
        """`refresh`, unless the last pull is younger than the storage's `pull_interval` (reads use this)."""
        with self._lock:
            pulled = self._pulled_at
            if pulled is None or time.monotonic() - pulled >= self._storage.pull_interval:
                self.refresh()

    def refresh(self) -> None:
        """Decrypt whatever was appended since the last look (writes always call this first)."""
        with self._lock:
            self._apply(self._pull())
            if self._snapshots is not None:
                self._snapshots.write_if_stale(self._count, self._captured)

    def _pull(self) -> list[SealedRecord]:
        """The records appended since the last pull, chained by the log watch."""
        started = time.monotonic()
        records, self._cursor = self._storage.changes_since(self._cursor)
        self._pulled_at = started
        if self._watch is not None:
            self._watch.pulled(records)
        return records

    def _open_log(self) -> None:
        """The first pull (the whole log), decrypting only what the snapshot does not already hold."""
        with self._lock, _collecting_later():
            records = self._pull()
            state = None
            if self._snapshots is not None and self._watch is not None:
                state = self._snapshots.read(self._watch.chain)
            if state is not None and self._snapshots is not None and self._restore(state):
                self._snapshots.covered = state.count
                records = records[state.count :]
            self._apply(records)
            if self._snapshots is not None:
                self._snapshots.write_if_stale(self._count, self._captured)

    def _restore(self, state: State) -> bool:
        """Take the view, index and catalog from a snapshot's state; False if it does not fit together."""
        histories: dict[str, _History] = {}
        newest: dict[str, Revision | None] = {}
        live: dict[str, Revision] = {}
        for memory_id, revisions, unreadable in state.histories:
            # Oldest first (_capture): the last is the newest readable.
            latest = newest[memory_id] = revisions[-1] if revisions else None
            history = _History({r.revision: r for r in revisions} if len(revisions) > 1 else {})
            if latest is not None:
                history.revisions[latest.revision] = latest
                if not latest.deleted:
                    live[memory_id] = latest
            if unreadable:
                history.unreadable.update(unreadable)
            histories[memory_id] = history
        try:
            index = SearchIndex.from_image(state.index, live)
        except (ValueError, KeyError):
            return False
        if len(index) != len(live):
            return False
        self._histories, self.index = histories, index
        # What _note_readability would find for each memory, without a call per memory.
        self._unreadable = {i for i, history in histories.items() if not history.revisions}
        self._older = {
            i
            for i, history in histories.items()
            if history.unreadable and history.revisions and history.unreadable_above()
        }
        # In the order _capture wrote them, oldest change first: the catalog's sort finds them sorted.
        self._catalog.update(newest)
        self._count = state.count
        return True

    def _captured(self) -> State | None:
        """The state the view holds now, for a snapshot (taken under the lock); None without a log watch."""
        with self._lock:
            link = None if self._watch is None else self._watch.chain.link(self._count)
            return None if link is None else self._capture(link)

    def _capture(self, link: bytes) -> State:
        """The state the view holds now, the chain's `link` after its records. Hold the lock."""
        # Oldest change first, as the catalog orders them (then those with no readable revision):
        # _restore gives them to the catalog in this order, which its sort then finds in place.
        order = [revision.id for revision in reversed(self._catalog.newest_first(include_deleted=True))]
        order += self._unreadable
        histories = []
        for memory_id in order:
            history = self._histories[memory_id]
            revisions = [history.revisions[n] for n in sorted(history.revisions)]
            histories.append((memory_id, revisions, sorted(history.unreadable)))
        return State(self._count, link, histories, self.index.image())

    def close(self) -> None:
        """Before the process ends: finish the snapshot being written; write one if STALE_RECORDS behind.

        The store stays usable; without this, a snapshot still being written in
        the background is lost with the process (the file is left as it was).
        """
        if self._snapshots is not None:
            with self._lock:
                count = self._count
            self._snapshots.finish(count, self._captured)

    def _apply(self, records: list[SealedRecord]) -> None:
        """Decrypt `records`, pulled in log order, into the view, the index and the catalog."""
        with self._lock:
            self._count += len(records)
            for done, record in enumerate(records, 1):
                if self.progress is not None and done % PROGRESS_STEP == 0:
                    self.progress(done, len(records))
                history = self._histories.setdefault(record.memory_id, _History())
                revision = self._open(record)
                if revision is None:
                    history.unreadable.add(record.revision)
                else:
                    history.revisions[record.revision] = revision
            changed = []
            newest: dict[str, Revision | None] = {}
            for memory_id in {record.memory_id for record in records}:
                history = self._histories[memory_id]
                latest = newest[memory_id] = history.newest_readable()
                self._note_readability(memory_id, history)
                if latest is None or latest.deleted:
                    self.index.remove(memory_id)
                else:
                    self.index.add(latest)
                if latest is not None:
                    changed.append(latest)
            self._catalog.update(newest)
            if self.progress is not None and records:
                self.progress(len(records), len(records))
            if changed:
                for listener in self.listeners:
                    listener(changed)

    def _note_readability(self, memory_id: str, history: _History) -> None:
        """Keep `unreadable_ids` and `older_revision_ids` current for a memory that changed."""
        for ids, member in (
            (self._unreadable, not history.revisions),
            (self._older, bool(history.revisions and history.unreadable_above())),
        ):
            if member:
                ids.add(memory_id)
            else:
                ids.discard(memory_id)

    def _open(self, record: SealedRecord) -> Revision | None:
        ad = crypto.record_ad(self.account_id, record.memory_id, record.revision)
        try:
            plaintext = crypto.open_sealed(self._key, record.ciphertext, ad)
            revision = Revision.model_validate_json(plaintext)
        except (crypto.DecryptionError, ValidationError):
            return None
        # The associated data already binds these; a mismatch means a bug, not an attack.
        if revision.id != record.memory_id or revision.revision != record.revision:
            return None
        return revision

    def _refresh_for(self, memory_id: str) -> None:
        """Refresh if stale, and also if the view has never seen this id (it may be seconds old)."""
        self.refresh_if_stale()
        if memory_id not in self._histories:
            self.refresh()

    def _latest(self, memory_id: str) -> Revision:
        history = self._histories.get(memory_id)
        if history is None:
            raise UnknownMemoryError(memory_id)
        latest = history.newest_readable()
        if latest is None:
            raise UnreadableMemoryError(memory_id)
        return latest

    def get(self, memory_id: str) -> Revision:
        """The newest readable revision of a memory (a tombstone if it is deleted)."""
        with self._lock:
            self._refresh_for(memory_id)
            return self._latest(memory_id)

    def unreadable_above(self, memory_id: str) -> list[int]:
        """Revisions of the memory newer than the one `get` serves that failed their integrity check."""
        with self._lock:
            history = self._histories.get(memory_id)
            return [] if history is None else history.unreadable_above()

    def live(self, memory_id: str) -> Revision | None:
        """The latest revision of a live memory as the search index holds it, or None; no pull.

        What a search may return: the server checks a ranker's answer against it.
        """
        return self.index.memory(memory_id)

    def derive_key(self, purpose: str) -> bytes:
        """A key of its own for `purpose`, derived from the data key (`crypto.derive_key`)."""
        return crypto.derive_key(self._key, purpose)

    def history(self, memory_id: str) -> list[Revision]:
        """Every readable revision, oldest first."""
        with self._lock:
            self._refresh_for(memory_id)
            latest = self._latest(memory_id)
            history = self._histories[latest.id]
            return [history.revisions[n] for n in sorted(history.revisions)]

    def current(self, *, include_deleted: bool = False) -> list[Revision]:
        """The newest readable revision of every memory, newest change first."""
        with self.reading() as catalog:
            return catalog.newest_first(include_deleted=include_deleted)

    @contextmanager
    def reading(self) -> Iterator[Catalog]:
        """The catalog of current revisions, refreshed if stale, held still while the block runs.

        For listings that take a page and its totals from one state of the vault.
        """
        with self._lock:
            self.refresh_if_stale()
            yield self._catalog

    def unreadable_ids(self) -> list[str]:
        """Ids of memories none of whose records can be read."""
        with self._lock:
            return sorted(self._unreadable)

    def older_revision_ids(self) -> list[str]:
        """Ids of memories served at an older revision: their newest one cannot be read."""
        with self._lock:
            return sorted(self._older)

    def all_revisions(self) -> Iterable[list[Revision]]:
        """Every memory's readable history, for export."""
        with self._lock:
            self.refresh()
            return [
                [history.revisions[n] for n in sorted(history.revisions)]
                for _, history in sorted(self._histories.items())
                if history.revisions
            ]

    # Log integrity -----------------------------------------------------------

    @property
    def log_problem(self) -> str | None:
        """What is wrong with the log as a whole (it no longer extends this machine's checkpoint), or None."""
        return None if self._watch is None else self._watch.problem

    def accept_log(self) -> int:
        """Take the log as it is now for this machine's checkpoint (the user's call); how many records."""
        with self._lock:
            self.refresh()
            return 0 if self._watch is None else self._watch.accept()

    # Writing -----------------------------------------------------------------

    def _seal(self, revisions: list[Revision]) -> list[SealedRecord]:
        """The revisions sealed for storage; LogDivergedError while the log does not extend the checkpoint."""
        refusal = None if self._watch is None else self._watch.write_refusal()
        if refusal is not None:
            raise LogDivergedError(refusal)
        return [
            SealedRecord(
                revision.id,
                revision.revision,
                crypto.seal(
                    self._key,
                    revision.model_dump_json().encode(),
                    crypto.record_ad(self.account_id, revision.id, revision.revision),
                ),
            )
            for revision in revisions
        ]

    def _append(self, revisions: list[Revision]) -> None:
        self._storage.append(self._seal(revisions))
        self.refresh()

    def save(
        self,
        *,
        entity: str,
        text: str,
        category: Category,
        tags: list[str],
        keywords: list[str],
    ) -> Revision:
        """Store a new memory as revision 1."""
        stamp = now_iso()
        revision = Revision(
            id=new_memory_id(),
            entity=entity,
            text=text,
            tags=tags,
            keywords=keywords,
            category=category,
            createdAt=stamp,
            updatedAt=stamp,
            revision=1,
            change="created",
        )
        with self._lock:
            self._append([revision])
        return revision

    def _next(
        self,
        memory_id: str,
        change: Change,
        expected_revision: int | None,
        was_deleted: bool,
        refusal: str,
        **fields: object,
    ) -> Revision:
        """Write the next revision, with `fields` changed from the newest readable one.

        That revision must be a tombstone if `was_deleted`, live otherwise (else
        MemoryOperationError with `refusal`). It is judged after a pull, so a
        delete made on another machine a second ago counts. The new revision's
        number is one above the highest stored, readable or not: storage takes
        only the next number, and an unreadable newest revision must not block
        every later change.
        """
        with self._lock:
            self.refresh()
            latest = self._latest(memory_id)
            number = self._histories[memory_id].latest_number() + 1
            if latest.deleted != was_deleted:
                raise MemoryOperationError(f"memory {memory_id} {refusal}")
            if expected_revision is not None and latest.revision != expected_revision:
                raise ConflictError(
                    f"memory {memory_id} is at revision {latest.revision}, not {expected_revision}: "
                    "it changed since you read it; read it again with get_memory, then retry"
                )
            values = latest.model_dump() | fields
            values.update(revision=number, updatedAt=now_iso(), change=change)
            revision = Revision.model_validate(values)
            try:
                self._append([revision])
            except RevisionConflict:
                self.refresh()
                raise ConflictError(
                    f"memory {memory_id} was changed by another process (or machine) at the same moment; "
                    "read it again with get_memory, then retry"
                ) from None
            return revision

    def update(
        self,
        memory_id: str,
        *,
        changes: dict[str, object],
        reason: str | None,
        expected_revision: int | None = None,
    ) -> Revision:
        """A correction: the next revision with `changes` applied; the old one stays."""
        return self._next(
            memory_id,
            "corrected",
            expected_revision,
            was_deleted=False,
            refusal="is deleted; restore_memory it first",
            reason=reason,
            **changes,
        )

    def delete(self, memory_id: str, *, reason: str | None) -> Revision:
        """A tombstone revision; restore undoes it."""
        return self._next(
            memory_id,
            "deleted",
            None,
            was_deleted=False,
            refusal="is already deleted",
            deleted=True,
            reason=reason,
        )

    def restore(self, memory_id: str) -> Revision:
        """Undo a delete: a new revision with the memory's content back."""
        return self._next(
            memory_id,
            "restored",
            None,
            was_deleted=True,
            refusal="is not deleted",
            deleted=False,
            reason=None,
        )

    def import_history(self, revisions: list[Revision]) -> tuple[int, int, list[int]]:
        """Add an exported memory's revisions that this account lacks (`import_histories` of one)."""
        return self.import_histories([revisions])[0]

    def import_histories(
        self, histories: Sequence[list[Revision]], progress: Callable[[int, int], None] | None = None
    ) -> list[tuple[int, int, list[int]]]:
        """Add the revisions of exported memories that this account lacks, in few appends.

        Returns, for each memory in the order given, (added, already present,
        conflicting revision numbers). A revision already here with the same content
        counts as present, so an import can be run twice; one here with different
        content is a conflict and is left alone.

        One pull, then the missing revisions of many memories go together, at most
        IMPORT_BATCH records per append (what the sync contract takes in one request;
        a memory with a longer history goes alone, in order), and one pull at the end.
        An append refused because a record it holds appeared meanwhile (another
        process wrote one of its memories) is redone memory by memory after a pull,
        each judged against what storage then holds. `progress` is told how many
        memories are done, and of how many, after each append.
        """
        results: list[tuple[int, int, list[int]]] = []
        with self._lock:
            self.refresh()
            batch: list[Revision] = []
            members: list[int] = []
            for number, revisions in enumerate(histories):
                missing, present, conflicts = self._compare(revisions)
                if missing and batch and len(batch) + len(missing) > IMPORT_BATCH:
                    self._import_batch(batch, members, histories, results)
                    batch, members = [], []
                    if progress is not None:
                        progress(number, len(histories))
                results.append((len(missing), present, conflicts))
                if missing:
                    batch.extend(missing)
                    members.append(number)
            self._import_batch(batch, members, histories, results)
            self.refresh()
        if progress is not None:
            progress(len(histories), len(histories))
        return results

    def _compare(self, revisions: list[Revision]) -> tuple[list[Revision], int, list[int]]:
        """An exported memory's revisions against the view: (missing, present count, conflicting numbers)."""
        history = self._histories.get(revisions[0].id, _History())
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

    def _import_batch(
        self,
        batch: list[Revision],
        members: list[int],
        histories: Sequence[list[Revision]],
        results: list[tuple[int, int, list[int]]],
    ) -> None:
        """Append one batch of an import; on a conflict, redo its memories one by one (import_histories)."""
        if not batch:
            return
        try:
            self._storage.append(self._seal(batch))
        except RevisionConflict:
            self.refresh()
            for number in members:
                missing, present, conflicts = self._compare(histories[number])
                if missing:
                    self._append(missing)
                results[number] = (len(missing), present, conflicts)


class MemoryReader:
    """Read-only access to the decrypted memories, as plugins get it at start-up."""

    def __init__(self, store: MemoryStore) -> None:
        """Wrap `store`; plugins never receive the store itself, so they cannot write to it."""
        self._store = store

    @property
    def account_id(self) -> str:
        """The vault account's id (to name per-account files)."""
        return self._store.account_id

    def derive_key(self, purpose: str) -> bytes:
        """A 256-bit key of the plugin's own for `purpose` (`crypto.derive_key`), never the data key."""
        return self._store.derive_key(purpose)

    def current(self) -> list[Revision]:
        """The latest readable revision of every live memory, newest change first."""
        return self._store.current()

    def get(self, memory_id: str) -> Revision | None:
        """The latest revision of a live memory, or None when no live memory has this id."""
        return self._store.live(memory_id)
