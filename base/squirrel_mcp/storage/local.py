"""The local vault: one SQLite file holding the account and sealed records only.

WAL mode with a busy timeout lets two server processes (two agents at once) use
one vault: writes are serialized by SQLite, each write is one transaction, and
a (memory id, revision) pair is unique, so two corrections of the same memory
cannot both land as the same revision. `synchronous=FULL` makes an
acknowledged save survive a crash or power loss.

The file and its directory are created with owner-only permissions before
SQLite touches them; SQLite gives its -wal and -shm files the database file's
mode. An existing vault (or -wal, -shm file) that group or others may read or
write is set back to mode 0600 when it is opened, and the caller is told so it
can tell the user; one owned by another user is refused. A symbolic link at any
of the three paths is refused rather than followed: SQLite would create or open
whatever it points to, with the umask's mode.

The file's identity (device and inode) is recorded at the open: `moved` compares
the path's with it before each operation, so a vault deleted, or replaced by
another file (a backup restored, a sync tool, `mv`), is not served from the file
SQLite still holds. `data_version` and `tail` let the memory book notice a change
another connection made in place (records deleted with sqlite3, an older copy
restored into the file) at its next call.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from squirrel_mcp.core.files import create_private_file
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.keys.crypto import proves_key_change
from squirrel_mcp.storage import (
    Account,
    AccountExists,
    KeyChanged,
    KeyChangeForbidden,
    RevisionConflict,
    SealedRecord,
    StorageError,
    Tail,
    sqlite,
)
from squirrel_mcp.storage.wire import NewAccount

SCHEMA_VERSION = 1
# SQLite's names for a lock another connection holds (the busy timeout ran out waiting for it).
BUSY = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})
# The files SQLite keeps beside the vault in WAL mode: they hold pages of it.
SIDE_FILE_SUFFIXES = ("-wal", "-shm")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    ciphertext BLOB NOT NULL,
    UNIQUE (memory_id, revision)
);
"""


