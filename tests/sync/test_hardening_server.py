"""The reference sync server against hostile clients: each test mounts one attack on the real process.

- slowloris: dozens of half-sent requests on a server with 64 file descriptors;
  a normal request is still answered and no "Too many open files" is logged;
  trickled headers and bodies are cut off at their deadlines;
- a body just over the limit is refused (413) unread, and the largest append a
  client can make fits under it;
- a flood of bad keys reaches the database only at the address budget's rate,
  and /v1/health asks the database at most every few seconds;
- a record that is not its memory's next revision is refused (409), so no key
  holder can push a memory to a revision no client can follow;
- scrypt parameters that would cost too much memory or work are refused (400).

Database accesses are made visible, without timing, by breaking the database
under the running server (renaming a table): any request that reaches it then
fails with 500 or 503.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import resource
import secrets
import select
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from squirrel_mcp.core import models
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.wire import CIPHERTEXT_CHARS, MAX_RECORDS_PER_APPEND
from squirrel_mcp.syncserver.app import HEALTH_CHECK_INTERVAL_S
from squirrel_mcp.syncserver.validation import MAX_BODY_BYTES
from tests.sync.conftest import SyncServer, start_sync_server

Json = dict[str, Any]
FILE_LIMIT = 64
# Generous waits: the machine may be loaded; only outcomes are asserted, never durations.
PATIENCE_S = 120


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def new_account(n: int = 2**17, r: int = 8, p: int = 1) -> Json:
    return {
        "id": secrets.token_hex(16),
        "kdf": {"alg": "scrypt", "salt": b64(os.urandom(16)), "n": n, "r": r, "p": p},
        "wrappedDataKey": b64(os.urandom(61)),
    }


def record(memory_id: str, revision: int, size: int = 64) -> Json:
    return {"memoryId": memory_id, "revision": revision, "ciphertext": b64(os.urandom(size))}


def all_changes(server: SyncServer) -> list[Json]:
    records: list[Json] = []
    after = 0
    while True:
        page = server.get(f"/v1/records?after={after}").json()
        records += page["records"]
        after = page["cursor"]
        if not page["more"]:
            return records


@contextmanager
def limited_server(tmp_path: Path, *args: str) -> Iterator[SyncServer]:
    """`squirrel-mcp-sync serve` on SQLite with at most FILE_LIMIT open files (ulimit -n)."""

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))

    database_url = f"sqlite:///{tmp_path}/sync-db/sync.sqlite3"
    log = tmp_path / "sync-server.log"
    with start_sync_server(database_url, *args, log=log, preexec_fn=limit_files) as server:
        yield server


def address(server: SyncServer) -> tuple[str, int]:
    parts = urlsplit(server.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def open_socket(server: SyncServer, first_bytes: bytes) -> socket.socket | None:
    """A connection that sent `first_bytes`; None if the server refused it at once."""
    try:
        connection = socket.create_connection(address(server), timeout=PATIENCE_S)
        connection.sendall(first_bytes)
        return connection
    except OSError:
        return None


def read_to_end(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset ends it too)."""
    connection.settimeout(PATIENCE_S)
    received = b""
    while True:
        try:
            chunk = connection.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


def closed_or_answered(connection: socket.socket, trickle: bytes, limit: int) -> tuple[bytes, int]:
    """Send `trickle` once a tenth of a second until the server answers or closes, or `limit` sent.

    Returns what the server sent back (empty if it just closed) and how many
    trickled bytes went out.
    """
    sent = 0
    deadline = time.monotonic() + PATIENCE_S
    while sent < limit and time.monotonic() < deadline:
        readable, _, _ = select.select([connection], [], [], 0.1)
        if readable:
            return read_to_end(connection), sent
        try:
            connection.sendall(trickle)
        except OSError:  # reset or broken pipe: the server closed it
            return b"", sent
        sent += len(trickle)
    raise AssertionError(f"the server neither answered nor closed after {sent} trickled bytes")


