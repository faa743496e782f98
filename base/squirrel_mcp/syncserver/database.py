"""The sync server's store: its accounts and their sealed records, on SQLite or PostgreSQL.

`Database` is the whole store the application (syncserver/app.py) and the
admin commands (syncserver/cli.py) use: it opens the database (creating the
tables, or migrating an older schema), and adds to the key management it
inherits (syncserver/keystore.py, over the connections of syncserver/pool.py)
what the sync API's requests read and write: a slot's account, its key, and
its log of records. The tables are described in syncserver/schema.py.

Sequence numbers are per slot and given out under the slot's row lock (SQLite:
the write lock of BEGIN IMMEDIATE; PostgreSQL: SELECT ... FOR UPDATE), so they
increase in commit order with no gaps: a reader that has seen seq N and asks
for what comes after N can never miss a record committed later with a lower
number, which a shared auto-increment would allow on PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass

from squirrel_mcp.core.models import now_iso
from squirrel_mcp.keys.crypto import KdfParams
from squirrel_mcp.storage import Account, KeyChanged, RevisionConflict, SealedRecord
from squirrel_mcp.syncserver.keystore import KeyStore
from squirrel_mcp.syncserver.pool import DatabaseError
from squirrel_mcp.syncserver.schema import SCHEMA_VERSION, tables


class NoAccount(Exception):
    """The slot has no account yet."""


class AccountExists(Exception):
    """The slot already holds an account."""


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


class Database(KeyStore):
    """The sync server's tables on SQLite or PostgreSQL; safe to use from many threads."""

    def __init__(self, url: str) -> None:
        """Open (creating the tables if needed) the database named by `url`."""
        super().__init__(url)
        self._create_schema()

    def _create_schema(self) -> None:
        with self._transaction(write=True) as cursor:
            for statement in tables(self._dialect):
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

    # Accounts and records -------------------------------------------------

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
