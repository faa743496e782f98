"""The remote backend against the reference server on loopback (SQLite, then PostgreSQL).

The same Storage behaviour the local vault has (tests/test_storage.py), over
HTTP; then a MemoryStore on it, with every request body recorded to show that
no plaintext leaves the machine.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from squirrel_mcp.book.errors import ConflictError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import Account, RevisionConflict, SealedRecord, StorageError, remote, transport
from squirrel_mcp.storage.deadline import WatchedAdapter
from squirrel_mcp.storage.remote import RemoteStorage
from tests.sync.conftest import SyncServer, start_sync_server

PASSPHRASE = "correct horse battery staple"
# Cheap scrypt for tests: the cost is the KDF's, not what is tested here.
CHEAP_KDF = crypto.KdfParams(salt=b"0123456789abcdef", n=2**14, r=8, p=1)


class RecordingAdapter(WatchedAdapter):
    """A requests transport that keeps every request it sends (method, URL, headers, body)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        self.sent.append(request)
        return super().send(request, *args, **kwargs)

    def bodies(self) -> bytes:
        """Every request's URL, headers and body, as one blob to grep."""
        parts = []
        for request in self.sent:
            parts.append(f"{request.method} {request.url}".encode())
            parts.extend(f"{name}: {value}".encode() for name, value in request.headers.items())
            body = request.body or b""
            parts.append(body if isinstance(body, bytes) else body.encode())
        return b"\n".join(parts)


def recording_storage(server: SyncServer, key: str | None = None) -> tuple[RemoteStorage, RecordingAdapter]:
    adapter = RecordingAdapter()
    session = requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return RemoteStorage(server.url, key or server.api_key, session=session), adapter


@pytest.fixture
def storage(sync_server: SyncServer) -> Iterator[RemoteStorage]:
    client = RemoteStorage(sync_server.url, sync_server.api_key)
    try:
        yield client
    finally:
        client.close()


def account() -> Account:
    return Account(secrets.token_hex(16), CHEAP_KDF, b"\x01" + secrets.token_bytes(60))


def record(memory_id: str, revision: int, body: bytes = b"") -> SealedRecord:
    return SealedRecord(memory_id, revision, b"\x01" + (body or secrets.token_bytes(40)))


def test_an_empty_slot_has_no_account_until_one_is_created(storage: RemoteStorage) -> None:
    assert storage.load_account() is None
    with pytest.raises(StorageError, match="holds no account for this API key"):
        storage.changes_since(0)
    created = account()
    storage.create_account(created)
    assert storage.load_account() == created
    with pytest.raises(StorageError, match="already holds an account for this API key"):
        storage.create_account(account())
    assert storage.load_account() == created


def test_append_and_changes_since_a_cursor_across_two_clients(
    storage: RemoteStorage, sync_server: SyncServer
) -> None:
    storage.create_account(account())
    other = RemoteStorage(sync_server.url, sync_server.api_key)
    first = [record("0000000000000001", 1), record("0000000000000002", 1)]
    storage.append(first)
    seen, cursor = other.changes_since(0)
    assert seen == first
    later = record("0000000000000001", 2)
    storage.append([later])
    assert other.changes_since(cursor) == ([later], cursor + 1)
    assert other.changes_since(cursor + 1) == ([], cursor + 1)
    other.close()


def test_a_taken_revision_is_a_conflict_and_stores_nothing(storage: RemoteStorage) -> None:
    storage.create_account(account())
    storage.append([record("0000000000000001", 1)])
    before = storage.changes_since(0)
    with pytest.raises(RevisionConflict) as raised:
        storage.append([record("0000000000000002", 1), record("0000000000000001", 1)])
    assert (raised.value.memory_id, raised.value.revision) == ("0000000000000001", 1)
    assert storage.changes_since(0) == before  # all or none: memory 2 was not stored either


