"""SQLite opened the one way both the local vault and the sync server's database need it.

Autocommit mode (each write begins its own transaction explicitly), shared by
threads (callers hold a lock or a pool), WAL so readers do not block the
writer, `synchronous=FULL` so an acknowledged write survives a crash or power
loss, and a busy timeout so a second process waits for the write lock instead
of failing at once.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

BUSY_TIMEOUT_S = 10


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file at `path`, set up as the module docstring says."""
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    return connection
