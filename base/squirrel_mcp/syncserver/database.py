"""The sync server's store: key slots, their accounts and their sealed records.

One class, two databases, chosen by URL: `sqlite:///absolute/path.sqlite3` for one
machine, `postgresql://user@host/dbname` (psycopg 3, the `postgres` extra) when it
outgrows one. The SQL is the same on both but for two column types and the row
lock, which the `_Dialect` holds.

Tables:
    slots    one row per account slot: once `squirrel-mcp init` has run, the
             account (id, scrypt salt and parameters, wrapped data key), and the
             last sequence number given to one of its records. Its key_hash is
             the hash of the key that made the slot; since schema 2 keys are
             looked up in api_keys only, so that column is kept but never read.
    api_keys one row per API key ever issued: the key's SHA-256, the slot it
             opens (several keys may open one slot), its display prefix, when it
             was made, last used and revoked. A revoked row is kept, so its id
             is never given to another key and `issue-key --for` can still
             name it.
    records  one row per sealed memory revision: (slot, seq) is the cursor order,
             (slot, memory id, revision) is unique, as in the local vault.

Sequence numbers are per slot and given out under the slot's row lock (SQLite:
the write lock of BEGIN IMMEDIATE; PostgreSQL: SELECT ... FOR UPDATE), so they
increase in commit order with no gaps: a reader that has seen seq N and asks
for what comes after N can never miss a record committed later with a lower
number, which a shared auto-increment would allow on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from squirrel_mcp.core.files import create_private_file
from squirrel_mcp.core.models import now_iso
from squirrel_mcp.keys.crypto import KdfParams
from squirrel_mcp.storage import Account, KeyChanged, RevisionConflict, SealedRecord, sqlite

if TYPE_CHECKING:
    import psycopg

    # Rows are tuples whose items are whatever the columns hold.
    _Connection = sqlite3.Connection | psycopg.Connection[tuple[Any, ...]]
    _DbCursor = sqlite3.Cursor | psycopg.Cursor[tuple[Any, ...]]

# Schema 1 had one key per slot, its hash in slots.key_hash; schema 2 adds api_keys.
SCHEMA_VERSION = 2
# A key's last use is written at most this often per key and server process: a
# busy key would otherwise turn every request into a database write.
LAST_USED_INTERVAL_S = 60.0
# Idle connections kept for reuse; more are opened when more requests run at once.
POOL_SIZE = 8


class DatabaseError(Exception):
    """The database URL is unusable, or the database is not a sync server's."""


class DatabaseUnavailable(Exception):
    """The database cannot be reached or answered with an operational error."""


class NoAccount(Exception):
    """The slot has no account yet."""


class AccountExists(Exception):
    """The slot already holds an account."""


class UnknownKey(Exception):
    """No key has this id (the exception's one argument)."""


@dataclass(frozen=True)
class KeyInfo:
    """What `list-keys` shows of a key: never the key nor its hash."""

    key_id: int
    prefix: str | None  # None for keys issued before prefixes were kept
    created_at: str
    last_used_at: str | None
    revoked_at: str | None
    slot: int
    account_id: str | None  # None until `squirrel-mcp init` has made the account


@dataclass(frozen=True)
class StoredAccount:
    """An account as the server holds it: what the client stored, and when."""

    account: Account
    created_at: str


@dataclass(frozen=True)
class StoredRecord:
    """A sealed memory revision with its place in the slot's log."""

    seq: int
    memory_id: str
    revision: int
    ciphertext: bytes
    stored_at: str


@dataclass(frozen=True)
class ChangesPage:
    """Records after a cursor, the new cursor, and whether more remain."""

    records: list[StoredRecord]
    cursor: int
    more: bool


@dataclass(frozen=True)
class _Dialect:
    name: str
    blob: str
    slot_id: str
    slot_for_append: str  # reads the slot row, locked until the append commits
    schema_row: str  # reads the schema version, locked if need be so that two starting servers migrate once


_SLOT_ROW = "SELECT account_id, last_seq FROM slots WHERE slot_id = ?"
_SCHEMA_ROW = "SELECT value FROM sync_meta WHERE key = 'schema'"
# SQLite locks the whole database at BEGIN IMMEDIATE, so the row needs no lock of its own.
_SQLITE = _Dialect("sqlite", "BLOB", "INTEGER PRIMARY KEY", _SLOT_ROW, _SCHEMA_ROW)
_POSTGRES = _Dialect(
    "postgresql",
    "BYTEA",
    "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    _SLOT_ROW + " FOR UPDATE",
    _SCHEMA_ROW + " FOR UPDATE",
)


