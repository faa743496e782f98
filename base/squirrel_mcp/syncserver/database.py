"""The sync server's store: its accounts and their sealed records, on SQLite or PostgreSQL.

`Database` is the whole store the application (syncserver/app.py) and the
admin commands (syncserver/cli.py) use: it opens the database (creating the
tables, or migrating an older schema), and adds to the key management it
inherits (syncserver/keystore.py, over the connections of syncserver/pool.py)
what the sync API's requests read and write: a slot's account, its key, and
its log of records; and what the operator's commands do to an account's key
(list the keys it held, put one back, forget them, forget its verifier). The
tables are described in syncserver/schema.py.

A key change is stored only with the proof that its account's verifier asks
for (crypto.proves_key_change): an API key opens the slot, but only a holder of
the data key may replace the wrapped key. Each key replaced is kept in
old_keys (the KEPT_OLD_KEYS latest), so that an operator can undo a change.

Sequence numbers are per slot and given out under the slot's row lock (SQLite:
the write lock of BEGIN IMMEDIATE; PostgreSQL: SELECT ... FOR UPDATE), so they
increase in commit order with no gaps: a reader that has seen seq N and asks
for what comes after N can never miss a record committed later with a lower
number, which a shared auto-increment would allow on PostgreSQL.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, replace
from typing import Any

from squirrel_mcp.core.models import now_iso
from squirrel_mcp.keys.crypto import KdfParams, proves_key_change
from squirrel_mcp.storage import Account, KeyChanged, KeyChangeForbidden, RevisionConflict, SealedRecord
from squirrel_mcp.syncserver.keystore import KeyStore
from squirrel_mcp.syncserver.pool import Cursor, DatabaseError
from squirrel_mcp.syncserver.schema import (
    ACCOUNT_ROW,
    KEPT_OLD_KEYS,
    POSTGRES,
    SCHEMA_VERSION,
    tables,
    upgrade,
)

# Memory ids per IN list (SQLite): far below its limit of 32,766 parameters to a
# statement; an append holds at most 500 records, so its revision check is one query.
_IDS_PER_QUERY = 500
_RECORD_COLUMNS = ("slot_id", "seq", "memory_id", "revision", "ciphertext", "stored_at")


class NoAccount(Exception):
    """The slot has no account yet."""


class AccountExists(Exception):
    """The slot already holds an account."""


class VerifierExists(Exception):
    """The account holds another key-change verifier; nothing was changed."""


class UnknownOldKey(Exception):
    """The account held no key with this id (the exception's one argument)."""


@dataclass(frozen=True)
class StoredAccount:
    """An account as the server holds it: what the client stored, when, and when its key was set."""

    account: Account
    created_at: str
    key_set_at: str | None = None  # None for a key set before the server kept the date


@dataclass(frozen=True)
class HeldKey:
    """A key an account holds or held, as `list-account-keys` shows it."""

    old_key_id: int | None  # None for the key it holds now
    account: Account  # the account with this key (and the verifier it has now)
    set_at: str | None  # None when it was set before the server kept the date
    replaced_at: str | None  # None for the key it holds now


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
            if self._dialect.schema_lock is not None:
                cursor.execute(self._dialect.schema_lock)
            for statement in tables(self._dialect):
                cursor.execute(statement)
            row = cursor.execute(self._dialect.schema_row).fetchone()
            # A new database has no version yet: its tables, just made and empty, take
            # every upgrade after schema 1, as an old database's do. Each upgrade runs
            # once, with the version change, in this one transaction.
            found = "1" if row is None else row[0]
            if found not in {str(version) for version in range(1, SCHEMA_VERSION + 1)}:
                raise DatabaseError(
                    f"the database has sync schema {found}; this server reads schema {SCHEMA_VERSION}"
                )
            if int(found) < SCHEMA_VERSION:
                for version in range(int(found) + 1, SCHEMA_VERSION + 1):
                    for statement in upgrade(self._dialect, version):
                        cursor.execute(statement)
                cursor.execute(
                    "INSERT INTO sync_meta (key, value) VALUES ('schema', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(SCHEMA_VERSION),),
                )

    # Accounts and records -------------------------------------------------

    def get_account(self, slot: int) -> StoredAccount:
        """The slot's account; NoAccount if it has none."""
        with self._transaction(write=False, alone=True) as cursor:
            return self._account_row(cursor, slot, ACCOUNT_ROW)

    def create_account(self, slot: int, account: Account) -> StoredAccount:
        """Store the slot's account (its verifier too, if it has one); AccountExists if it has one already.

        Nothing changes when it exists.
        """
        created_at = now_iso("microseconds")
        with self._transaction(write=True) as cursor:
            updated = cursor.execute(
                "UPDATE slots SET account_id = ?, kdf_salt = ?, kdf_n = ?, kdf_r = ?, kdf_p = ?, "
                "wrapped_data_key = ?, key_change_verifier = ?, account_created_at = ?, key_set_at = ? "
                "WHERE slot_id = ? AND account_id IS NULL",
                (
                    account.account_id,
                    account.kdf.salt,
                    account.kdf.n,
                    account.kdf.r,
                    account.kdf.p,
                    account.wrapped_data_key,
                    account.key_change_verifier,
                    created_at,
                    created_at,
                    slot,
                ),
            ).rowcount
        if updated != 1:
            raise AccountExists
        return StoredAccount(account, created_at, created_at)

    def replace_key(
        self,
        slot: int,
        expected: tuple[KdfParams, bytes],
        new: tuple[KdfParams, bytes],
        proof: bytes | None,
    ) -> StoredAccount:
        """Store `new` (KDF parameters, wrapped data key) as the slot's key, with its proof, over `expected`.

        NoAccount if the slot has no account; KeyChangeForbidden if `proof` is
        missing or does not match the account's verifier (or the account has
        none); KeyChanged if its key is not `expected`: nothing changes in each
        case. Otherwise the key it held goes to old_keys. The account's row is
        read locked (SQLite: the write lock of BEGIN IMMEDIATE; PostgreSQL: FOR
        UPDATE) until the change commits, so two changes over the same key
        cannot both land: a compare-and-swap.
        """
        with self._transaction(write=True) as cursor:
            stored = self._account_row(cursor, slot, self._dialect.account_for_change)
            verifier = stored.account.key_change_verifier
            if verifier is None:
                raise KeyChangeForbidden(
                    "this account has no key-change verifier yet (the first client that unlocks it sets "
                    "one), so its key cannot be changed; nothing was changed"
                )
            if proof is None or not proves_key_change(verifier, proof):
                raise KeyChangeForbidden(
                    "a key change must prove it holds the account's data key, and this one's proof is "
                    "missing or wrong; nothing was changed"
                )
            if (stored.account.kdf, stored.account.wrapped_data_key) != expected:
                raise KeyChanged("the account's key is no longer the expected one")
            return self._set_key(cursor, slot, stored, new)

    def set_verifier(self, slot: int, verifier: bytes) -> StoredAccount:
        """Store `verifier` as the account's key-change verifier if it has none; the account as stored.

        NoAccount if the slot has no account; VerifierExists, nothing changed,
        if it holds another verifier (the same one again is no change).
        """
        with self._transaction(write=True) as cursor:
            stored = self._account_row(cursor, slot, self._dialect.account_for_change)
            held = stored.account.key_change_verifier
            if held is None:
                cursor.execute("UPDATE slots SET key_change_verifier = ? WHERE slot_id = ?", (verifier, slot))
                return replace(stored, account=replace(stored.account, key_change_verifier=verifier))
            if not hmac.compare_digest(held, verifier):
                raise VerifierExists
            return stored

    def clear_verifier(self, slot: int) -> bool:
        """Forget the account's key-change verifier (the operator's call); whether it had one.

        NoAccount if the slot has no account. The next client to unlock the
        account sets the verifier again.
        """
        with self._transaction(write=True) as cursor:
            stored = self._account_row(cursor, slot, self._dialect.account_for_change)
            cursor.execute("UPDATE slots SET key_change_verifier = NULL WHERE slot_id = ?", (slot,))
        return stored.account.key_change_verifier is not None

    def held_keys(self, slot: int) -> list[HeldKey]:
        """The key the account holds, then those it held before (the latest KEPT_OLD_KEYS), newest first.

        NoAccount if the slot has no account.
        """
        with self._transaction(write=False) as cursor:
            stored = self._account_row(cursor, slot, ACCOUNT_ROW)
            rows = cursor.execute(
                "SELECT old_key_id, kdf_salt, kdf_n, kdf_r, kdf_p, wrapped_data_key, set_at, replaced_at "
                "FROM old_keys WHERE slot_id = ? ORDER BY old_key_id DESC",
                (slot,),
            ).fetchall()
        held = [HeldKey(None, stored.account, stored.key_set_at, None)]
        for old_key_id, salt, n, r, p, wrapped, old_set_at, replaced_at in rows:
            kdf = KdfParams(salt=bytes(salt), n=n, r=r, p=p)
            account = replace(stored.account, kdf=kdf, wrapped_data_key=bytes(wrapped))
            held.append(HeldKey(int(old_key_id), account, old_set_at, replaced_at))
        return held

    def restore_key(self, slot: int, old_key_id: int) -> StoredAccount:
        """Make the account's earlier key `old_key_id` its key again (the operator's undo); the account.

        The key it holds now goes to old_keys like any replaced key, so a restore
        can be undone too. NoAccount if the slot has no account; UnknownOldKey if
        the account kept no earlier key with that id.
        """
        with self._transaction(write=True) as cursor:
            stored = self._account_row(cursor, slot, self._dialect.account_for_change)
            row = cursor.execute(
                "SELECT kdf_salt, kdf_n, kdf_r, kdf_p, wrapped_data_key FROM old_keys "
                "WHERE slot_id = ? AND old_key_id = ?",
                (slot, old_key_id),
            ).fetchone()
            if row is None:
                raise UnknownOldKey(old_key_id)
            kdf = KdfParams(salt=bytes(row[0]), n=row[1], r=row[2], p=row[3])
            return self._set_key(cursor, slot, stored, (kdf, bytes(row[4])))

    def forget_old_keys(self, slot: int) -> int:
        """Delete the earlier keys the account kept (the operator's call); how many there were.

        NoAccount if the slot has no account. For a passphrase changed because it
        leaked: an earlier wrapped key opens under the old passphrase.
        """
        with self._transaction(write=True) as cursor:
            self._account_row(cursor, slot, self._dialect.account_for_change)
            return int(cursor.execute("DELETE FROM old_keys WHERE slot_id = ?", (slot,)).rowcount)

    def _account_row(self, cursor: Cursor, slot: int, query: str) -> StoredAccount:
        """The slot's account, read by `query` (ACCOUNT_ROW, locked or not); NoAccount if none."""
        row = cursor.execute(query, (slot,)).fetchone()
        if row is None or row[0] is None:
            raise NoAccount
        return _stored_account(row)

    @staticmethod
    def _set_key(
        cursor: Cursor, slot: int, stored: StoredAccount, new: tuple[KdfParams, bytes]
    ) -> StoredAccount:
        """Make `new` the account's key, keeping the one it held in old_keys (the latest KEPT_OLD_KEYS)."""
        now = now_iso("microseconds")
        old = stored.account
        kept = (old.kdf.salt, old.kdf.n, old.kdf.r, old.kdf.p, old.wrapped_data_key, stored.key_set_at)
        cursor.execute(
            "INSERT INTO old_keys (slot_id, kdf_salt, kdf_n, kdf_r, kdf_p, wrapped_data_key, set_at, "
            "replaced_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (slot, *kept, now),
        )
        cursor.execute(
            "DELETE FROM old_keys WHERE slot_id = ? AND old_key_id NOT IN "
            "(SELECT old_key_id FROM old_keys WHERE slot_id = ? ORDER BY old_key_id DESC LIMIT ?)",
            (slot, slot, KEPT_OLD_KEYS),
        )
        kdf, wrapped = new
        cursor.execute(
            "UPDATE slots SET kdf_salt = ?, kdf_n = ?, kdf_r = ?, kdf_p = ?, wrapped_data_key = ?, "
            "key_set_at = ? WHERE slot_id = ?",
            (kdf.salt, kdf.n, kdf.r, kdf.p, wrapped, now, slot),
        )
        return replace(stored, account=replace(old, kdf=kdf, wrapped_data_key=wrapped), key_set_at=now)

    def append(self, slot: int, records: list[SealedRecord]) -> list[StoredRecord]:
        """Store every record or none; RevisionConflict names the first that is not its memory's next one.

        A memory's next revision is one more than its highest stored one (1 for
        a new memory), and a batch may carry several consecutive revisions of
        one memory. Nothing else is taken: a revision far ahead (say 2^31 - 1)
        would leave the memory with a revision no client can ever follow, and
        so unreadable for good.
        """
        stored_at = now_iso("microseconds")
        with self._transaction(write=True) as cursor:
            row = cursor.execute(self._dialect.slot_for_append, (slot,)).fetchone()
            if row is None or row[0] is None:
                raise NoAccount
            first = int(row[1]) + 1
            # The slot row's lock is held, so no other append of this slot can
            # store a revision between this read and the insert. One query for
            # the whole batch's highest revisions, one statement for its rows:
            # a round trip per record is what made a batch slow on PostgreSQL.
            last = self._highest_revisions(cursor, slot, {record.memory_id for record in records})
            for record in records:
                expected = last.get(record.memory_id, 0) + 1
                if record.revision != expected:
                    raise RevisionConflict(record.memory_id, record.revision, expected)
                last[record.memory_id] = expected
            rows: list[tuple[object, ...]] = [
                (slot, first + index, record.memory_id, record.revision, record.ciphertext, stored_at)
                for index, record in enumerate(records)
            ]
            cursor.insert_many("records", _RECORD_COLUMNS, rows)
            cursor.execute(
                "UPDATE slots SET last_seq = ? WHERE slot_id = ?", (first + len(records) - 1, slot)
            )
        return [
            StoredRecord(first + index, record.memory_id, record.revision, b"", stored_at)
            for index, record in enumerate(records)
        ]

    def _highest_revisions(self, cursor: Cursor, slot: int, memory_ids: set[str]) -> dict[str, int]:
        """The highest stored revision of each of `memory_ids` that the slot holds (absent: none stored)."""
        if self._dialect is POSTGRES:
            # One probe of the (slot, memory, revision) index per id, in one statement
            # whose text never changes (the driver prepares it after a few uses). An
            # IN list or `= ANY` let the planner scan every record of the slot instead
            # when its statistics were older than the slot's growth: a cost that grew
            # with the account, 8 ms per batch at 10,000 records.
            rows = cursor.execute(
                "SELECT ids.memory_id, (SELECT MAX(r.revision) FROM records r "
                "WHERE r.slot_id = ? AND r.memory_id = ids.memory_id) "
                "FROM unnest(?::text[]) AS ids (memory_id)",
                (slot, list(memory_ids)),
            ).fetchall()
            return {memory_id: int(revision) for memory_id, revision in rows if revision is not None}
        highest: dict[str, int] = {}
        ordered = sorted(memory_ids)
        for start in range(0, len(ordered), _IDS_PER_QUERY):
            chunk = ordered[start : start + _IDS_PER_QUERY]
            marks = ", ".join("?" * len(chunk))
            # Only placeholders are joined into the SQL; the ids go as parameters.
            rows = cursor.execute(
                "SELECT memory_id, MAX(revision) FROM records "  # noqa: S608
                f"WHERE slot_id = ? AND memory_id IN ({marks}) GROUP BY memory_id",
                (slot, *chunk),
            ).fetchall()
            highest.update((memory_id, int(revision)) for memory_id, revision in rows)
        return highest

    def changes(self, slot: int, after: int, limit: int, max_bytes: int) -> ChangesPage:
        """Records with seq > `after`, lowest first: at most `limit`, and about `max_bytes`.

        The page always holds the first record after `after` if there is one,
        however large, so a client always moves forward.
        """
        with self._transaction(write=False) as cursor:
            # Sizes first, so a page of large records is never loaded only to be cut.
            sizes = cursor.execute(
                "SELECT seq, LENGTH(ciphertext) FROM records "
                "WHERE slot_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (slot, after, limit + 1),
            ).fetchall()
            if not sizes:
                # Only an empty page needs the account checked: a slot holds records
                # only once it has an account (an append refuses one without), and
                # nothing takes an account away. A query less for every other page.
                account = cursor.execute("SELECT account_id FROM slots WHERE slot_id = ?", (slot,)).fetchone()
                if account is None or account[0] is None:
                    raise NoAccount
                return ChangesPage([], after, more=False)
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


def _stored_account(row: Any) -> StoredAccount:
    """An account from the columns of the dialect's account row."""
    account_id, salt, n, r, p, wrapped, verifier, created_at, key_set_at = row
    kdf = KdfParams(salt=bytes(salt), n=n, r=r, p=p)
    held = None if verifier is None else bytes(verifier)
    return StoredAccount(Account(account_id, kdf, bytes(wrapped), held), created_at, key_set_at)
