"""The sync server's tables, their version, and the SQL in which SQLite and PostgreSQL differ.

The SQL is the same on both databases but for two column types and the row
lock, which a `Dialect` holds. Apart from the connections (syncserver/pool.py)
and the queries (syncserver/keystore.py, syncserver/database.py) so that what
the database looks like is read in one place; Database creates the tables and
migrates an older schema when it opens.

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
"""

from __future__ import annotations

from dataclasses import dataclass

# Schema 1 had one key per slot, its hash in slots.key_hash; schema 2 adds api_keys.
SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Dialect:
    """What differs between the two databases: its name, two column types and two locking reads."""

    name: str
    blob: str
    slot_id: str
    slot_for_append: str  # reads the slot row, locked until the append commits
    schema_row: str  # reads the schema version, locked if need be so that two starting servers migrate once


_SLOT_ROW = "SELECT account_id, last_seq FROM slots WHERE slot_id = ?"
_SCHEMA_ROW = "SELECT value FROM sync_meta WHERE key = 'schema'"
# SQLite locks the whole database at BEGIN IMMEDIATE, so the row needs no lock of its own.
SQLITE = Dialect("sqlite", "BLOB", "INTEGER PRIMARY KEY", _SLOT_ROW, _SCHEMA_ROW)
POSTGRES = Dialect(
    "postgresql",
    "BYTEA",
    "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    _SLOT_ROW + " FOR UPDATE",
    _SCHEMA_ROW + " FOR UPDATE",
)


def tables(d: Dialect) -> list[str]:
    """The statements that create the tables (if they do not exist) in dialect `d`."""
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