# Slowloris ------------------------------------------------------------------------


def test_seventy_half_sent_requests_do_not_starve_a_normal_one_on_64_file_descriptors(
    tmp_path: Path,
) -> None:
    # Deadlines far away, so that the cap on connections, not a timeout, is what serves the
    # normal request here.
    with limited_server(tmp_path, "--header-timeout", "600", "--body-timeout", "600") as server:
        assert "at most" in server.log.read_text()  # the cap was lowered to fit 64 files
        attackers = []
        for index in range(70):
            if index % 7 == 0:
                # Headers whole, body trickled: inside a request, never dropped for room.
                head = (
                    "POST /v1/account HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Authorization: Bearer {server.api_key}\r\nContent-Length: 1000\r\n\r\n{{"
                )
                attackers.append(open_socket(server, head.encode()))
            else:
                attackers.append(open_socket(server, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n"))
        try:
            # The server caps open connections at 20 here: it must drop (or refuse) all but
            # 20 of the 70, and it keeps the slow bodies, which are inside a request.
            held = [a for a in attackers if a is not None]
            deadline = time.monotonic() + PATIENCE_S
            while len(held) > 20:
                assert time.monotonic() < deadline, f"{len(held)} connections still open"
                readable, _, _ = select.select(held, [], [], 1.0)
                for attacker in readable:
                    try:
                        ended = attacker.recv(65536) == b""
                    except ConnectionResetError:
                        ended = True
                    if ended:
                        held.remove(attacker)
            answer = requests.get(server.url + "/v1/health", timeout=PATIENCE_S)
            assert answer.status_code == 200
            assert answer.json() == {"status": "ok"}
            # The server kept its open files under the limit.
            assert len(os.listdir(f"/proc/{server.process.pid}/fd")) < FILE_LIMIT
        finally:
            for attacker in attackers:
                if attacker is not None:
                    attacker.close()
        # And it still serves after the flood.
        assert requests.get(server.url + "/v1/health", timeout=PATIENCE_S).status_code == 200
    log = server.log.read_text()
    assert "Too many open files" not in log
    assert "out of system resource" not in log
    assert "connections are open, the most allowed" in log


def test_trickled_headers_and_bodies_are_cut_off_at_their_deadlines(tmp_path: Path) -> None:
    with limited_server(tmp_path, "--header-timeout", "2", "--body-timeout", "2") as server:
        # Headers: one new header line at a time, never the blank line that ends them.
        headers = open_socket(server, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        assert headers is not None
        with closing(headers):
            answer, _ = closed_or_answered(headers, b"X-A: b\r\n", limit=10**9)
            assert answer == b""  # closed: no request arrived, so nothing is owed

        # A body announced as 100,000 bytes and sent one byte at a time.
        head = (
            "POST /v1/account HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {server.api_key}\r\nContent-Length: 100000\r\n\r\n{{"
        )
        body = open_socket(server, head.encode())
        assert body is not None
        with closing(body):
            answer, sent = closed_or_answered(body, b" ", limit=100_000)
            assert sent < 100_000
            if answer:  # the 408 is sent, then the connection closed
                assert answer.startswith(b"HTTP/1.1 408 ")
                assert b'"request_timeout"' in answer
                assert b"connection: close" in answer.lower()
        assert server.get("/v1/account").status_code == 404  # nothing was stored
    assert "Too many open files" not in server.log.read_text()


# Bodies ---------------------------------------------------------------------------


def test_a_body_just_over_the_limit_is_refused_unread(sync_server: SyncServer) -> None:
    assert sync_server.post("/v1/account", new_account()).status_code == 201
    # Announced: refused on its Content-Length, before a byte of it is read.
    head = (
        "POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {sync_server.api_key}\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    )
    connection = open_socket(sync_server, head.encode() + b"not json")
    assert connection is not None
    with closing(connection):
        answer = read_to_end(connection)  # the connection is closed after the answer
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b'"payload_too_large"' in answer

    # Streamed with no length: counted as it comes, refused at one byte past the limit. It
    # is not JSON: had it been parsed, the answer would be 400.
    def chunks() -> Iterator[bytes]:
        for _ in range(MAX_BODY_BYTES // 2**20):
            yield b"x" * 2**20
        yield b"x"

    streamed = requests.post(
        sync_server.url + "/v1/records",
        data=chunks(),
        headers={**sync_server.headers(), "Content-Type": "application/json"},
        timeout=PATIENCE_S,
    )
    assert streamed.status_code == 413
    assert streamed.json()["error"]["code"] == "payload_too_large"
    assert all_changes(sync_server) == []


def _largest_revision() -> models.Revision:
    wide = "\U0001f600"  # four bytes in UTF-8
    return models.Revision(
        id="0123456789abcdef",
        entity=wide * models.MAX_ENTITY,
        text=wide * models.MAX_TEXT,
        tags=[chr(0x10000 + i) + wide * (models.MAX_TAG - 1) for i in range(models.MAX_TAGS)],
        keywords=[chr(0x10100 + i) + wide * (models.MAX_TAG - 1) for i in range(models.MAX_KEYWORDS)],
        category="preference",
        createdAt="2026-01-01T00:00:00.000Z",
        updatedAt="2026-01-01T00:00:00.000Z",
        revision=2**31 - 1,
        change="corrected",
        deleted=False,
        reason=wide * models.MAX_REASON,
    )


def test_the_largest_append_a_client_can_make_fits_the_limits(sync_server: SyncServer) -> None:
    sealed = crypto.seal(os.urandom(32), _largest_revision().model_dump_json().encode(), b"ad")
    assert len(b64(sealed)) <= CIPHERTEXT_CHARS[1]
    assert sync_server.post("/v1/account", new_account()).status_code == 201
    # 500 records at the contract's largest size, as the client encodes them.
    largest = CIPHERTEXT_CHARS[1] // 4 * 3
    batch = [record(secrets.token_hex(8), 1, size=largest) for _ in range(MAX_RECORDS_PER_APPEND)]
    body = json.dumps({"records": batch}).encode()
    assert len(body) <= MAX_BODY_BYTES
    answer = requests.post(
        sync_server.url + "/v1/records",
        data=body,
        headers={**sync_server.headers(), "Content-Type": "application/json"},
        timeout=PATIENCE_S,
    )
    assert answer.status_code == 201, answer.text
    assert len(answer.json()["stored"]) == MAX_RECORDS_PER_APPEND


# Unauthenticated load ---------------------------------------------------------------


def _rename_table(server: SyncServer, old: str, new: str) -> None:
    """Rename a table under the running server, so requests that reach it fail."""
    if server.dialect == "sqlite":
        with closing(sqlite3.connect(urlsplit(server.database_url).path, timeout=30)) as connection:
            connection.execute(f"ALTER TABLE {old} RENAME TO {new}")
            connection.commit()
    else:
        import psycopg

        with psycopg.connect(server.database_url, autocommit=True) as connection:
            connection.execute(f"ALTER TABLE {old} RENAME TO {new}")


def test_bad_keys_reach_the_database_only_at_the_address_budget(sync_server: SyncServer) -> None:
    _rename_table(sync_server, "api_keys", "api_keys_away")
    bad = {"Authorization": "Bearer sqk_" + "B" * 43}
    started = time.monotonic()
    answers = [
        requests.get(sync_server.url + "/v1/account", headers=bad, timeout=PATIENCE_S) for _ in range(100)
    ]
    elapsed = time.monotonic() - started
    statuses = [answer.status_code for answer in answers]
    # Each bad key that reached the database failed there (no api_keys table): 500 or 503.
    reached = sum(status in (500, 503) for status in statuses)
    assert set(statuses) <= {429, 500, 503}
    # The address budget: 20 at once, then one a second.
    assert reached <= 20 + int(elapsed) + 1
    limited = [answer for answer in answers if answer.status_code == 429]
    assert len(limited) >= 100 - (20 + int(elapsed) + 1)
    assert all(int(answer.headers["Retry-After"]) >= 1 for answer in limited)


def test_health_asks_the_database_at_most_every_few_seconds(sync_server: SyncServer) -> None:
    # The database is broken and mended between health calls: were each call to ask it,
    # the answers would alternate. Each change of answer needs a new check.
    answers = []
    broken = False
    started = time.monotonic()
    for _ in range(30):
        answers.append(requests.get(sync_server.url + "/v1/health", timeout=PATIENCE_S).status_code)
        if broken:
            _rename_table(sync_server, "meta_away", "sync_meta")
        else:
            _rename_table(sync_server, "sync_meta", "meta_away")
        broken = not broken
    elapsed = time.monotonic() - started
    assert set(answers) <= {200, 503}
    changes = sum(a != b for a, b in itertools.pairwise(answers))
    assert changes <= elapsed / HEALTH_CHECK_INTERVAL_S + 1
    # Health does reflect the database, once its last check is old enough.
    if not broken:
        _rename_table(sync_server, "sync_meta", "meta_away")
    deadline = time.monotonic() + PATIENCE_S
    while requests.get(sync_server.url + "/v1/health", timeout=PATIENCE_S).status_code != 503:
        assert time.monotonic() < deadline, "health never noticed the broken database"
        time.sleep(0.5)


# Revisions -----------------------------------------------------------------------


def test_only_a_memorys_next_revision_is_stored(sync_server: SyncServer) -> None:
    assert sync_server.post("/v1/account", new_account()).status_code == 201
    memory = secrets.token_hex(8)

    # The attack: a far revision for a new memory would leave it with no readable next one.
    far = sync_server.post("/v1/records", {"records": [record(memory, 2**31 - 1)]})
    assert far.status_code == 409
    assert far.json()["error"] | {"message": ""} == {
        "code": "revision_conflict",
        "message": "",
        "memoryId": memory,
        "revision": 2**31 - 1,
    }
    assert "next revision is 1" in far.json()["error"]["message"]
    assert all_changes(sync_server) == []

    # Consecutive revisions of one memory in one batch are fine.
    assert (
        sync_server.post(
            "/v1/records", {"records": [record(memory, 1), record(memory, 2), record(memory, 3)]}
        ).status_code
        == 201
    )
    # A gap, a taken revision, a repeat within a batch: each refused, nothing of the batch stored.
    other = secrets.token_hex(8)
    for batch in (
        [record(other, 1), record(memory, 5)],
        [record(other, 1), record(memory, 3)],
        [record(other, 1), record(memory, 4), record(memory, 4)],
        [record(other, 2)],
    ):
        answer = sync_server.post("/v1/records", {"records": batch})
        assert answer.status_code == 409
        assert answer.json()["error"]["code"] == "revision_conflict"
    assert [(c["memoryId"], c["revision"]) for c in all_changes(sync_server)] == [
        (memory, 1),
        (memory, 2),
        (memory, 3),
    ]
    # The next one is taken.
    assert sync_server.post("/v1/records", {"records": [record(memory, 4)]}).status_code == 201


# Key derivation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "r", "p", "rule"),
    [
        (2**20, 32, 1, "need more than 256 MiB (128·N·r)"),
        (2**17, 8, 16, "cost more than N·r·p = 2^22"),
    ],
)
def test_costly_scrypt_parameters_are_refused(
    sync_server: SyncServer, n: int, r: int, p: int, rule: str
) -> None:
    answer = sync_server.post("/v1/account", new_account(n, r, p))
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_request"
    assert rule in answer.json()["error"]["message"]
    assert sync_server.get("/v1/account").status_code == 404
