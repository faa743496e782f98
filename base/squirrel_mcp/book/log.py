"""One account's log of sealed records, as this process reads and extends it.

`Log` is the memory store's side of storage: it pulls the records appended since
its last look (chained by this machine's log watch, squirrel_mcp.book.checkpoint),
opens each under the data key, and seals new revisions for appending, refusing
to while the log does not extend the checkpoint. Each record is one revision,
sealed with AES-256-GCM; its associated data binds account, memory id and
revision, so records cannot be swapped or replayed. It also holds where this
machine keeps its snapshots of the decrypted state (squirrel_mcp.book.snapshot).

A log in a file of this machine (the local vault) can be changed by other
programs while this process holds it: `look` tells, before each operation,
whether the file was deleted or replaced at its path, or its records edited in
place (removed, an older copy restored into it); the store then opens the log
again as a start does (`reopened`), so the start's checks run on it.
"""

from __future__ import annotations

import threading
import time
from typing import Literal

from pydantic import ValidationError

from squirrel_mcp.book.checkpoint import (
    CheckpointDamaged,
    FirstRead,
    LogChain,
    LogWatch,
    Place,
    Repeat,
    sealed_checkpoint,
)
from squirrel_mcp.book.errors import LogDivergedError
from squirrel_mcp.book.snapshot import Snapshots
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.core.models import MAX_REVISION, Revision, sharing_fields_set
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import FileStorage, SealedRecord, Storage, StorageError

# What `Log.look` finds another program did to the log's file since this process last looked.
Change = Literal["gone", "replaced", "edited"]


class FirstPull:
    """A store's first pull, made in a thread of its own while the caller derives the data key.

    Neither needs the key: this machine's checkpoint is read as sealed (it must be read
    before the pull begins, see `LogWatch.opened`), then every record, then their hash
    chain; the key derivation (scrypt, about half a second, in C without the
    interpreter's lock) runs meanwhile. `Log.pull` then takes what it read as its first
    pull. An error of the storage is raised there, where the pull would have raised it.
    """

    def __init__(self, storage: Storage, account_id: str, checkpoints: Place | None) -> None:
        """Start reading (`join` waits for the end)."""
        self._storage = storage
        self._account_id = account_id
        self._path = None if checkpoints is None else checkpoints.file(account_id)
        self.started = time.monotonic()
        self._read: tuple[FirstRead, list[SealedRecord], int] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="squirrel-mcp-first-pull", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            sealed: bytes | CheckpointDamaged | None = None
            if self._path is not None:
                try:
                    sealed = sealed_checkpoint(self._path)
                except CheckpointDamaged as damaged:
                    sealed = damaged
            records, cursor = self._storage.changes_since(0)
            chain = LogChain(self._account_id)
            chain.extend(records)
            self._read = (FirstRead(sealed, chain), records, cursor)
        except BaseException as error:  # raised again by `result`, in the store's thread
            self._error = error

    def join(self) -> None:
        """Wait until the reading is over: then the storage is again used by one thread at a time."""
        self._thread.join()

    def result(self) -> tuple[FirstRead, list[SealedRecord], int]:
        """What it read (checkpoint and chain, records, cursor); raises its error if it failed."""
        self.join()
        if self._error is not None:
            raise self._error
        assert self._read is not None
        return self._read


