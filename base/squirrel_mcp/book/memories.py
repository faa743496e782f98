"""The unlocked memory book: `MemoryStore`, the operations an agent's tools run on its memories.

Every backend is an append-only log of sealed revisions. The store reads that log
through `Log` (log.py: pull, open, seal, append), keeps what it decrypted in a
`View` (view.py: every memory's history, the search index, the catalog) and turns
the agent's operations into new revisions (writing.py), under one lock. Before each
operation it pulls what other processes appended since its last look, so two servers on
one vault see each other's writes at their next call; and it asks the log whether
another program deleted, replaced or edited the vault's file meanwhile, in which case
it opens the log again as a start does (`_look`). A backend whose pulls cost
a round trip (the remote API) sets `pull_interval`: reads within that many
seconds of the last pull use the view as it is, while a write always pulls
first, so its conflict check sees the latest revision storage holds.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from squirrel_mcp.book import rekey
from squirrel_mcp.book.catalog import Catalog
from squirrel_mcp.book.checkpoint import Place
from squirrel_mcp.book.errors import NoAccountError
from squirrel_mcp.book.log import FirstPull, Log
from squirrel_mcp.book.snapshot import State
from squirrel_mcp.book.view import View, collecting_later
from squirrel_mcp.book.writing import Writing
from squirrel_mcp.core.models import Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.storage import Account, SealedRecord, Storage

# The purpose of the key `opened_by` compares the data keys by (never the keys themselves).
PASSPHRASE_CHECK_PURPOSE = "passphrase check"  # noqa: S105 - a key derivation label, no secret


class MemoryStore(Writing):
    """The decrypted, in-memory view of one account, and the operations on it."""

    def __init__(
        self,
        storage: Storage,
        account_id: str,
        data_key: bytes,
        checkpoints: Place | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
        first: FirstPull | None = None,
    ) -> None:
        """Use `unlock` or `create` rather than this.

        With `checkpoints`, the log is checked against this machine's checkpoint
        there (squirrel_mcp.book.checkpoint), and the state decrypted is kept in a
        snapshot there to open faster (squirrel_mcp.book.snapshot); without, neither
        (unit tests). `first`: the first pull, read while the key was derived.
        """
        self.account_id = account_id
        # The sealed records: pulled, opened, sealed and appended under the data key (log.py).
        self._log = Log(storage, account_id, data_key, checkpoints, first)
        # The decrypted memories, the search index and the catalog (view.py).
        self._view = View()
        # Tools run in worker threads; one lock keeps read-modify-append atomic here.
        self._lock = threading.RLock()
        # Told of the latest revisions of the memories each refresh found changed
        # (plugins, through their memories_changed hook). Called under the lock: be quick.
        self.listeners: list[Callable[[Sequence[Revision]], None]] = []
        # Told (records decrypted, records pulled) as a refresh goes: the commands' progress bar.
        self.progress = progress
        self._open_log()
        if self._log.watch is not None:
            self._log.watch.opened()

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
        # The log is read while the key is derived (log.FirstPull).
        first = FirstPull(storage, account.account_id, checkpoints)
        try:
            data_key = crypto.unwrap_data_key(
                passphrase, account.kdf, account.account_id, account.wrapped_data_key
            )
        finally:
            first.join()
        return cls(storage, account.account_id, data_key, checkpoints, progress=progress, first=first)

    @classmethod
    def create(
        cls,
        storage: Storage,
        passphrase: str,
        kdf: crypto.KdfParams | None = None,
        checkpoints: Place | None = None,
    ) -> MemoryStore:
        """Create a new account with a fresh data key wrapped under the passphrase, and its verifier.

        `kdf` defaults to fresh strong parameters; unit tests pass cheaper ones.
        """
        account_id = secrets.token_hex(16)
        kdf = kdf or crypto.KdfParams.new()
        data_key = crypto.new_data_key()
        wrapped = crypto.wrap_data_key(passphrase, kdf, account_id, data_key)
        storage.create_account(Account(account_id, kdf, wrapped, rekey.verifier(data_key)))
        return cls(storage, account_id, data_key, checkpoints)

    # Reading -----------------------------------------------------------------

    def refresh_if_stale(self) -> None:
        """`refresh`, unless the last pull is younger than the storage's `pull_interval` (reads use this)."""
        with self._lock:
            if self._log.stale():
                self.refresh()

    def refresh(self) -> None:
        """Decrypt whatever was appended since the last look (writes always call this first)."""
        with self._lock:
            self._look()
            self._apply(self._log.pull())
            if self._log.snapshots is not None:
                self._log.snapshots.write_if_stale(self._view.count, self._captured)

    def _open_log(self) -> None:
        """The first pull (the whole log), decrypting only what the snapshot does not already hold."""
        with self._lock, collecting_later():
            records = self._log.pull()
            snapshots, watch = self._log.snapshots, self._log.watch
            state = None if snapshots is None or watch is None else snapshots.read(watch.chain)
            if (
                state is not None
                and watch is not None
                and watch.trusted < state.count
                and state.addresses() != state.count
            ):
                # A revision came twice in records this machine had not trusted yet: decrypted one
                # by one, they let the view find the repeat (the log diverged), which the snapshot hides.
                state = None
            if state is not None and snapshots is not None and self._view.restore(state):
                snapshots.covered = state.count
                records = records[state.count :]
            self._apply(records)
            if snapshots is not None:
                snapshots.write_if_stale(self._view.count, self._captured)

    def _look(self) -> None:
        """Open the log again, as a start does, when another program deleted, replaced or edited its file.

        The start's checks then run on what the file holds now: a log rolled back or
        with a record removed no longer extends this machine's checkpoint, so it is
        reported and writes are refused until the user accepts it. A vault gone from
        its path is a StorageError for every call until a vault is back there.
        """
        with self._lock:
            change = self._log.look()
            if change is not None:
                self._reopen(self._log.reopened(change))

    def _reopen(self, log: Log) -> None:
        """Take `log` (opened afresh) for the store's, with a view of its own, as `__init__` opens one."""
        before, old_view, listeners = self._log, self._view, self.listeners
        self._log, self._view, self.listeners = log, View(), []
        try:
            self._open_log()
            if log.watch is not None:
                log.watch.opened()
        except BaseException:
            self._log, self._view = before, old_view
            if log.storage is not before.storage:
                log.storage.close()
            raise
        finally:
            self.listeners = listeners
        if log.storage is not before.storage:
            before.storage.close()
        # The plugins hear of every memory the file holds otherwise than the view did.
        was = {memory_id: history.newest_readable() for memory_id, history in old_view.histories.items()}
        changed = [
            latest
            for memory_id, history in self._view.histories.items()
            if (latest := history.newest_readable()) is not None and was.get(memory_id) != latest
        ]
        if changed:
            for listener in self.listeners:
                listener(changed)

    def _captured(self) -> State | None:
        """The state the view holds now, for a snapshot (taken under the lock); None without a log watch."""
        with self._lock:
            watch = self._log.watch
            link = None if watch is None else watch.chain.link(self._view.count)
            return None if link is None else self._view.capture(link)

    def close(self) -> None:
        """Before the process ends: finish the snapshot being written; write one if STALE_RECORDS behind.

        The store stays usable; without this, a snapshot still being written in
        the background is lost with the process (the file is left as it was).
        """
        if self._log.snapshots is not None:
            with self._lock:
                count = self._view.count
            self._log.snapshots.finish(count, self._captured)

    def opened_by(self, passphrase: str) -> bool:
        """True when `passphrase` opens the account's key as storage holds it now, and that key is ours.

        So a passphrase changed since this store was unlocked (`squirrel-mcp passphrase`
        rewraps the same data key) is told from a wrong one. Costs one key derivation.
        """
        account = self._log.storage.load_account()
        if account is None or account.account_id != self.account_id:
            return False
        try:
            data_key = crypto.unwrap_data_key(
                passphrase, account.kdf, account.account_id, account.wrapped_data_key
            )
        except crypto.WrongPassphraseError:
            return False
        return hmac.compare_digest(
            crypto.derive_key(data_key, PASSPHRASE_CHECK_PURPOSE), self.derive_key(PASSPHRASE_CHECK_PURPOSE)
        )

    def release(self) -> None:
        """Close the storage too (a local vault's file let go, its WAL checkpointed): the store is done.

        For a process that ends after its host has been told: the vault's files are as the
        next process finds them before that host sees the end.
        """
        self._log.storage.close()

    def _apply(self, records: list[SealedRecord]) -> None:
        """Decrypt `records`, pulled in log order, into the view; tell the log watch and the listeners."""
        with self._lock:
            changed, repeats = self._view.apply(records, self._log.open, self.progress)
            self._log.checked(repeats)
            if changed:
                for listener in self.listeners:
                    listener(changed)

    def _refresh_for(self, memory_id: str) -> None:
        """Refresh if stale, and also if the view has never seen this id (it may be seconds old)."""
        self.refresh_if_stale()
        if memory_id not in self._view.histories:
            self.refresh()

    def get(self, memory_id: str) -> Revision:
        """The newest readable revision of a memory (a tombstone if it is deleted)."""
        with self._lock:
            self._refresh_for(memory_id)
            return self._view.latest(memory_id)

    def unreadable_above(self, memory_id: str) -> list[int]:
        """Revisions of the memory newer than the one `get` serves that failed their integrity check."""
        with self._lock:
            history = self._view.histories.get(memory_id)
            return [] if history is None else history.unreadable_above()

    def next_revision(self, memory_id: str) -> int:
        """The number a change of the memory writes: one above the highest stored (see `History`)."""
        with self._lock:
            history = self._view.histories.get(memory_id)
            return 1 if history is None else history.latest_number() + 1

    @property
    def index(self) -> SearchIndex:
        """The search index of the live memories' latest revisions (search runs over it)."""
        return self._view.index

    def live(self, memory_id: str) -> Revision | None:
        """The latest revision of a live memory as the search index holds it, or None; no pull.

        What a search may return: the server checks a ranker's answer against it.
        """
        return self.index.memory(memory_id)

    def derive_key(self, purpose: str) -> bytes:
        """A key of its own for `purpose`, derived from the data key (`crypto.derive_key`)."""
        return self._log.derive_key(purpose)

    def history(self, memory_id: str) -> list[Revision]:
        """Every readable revision, oldest first."""
        with self._lock:
            self._refresh_for(memory_id)
            latest = self._view.latest(memory_id)
            return self._view.histories[latest.id].oldest_first()

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
            yield self._view.catalog

    def unreadable_ids(self) -> list[str]:
        """Ids of memories none of whose records can be read."""
        with self._lock:
            return sorted(self._view.unreadable)

    def older_revision_ids(self) -> list[str]:
        """Ids of memories served at an older revision: their newest one cannot be read."""
        with self._lock:
            return sorted(self._view.older)

    def all_revisions(self) -> Iterable[list[Revision]]:
        """Every memory's readable history, for export."""
        with self._lock:
            self.refresh()
            return [
                history.oldest_first()
                for _, history in sorted(self._view.histories.items())
                if history.revisions
            ]

    # Log integrity -----------------------------------------------------------

    @property
    def log_problem(self) -> str | None:
        """What is wrong with the log as a whole (it no longer extends this machine's checkpoint), or None."""
        return self._log.problem

    def accept_log(self) -> int:
        """Take the log as it is now for this machine's checkpoint (the user's call); how many records."""
        with self._lock:
            self.refresh()
            return self._log.accept()
