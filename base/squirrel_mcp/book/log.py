"""One account's log of sealed records, as this process reads and extends it.

`Log` is the memory store's side of storage: it pulls the records appended since
its last look (chained by this machine's log watch, squirrel_mcp.book.checkpoint),
opens each under the data key, and seals new revisions for appending, refusing
to while the log does not extend the checkpoint. Each record is one revision,
sealed with AES-256-GCM; its associated data binds account, memory id and
revision, so records cannot be swapped or replayed. It also holds where this
machine keeps its snapshots of the decrypted state (squirrel_mcp.book.snapshot).
"""

from __future__ import annotations

import threading
import time

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
from squirrel_mcp.core.models import MAX_REVISION, Revision, sharing_fields_set
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import SealedRecord, Storage


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
        self._cursor = 0
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
            if self.watch is not None:
                self.watch.pulled(records, read.chain)
            return records
        started = time.monotonic()
        records, self._cursor = self.storage.changes_since(self._cursor)
        self._pulled_at = started
        if self.watch is not None:
            self.watch.pulled(records)
        return records

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
                    revision.model_dump_json().encode(),
                    crypto.record_ad(self.account_id, revision.id, revision.revision),
                ),
            )
            for revision in revisions
        ]

    def append(self, revisions: list[Revision]) -> None:
        """Seal and append `revisions`, all or nothing (RevisionConflict when one exists already)."""
        self.storage.append(self.seal(revisions))

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