def _schema(d: _Dialect) -> list[str]:
    return [
        "CREATE TABLE IF NOT EXISTS sync_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        f"""CREATE TABLE IF NOT EXISTS slots (
            slot_id {d.slot_id},
            key_hash {d.blob} NOT NULL UNIQUE,
            created_at TEXT NOT NULL,
            account_id TEXT,
            kdf_salt {d.blob},
            kdf_n INTEGER,
            kdf_r INTEGER,
            kdf_p INTEGER,
            wrapped_data_key {d.blob},
            account_created_at TEXT,
            last_seq BIGINT NOT NULL DEFAULT 0
        )""",
        f"""CREATE TABLE IF NOT EXISTS records (
            slot_id BIGINT NOT NULL REFERENCES slots (slot_id),
            seq BIGINT NOT NULL,
            memory_id TEXT NOT NULL,
            revision INTEGER NOT NULL,
            ciphertext {d.blob} NOT NULL,
            stored_at TEXT NOT NULL,
            PRIMARY KEY (slot_id, seq),
            UNIQUE (slot_id, memory_id, revision)
        )""",
        f"""CREATE TABLE IF NOT EXISTS api_keys (
            key_id {d.slot_id},
            slot_id BIGINT NOT NULL REFERENCES slots (slot_id),
            key_hash {d.blob} NOT NULL UNIQUE,
            key_prefix TEXT,
            created_at TEXT NOT NULL,
            last_used_at TEXT,
            revoked_at TEXT
        )""",
    ]


def sqlite_path(url: str) -> Path | None:
    """The file of a `sqlite:///absolute/path` URL; None for another scheme."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        return None
    path = unquote(parts.path)
    if parts.netloc or not path.startswith("/") or parts.query or parts.fragment:
        raise DatabaseError("a SQLite database URL is sqlite:///ABSOLUTE/PATH (three slashes, then the path)")
    return Path(path)


class Database:
    """The sync server's tables on SQLite or PostgreSQL; safe to use from many threads."""

    def __init__(self, url: str) -> None:
        """Open (creating the tables if needed) the database named by `url`."""
        self._sqlite_path = sqlite_path(url)
        self._url = url
        if self._sqlite_path is not None:
            self._dialect = _SQLITE
            self._errors = _sqlite_errors()
            create_private_file(self._sqlite_path)
        elif urlsplit(url).scheme in ("postgresql", "postgres"):
            self._dialect = _POSTGRES
            self._errors = _postgres_errors()
        else:
            raise DatabaseError("the database URL must start with sqlite:/// or postgresql://")
        self._idle: list[_Connection] = []
        self._pool_lock = threading.Lock()
        # key id -> time.monotonic() of the last write of its last use by this process.
        self._last_use_written: dict[int, float] = {}
        self._use_lock = threading.Lock()
        self._create_schema()

    @property
    def dialect(self) -> str:
        """The database kind: sqlite or postgresql."""
        return self._dialect.name

    # Connections ----------------------------------------------------------

    def _connect(self) -> _Connection:
        try:
            if self._sqlite_path is not None:
                connection = sqlite.connect(self._sqlite_path)
                connection.execute("PRAGMA foreign_keys = ON")
                return connection
            import psycopg

            return psycopg.connect(self._url, connect_timeout=10)
        except self._errors.operational as error:
            # The URL may hold a password: say what failed, not where.
            raise DatabaseUnavailable(f"cannot connect to the {self._dialect.name} database") from error

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[_Cursor]:
        """One transaction on a pooled connection; rolled back if the block raises."""
        with self._pool_lock:
            connection = self._idle.pop() if self._idle else None
        if connection is not None and self._sqlite_path is None:
            # A pooled PostgreSQL connection may have been closed by the server
            # (a restart, an idle timeout) since its last use: try it before
            # trusting a write to it, and start afresh if it is gone.
            try:
                connection.execute("SELECT 1")
            except self._errors.operational:
                _close_quietly(connection)
                connection = None
        if connection is None:
            connection = self._connect()
        # Only a connection whose transaction ended cleanly goes back to the pool.
        healthy = False
        try:
            if self._sqlite_path is not None:
                # IMMEDIATE takes the write lock up front, so the slot's last_seq
                # cannot change between reading and updating it.
                connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _Cursor(connection, self._dialect)
            except self._errors.operational:
                raise
            except BaseException:
                connection.rollback()
                healthy = True
                raise
            connection.commit()
            healthy = True
        except self._errors.operational as error:
            healthy = False
            raise DatabaseUnavailable(f"the {self._dialect.name} database failed") from error
        finally:
            if healthy:
                with self._pool_lock:
                    if len(self._idle) < POOL_SIZE:
                        self._idle.append(connection)
                        connection = None
            if connection is not None:
                _close_quietly(connection)

    def _create_schema(self) -> None:
        with self._transaction(write=True) as cursor:
            for statement in _schema(self._dialect):
                cursor.execute(statement)
            row = cursor.execute(self._dialect.schema_row).fetchone()
            if row is None or row[0] == "1":
                # Schema 1 (or a new database, whose slots are empty): every slot's
                # one key becomes a row of api_keys, without a prefix, since only
                # its hash was ever stored. Done once, with the version change, in
                # one transaction: a later start must not bring back a revoked key.
                cursor.execute(
                    "INSERT INTO api_keys (slot_id, key_hash, created_at) "
                    "SELECT slot_id, key_hash, created_at FROM slots ORDER BY slot_id"
                )
                cursor.execute(
                    "INSERT INTO sync_meta (key, value) VALUES ('schema', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(SCHEMA_VERSION),),
                )
            elif row[0] != str(SCHEMA_VERSION):
                raise DatabaseError(
                    f"the database has sync schema {row[0]}; this server reads schema {SCHEMA_VERSION}"
                )

    def close(self) -> None:
        """Close every idle connection."""
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            _close_quietly(connection)

    # Operations -----------------------------------------------------------

    def ping(self) -> None:
        """Raise DatabaseUnavailable unless the database answers (a read of its schema version)."""
        try:
            with self._transaction(write=False) as cursor:
                # A table, not "SELECT 1": SQLite answers that without touching the file.
                cursor.execute("SELECT value FROM sync_meta WHERE key = 'schema'").fetchone()
        except self._errors.any as error:
            # Whatever the database says, for a health check it is one answer: not well.
            raise DatabaseUnavailable(f"the {self._dialect.name} database failed its check") from error

    def add_slot(self, key_hash: bytes, prefix: str) -> int:
        """A new empty slot and the key (hash, display prefix) that opens it; the key's id."""
        created_at = now_iso("microseconds")
        with self._transaction(write=True) as cursor:
            (slot,) = cursor.one(
                "INSERT INTO slots (key_hash, created_at) VALUES (?, ?) RETURNING slot_id",
                (key_hash, created_at),
            )
            return self._insert_key(cursor, int(slot), key_hash, prefix, created_at)

    def add_key(self, like_key_id: int, key_hash: bytes, prefix: str) -> int:
        """A new key opening the same slot as key `like_key_id` (revoked or not); its id.

        UnknownKey if no key has that id.
        """
        with self._transaction(write=True) as cursor:
            row = cursor.execute("SELECT slot_id FROM api_keys WHERE key_id = ?", (like_key_id,)).fetchone()
            if row is None:
                raise UnknownKey(like_key_id)
            return self._insert_key(cursor, int(row[0]), key_hash, prefix, now_iso("microseconds"))

    @staticmethod
    def _insert_key(cursor: _Cursor, slot: int, key_hash: bytes, prefix: str, created_at: str) -> int:
        (key_id,) = cursor.one(
            "INSERT INTO api_keys (slot_id, key_hash, key_prefix, created_at) VALUES (?, ?, ?, ?) "
            "RETURNING key_id",
            (slot, key_hash, prefix, created_at),
        )
        return int(key_id)

    def revoke_key(self, key_id: int) -> bool:
        """Revoke a key: it opens nothing from now on; its slot and records stay.

        False if it was revoked already; UnknownKey if no key has that id.
        """
        with self._transaction(write=True) as cursor:
            row = cursor.execute("SELECT revoked_at FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
            if row is None:
                raise UnknownKey(key_id)
            if row[0] is not None:
                return False
            cursor.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ?", (now_iso("microseconds"), key_id)
            )
        return True

    def list_keys(self) -> list[KeyInfo]:
        """Every key ever issued, revoked ones included, oldest first."""
        with self._transaction(write=False) as cursor:
            rows = cursor.execute(
                "SELECT k.key_id, k.key_prefix, k.created_at, k.last_used_at, k.revoked_at, "
                "k.slot_id, s.account_id FROM api_keys k JOIN slots s ON s.slot_id = k.slot_id "
                "ORDER BY k.key_id"
            ).fetchall()
        return [KeyInfo(int(row[0]), row[1], row[2], row[3], row[4], int(row[5]), row[6]) for row in rows]

    def slot_for_key(self, key_hash: bytes) -> int | None:
        """The slot a key hash opens, or None (unknown or revoked); notes the key's use.

        The use is written only if this process has not written it for that key
        in the last LAST_USED_INTERVAL_S seconds, so a key's "last used" is at
        most about a minute behind, and a busy key costs one write a minute
        rather than one per request.
        """
        with self._transaction(write=False) as cursor:
            row = cursor.execute(
                "SELECT key_id, slot_id FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
                (key_hash,),
            ).fetchone()
        if row is None:
            return None
        key_id, slot = int(row[0]), int(row[1])
        now = time.monotonic()
        with self._use_lock:
            due = now - self._last_use_written.get(key_id, float("-inf")) >= LAST_USED_INTERVAL_S
            if due:
                self._last_use_written[key_id] = now
        if due:
            with self._transaction(write=True) as cursor:
                cursor.execute(
                    "UPDATE api_keys SET last_used_at = ? WHERE key_id = ?", (now_iso("microseconds"), key_id)
                )
        return slot

    def get_account(self, slot: int) -> StoredAccount:
        """The slot's account; NoAccount if it has none."""
        with self._transaction(write=False) as cursor:
            row = cursor.execute(
                "SELECT account_id, kdf_salt, kdf_n, kdf_r, kdf_p, wrapped_data_key, account_created_at "
                "FROM slots WHERE slot_id = ?",
                (slot,),
            ).fetchone()
        if row is None or row[0] is None:
            raise NoAccount
        kdf = KdfParams(salt=bytes(row[1]), n=row[2], r=row[3], p=row[4])
        return StoredAccount(Account(row[0], kdf, bytes(row[5])), row[6])

    def create_account(self, slot: int, account: Account) -> StoredAccount:
        """Store the slot's account; AccountExists if it has one (nothing changes then)."""
        created_at = now_iso("microseconds")
        with self._transaction(write=True) as cursor:
            updated = cursor.execute(
                "UPDATE slots SET account_id = ?, kdf_salt = ?, kdf_n = ?, kdf_r = ?, kdf_p = ?, "
                "wrapped_data_key = ?, account_created_at = ? WHERE slot_id = ? AND account_id IS NULL",
                (
                    account.account_id,
                    account.kdf.salt,
                    account.kdf.n,
                    account.kdf.r,
                    account.kdf.p,
                    account.wrapped_data_key,
                    created_at,
                    slot,
                ),
            ).rowcount
        if updated != 1:
            raise AccountExists
        return StoredAccount(account, created_at)

    def replace_key(
        self, slot: int, expected: tuple[KdfParams, bytes], new: tuple[KdfParams, bytes]
    ) -> StoredAccount:
        """Store `new` (KDF parameters, wrapped data key) as the slot's key if it still holds `expected`.

        One conditional UPDATE, a compare-and-swap on both databases (PostgreSQL
        re-checks its condition on a row another transaction changed meanwhile).
        NoAccount if the slot has no account; KeyChanged, nothing changed, if its
        key is not `expected`.
        """
        (old, old_wrapped), (kdf, wrapped) = expected, new
        with self._transaction(write=True) as cursor:
            updated = cursor.execute(
                "UPDATE slots SET kdf_salt = ?, kdf_n = ?, kdf_r = ?, kdf_p = ?, wrapped_data_key = ? "
                "WHERE slot_id = ? AND account_id IS NOT NULL AND kdf_salt = ? AND kdf_n = ? "
                "AND kdf_r = ? AND kdf_p = ? AND wrapped_data_key = ?",
                (kdf.salt, kdf.n, kdf.r, kdf.p, wrapped, slot, old.salt, old.n, old.r, old.p, old_wrapped),
            ).rowcount
            row = cursor.execute(
                "SELECT account_id, account_created_at FROM slots WHERE slot_id = ?", (slot,)
            ).fetchone()
            if row is None or row[0] is None:
                raise NoAccount
            if updated != 1:
                raise KeyChanged("the account's key is no longer the expected one")
        return StoredAccount(Account(row[0], kdf, wrapped), row[1])

    def append(self, slot: int, records: list[SealedRecord]) -> list[StoredRecord]:
        """Store every record or none; RevisionConflict names the first that is not its memory's next one.

        A memory's next revision is one more than its highest stored one (1 for
        a new memory), and a batch may carry several consecutive revisions of
        one memory. Nothing else is taken: a revision far ahead (say 2^31 - 1)
        would leave the memory with a revision no client can ever follow, and
        so unreadable for good.
        """
        stored_at = now_iso("microseconds")
        stored: list[StoredRecord] = []
        with self._transaction(write=True) as cursor:
            row = cursor.execute(self._dialect.slot_for_append, (slot,)).fetchone()
            if row is None or row[0] is None:
                raise NoAccount
            seq = int(row[1])
            # The slot row's lock is held, so no other append of this slot can
            # store a revision between this read and the inserts.
            last: dict[str, int] = {}
            for record in records:
                if record.memory_id not in last:
                    (highest,) = cursor.one(
                        "SELECT MAX(revision) FROM records WHERE slot_id = ? AND memory_id = ?",
                        (slot, record.memory_id),
                    )
                    last[record.memory_id] = 0 if highest is None else int(highest)
                expected = last[record.memory_id] + 1
                if record.revision != expected:
                    raise RevisionConflict(record.memory_id, record.revision, expected)
                last[record.memory_id] = expected
                seq += 1
                cursor.execute(
                    "INSERT INTO records (slot_id, seq, memory_id, revision, ciphertext, stored_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (slot, seq, record.memory_id, record.revision, record.ciphertext, stored_at),
                )
                stored.append(StoredRecord(seq, record.memory_id, record.revision, b"", stored_at))
            cursor.execute("UPDATE slots SET last_seq = ? WHERE slot_id = ?", (seq, slot))
        return stored

    def changes(self, slot: int, after: int, limit: int, max_bytes: int) -> ChangesPage:
        """Records with seq > `after`, lowest first: at most `limit`, and about `max_bytes`.

        The page always holds the first record after `after` if there is one,
        however large, so a client always moves forward.
        """
        with self._transaction(write=False) as cursor:
            account = cursor.execute("SELECT account_id FROM slots WHERE slot_id = ?", (slot,)).fetchone()
            if account is None or account[0] is None:
                raise NoAccount
            # Sizes first, so a page of large records is never loaded only to be cut.
            sizes = cursor.execute(
                "SELECT seq, LENGTH(ciphertext) FROM records "
                "WHERE slot_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (slot, after, limit + 1),
            ).fetchall()
            last = after
            total = 0
            taken = 0
            for seq, size in sizes[:limit]:
                if taken and total + size > max_bytes:
                    break
                total += size
                taken += 1
                last = int(seq)
            rows = cursor.execute(
                "SELECT seq, memory_id, revision, ciphertext, stored_at FROM records "
                "WHERE slot_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (slot, after, last),
            ).fetchall()
        records = [StoredRecord(int(s), m, int(r), bytes(c), t) for s, m, r, c, t in rows]
        return ChangesPage(records, last, more=len(sizes) > taken)

    def database_files(self) -> list[Path]:
        """The SQLite file and its WAL companions (empty for PostgreSQL)."""
        if self._sqlite_path is None:
            return []
        return [Path(f"{self._sqlite_path}{suffix}") for suffix in ("", "-wal", "-shm")]


class _Cursor:
    """The one call this module needs, with `?` placeholders on both databases."""

    def __init__(self, connection: _Connection, dialect: _Dialect) -> None:
        self._connection = connection
        self._postgres = dialect is _POSTGRES

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> _DbCursor:
        """Run one statement; the DB-API cursor (fetchone, fetchall, rowcount)."""
        if self._postgres:
            # No statement here holds a literal "?" or "%", so this is exact.
            sql = sql.replace("?", "%s")
        return self._connection.execute(sql, params)

    def one(self, sql: str, params: tuple[object, ...] = ()) -> tuple[Any, ...]:
        """The row of a statement that always returns exactly one (an aggregate, INSERT ... RETURNING)."""
        row = self.execute(sql, params).fetchone()
        if row is None:
            raise DatabaseError("the database returned no row where one is certain")
        return tuple(row)


@dataclass(frozen=True)
class _Errors:
    any: tuple[type[Exception], ...]
    operational: tuple[type[Exception], ...]


def _sqlite_errors() -> _Errors:
    return _Errors((sqlite3.Error,), (sqlite3.OperationalError,))


def _postgres_errors() -> _Errors:
    try:
        import psycopg
    except ImportError as error:
        raise DatabaseError(
            "PostgreSQL needs the postgres extra: pip install 'squirrel-mcp[postgres]'"
        ) from error
    return _Errors((psycopg.Error,), (psycopg.OperationalError, psycopg.InterfaceError))


def _close_quietly(connection: _Connection) -> None:
    # A connection being dropped may be broken already; closing it is best effort.
    with contextlib.suppress(Exception):
        connection.close()
