"""Key administration with the real `squirrel-mcp-sync`: list, revoke, re-issue, on SQLite and PostgreSQL.

A revoked key must be refused by the server that is already running (it has seen
the key work), while the account, its records and its other keys stay.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit

from squirrel_mcp.syncserver import schema as sync_schema
from tests.sync.conftest import KEY_PATTERN, SyncServer, sync_command
from tests.sync.test_syncserver import Json, account, all_changes, memory_id, new_account, record

__all__ = ["account"]  # the fixture, used by name

_LINE = re.compile(
    r"(?P<id>\d+)\t(?P<prefix>sqk_[A-Za-z0-9_-]{8}\.\.\.|-)\tcreated (?P<created>\S+Z)\t"
    r"last used (?P<used>\S+Z|never)\tslot (?P<slot>\d+) \((?P<account>[^)]*)\)(\trevoked (?P<revoked>\S+Z))?"
)


def sync(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `squirrel-mcp-sync` with the database given by environment."""
    return subprocess.run(
        sync_command(*args),
        env={**os.environ, "SQUIRREL_SYNC_DATABASE": database_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def listed(database_url: str) -> list[dict[str, str]]:
    """`list-keys`, one dict per line; every line must match the documented shape."""
    done = sync(database_url, "list-keys")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    matches = [_LINE.fullmatch(line) for line in lines]
    assert all(matches), lines
    return [m.groupdict() for m in matches if m is not None]


def key_id(database_url: str, key: str) -> str:
    """The id `list-keys` gives the key with this key's prefix."""
    (line,) = [line for line in listed(database_url) if line["prefix"] == key[:12] + "..."]
    return line["id"]


def issue(database_url: str, *args: str) -> str:
    done = sync(database_url, "issue-key", *args)
    assert done.returncode == 0, done.stderr
    assert KEY_PATTERN.fullmatch(done.stdout.strip()), "issue-key printed something other than one key"
    return done.stdout.strip()


def test_list_keys_shows_each_key_and_never_a_key(sync_server: SyncServer, account: Json) -> None:
    other = sync_server.issue_key()
    done = sync(sync_server.database_url, "list-keys")
    for key in (sync_server.api_key, other):
        assert key not in done.stdout + done.stderr
        assert key[4:] not in done.stdout + done.stderr
    first, second = listed(sync_server.database_url)
    assert first["prefix"] == sync_server.api_key[:12] + "..."
    assert second["prefix"] == other[:12] + "..."
    # The first key made the account (the fixture), so it has been used; the other never.
    assert first["used"] != "never" and first["used"] >= first["created"]
    assert first["account"] == f"account {account['id']}"
    assert second["used"] == "never" and second["account"] == "no account yet"
    assert first["slot"] != second["slot"]
    assert first["revoked"] is None and second["revoked"] is None


def test_a_revoked_key_is_refused_at_once_and_the_account_stays(
    sync_server: SyncServer, account: Json
) -> None:
    url = sync_server.database_url
    written = [record(memory_id(), 1) for _ in range(3)]
    assert sync_server.post("/v1/records", {"records": written}).status_code == 201
    leaked = key_id(url, sync_server.api_key)
    spare = issue(url, "--for", leaked)
    # The running server has seen the leaked key work; revoking must still reach it.
    assert sync_server.get("/v1/account").status_code == 200
    done = sync(url, "revoke-key", leaked)
    assert done.returncode == 0, done.stderr
    answer = sync_server.get("/v1/account")
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"
    assert sync_server.get("/v1/records?after=0").status_code == 401
    assert sync_server.post("/v1/records", {"records": [record(memory_id(), 1)]}).status_code == 401
    assert sync_server.get("/v1/account", spare).json()["id"] == account["id"]
    assert [(r["memoryId"], r["ciphertext"]) for r in all_changes(sync_server, spare)] == [
        (r["memoryId"], r["ciphertext"]) for r in written
    ]
    lines = {line["id"]: line for line in listed(url)}
    assert lines[leaked]["revoked"] is not None
    assert lines[leaked]["slot"] == lines[key_id(url, spare)]["slot"]
    again = sync(url, "revoke-key", leaked)
    assert again.returncode == 0 and "already revoked" in again.stderr


def test_a_key_reissued_for_a_revoked_one_reads_and_writes_its_account(
    sync_server: SyncServer, account: Json
) -> None:
    url = sync_server.database_url
    written = [record(memory_id(), 1) for _ in range(2)]
    assert sync_server.post("/v1/records", {"records": written}).status_code == 201
    leaked = key_id(url, sync_server.api_key)
    # The leak case: revoke first (the account now has no working key), then replace.
    assert sync(url, "revoke-key", leaked).returncode == 0
    assert sync_server.get("/v1/account").status_code == 401
    fresh = issue(url, "--for", leaked)
    assert sync_server.get("/v1/account", fresh).json()["wrappedDataKey"] == account["wrappedDataKey"]
    assert [r["memoryId"] for r in all_changes(sync_server, fresh)] == [r["memoryId"] for r in written]
    later = record(written[0]["memoryId"], 2)
    assert sync_server.post("/v1/records", {"records": [later]}, fresh).status_code == 201
    assert len(all_changes(sync_server, fresh)) == 3
    # Another account's key still sees nothing of it.
    stranger = sync_server.issue_key()
    assert sync_server.post("/v1/account", new_account(), stranger).status_code == 201
    assert all_changes(sync_server, stranger) == []


def test_an_unknown_key_id_is_one_line_and_exit_1(database_url: str) -> None:
    issue(database_url)
    for args in (("revoke-key", "99"), ("issue-key", "--for", "99")):
        done = sync(database_url, *args)
        assert done.returncode == 1, args
        assert done.stdout == ""
        assert done.stderr.strip().splitlines() == ["squirrel-mcp-sync: no key has id 99"], args
    assert len(listed(database_url)) == 1


def _old_database(database_url: str) -> Callable[[str, tuple[object, ...]], list[tuple[object, ...]]]:
    """A runner of SQL (`?` placeholders) on `database_url` directly, committing each statement."""

    def run(sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        if database_url.startswith("sqlite:"):
            with closing(sqlite3.connect(urlsplit(database_url).path)) as connection, connection:
                return connection.execute(sql, params).fetchall()
        import psycopg

        with psycopg.connect(database_url, autocommit=True) as connection:
            cursor = connection.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []

    return run


def test_a_schema_1_database_keeps_its_keys_and_migrates_once(database_url: str) -> None:
    # A database as the previous server left it: the key's hash in its slot, no api_keys.
    if database_url.startswith("sqlite:"):
        Path(urlsplit(database_url).path).parent.mkdir()
        dialect = sync_schema.SQLITE
    else:
        dialect = sync_schema.POSTGRES
    sql = _old_database(database_url)
    for statement in sync_schema.tables(dialect)[:3]:
        sql(statement)
    sql("INSERT INTO sync_meta (key, value) VALUES ('schema', '1')")
    sql(
        "INSERT INTO slots (key_hash, created_at) VALUES (?, '2026-01-02T03:04:05.000006Z')",
        (hashlib.sha256(("sqk_" + "Q" * 43).encode()).digest(),),
    )
    (line,) = listed(database_url)
    assert line["prefix"] == "-" and line["created"] == "2026-01-02T03:04:05Z"
    replacement = issue(database_url, "--for", line["id"])
    assert sync(database_url, "revoke-key", line["id"]).returncode == 0
    # Opening the database again must not bring the revoked key back.
    lines = listed(database_url)
    assert [entry["revoked"] is not None for entry in lines] == [True, False]
    assert lines[1]["prefix"] == replacement[:12] + "..." and lines[0]["slot"] == lines[1]["slot"]
    assert sql("SELECT value FROM sync_meta WHERE key = 'schema'") == [(str(sync_schema.SCHEMA_VERSION),)]