def test_pages_are_followed(storage: RemoteStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    storage.create_account(account())
    records = [record(f"{n:016x}", 1) for n in range(1, 8)]
    storage.append(records)
    monkeypatch.setattr(remote, "PAGE_LIMIT", 3)
    assert storage.changes_since(0) == (records, 7)
    assert storage.changes_since(2) == (records[2:], 7)


def test_keys_open_only_their_own_slot(sync_server: SyncServer) -> None:
    mine = RemoteStorage(sync_server.url, sync_server.api_key)
    theirs = RemoteStorage(sync_server.url, sync_server.issue_key())
    mine.create_account(account())
    mine.append([record("0000000000000001", 1)])
    assert theirs.load_account() is None
    theirs.create_account(account())
    assert theirs.changes_since(0) == ([], 0)


def test_a_wrong_key_gets_a_clear_401(sync_server: SyncServer) -> None:
    wrong = "sqk_" + "A" * 43
    for key in (wrong, "not-a-key"):
        client = RemoteStorage(sync_server.url, key)
        with pytest.raises(StorageError) as raised:
            client.load_account()
        message = str(raised.value)
        assert "did not accept SQUIRREL_API_KEY (401)" in message
        assert key not in message


def test_a_memory_store_on_the_server_sends_no_plaintext(sync_server: SyncServer) -> None:
    storage, adapter = recording_storage(sync_server)
    store = MemoryStore.create(storage, PASSPHRASE, kdf=CHEAP_KDF)
    texts = ["Zephyrine keeps bees on the roof of the Oberbaumbrücke", "allergic to pistachio gelato"]
    saved = store.save(
        entity="Marguerite", text=texts[0], category="fact", tags=["apiary"], keywords=["hive"]
    )
    store.save(entity="Marguerite", text=texts[1], category="profile", tags=["health"], keywords=["nuts"])
    store.update(saved.id, changes={"text": "Zephyrine moved the bees to Tempelhof"}, reason="moved hives")
    store.delete(saved.id, reason="sold the bees")
    store.restore(saved.id)

    # The same account opens on a second client, and everything decrypts there.
    second = MemoryStore.unlock(RemoteStorage(sync_server.url, sync_server.api_key), PASSPHRASE)
    assert [r.text for r in second.history(saved.id)] == [
        texts[0],
        "Zephyrine moved the bees to Tempelhof",
        "Zephyrine moved the bees to Tempelhof",
        "Zephyrine moved the bees to Tempelhof",
    ]
    assert {m.text for m in second.current()} == {"Zephyrine moved the bees to Tempelhof", texts[1]}

    sent = adapter.bodies()
    assert b"POST" in sent and b"/v1/records" in sent  # the recorder did see the writes
    for plaintext in [*texts, "Tempelhof", "Marguerite", "apiary", "hive", "moved hives", "sold the bees"]:
        assert plaintext.encode() not in sent, plaintext
        assert plaintext.encode("unicode_escape") not in sent, plaintext
    assert PASSPHRASE.encode() not in sent
    # Nor does the server hold any, or the passphrase.
    held = sync_server.database_bytes()
    for plaintext in [*texts, "Tempelhof", "Marguerite", "apiary", PASSPHRASE]:
        assert plaintext.encode() not in held, plaintext
    # The only secret on the wire is the API key, in the Authorization header.
    assert all(r.headers["Authorization"] == f"Bearer {sync_server.api_key}" for r in adapter.sent)


def test_the_data_key_never_leaves_wrapped(sync_server: SyncServer) -> None:
    storage, adapter = recording_storage(sync_server)
    store = MemoryStore.create(storage, PASSPHRASE, kdf=CHEAP_KDF)
    sent = adapter.bodies()
    key = store._log._key  # the one place a test reads it: to show it is not on the wire
    for form in (key, key.hex().encode(), base64.b64encode(key)):
        assert form not in sent


def test_a_concurrent_correction_is_a_conflict_not_an_overwrite(sync_server: SyncServer) -> None:
    one = MemoryStore.create(RemoteStorage(sync_server.url, sync_server.api_key), PASSPHRASE, kdf=CHEAP_KDF)
    two = MemoryStore.unlock(RemoteStorage(sync_server.url, sync_server.api_key), PASSPHRASE)
    saved = one.save(entity="user", text="lives in Lyon", category="profile", tags=[], keywords=[])
    assert two.get(saved.id).revision == 1
    one.update(saved.id, changes={"text": "lives in Nantes"}, reason="moved", expected_revision=1)
    # Two read revision 1 and asks to correct it: refused, after a pull, and told why.
    with pytest.raises(ConflictError, match="is at revision 2, not 1"):
        two.update(saved.id, changes={"text": "lives in Paris"}, reason=None, expected_revision=1)
    # Without an expected revision it lands on top of the latest: history keeps both.
    two.update(saved.id, changes={"text": "lives in Paris"}, reason="moved again")
    # One pulled less than PULL_INTERVAL ago, so its reads may lag by that much; a pull catches up.
    one.refresh()
    assert [r.text for r in one.history(saved.id)] == ["lives in Lyon", "lives in Nantes", "lives in Paris"]


def test_a_race_lost_at_the_server_is_reported_as_a_conflict(sync_server: SyncServer) -> None:
    one = MemoryStore.create(RemoteStorage(sync_server.url, sync_server.api_key), PASSPHRASE, kdf=CHEAP_KDF)
    two = MemoryStore.unlock(RemoteStorage(sync_server.url, sync_server.api_key), PASSPHRASE)
    saved = one.save(entity="user", text="first", category="note", tags=[], keywords=[])
    two.refresh()
    one.update(saved.id, changes={"text": "from one"}, reason=None)
    # Two has not pulled since: its append of revision 2 meets the server's 409.
    refresh = two.refresh
    two.refresh = lambda: None  # type: ignore[method-assign]
    try:
        with pytest.raises(ConflictError, match="changed by another process"):
            two.update(saved.id, changes={"text": "from two"}, reason=None)
    finally:
        two.refresh = refresh  # type: ignore[method-assign]
    two.refresh()
    assert two.get(saved.id).text == "from one"
    assert [r.text for r in two.history(saved.id)] == ["first", "from one"]


def test_the_servers_rate_limit_is_waited_out(database_url: str, tmp_path: Path) -> None:
    """Against a real budget of 2 requests a second: every operation lands, after the waits asked."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    rate = ("--rate-limit", "2", "--burst", "2")
    with start_sync_server(database_url, *rate, log=tmp_path / "sync.log") as server:
        storage = RemoteStorage(server.url, server.api_key, sleep=sleep)
        storage.create_account(account())
        records = [record(f"{n:016x}", 1) for n in range(1, 7)]
        for one in records:
            storage.append([one])
        assert storage.changes_since(0) == (records, 6)
    assert waits, "the server never said 429: the budget was not reached"
    assert all(0 < wait <= transport.RETRY_AFTER_CAP for wait in waits)


def test_what_each_write_costs_on_the_wire(sync_server: SyncServer) -> None:
    """A save is one append and one pull; a correction pulls first, so its check sees the latest."""
    storage, adapter = recording_storage(sync_server)
    store = MemoryStore.create(storage, PASSPHRASE, kdf=CHEAP_KDF)

    def requests_of(operation: Any) -> list[str]:
        adapter.sent.clear()
        operation()
        return [f"{r.method} {(r.path_url or '').split('?')[0]}" for r in adapter.sent]

    saved = store.save(entity="user", text="a", category="note", tags=[], keywords=[])
    assert requests_of(
        lambda: store.save(entity="user", text="b", category="note", tags=[], keywords=[])
    ) == ["POST /v1/records", "GET /v1/records"]
    assert requests_of(lambda: store.update(saved.id, changes={"text": "c"}, reason=None)) == [
        "GET /v1/records",
        "POST /v1/records",
        "GET /v1/records",
    ]
