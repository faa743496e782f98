"""The sync server's tables, their version, and the SQL in which SQLite and PostgreSQL differ.

The SQL is the same on both databases but for two column types and the locks,
which a `Dialect` holds. Apart from the connections (syncserver/pool.py)
and the queries (syncserver/keystore.py, syncserver/database.py) so that what
the database looks like is read in one place; Database creates the tables and
migrates an older schema when it opens: `tables` makes the tables as schema 2
had them, then `upgrade` brings them one version up at a time, so that a new
database goes through the very steps an old one does.

Tables:
    slots    one row per account slot: once `squirrel-mcp init` has run, the
             account (id, scrypt salt and parameters, wrapped data key, since
             schema 3 its key-change verifier and when its key was set), and the
             last sequence number given to one of its records. Its key_hash is
             the hash of the key that made the slot; since schema 2 keys are
             looked up in api_keys only, so that column is kept but never read.
             An account migrated from schema 2 has no verifier (the first client
             that unlocks it sets one) and no date for its key.
    api_keys one row per API key ever issued: the key's SHA-256, the slot it
             opens (several keys may open one slot), its display prefix, when it
             was made, last used and revoked. A revoked row is kept, so its id
             is never given to another key and `issue-key --for` can still
             name it.
    records  one row per sealed memory revision: (slot, seq) is the cursor order,
             (slot, memory id, revision) is unique, as in the local vault.
    old_keys (schema 3) the keys an account held before: scrypt salt and
             parameters, wrapped data key, when each was set (None if before
             schema 3) and replaced; the KEPT_OLD_KEYS latest per slot, so an
             operator can put one back (`squirrel-mcp-sync restore-account-key`).
"""

from __future__ import annotations

from dataclasses import dataclass

# Schema 1 had one key per slot, its hash in slots.key_hash; schema 2 adds api_keys;
# schema 3 the accounts' key-change verifiers and their earlier keys (old_keys).
SCHEMA_VERSION = 3
# The earlier keys kept per account, newest first; older ones are deleted as new ones come.
KEPT_OLD_KEYS = 10


@dataclass(frozen=True)
class Dialect:
    """What differs between the two databases: its name, two column types, three locking reads, a lock."""

    name: str
    blob: str
    slot_id: str
    slot_for_append: str  # reads the slot row, locked until the append commits
    schema_row: str  # reads the schema version, locked if need be so that two starting servers migrate once
    account_for_change: str  # reads the slot's account, locked until its key change commits
    # Taken first in the transaction that creates or upgrades the tables, so that two servers
    # starting on a new database do not both upgrade it; None where BEGIN IMMEDIATE does that.
    schema_lock: str | None


_SLOT_ROW = "SELECT account_id, last_seq FROM slots WHERE slot_id = ?"
_SCHEMA_ROW = "SELECT value FROM sync_meta WHERE key = 'schema'"
# The slot's account, in the order database.py reads it.
ACCOUNT_ROW = (
    "SELECT account_id, kdf_salt, kdf_n, kdf_r, kdf_p, wrapped_data_key, key_change_verifier, "
    "account_created_at, key_set_at FROM slots WHERE slot_id = ?"
)
# SQLite locks the whole database at BEGIN IMMEDIATE, so the row needs no lock of its own.
SQLITE = Dialect("sqlite", "BLOB", "INTEGER PRIMARY KEY", _SLOT_ROW, _SCHEMA_ROW, ACCOUNT_ROW, None)
POSTGRES = Dialect(
    "postgresql",
    "BYTEA",
    "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    _SLOT_ROW + " FOR UPDATE",
    _SCHEMA_ROW + " FOR UPDATE",
    ACCOUNT_ROW + " FOR UPDATE",
    # A transaction-scoped advisory lock, released at commit; the number is arbitrary, fixed.
    "SELECT pg_advisory_xact_lock(7306274017)",
)


def tables(d: Dialect) -> list[str]:
    """The statements that create the tables of schema 2 (if they do not exist) in dialect `d`.

    `upgrade` then brings them to SCHEMA_VERSION.
    """
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


def upgrade(d: Dialect, version: int) -> list[str]:
    """The statements that bring the tables from schema `version - 1` to `version`, in dialect `d`.

    Run in the transaction that also writes the new version, so an upgrade is
    done whole or not at all (PostgreSQL and SQLite both roll back DDL).
    """
    if version == 2:
        # Every slot's one key becomes a row of api_keys, without a prefix, since only
        # its hash was ever stored. Done once, with the version change: a later start
        # must not bring back a revoked key. (A new database's slots are empty.)
        return [
            "INSERT INTO api_keys (slot_id, key_hash, created_at) "
            "SELECT slot_id, key_hash, created_at FROM slots ORDER BY slot_id"
        ]
    if version == 3:
        return [
            f"ALTER TABLE slots ADD COLUMN key_change_verifier {d.blob}",
            "ALTER TABLE slots ADD COLUMN key_set_at TEXT",
            f"""CREATE TABLE old_keys (
                old_key_id {d.slot_id},
                slot_id BIGINT NOT NULL REFERENCES slots (slot_id),
                kdf_salt {d.blob} NOT NULL,
                kdf_n INTEGER NOT NULL,
                kdf_r INTEGER NOT NULL,
                kdf_p INTEGER NOT NULL,
                wrapped_data_key {d.blob} NOT NULL,
                set_at TEXT,
                replaced_at TEXT NOT NULL
            )""",
            "CREATE INDEX old_keys_by_slot ON old_keys (slot_id, old_key_id)",
        ]
    raise ValueError(f"no upgrade to sync schema {version}")