class LocalVault:
    """The SQLite backend of `squirrel_mcp.storage.Storage`."""

    # A pull is one indexed SELECT on a local file: cheap enough to do before every operation.
    pull_interval = 0.0

    def __init__(self, path: Path, *, create: bool) -> None:
        """Open the vault at `path`; with `create`, make the file if it is missing."""
        self.path = path
        #: Files whose mode this open set to 0600, with the mode they had (for the user to hear of).
        self.corrected_modes: list[tuple[Path, int]] = []
        # lexists: a dangling symlink "does not exist" for exists(), yet SQLite would create its target.
        if not os.path.lexists(path):
            if not create:
                raise StorageError(f"there is no vault at {path} (run `squirrel-mcp init`)")
            create_private_file(path)
        for file in (path, *(path.with_name(path.name + suffix) for suffix in SIDE_FILE_SUFFIXES)):
            self._make_private(file)
        # One connection shared by the server's worker threads, guarded by a lock.
        self._lock = threading.Lock()
        try:
            self._db = sqlite.connect(path)
            self._db.executescript(_SCHEMA)
            self._check_schema()
        except sqlite3.DatabaseError as error:
            raise StorageError(f"{path} is not a readable squirrel-mcp vault ({_reason(error)})") from error
        # The file SQLite opened a moment ago (a swap within that moment is the directory's
        # owner's to make, as in _make_private), looked for where it was even if the
        # process's working directory changes.
        self._where = path.absolute()
        self._identity = _identity(self._where)

    def _make_private(self, file: Path) -> None:
        """Refuse `file` if it is a symlink or not a regular file; set its mode to 0600 if it is looser.

        The checks use lstat and the chmod an O_NOFOLLOW descriptor, so no link is
        followed here. (A process that can write in the vault's directory could still
        swap a file in between this check and SQLite's open; the directory is created
        owner-only for that reason.)
        """
        try:
            status = file.lstat()
        except FileNotFoundError:
            return
        if stat.S_ISLNK(status.st_mode):
            raise StorageError(
                f"{file} is a symbolic link: the vault and its -wal and -shm files must be regular files "
                "(set SQUIRREL_VAULT to the real path)"
            )
        if not stat.S_ISREG(status.st_mode):
            raise StorageError(f"{file} is not a regular file, so it cannot be a squirrel-mcp vault")
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o077 == 0:
            return
        if status.st_uid != os.geteuid():
            raise StorageError(
                f"{file} belongs to another user and others may read it (mode {mode:04o}); refusing to use it"
            )
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        self.corrected_modes.append((file, mode))

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite's errors as StorageError: a damaged or unreadable file is the user's to fix, not a bug.

        SQLite may only notice damage when a query reaches the bad page, long after the
        file opened, so every method goes through this. Its messages name no data.
        """
        try:
            yield
        except sqlite3.ProgrammingError:
            # Misuse of the connection (closed, wrong thread): our bug, so loudly.
            raise
        except sqlite3.DatabaseError as error:
            if getattr(error, "sqlite_errorname", None) in BUSY:
                # Another process kept the write lock past the busy timeout: nothing is damaged.
                problem = f"is busy: another process held its write lock for {sqlite.BUSY_TIMEOUT_S} s"
            else:
                problem = "is damaged or unreadable"
            raise StorageError(f"the vault at {self.path} {problem} ({_reason(error)})") from error

    def _check_schema(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        elif row[0] != str(SCHEMA_VERSION):
            raise StorageError(
                f"{self.path} has vault schema {row[0]}; this squirrel-mcp reads schema {SCHEMA_VERSION}"
            )

    def load_account(self) -> Account | None:
        """The stored account, or None."""
        with self._lock, self._guard():
            row = self._db.execute("SELECT value FROM meta WHERE key = 'account'").fetchone()
        return None if row is None else self._account(row[0])

    def _account(self, value: str) -> Account:
        try:
            return NewAccount.model_validate_json(value).account()
        except ValidationError as error:
            raise StorageError(f"the account record in {self.path} is damaged") from error

    def create_account(self, account: Account) -> None:
        """Store the account; StorageError if the vault already has one."""
        value = _record(account)
        with self._lock, self._guard():
            try:
                self._db.execute("INSERT INTO meta (key, value) VALUES ('account', ?)", (value,))
            except sqlite3.IntegrityError as error:
                raise AccountExists(f"{self.path} already holds an account") from error

    def replace_key(self, expected: Account, new: Account, proof: bytes) -> None:
        """Store `new`'s key if the vault still holds `expected`'s and `proof` matches its verifier.

        KeyChangeForbidden if the proof does not match (or the account has no
        verifier), KeyChanged if the key is not `expected`'s: nothing changes
        either way. (Whoever can write the file could rewrite the account record
        directly; the check is here so that a key change means the same on every
        backend.) The read and the write share one write transaction (BEGIN
        IMMEDIATE), so no other process can change the key in between; a kill at
        any moment leaves the old account row or the new one, never both or
        neither.
        """
        if new.account_id != expected.account_id:
            raise ValueError("a key change cannot change the account id")
        with self._lock, self._guard(), self._writing():
            stored = self._stored_account()
            verifier = None if stored is None else stored.key_change_verifier
            if verifier is None or not proves_key_change(verifier, proof):
                raise KeyChangeForbidden(
                    f"the key change does not prove it holds the data key of the vault at {self.path} "
                    "(a proof that matches its key-change verifier); nothing was changed"
                )
            if stored is None or (stored.kdf, stored.wrapped_data_key) != (
                expected.kdf,
                expected.wrapped_data_key,
            ):
                raise KeyChanged(
                    f"the key of the vault at {self.path} was changed by another process since it was "
                    "read; nothing was changed"
                )
            changed = Account(stored.account_id, new.kdf, new.wrapped_data_key, verifier)
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'account'", (_record(changed),))

    def set_key_change_verifier(self, verifier: bytes) -> bytes:
        """Give the account `verifier` if it has none; the verifier it holds afterwards.

        StorageError if the vault holds no account.
        """
        with self._lock, self._guard(), self._writing():
            stored = self._stored_account()
            if stored is None:
                raise StorageError(f"the vault at {self.path} holds no account")
            if stored.key_change_verifier is not None:
                return stored.key_change_verifier
            changed = Account(stored.account_id, stored.kdf, stored.wrapped_data_key, verifier)
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'account'", (_record(changed),))
        return verifier

    def _stored_account(self) -> Account | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'account'").fetchone()
        return None if row is None else self._account(row[0])

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction (BEGIN IMMEDIATE), committed if the block returns, else rolled back."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def append(self, records: list[SealedRecord]) -> None:
        """Store all records in one transaction; RevisionConflict stores none."""
        with self._lock, self._guard():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for record in records:
                    self._db.execute(
                        "INSERT INTO records (memory_id, revision, ciphertext) VALUES (?, ?, ?)",
                        (record.memory_id, record.revision, record.ciphertext),
                    )
            except sqlite3.IntegrityError as error:
                self._db.execute("ROLLBACK")
                raise RevisionConflict(record.memory_id, record.revision) from error
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def changes_since(self, cursor: int) -> tuple[list[SealedRecord], int]:
        """Records with a sequence number above `cursor`, and the highest one seen."""
        with self._lock, self._guard():
            rows = self._db.execute(
                "SELECT seq, memory_id, revision, ciphertext FROM records WHERE seq > ? ORDER BY seq",
                (cursor,),
            ).fetchall()
        records = [SealedRecord(memory_id, revision, bytes(blob)) for _, memory_id, revision, blob in rows]
        return records, (rows[-1][0] if rows else cursor)

    def close(self) -> None:
        """Close the connection (checkpointing the WAL when last out)."""
        with self._lock, self._guard():
            self._db.close()

    # What other programs did to the file meanwhile --------------------------------------

    def moved(self) -> Literal["gone", "replaced"] | None:
        """What became of the file at the path: "gone", "replaced" (another file is there), or None.

        One lstat: cheap enough before every operation. A link put at the path counts
        as another file (reopening it refuses the link).
        """
        identity = _identity(self._where)
        if identity is None:
            return "gone"
        return None if identity == self._identity else "replaced"

    def reopen(self) -> LocalVault:
        """The vault at the same path, opened afresh as a start opens it (its modes set, and said so)."""
        vault = LocalVault(self.path, create=False)
        tell_corrected_modes(vault)
        return vault

    def data_version(self) -> int:
        """SQLite's `data_version`: it changes whenever another connection has committed to the file."""
        with self._lock, self._guard():
            return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def tail(self, cursor: int) -> Tail:
        """How many records have a sequence number up to `cursor`, and the one numbered `cursor`.

        In one read transaction. The total's `count(*)` walks the smallest index (the
        (memory id, revision) pairs), not the records' pages; the records past `cursor`
        (appended since the caller's last pull: few) are counted off it, and the one
        at `cursor` is one lookup.
        """
        with self._lock, self._guard():
            self._db.execute("BEGIN")
            try:
                (total,) = self._db.execute("SELECT count(*) FROM records").fetchone()
                after_cursor = "SELECT count(*) FROM records WHERE seq > ?"
                (after,) = self._db.execute(after_cursor, (cursor,)).fetchone()
                row = self._db.execute(
                    "SELECT memory_id, revision, ciphertext FROM records WHERE seq = ?", (cursor,)
                ).fetchone()
            finally:
                self._db.execute("COMMIT")
        last = None if row is None else SealedRecord(row[0], row[1], bytes(row[2]))
        return Tail(total - after, last)


