"""Several instances on one database: a graceful stop (SIGTERM), budgets that hold across instances.

Real `squirrel-mcp-sync serve` processes on SQLite, then PostgreSQL. The stop is
driven by the test's own signals and sockets, never by waiting for a time to
pass: a request is left in flight (its body half sent) when SIGTERM comes, the
drain is long, and a second SIGTERM ends it once the checks are done.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from squirrel_mcp.storage.wire import MAX_RECORDS_PER_APPEND
from squirrel_mcp.syncserver.app import Limits
from squirrel_mcp.syncserver.database import Database
from squirrel_mcp.syncserver.keys import display_prefix, key_hash, new_key
from tests.sync.conftest import SyncServer, start_sync_server
from tests.sync.test_syncserver import new_account

WAIT_S = 60.0


def _account(server: SyncServer) -> None:
    assert server.post("/v1/account", new_account()).status_code == 201


def _second_key(server: SyncServer) -> tuple[str, int]:
    """Another key opening the server's account, made as `issue-key --for` makes it; (key, its id)."""
    database = Database(server.database_url)
    try:
        first = next(info.key_id for info in database.list_keys() if info.last_used_at is not None)
        key = new_key()
        return key, database.add_key(first, key_hash(key), display_prefix(key))
    finally:
        database.close()


def _used(server: SyncServer, key_id: int) -> bool:
    database = Database(server.database_url)
    try:
        return any(info.key_id == key_id and info.last_used_at for info in database.list_keys())
    finally:
        database.close()


def _wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"no sign of {what} within {WAIT_S:g} s"
        time.sleep(0.05)


def _read_answer(connection: socket.socket) -> tuple[int, bytes]:
    """The status and body of one HTTP/1.1 answer with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        assert chunk, "the server closed the connection before answering"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, "the server closed the connection mid-answer"
        body += chunk
    return int(lines[0].split()[1]), body


def test_sigterm_finishes_the_request_in_flight_refuses_new_ones_with_503_then_exits(
    database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    with start_sync_server(database_url, "--drain-seconds", "600", log=log) as server:
        _account(server)
        record = {"memoryId": "0123456789abcdef", "revision": 1, "ciphertext": "QUJD" * 20}
        body = json.dumps({"records": [record]}).encode()
        # A second key to the same account, never used: its first use is written to the
        # database as the request is authenticated, before its body is read. That is
        # how the test knows the request is in the application when the signal comes.
        key, key_id = _second_key(server)
        parts = urlsplit(server.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=WAIT_S) as in_flight:
            in_flight.sendall(
                b"POST /v1/records HTTP/1.1\r\nHost: sync\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body[:10]
            )
            _wait_for(lambda: _used(server, key_id), "the request reaching the application")
            server.process.send_signal(signal.SIGTERM)
            _wait_for(lambda: "refusing new requests" in log.read_text(), "the drain starting")

            refused = server.get("/v1/account")
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "unavailable"
            assert refused.headers["Retry-After"] == "1"
            assert refused.headers["Connection"] == "close"
            # A load balancer's health check sees it going.
            assert requests.get(server.url + "/v1/health", timeout=30).status_code == 503
            assert server.process.poll() is None

            in_flight.sendall(body[10:])
            status, answer = _read_answer(in_flight)
        assert status == 201, answer
        # A second signal cuts the drain short: the server exits, by the signal re-raised.
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=WAIT_S) == -signal.SIGTERM
    database = Database(server.database_url)
    try:
        slot = database.slot_for_key(key_hash(server.api_key))
        assert slot is not None
        stored = database.changes(slot, 0, MAX_RECORDS_PER_APPEND, 2**20).records
    finally:
        database.close()
    assert [(r.memory_id, r.revision) for r in stored] == [("0123456789abcdef", 1)]


def test_without_a_drain_sigterm_exits_at_once_after_the_requests_in_flight(
    database_url: str, tmp_path: Path
) -> None:
    with start_sync_server(database_url, log=tmp_path / "server.log") as server:
        assert server.get("/v1/account").status_code == 404
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=WAIT_S) == -signal.SIGTERM
        with pytest.raises(requests.ConnectionError):
            requests.get(server.url + "/v1/health", timeout=30)


def test_each_of_n_instances_allows_its_share_of_a_keys_budget(database_url: str, tmp_path: Path) -> None:
    # A burst of 4 across 2 instances is 2 each; refilled one per 100 s, so the third is over.
    with start_sync_server(
        database_url, "--rate-limit", "0.01", "--burst", "4", "--instances", "2", log=tmp_path / "s.log"
    ) as server:
        statuses = [server.get("/v1/account").status_code for _ in range(3)]
    assert statuses == [404, 404, 429]


def test_a_share_divides_every_budget_and_rounds_bursts_up() -> None:
    limits = Limits(rate=10.0, burst=60, bad_key_rate=1.0, bad_key_burst=20, body_timeout=5.0)
    assert limits.share(1) == limits
    third = limits.share(3)
    assert (third.rate, third.burst, third.bad_key_rate, third.bad_key_burst) == (10 / 3, 20, 1 / 3, 7)
    assert third.body_timeout == 5.0
    assert Limits(burst=1).share(4).burst == 1
    with pytest.raises(ValueError, match="at least one instance"):
        limits.share(0)


def test_good_keys_an_instance_has_not_seen_yet_never_use_up_their_address_budget(
    sync_server: SyncServer,
) -> None:
    # Behind a load balancer every client has its address, and an instance just started
    # has seen no key work: 30 good keys, new to the server, one request each, from one
    # address whose budget for keys not seen to work is 20 at once.
    database = Database(sync_server.database_url)
    try:
        fresh = []
        for _ in range(30):
            key = new_key()
            database.add_slot(key_hash(key), display_prefix(key))
            fresh.append(key)
    finally:
        database.close()
    assert [sync_server.get("/v1/account", key).status_code for key in fresh] == [404] * 30
    # Bad keys still spend it.
    bad = [sync_server.get("/v1/account", "sqk_" + "B" * 43).status_code for _ in range(30)]
    assert bad[0] == 401
    assert 429 in bad
