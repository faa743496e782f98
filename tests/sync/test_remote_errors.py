"""The remote client's failure handling, against a scripted stub server on loopback.

The reference server answers correctly, so the failures a real network and a
busy server produce (401, 403, 404, 429 then success, 5xx, timeouts, refused
connections, redirects, garbage) are injected here by a tiny HTTP server that
plays back a script. The happy paths are tested against the reference server
(test_remote_storage.py). Waits are recorded, never slept, and never timed.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from squirrel_mcp.core.config import ConfigError
from squirrel_mcp.keys.crypto import KdfParams
from squirrel_mcp.storage import Account, RevisionConflict, SealedRecord, StorageError, remote, transport
from squirrel_mcp.storage.remote import RemoteStorage
from tests.sync.conftest import serve_on_loopback

API_KEY = "sqk_" + "k" * 43
MEMORY_ID = "0123456789abcdef"


@dataclass
class Reply:
    """One scripted answer: a status, headers and a JSON body; or a delay before it."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    """One request the stub received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Stub:
    """A loopback HTTP server answering with the next scripted Reply (the last one repeats)."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.seen: list[Seen] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                stub.seen.append(Seen(self.command, self.path, dict(self.headers), body))
                reply = stub.script.pop(0) if len(stub.script) > 1 else stub.script[0]
                if reply.delay:
                    time.sleep(reply.delay)
                data = (
                    b""
                    if reply.body is None
                    else (reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode())
                )
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.handler = Handler
        # Set while the fixture serves `handler` (serve_on_loopback).
        self.url = ""

    def storage(self, **kwargs: Any) -> RemoteStorage:
        """A client of this stub whose waits are recorded in `self.waits`, not slept."""
        self.waits: list[float] = []
        return RemoteStorage(self.url, API_KEY, sleep=self.waits.append, **kwargs)


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    with serve_on_loopback(server.handler) as server.url:
        yield server


def error(code: str, message: str = "", **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def account_body() -> dict[str, Any]:
    return {
        "id": "a" * 32,
        "kdf": {"alg": "scrypt", "salt": base64.b64encode(b"s" * 16).decode(), "n": 16384, "r": 8, "p": 1},
        "wrappedDataKey": base64.b64encode(b"w" * 61).decode(),
        "createdAt": "2026-01-01T00:00:00Z",
    }


def page(records: list[SealedRecord], first_seq: int = 1, more: bool = False) -> dict[str, Any]:
    return {
        "records": [
            {
                "seq": first_seq + i,
                "memoryId": r.memory_id,
                "revision": r.revision,
                "ciphertext": base64.b64encode(r.ciphertext).decode(),
                "storedAt": "2026-01-01T00:00:00Z",
            }
            for i, r in enumerate(records)
        ],
        "cursor": first_seq + len(records) - 1 if records else first_seq - 1,
        "more": more,
    }


def assert_clean(message: str, *secrets: str) -> None:
    """An error message is one line and carries no key, body or ciphertext."""
    assert "\n" not in message
    assert API_KEY not in message
    for secret in secrets:
        assert secret not in message


def test_401_is_a_clear_error_at_once_without_the_key(stub: Stub) -> None:
    stub.script = [
        Reply(401, error("unauthorized", "missing or unknown key"), {"WWW-Authenticate": "Bearer"})
    ]
    with pytest.raises(StorageError) as raised:
        stub.storage().load_account()
    message = str(raised.value)
    assert "401" in message and "SQUIRREL_API_KEY" in message and stub.url in message
    assert_clean(message)
    assert len(stub.seen) == 1  # never retried
    assert stub.seen[0].headers["Authorization"] == f"Bearer {API_KEY}"


def test_403_is_a_clear_error_at_once(stub: Stub) -> None:
    stub.script = [Reply(403, error("forbidden"))]
    with pytest.raises(StorageError, match=r"forbids this API key to read the changes \(403\)") as raised:
        stub.storage().changes_since(0)
    assert_clean(str(raised.value))
    assert len(stub.seen) == 1


def test_404_tells_no_account_from_a_wrong_address(stub: Stub) -> None:
    stub.script = [Reply(404, error("no_account"))]
    assert stub.storage().load_account() is None
    with pytest.raises(
        StorageError,
        match="holds no account for this API key: if this is a new account, run `squirrel-mcp init`;",
    ):
        stub.storage().changes_since(0)
    stub.script = [Reply(404, error("not_found"))]
    for operation in (stub.storage().load_account, lambda: stub.storage().changes_since(0)):
        with pytest.raises(StorageError, match=r"no such endpoint \(404\).*SQUIRREL_API_BASE_URL"):
            operation()
    # A 404 from something that is not a sync server at all (no JSON body).
    stub.script = [Reply(404, b"<html>nothing here</html>")]
    with pytest.raises(StorageError, match="no such endpoint"):
        stub.storage().load_account()


def test_429_waits_what_retry_after_asks_then_succeeds(stub: Stub) -> None:
    stub.script = [
        Reply(429, error("rate_limited"), {"Retry-After": "2"}),
        Reply(429, error("rate_limited"), {"Retry-After": "1"}),
        Reply(200, account_body()),
    ]
    storage = stub.storage()
    account = storage.load_account()
    assert account is not None and account.account_id == "a" * 32
    assert stub.waits == [2.0, 1.0]
    assert len(stub.seen) == 3


def test_429_asking_for_too_long_a_wait_fails_at_once(stub: Stub) -> None:
    stub.script = [Reply(429, error("rate_limited"), {"Retry-After": "3600"})]
    with pytest.raises(StorageError, match=r"rate-limiting this API key \(429\); it asks to wait 3600 s"):
        stub.storage().load_account()
    assert stub.waits == [] and len(stub.seen) == 1


def test_5xx_is_retried_with_growing_jittered_backoff_then_succeeds(stub: Stub) -> None:
    stub.script = [
        Reply(503, error("unavailable")),
        Reply(500),
        Reply(502, b"bad gateway"),
        Reply(200, page([])),
    ]
    assert stub.storage().changes_since(0) == ([], 0)
    assert len(stub.waits) == 3
    for attempt, wait in enumerate(stub.waits, start=1):
        ceiling = transport.BACKOFF_BASE * 2 ** (attempt - 1)
        assert ceiling / 2 <= wait <= ceiling


def test_5xx_gives_up_after_the_bounded_attempts(stub: Stub) -> None:
    stub.script = [Reply(500, error("internal", "boom"))]
    with pytest.raises(StorageError) as raised:
        stub.storage().changes_since(0)
    message = str(raised.value)
    assert f"failed (HTTP 500); gave up after {transport.MAX_ATTEMPTS} attempts" in message
    assert_clean(message, "boom")
    assert len(stub.seen) == transport.MAX_ATTEMPTS
    assert all(wait <= transport.BACKOFF_CAP for wait in stub.waits)


def test_a_timeout_is_retried_and_then_reported(stub: Stub) -> None:
    # The first answer comes too late for the client's read timeout; the retry is answered.
    stub.script = [Reply(200, page([]), delay=2.0), Reply(200, page([]))]
    storage = stub.storage(timeout=(5.0, 0.3))
    assert storage.changes_since(0) == ([], 0)
    assert len(stub.waits) == 1
    stub.script = [Reply(200, page([]), delay=2.0)]
    with pytest.raises(StorageError, match=r"did not answer within 0\.3 s; gave up after 5 attempts"):
        stub.storage(timeout=(5.0, 0.3)).changes_since(0)


def test_a_refused_connection_is_retried_and_then_reported() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on `port` now.
    waits: list[float] = []
    storage = RemoteStorage(f"http://127.0.0.1:{port}", API_KEY, sleep=waits.append)
    with pytest.raises(StorageError) as raised:
        storage.load_account()
    message = str(raised.value)
    assert message == (
        f"cannot reach the sync server at http://127.0.0.1:{port} (connection failed); "
        f"gave up after {transport.MAX_ATTEMPTS} attempts"
    )
    assert len(waits) == transport.MAX_ATTEMPTS - 1


def test_a_redirect_is_not_followed(stub: Stub) -> None:
    # Following it would send the key wherever the Location says.
    stub.script = [Reply(302, None, {"Location": "http://198.51.100.7/v1/account"})]
    with pytest.raises(StorageError, match=r"answered with a redirect \(302\)") as raised:
        stub.storage().load_account()
    assert "198.51.100.7" not in str(raised.value)
    assert len(stub.seen) == 1


def test_an_unreadable_answer_is_refused(stub: Stub) -> None:
    stub.script = [Reply(200, b"not json")]
    with pytest.raises(StorageError, match="sent the account in a form this client cannot read"):
        stub.storage().load_account()
    bad = page([SealedRecord(MEMORY_ID, 1, b"x" * 40)])
    bad["records"][0]["ciphertext"] = "not base64!"
    stub.script = [Reply(200, bad)]
    with pytest.raises(StorageError, match="sent the changes in a form"):
        stub.storage().changes_since(0)
    # A page that says there is more but holds nothing would loop forever.
    stub.script = [Reply(200, {"records": [], "cursor": 0, "more": True})]
    with pytest.raises(StorageError, match="sent the changes in a form"):
        stub.storage().changes_since(0)
    # A record at or before the cursor asked for is a server going backwards.
    stub.script = [Reply(200, page([SealedRecord(MEMORY_ID, 1, b"x" * 40)], first_seq=3))]
    with pytest.raises(StorageError, match="sent the changes in a form"):
        stub.storage().changes_since(5)


def test_pages_are_followed_until_the_server_has_no_more(stub: Stub) -> None:
    one = SealedRecord(MEMORY_ID, 1, b"1" * 40)
    two = SealedRecord(MEMORY_ID, 2, b"2" * 40)
    stub.script = [Reply(200, page([one], first_seq=1, more=True)), Reply(200, page([two], first_seq=2))]
    assert stub.storage().changes_since(0) == ([one, two], 2)
    assert [seen.path for seen in stub.seen] == [
        f"/v1/records?after=0&limit={remote.PAGE_LIMIT}",
        f"/v1/records?after=1&limit={remote.PAGE_LIMIT}",
    ]


def test_a_409_conflict_is_a_revision_conflict(stub: Stub) -> None:
    stub.script = [Reply(409, error("revision_conflict", "taken", memoryId=MEMORY_ID, revision=2))]
    records = [SealedRecord(MEMORY_ID, 2, b"c" * 40)]
    with pytest.raises(RevisionConflict) as raised:
        stub.storage().append(records)
    assert (raised.value.memory_id, raised.value.revision) == (MEMORY_ID, 2)
    assert len(stub.seen) == 1


def test_a_retried_append_that_had_landed_counts_as_done(stub: Stub) -> None:
    ours = SealedRecord(MEMORY_ID, 1, b"ours" * 10)
    # The first attempt is stored but its answer lost (a 502 from a proxy); the retry meets itself.
    stub.script = [
        Reply(502),
        Reply(409, error("revision_conflict", memoryId=MEMORY_ID, revision=1)),
        Reply(200, page([ours])),
    ]
    stub.storage().append([ours])
    assert [seen.method for seen in stub.seen] == ["POST", "POST", "GET"]
    # Someone else's record in that place is a real conflict.
    theirs = SealedRecord(MEMORY_ID, 1, b"them" * 10)
    stub.seen.clear()
    stub.script = [
        Reply(502),
        Reply(409, error("revision_conflict", memoryId=MEMORY_ID, revision=1)),
        Reply(200, page([theirs])),
    ]
    with pytest.raises(RevisionConflict):
        stub.storage().append([ours])


def test_create_account_reports_an_existing_one(stub: Stub) -> None:
    account = Account("a" * 32, KdfParams(salt=b"s" * 16, n=16384), b"w" * 61)
    stub.script = [Reply(409, error("account_exists"))]
    with pytest.raises(StorageError, match="already holds an account for this API key"):
        stub.storage().create_account(account)
    stub.script = [Reply(201, account_body())]
    stub.storage().create_account(account)
    sent = json.loads(stub.seen[-1].body)
    assert sent["id"] == "a" * 32 and sent["kdf"]["n"] == 16384
    assert stub.seen[-1].headers["Content-Type"] == "application/json"


def test_error_bodies_never_reach_the_message(stub: Stub) -> None:
    ciphertext = b"\x01" + b"secret-looking ciphertext bytes" * 2
    encoded = base64.b64encode(ciphertext).decode()
    stub.script = [Reply(400, error("invalid_request", f"bad ciphertext {encoded}"))]
    with pytest.raises(StorageError) as raised:
        stub.storage().append([SealedRecord(MEMORY_ID, 1, ciphertext)])
    message = str(raised.value)
    assert "refused to store the records (HTTP 400 invalid_request)" in message
    assert_clean(message, encoded, "bad ciphertext")


def test_a_long_append_goes_in_batches_of_the_contract_limit(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "MAX_APPEND", 2)
    stub.script = [Reply(201, {"stored": []})]
    stub.storage().append([SealedRecord(MEMORY_ID, n, bytes([n]) * 40) for n in range(1, 6)])
    sizes = [len(json.loads(seen.body)["records"]) for seen in stub.seen]
    assert sizes == [2, 2, 1]


def test_the_client_itself_refuses_cleartext_to_another_host() -> None:
    with pytest.raises(ConfigError, match="must use https"):
        RemoteStorage("http://sync.example.org", API_KEY)
    RemoteStorage("http://[::1]:9", API_KEY).close()
