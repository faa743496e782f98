"""When a MemoryStore pulls: reads within the storage's pull_interval skip it, writes never do.

Counted, not timed: the storage below wraps a real local vault, counts its
`changes_since` calls, and takes its pull_interval from the test (an hour, so
no read in a test is ever "late"; 0, the local vault's own, pulls every time).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from squirrel_mcp.book.errors import ConflictError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import Account, SealedRecord
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp.storage.remote import PULL_INTERVAL, RemoteStorage

CHEAP_KDF = crypto.KdfParams(salt=b"0123456789abcdef", n=2**14, r=8, p=1)


class CountingVault:
    """A LocalVault that counts pulls and has the pull_interval it is given."""

    def __init__(self, path: Path, pull_interval: float) -> None:
        self.vault = LocalVault(path, create=True)
        self.pull_interval = pull_interval
        self.pulls = 0

    def load_account(self) -> Account | None:
        return self.vault.load_account()

    def create_account(self, account: Account) -> None:
        self.vault.create_account(account)

    def append(self, records: list[SealedRecord]) -> None:
        self.vault.append(records)

    def changes_since(self, cursor: int) -> tuple[list[SealedRecord], int]:
        self.pulls += 1
        return self.vault.changes_since(cursor)

    def close(self) -> None:
        self.vault.close()


def test_the_remote_bound_is_the_documented_one() -> None:
    assert RemoteStorage.pull_interval == PULL_INTERVAL == 2.0
    assert LocalVault.pull_interval == 0.0


def test_reads_within_the_interval_do_not_pull_and_writes_always_do(tmp_path: Path) -> None:
    storage = CountingVault(tmp_path / "v", pull_interval=3600)
    store = MemoryStore.create(storage, "passphrase", kdf=CHEAP_KDF)
    assert storage.pulls == 1  # the first look, at unlock
    saved = store.save(entity="user", text="first", category="note", tags=[], keywords=[])
    assert storage.pulls == 2  # a write pulls after appending, to pick up its own record
    store.current()
    store.get(saved.id)
    store.history(saved.id)
    store.refresh_if_stale()
    assert storage.pulls == 2  # fresh: reads use the view

    store.update(saved.id, changes={"text": "second"}, reason=None)
    assert storage.pulls == 4  # before the conflict check, and after the append
    store.delete(saved.id, reason=None)
    store.restore(saved.id)
    assert storage.pulls == 8


def test_a_write_sees_what_another_writer_stored_since_the_last_pull(tmp_path: Path) -> None:
    storage = CountingVault(tmp_path / "v", pull_interval=3600)
    store = MemoryStore.create(storage, "passphrase", kdf=CHEAP_KDF)
    saved = store.save(entity="user", text="first", category="note", tags=[], keywords=[])
    other = MemoryStore.unlock(LocalVault(tmp_path / "v", create=False), "passphrase")
    other.update(saved.id, changes={"text": "from the other machine"}, reason=None)

    assert store.get(saved.id).text == "first"  # a read inside the interval may be behind...
    with pytest.raises(ConflictError, match="is at revision 2, not 1"):
        # ...but a write pulls first, so it is judged against revision 2.
        store.update(saved.id, changes={"text": "stale"}, reason=None, expected_revision=1)
    store.delete(saved.id, reason=None)
    # The delete, too, landed on top of the other machine's revision, not on the stale one.
    history = store.history(saved.id)
    assert [(r.revision, r.text, r.deleted) for r in history] == [
        (1, "first", False),
        (2, "from the other machine", False),
        (3, "from the other machine", True),
    ]


def test_an_id_the_view_has_never_seen_pulls_even_inside_the_interval(tmp_path: Path) -> None:
    storage = CountingVault(tmp_path / "v", pull_interval=3600)
    store = MemoryStore.create(storage, "passphrase", kdf=CHEAP_KDF)
    other = MemoryStore.unlock(LocalVault(tmp_path / "v", create=False), "passphrase")
    saved = other.save(entity="user", text="made elsewhere", category="note", tags=[], keywords=[])
    assert store.get(saved.id).text == "made elsewhere"


def test_the_local_vault_still_pulls_before_every_read(tmp_path: Path) -> None:
    storage = CountingVault(tmp_path / "v", pull_interval=LocalVault.pull_interval)
    store = MemoryStore.create(storage, "passphrase", kdf=CHEAP_KDF)
    before = storage.pulls
    for _ in range(3):
        store.current()
    assert storage.pulls == before + 3