def tell_corrected_modes(vault: LocalVault) -> None:
    """One line for each file of `vault` whose mode its open set back to 0600."""
    for path, mode in vault.corrected_modes:
        log_line(
            f"{path} could be read or written by other users (mode {mode:04o}); its mode is now 0600. "
            "Whoever read it holds sealed records that only your passphrase protects"
        )


def _identity(path: Path) -> tuple[int, int] | None:
    """The device and inode of the file at `path` (not following a link), or None when there is none."""
    try:
        status = path.lstat()
    except OSError:
        # Missing, or its directory no longer reachable: either way no vault is there for this process.
        return None
    return status.st_dev, status.st_ino


def _record(account: Account) -> str:
    """The account's row in `meta`: its NewAccount, without the verifier of an account made before them."""
    return NewAccount.of(account).model_dump_json(exclude_none=True)


def _reason(error: sqlite3.DatabaseError) -> str:
    """SQLite's reason for `error`, or a fixed one when the error does not come from SQLite itself.

    SQLite's own messages name tables, columns and constraints, never stored values.
    Python's sqlite3 module raises some errors of its own (no SQLite error name), and
    those can quote a value: "Could not decode to UTF-8 column 'memory_id' with text
    '<the bytes>'", where a damaged or crafted vault puts ciphertext (or anything) in
    a text column. Those are summarised without the value.
    """
    if getattr(error, "sqlite_errorname", None) is None:
        return "a stored value has the wrong type or is not valid UTF-8 text"
    return str(error)