class Log:
    """The sealed records of one account: pulled, opened, sealed and appended under its data key."""

    def __init__(
        self,
        storage: Storage,
        account_id: str,
        data_key: bytes,
        checkpoints: Place | None,
        first: FirstPull | None = None,
    ) -> None:
        """The log in `storage`; with `checkpoints`, watched against this machine's checkpoint there.

        `first`: the first pull, read already (or being read) while the key was derived.
        """
        self.storage = storage
        self.account_id = account_id
        self._key = data_key
        self._checkpoints = checkpoints
        self._cursor = 0
        # How many records the pulls returned, and the last of them: what the file must still hold.
        self._count = 0
        self._last: SealedRecord | None = None
        # The storage as a file other programs may change (None: a sync server's log).
        self._file = storage if isinstance(storage, FileStorage) else None
        # The file's data version when its tail was last found as pulled (None: not looked yet).
        self._version: int | None = None
        self._pulled_at: float | None = None
        self._first = first
        read = None if first is None else first.result()[0]
        self.watch = None if checkpoints is None else LogWatch.of(checkpoints, account_id, data_key, read)
        self.snapshots = None if checkpoints is None else Snapshots.of(checkpoints, account_id, data_key)

    def stale(self) -> bool:
        """Whether the last pull is as old as the storage's `pull_interval` (or there was none)."""
        pulled = self._pulled_at
        return pulled is None or time.monotonic() - pulled >= self.storage.pull_interval

    def pull(self) -> list[SealedRecord]:
        """The records appended since the last pull, chained by the log watch (then `checked`)."""
        first, self._first = self._first, None
        if first is not None:
            read, records, self._cursor = first.result()
            self._pulled_at = first.started
            self._counted(records)
            if self.watch is not None:
                self.watch.pulled(records, read.chain)
            return records
        started = time.monotonic()
        records, self._cursor = self.storage.changes_since(self._cursor)
        self._pulled_at = started
        self._counted(records)
        if self.watch is not None:
            self.watch.pulled(records)
        return records

    def _counted(self, records: list[SealedRecord]) -> None:
        self._count += len(records)
        if records:
            self._last = records[-1]

    def look(self) -> Change | None:
        """What another program did to the log's file since the last look, or None (also for a sync server).

        "gone": nothing is at the path any more; "replaced": another file is (a backup
        restored, a sync tool, `mv`); "edited": the file no longer holds the records
        pulled from it. Only when another connection committed to the file since the
        last look (its data version) is its tail read: as many records up to the
        cursor as were pulled, the last of them the one pulled last. So a record
        removed anywhere, an older copy restored into the file, and the last record
        changed are found; a record changed in place before the last one is found
        only by the next open's whole chain. Costs an lstat and a pragma, plus two
        index reads when another process wrote.
        """
        file = self._file
        if file is None:
            return None
        moved = file.moved()
        if moved is not None:
            return moved
        version = file.data_version()
        if version == self._version:
            return None
        tail = file.tail(self._cursor)
        self._version = version
        return None if (tail.count, tail.last) == (self._count, self._last) else "edited"

    def reopened(self, change: Change) -> Log:
        """A log opened afresh on the file now at the path (`change`: what `look` found), to pull from 0.

        StorageError, changing nothing, when the vault is gone or holds another account.
        """
        assert self._file is not None
        path = self._file.path
        if change == "gone":
            raise StorageError(
                f"the vault at {path} is gone: it was deleted or moved away while squirrel-mcp had it "
                f"open; nothing was read or written. Put it back at {path}"
            )
        storage = self._file.reopen() if change == "replaced" else self._file
        try:
            account = storage.load_account()
            if account is None or account.account_id != self.account_id:
                raise StorageError(
                    f"the vault at {path} was replaced by one of another account (or of none) while "
                    "squirrel-mcp had it open; nothing was read or written. Put the vault back, or "
                    "let squirrel-mcp open this one, with its passphrase, at its next start"
                )
        except BaseException:
            if storage is not self.storage:
                storage.close()
            raise
        what = "replaced by another file" if change == "replaced" else "changed by another program"
        log_line(
            f"the vault at {path} was {what} while squirrel-mcp had it open: it is read again and checked"
        )
        return Log(storage, self.account_id, self._key, self._checkpoints)

    def checked(self, repeats: list[Repeat]) -> None:
        """The last pull was applied, `repeats` naming its records for a (memory, revision) seen before."""
        if self.watch is not None:
            self.watch.checked(repeats)

    def open(self, record: SealedRecord) -> Revision | None:
        """The revision a record seals; None when it fails its integrity check or its fields' rules.

        A record numbered past MAX_REVISION is never opened: no client writes one, so it
        was damaged or planted (the view does not count it for the next revision either).
        """
        if not 1 <= record.revision <= MAX_REVISION:
            return None
        ad = crypto.record_ad(self.account_id, record.memory_id, record.revision)
        try:
            plaintext = crypto.open_sealed(self._key, record.ciphertext, ad)
            revision = sharing_fields_set(Revision.model_validate_json(plaintext))
        except (crypto.DecryptionError, ValidationError):
            return None
        # The associated data already binds these; a mismatch means a bug, not an attack.
        if revision.id != record.memory_id or revision.revision != record.revision:
            return None
        return revision

    def seal(self, revisions: list[Revision]) -> list[SealedRecord]:
        """The revisions sealed for storage; LogDivergedError while the log does not extend the checkpoint."""
        refusal = None if self.watch is None else self.watch.write_refusal()
        if refusal is not None:
            raise LogDivergedError(refusal)
        return [
            SealedRecord(
                revision.id,
                revision.revision,
                crypto.seal(
                    self._key,
                    sealed_json(revision),
                    crypto.record_ad(self.account_id, revision.id, revision.revision),
                ),
            )
            for revision in revisions
        ]

    def append(self, revisions: list[Revision]) -> None:
        """Seal and append `revisions`, all or nothing (RevisionConflict when one exists already).

        StorageError when the file was deleted or replaced at its path while they were
        written: they went into the file that was there, not into the one there now, so
        the write is not reported done. (Once it is, a later change of the file is a
        change like any other, found at the next call.)
        """
        self.storage.append(self.seal(revisions))
        if self._file is not None and self._file.moved() is not None:
            path = self._file.path
            raise StorageError(
                f"the vault at {path} was deleted or replaced by another file while this change was "
                f"written: it went into the file that was there, not into the vault at {path} now; "
                "nothing was saved there"
            )

    def derive_key(self, purpose: str) -> bytes:
        """A key of its own for `purpose`, derived from the data key (`crypto.derive_key`)."""
        return crypto.derive_key(self._key, purpose)

    @property
    def problem(self) -> str | None:
        """What is wrong with the log as a whole (it no longer extends this machine's checkpoint), or None."""
        return None if self.watch is None else self.watch.problem

    def accept(self) -> int:
        """Take the log as it is now for this machine's checkpoint; how many records it holds."""
        return 0 if self.watch is None else self.watch.accept()


def sealed_json(revision: Revision) -> bytes:
    """The plaintext a record seals: the revision as JSON, without `project` when it has none.

    So a memory with no project is sealed exactly as before projects were, and a machine
    running an older version still reads it.
    """
    return revision.model_dump_json(exclude={"project"} if revision.project is None else None).encode()
