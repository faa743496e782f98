"""The sync server's database connections: which database a URL names, a pool, and its transactions.

One store, two databases, chosen by URL: `sqlite:///absolute/path.sqlite3` for one
machine, `postgresql://user@host/dbname` (psycopg 3, the `postgres` extra) when it
outgrows one. `Pool` opens connections to either, lends them one transaction at
a time, and turns the database's operational errors into DatabaseUnavailable.

Apart from the queries (syncserver/keystore.py, syncserver/database.py, which
subclass Pool) so that those read as SQL only, and nothing of connecting,
pooling or either driver's errors leaks into them.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from squirrel_mcp.core.files import create_private_file
from squirrel_mcp.storage import sqlite
from squirrel_mcp.syncserver.schema import POSTGRES, SQLITE, Dialect

if TYPE_CHECKING:
    import psycopg

    # Rows are tuples whose items are whatever the columns hold.
    _Connection = sqlite3.Connection | psycopg.Connection[tuple[Any, ...]]
    _DbCursor = sqlite3.Cursor | psycopg.Cursor[tuple[Any, ...]]

# Idle connections kept for reuse; more are opened when more requests run at once.
POOL_SIZE = 8


class DatabaseError(Exception):
    """The database URL is unusable, or the database is not a sync server's."""


class DatabaseUnavailable(Exception):
    """The database cannot be reached or answered with an operational error."""


