"""Log integrity on the reference sync server (SQLite, then PostgreSQL): deletions and forks are noticed.

A "machine" is a real `squirrel-mcp` server process with its own HOME and cache
directory (where its checkpoint lives). The server's database is changed behind
its back with SQL, as its operator (or an attacker in its place) could: a record
deleted; or the log rolled back to an earlier state (the records after it
removed and the slot's sequence set back, as restoring an older copy of the
database does) and then written on by another machine, a fork. The first
machine notices at its next start, the same way as with a local vault.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from mcp import Client

from tests.conftest import call, run_cli, server_params
from tests.sync.conftest import SyncServer
from tests.sync.test_remote_cli import remote_env
from tests.test_log_integrity import assert_diverged_then_accepted

pytestmark = pytest.mark.anyio


def server_sql(server: SyncServer, *statements: str) -> None:
    """Run `statements` in one transaction on the sync server's database, behind the server's back."""
    if server.dialect == "sqlite":
        db = sqlite3.connect(urlsplit(server.database_url).path)
        try:
            with db:
                for statement in statements:
                    db.execute(statement)
        finally:
            db.close()
        return
    import psycopg

    with psycopg.connect(server.database_url) as connection:
        for statement in statements:
            connection.execute(statement)


async def _save(env: dict[str, str], *texts: str) -> list[str]:
    ids = []
    async with Client(server_params(env)) as client:
        for text in texts:
            saved = await call(client, "save_memory", text=text, tags=["integrity"])
            ids.append(str(saved["memory"]["id"]))
    return ids


def _init(env: dict[str, str]) -> None:
    done = run_cli(env, "init")
    assert done.returncode == 0, done.stderr.decode()


async def test_a_record_deleted_on_the_sync_server_is_noticed(
    sync_server: SyncServer, tmp_path: Path
) -> None:
    env = remote_env(tmp_path, sync_server)
    _init(env)
    first, _, _ = await _save(
        env,
        "The first memory of the integrity check",
        "The second memory of the integrity check",
        "The third memory of the integrity check",
    )
    server_sql(sync_server, "DELETE FROM records WHERE seq = 2")
    await assert_diverged_then_accepted(env, first, "holds 2 records, fewer than the 3 this machine saw", 2)


async def test_a_forked_history_on_the_sync_server_is_noticed(
    sync_server: SyncServer, tmp_path: Path
) -> None:
    env = remote_env(tmp_path, sync_server)
    _init(env)
    first, _ = await _save(
        env, "The first memory of the integrity check", "The second memory of the integrity check"
    )
    await _save(env, "The third memory of the integrity check", "The fourth memory of the integrity check")
    # The server goes back to the log of two records...
    server_sql(sync_server, "DELETE FROM records WHERE seq > 2", "UPDATE slots SET last_seq = 2")
    # ...and another machine, which never saw the later two, writes three others on it.
    other = {**env, "XDG_CACHE_HOME": str(tmp_path / "other-machine" / "xdg-cache")}
    await _save(
        other,
        "A memory written on the other machine",
        "Another memory written on the other machine",
        "A third memory written on the other machine",
    )
    await assert_diverged_then_accepted(
        env, first, "no longer begins with the 4 records this machine saw in it (it holds 5)", 5
    )
