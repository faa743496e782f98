"""The sync server's API keys in its database: slots, the keys that open them, and their use.

`squirrel-mcp-sync issue-key`, `list-keys` and `revoke-key` administer them, and
every request looks its bearer key up here. Apart from the accounts and records
(syncserver/database.py, whose Database is a KeyStore) because a key is the
administrator's business, never the client's: no request of the sync API adds,
lists or revokes one. Making, hashing and showing a key is syncserver/keys.py.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from squirrel_mcp.core.models import now_iso
from squirrel_mcp.syncserver.pool import Cursor, Pool

# A key's last use is written at most this often per key and server process: a
# busy key would otherwise turn every request into a database write.
LAST_USED_INTERVAL_S = 60.0


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


class KeyStore(Pool):
    """The slots and the API keys that open them; safe to use from many threads."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # key id -> time.monotonic() of the last write of its last use by this process.
        self._last_use_written: dict[int, float] = {}
        self._use_lock = threading.Lock()

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

    def slot_of_key(self, key_id: int) -> int:
        """The slot key `key_id` opens (revoked or not); UnknownKey if no key has that id."""
        with self._transaction(write=False) as cursor:
            row = cursor.execute("SELECT slot_id FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        if row is None:
            raise UnknownKey(key_id)
        return int(row[0])

    @staticmethod
    def _insert_key(cursor: Cursor, slot: int, key_hash: bytes, prefix: str, created_at: str) -> int:
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
        with self._transaction(write=False, alone=True) as cursor:
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