def sqlite_path(url: str) -> Path | None:
    """The file of a `sqlite:///absolute/path` URL; None for another scheme."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        return None
    path = unquote(parts.path)
    if parts.netloc or not path.startswith("/") or parts.query or parts.fragment:
        raise DatabaseError("a SQLite database URL is sqlite:///ABSOLUTE/PATH (three slashes, then the path)")
    return Path(path)


class Pool:
    """Connections to the database named by a URL, on SQLite or PostgreSQL; safe to use from many threads."""

    def __init__(self, url: str) -> None:
        """Connections to the database named by `url` (none is opened yet)."""
        self._sqlite_path = sqlite_path(url)
        self._url = url
        if self._sqlite_path is not None:
            self._dialect = SQLITE
            self._errors = _sqlite_errors()
            create_private_file(self._sqlite_path)
        elif urlsplit(url).scheme in ("postgresql", "postgres"):
            self._dialect = POSTGRES
            self._errors = _postgres_errors()
        else:
            raise DatabaseError("the database URL must start with sqlite:/// or postgresql://")
        self._idle: list[_Connection] = []
        self._pool_lock = threading.Lock()

    @property
    def dialect(self) -> str:
        """The database kind: sqlite or postgresql."""
        return self._dialect.name

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
    def _transaction(self, *, write: bool, alone: bool = False) -> Iterator[Cursor]:
        """One transaction on a pooled connection; rolled back if the block raises.

        `alone` says the block runs a single statement that only reads: it then
        runs on its own (autocommit), without a BEGIN and a COMMIT, each a round
        trip to PostgreSQL.
        """
        with self._pool_lock:
            pooled = self._idle.pop() if self._idle else None
        postgres = self._sqlite_path is None

        def connect() -> _Connection:
            connection = self._connect()
            if alone and postgres:
                _set_autocommit(connection, True)
            return connection

        if pooled is not None and alone and postgres:
            _set_autocommit(pooled, True)
        # A pooled PostgreSQL connection may have been closed by the server (a
        # restart, an idle timeout) since its last use. Rather than a round trip
        # to try it before every transaction, the cursor sends the first statement
        # again on a new connection if it fails there (see Cursor).
        retry = connect if pooled is not None and postgres else None
        cursor = Cursor(pooled or connect(), self._dialect, retry, self._errors.operational)
        # Only a connection whose transaction ended cleanly goes back to the pool.
        healthy = False
        try:
            if not postgres and not alone:
                # IMMEDIATE takes the write lock up front, so the slot's last_seq
                # cannot change between reading and updating it.
                cursor.connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield cursor
            except self._errors.operational:
                raise
            except BaseException:
                cursor.connection.rollback()
                healthy = True
                raise
            cursor.connection.commit()
            healthy = True
        except self._errors.operational as error:
            healthy = False
            raise DatabaseUnavailable(f"the {self._dialect.name} database failed") from error
        finally:
            if healthy and alone and postgres:
                # Back to transactions before the pool lends it again, however the block ended.
                try:
                    _set_autocommit(cursor.connection, False)
                except self._errors.any:
                    healthy = False
            connection: _Connection | None = cursor.connection
            if healthy:
                with self._pool_lock:
                    if len(self._idle) < POOL_SIZE:
                        self._idle.append(cursor.connection)
                        connection = None
            if connection is not None:
                _close_quietly(connection)

    def close(self) -> None:
        """Close every idle connection."""
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            _close_quietly(connection)

    def ping(self) -> None:
        """Raise DatabaseUnavailable unless the database answers (a read of its schema version)."""
        try:
            with self._transaction(write=False, alone=True) as cursor:
                # A table, not "SELECT 1": SQLite answers that without touching the file.
                cursor.execute("SELECT value FROM sync_meta WHERE key = 'schema'").fetchone()
        except self._errors.any as error:
            # Whatever the database says, for a health check it is one answer: not well.
            raise DatabaseUnavailable(f"the {self._dialect.name} database failed its check") from error

    def database_files(self) -> list[Path]:
        """The SQLite file and its WAL companions (empty for PostgreSQL)."""
        if self._sqlite_path is None:
            return []
        return [Path(f"{self._sqlite_path}{suffix}") for suffix in ("", "-wal", "-shm")]


class Cursor:
    """The one call the queries need, with `?` placeholders on both databases."""

    def __init__(
        self,
        connection: _Connection,
        dialect: Dialect,
        reconnect: Callable[[], _Connection] | None = None,
        operational: tuple[type[Exception], ...] = (),
    ) -> None:
        """A transaction's statements on `connection`; `reconnect` set if it came from the pool."""
        self.connection = connection
        self._postgres = dialect is POSTGRES
        self._reconnect = reconnect
        self._operational = operational

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> _DbCursor:
        """Run one statement; the DB-API cursor (fetchone, fetchall, rowcount)."""
        if self._postgres:
            # No statement here holds a literal "?" or "%", so this is exact.
            sql = sql.replace("?", "%s")
        reconnect, self._reconnect = self._reconnect, None
        if reconnect is None:
            return self.connection.execute(sql, params)
        try:
            return self.connection.execute(sql, params)
        except self._operational:
            # The pooled connection was gone. Nothing of this transaction can have
            # committed (its first statement failed), so it starts again, once, on
            # a new connection; a second failure is the database's.
            _close_quietly(self.connection)
            self.connection = reconnect()
            return self.connection.execute(sql, params)

    def insert_many(self, table: str, columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> None:
        """Insert `rows` (values in the order of `columns`) into `table`, in one statement.

        PostgreSQL takes them by COPY, SQLite by executemany: one statement
        either way, where a statement per row costs PostgreSQL a round trip per
        row, most of a large batch's time.
        """
        if not rows:
            return
        self._reconnect = None
        names = ", ".join(columns)
        if self._postgres:
            assert not isinstance(self.connection, sqlite3.Connection)
            with self.connection.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        assert isinstance(self.connection, sqlite3.Connection)
        marks = ", ".join("?" * len(columns))
        # The table and column names are the callers' constants; the values go as parameters.
        self.connection.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)  # noqa: S608

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


def _set_autocommit(connection: _Connection, on: bool) -> None:
    # psycopg only; it changes a setting of the client, without a round trip.
    assert not isinstance(connection, sqlite3.Connection)
    connection.autocommit = on


def _close_quietly(connection: _Connection) -> None:
    # A connection being dropped may be broken already; closing it is best effort.
    with contextlib.suppress(Exception):
        connection.close()
