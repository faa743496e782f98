"""The local SQLite vault on its own: permissions, atomic appends, cursors, two connections."""

from __future__ import annotations

from pathlib import Path

import pytest

from squirrel_mcp.keys.crypto import KdfParams
from squirrel_mcp.storage import Account, RevisionConflict, SealedRecord, StorageError
from squirrel_mcp.storage.local import LocalVault

# As `squirrel-mcp init` makes one: the record is the sync contract's NewAccount.
ACCOUNT = Account("0123456789abcdef" * 2, KdfParams(salt=b"s" * 16), b"w" * 61)


def test_a_new_vault_is_private(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "vault.sqlite3"
    vault = LocalVault(path, create=True)
    vault.create_account(ACCOUNT)
    vault.append([SealedRecord("m1", 1, b"x")])
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    for file in path.parent.iterdir():
        assert (file.stat().st_mode & 0o777) == 0o600, file
    vault.close()


def test_the_account_round_trips_and_is_created_once(tmp_path: Path) -> None:
    vault = LocalVault(tmp_path / "v", create=True)
    assert vault.load_account() is None
    vault.create_account(ACCOUNT)
    assert vault.load_account() == ACCOUNT
    with pytest.raises(StorageError, match="already holds an account"):
        vault.create_account(ACCOUNT)


def test_open_without_create_needs_an_existing_vault(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="there is no vault"):
        LocalVault(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()


def test_append_is_all_or_nothing(tmp_path: Path) -> None:
    vault = LocalVault(tmp_path / "v", create=True)
    vault.append([SealedRecord("m1", 1, b"a")])
    with pytest.raises(RevisionConflict) as raised:
        vault.append([SealedRecord("m2", 1, b"b"), SealedRecord("m1", 1, b"c")])
    assert (raised.value.memory_id, raised.value.revision) == ("m1", 1)
    records, _ = vault.changes_since(0)
    assert records == [SealedRecord("m1", 1, b"a")]


def test_changes_since_a_cursor_across_two_connections(tmp_path: Path) -> None:
    one = LocalVault(tmp_path / "v", create=True)
    two = LocalVault(tmp_path / "v", create=False)
    one.append([SealedRecord("m1", 1, b"a")])
    seen, cursor = two.changes_since(0)
    assert [r.memory_id for r in seen] == ["m1"]
    one.append([SealedRecord("m1", 2, b"b"), SealedRecord("m2", 1, b"c")])
    seen, cursor = two.changes_since(cursor)
    assert [(r.memory_id, r.revision) for r in seen] == [("m1", 2), ("m2", 1)]
    assert two.changes_since(cursor) == ([], cursor)
    with pytest.raises(RevisionConflict):
        two.append([SealedRecord("m1", 2, b"late")])


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    vault = LocalVault(tmp_path / "v", create=True)
    vault._db.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    vault.close()
    with pytest.raises(StorageError, match="schema 99"):
        LocalVault(tmp_path / "v", create=False)
