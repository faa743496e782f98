"""The reference sync server over HTTP, on SQLite and PostgreSQL: what the contract promises.

Each test runs twice (the `database_url` fixture): once on a SQLite file, once on
a fresh PostgreSQL database. The server is the real `squirrel-mcp-sync` process.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from squirrel_mcp.syncserver.validation import MAX_BODY_BYTES
from tests.sync.conftest import SyncServer, fresh_postgres_database, start_sync_server

Json = dict[str, Any]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def new_account() -> dict[str, Any]:
    return {
        "id": secrets.token_hex(16),
        "kdf": {"alg": "scrypt", "salt": b64(os.urandom(16)), "n": 2**17, "r": 8, "p": 1},
        "wrappedDataKey": b64(os.urandom(61)),
    }


def record(memory_id: str, revision: int, size: int = 64) -> dict[str, Any]:
    return {"memoryId": memory_id, "revision": revision, "ciphertext": b64(os.urandom(size))}


def memory_id() -> str:
    return secrets.token_hex(8)


def error_code(answer: requests.Response) -> str:
    body = answer.json()
    assert set(body) == {"error"}
    assert {"code", "message"} <= set(body["error"])
    return str(body["error"]["code"])


def all_changes(server: SyncServer, key: str | None = None, after: int = 0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    while True:
        page = server.get(f"/v1/records?after={after}", key).json()
        records += page["records"]
        after = page["cursor"]
        if not page["more"]:
            return records


@pytest.fixture
def account(sync_server: SyncServer) -> dict[str, Any]:
    created = new_account()
    answer = sync_server.post("/v1/account", created)
    assert answer.status_code == 201, answer.text
    return created


# Keys ------------------------------------------------------------------------


BAD_AUTHORIZATIONS = [
    None,
    "",
    "Bearer",
    "Bearer sqk_short",
    "Basic dXNlcjpwYXNz",
    "Bearer sqk_" + "A" * 43,  # well formed, never issued
    "Bearer " + "x" * 5000,
]


def test_a_missing_or_wrong_key_gets_401_and_nothing_else(sync_server: SyncServer) -> None:
    for authorization in BAD_AUTHORIZATIONS:
        headers = {} if authorization is None else {"Authorization": authorization}
        # Two requests each: 14 in all, under the 20 bad keys an address may send at once.
        for method, path in (("GET", "/v1/account"), ("POST", "/v1/records")):
            answer = requests.request(method, sync_server.url + path, headers=headers, json={}, timeout=30)
            assert answer.status_code == 401, (authorization, path)
            assert answer.headers["WWW-Authenticate"] == "Bearer"
            assert answer.json() == {
                "error": {"code": "unauthorized", "message": "a valid API key is required"}
            }


def test_the_key_is_checked_before_the_body(sync_server: SyncServer) -> None:
    answer = requests.post(sync_server.url + "/v1/records", data=b"not json", timeout=30)
    assert answer.status_code == 401


def test_the_database_keeps_the_key_hash_never_the_key(sync_server: SyncServer, account: Json) -> None:
    stored = sync_server.database_bytes()
    assert sync_server.api_key.encode() not in stored
    assert hashlib.sha256(sync_server.api_key.encode()).digest() in stored


def test_each_key_sees_only_its_own_account_and_records(sync_server: SyncServer, account: Json) -> None:
    mine = memory_id()
    assert sync_server.post("/v1/records", {"records": [record(mine, 1)]}).status_code == 201
    other = sync_server.issue_key()
    assert error_code(sync_server.get("/v1/account", other)) == "no_account"
    assert error_code(sync_server.get("/v1/records", other)) == "no_account"
    # The other key's account may even reuse the same account id: slots never meet.
    assert sync_server.post("/v1/account", {**new_account(), "id": account["id"]}, other).status_code == 201
    assert all_changes(sync_server, other) == []
    assert sync_server.post("/v1/records", {"records": [record(mine, 1)]}, other).status_code == 201
    assert [r["memoryId"] for r in all_changes(sync_server)] == [mine]
    assert sync_server.get("/v1/account").json()["wrappedDataKey"] == account["wrappedDataKey"]


# Account ---------------------------------------------------------------------


def test_an_account_is_created_once_and_read_back_as_stored(sync_server: SyncServer) -> None:
    assert sync_server.get("/v1/account").status_code == 404
    assert error_code(sync_server.get("/v1/account")) == "no_account"
    created = new_account()
    answer = sync_server.post("/v1/account", created)
    assert answer.status_code == 201
    body = answer.json()
    assert body.pop("createdAt").endswith("Z")
    assert body == created
    fetched = sync_server.get("/v1/account").json()
    assert fetched == answer.json()

    again = sync_server.post("/v1/account", new_account())
    assert again.status_code == 409
    assert error_code(again) == "account_exists"
    assert sync_server.get("/v1/account").json() == fetched


def test_two_racing_creations_store_exactly_one_account(sync_server: SyncServer) -> None:
    statuses: list[int] = []
    candidates = [new_account() for _ in range(8)]

    def create(body: dict[str, Any]) -> None:
        statuses.append(sync_server.post("/v1/account", body).status_code)

    threads = [threading.Thread(target=create, args=(body,)) for body in candidates]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [201] + [409] * 7
    assert sync_server.get("/v1/account").json()["id"] in {body["id"] for body in candidates}


# Records ---------------------------------------------------------------------


def test_records_need_the_account_first(sync_server: SyncServer) -> None:
    answer = sync_server.post("/v1/records", {"records": [record(memory_id(), 1)]})
    assert answer.status_code == 404
    assert error_code(answer) == "no_account"


def test_appended_records_come_back_in_order_with_their_bytes(sync_server: SyncServer, account: Json) -> None:
    first, second = memory_id(), memory_id()
    batch = [record(first, 1), record(second, 1), record(first, 2)]
    answer = sync_server.post("/v1/records", {"records": batch})
    assert answer.status_code == 201
    stored = answer.json()["stored"]
    assert [(s["seq"], s["memoryId"], s["revision"]) for s in stored] == [
        (1, first, 1),
        (2, second, 1),
        (3, first, 2),
    ]
    changes = all_changes(sync_server)
    assert [(c["seq"], c["memoryId"], c["revision"], c["ciphertext"]) for c in changes] == [
        (i + 1, r["memoryId"], r["revision"], r["ciphertext"]) for i, r in enumerate(batch)
    ]
    assert all(c["storedAt"] == stored[0]["storedAt"] for c in changes)
    # A tombstone is one more sealed revision: nothing about it differs here.
    assert sync_server.post("/v1/records", {"records": [record(second, 2)]}).json()["stored"][0]["seq"] == 4
    assert sync_server.get("/v1/records?after=3").json()["records"][0]["memoryId"] == second


def test_an_empty_append_stores_nothing(sync_server: SyncServer, account: Json) -> None:
    answer = sync_server.post("/v1/records", {"records": []})
    assert answer.status_code == 201
    assert answer.json() == {"stored": []}
    assert sync_server.get("/v1/records").json() == {"records": [], "cursor": 0, "more": False}


def test_a_taken_revision_is_a_409_naming_it_and_nothing_of_the_batch_is_stored(
    sync_server: SyncServer, account: Json
) -> None:
    taken = memory_id()
    assert (
        sync_server.post("/v1/records", {"records": [record(taken, 1), record(taken, 2)]}).status_code == 201
    )
    fresh = memory_id()
    answer = sync_server.post(
        "/v1/records", {"records": [record(fresh, 1), record(taken, 2), record(fresh, 2)]}
    )
    assert answer.status_code == 409
    assert answer.json()["error"] | {"message": ""} == {
        "code": "revision_conflict",
        "message": "",
        "memoryId": taken,
        "revision": 2,
    }
    assert [r["memoryId"] for r in all_changes(sync_server)] == [taken, taken]
    # The next append gets the next sequence number: the refused one used none.
    assert sync_server.post("/v1/records", {"records": [record(fresh, 1)]}).json()["stored"][0]["seq"] == 3


def test_the_same_pair_twice_in_one_batch_is_a_conflict(sync_server: SyncServer, account: Json) -> None:
    twice = memory_id()
    answer = sync_server.post("/v1/records", {"records": [record(twice, 1), record(twice, 1)]})
    assert answer.status_code == 409
    assert answer.json()["error"]["memoryId"] == twice
    assert all_changes(sync_server) == []


def test_concurrent_writers_of_the_same_next_revision_one_wins_and_seq_has_no_gaps(
    sync_server: SyncServer, account: Json
) -> None:
    contested = memory_id()
    assert sync_server.post("/v1/records", {"records": [record(contested, 1)]}).status_code == 201
    outcomes: dict[int, list[int]] = {revision: [] for revision in range(2, 7)}
    lock = threading.Lock()

    def write(revision: int) -> None:
        status = sync_server.post("/v1/records", {"records": [record(contested, revision)]}).status_code
        with lock:
            outcomes[revision].append(status)

    # Four writers of each next revision at once, one revision after another (the
    # server takes only the next revision, so a later one waits for its round).
    for revision in outcomes:
        threads = [threading.Thread(target=write, args=(revision,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for statuses in outcomes.values():
        assert sorted(statuses) == [201, 409, 409, 409]
    changes = all_changes(sync_server)
    assert [c["seq"] for c in changes] == list(range(1, 7))
    assert sorted(c["revision"] for c in changes) == list(range(1, 7))


def test_changes_are_paged_by_count_and_the_cursor_misses_nothing(
    sync_server: SyncServer, account: Json
) -> None:
    batch = [record(memory_id(), 1) for _ in range(25)]
    assert sync_server.post("/v1/records", {"records": batch}).status_code == 201
    pages = []
    after = 0
    while True:
        page = sync_server.get(f"/v1/records?after={after}&limit=10").json()
        pages.append([r["seq"] for r in page["records"]])
        assert page["cursor"] == (page["records"][-1]["seq"] if page["records"] else after)
        after = page["cursor"]
        if not page["more"]:
            break
    assert pages == [list(range(1, 11)), list(range(11, 21)), list(range(21, 26))]
    assert sync_server.get("/v1/records?after=25").json() == {"records": [], "cursor": 25, "more": False}
    # A cursor past the end (another server's, say) is simply "nothing new".
    assert sync_server.get("/v1/records?after=1000").json() == {"records": [], "cursor": 1000, "more": False}


def test_a_page_stops_near_4_mib_of_ciphertext_but_always_moves_forward(
    sync_server: SyncServer, account: Json
) -> None:
    big = 49_152  # the largest record the contract allows
    for _ in range(4):
        batch = [record(memory_id(), 1, size=big) for _ in range(25)]
        assert sync_server.post("/v1/records", {"records": batch}).status_code == 201
    first = sync_server.get("/v1/records").json()
    # 100 records of 48 KiB are 4.7 MiB: the first page holds 85 (85 * 48 KiB <= 4 MiB < 86 * 48 KiB).
    assert len(first["records"]) == 85
    assert first["more"] is True
    rest = sync_server.get(f"/v1/records?after={first['cursor']}").json()
    assert [r["seq"] for r in rest["records"]] == list(range(86, 101))
    assert rest["more"] is False


# Validation ------------------------------------------------------------------

SECRET = "plaintext-that-must-never-be-echoed"


def bad_accounts() -> list[tuple[str, Any]]:
    good = new_account()
    kdf = good["kdf"]
    return [
        ("not an object", [good]),
        ("missing field", {k: v for k, v in good.items() if k != "wrappedDataKey"}),
        ("extra field", {**good, "passphrase": SECRET}),
        ("uppercase id", {**good, "id": good["id"].upper()}),
        ("short id", {**good, "id": "abc"}),
        ("id with newline", {**good, "id": good["id"] + "\n"}),
        ("other kdf", {**good, "kdf": {**kdf, "alg": "argon2"}}),
        ("n not a power of two", {**good, "kdf": {**kdf, "n": 100_000}}),
        ("n too small", {**good, "kdf": {**kdf, "n": 2**10}}),
        ("r as string", {**good, "kdf": {**kdf, "r": "8"}}),
        ("p as bool", {**good, "kdf": {**kdf, "p": True}}),
        ("p fractional", {**good, "kdf": {**kdf, "p": 1.5}}),
        ("salt 15 bytes", {**good, "kdf": {**kdf, "salt": b64(os.urandom(15))}}),
        ("salt 17 bytes", {**good, "kdf": {**kdf, "salt": b64(os.urandom(17))}}),
        ("salt not base64", {**good, "kdf": {**kdf, "salt": SECRET[:22] + "=="}}),
        ("wrapped key urlsafe", {**good, "wrappedDataKey": good["wrappedDataKey"].replace("+", "-") + "-"}),
        ("wrapped key too short", {**good, "wrappedDataKey": b64(os.urandom(30))}),
        ("wrapped key too long", {**good, "wrappedDataKey": b64(os.urandom(2000))}),
    ]


def test_a_bad_account_body_is_400_without_echoing_it(sync_server: SyncServer) -> None:
    for name, body in bad_accounts():
        answer = sync_server.post("/v1/account", body)
        assert answer.status_code == 400, name
        assert error_code(answer) == "invalid_request"
        assert SECRET not in answer.text
    assert sync_server.get("/v1/account").status_code == 404, "nothing was stored"


def bad_appends() -> list[tuple[str, Any]]:
    good = record(memory_id(), 1)
    return [
        ("no records", {}),
        ("records not a list", {"records": good}),
        ("extra field", {"records": [{**good, "text": SECRET}]}),
        # An uppercase hex letter, whatever the random id: an id of digits only has none to raise.
        ("memory id uppercase", {"records": [{**good, "memoryId": good["memoryId"][:15].upper() + "F"}]}),
        ("memory id too long", {"records": [{**good, "memoryId": good["memoryId"] + "00"}]}),
        ("revision 0", {"records": [{**good, "revision": 0}]}),
        ("revision too big", {"records": [{**good, "revision": 2**31}]}),
        ("revision as string", {"records": [{**good, "revision": "1"}]}),
        ("ciphertext too short", {"records": [{**good, "ciphertext": b64(os.urandom(20))}]}),
        ("ciphertext too long", {"records": [{**good, "ciphertext": b64(os.urandom(262_147))}]}),
        ("ciphertext unpadded", {"records": [{**good, "ciphertext": b64(os.urandom(40)).rstrip("=") + "A"}]}),
        ("ciphertext plaintext", {"records": [{**good, "ciphertext": SECRET * 2}]}),
        ("too many records", {"records": [record(memory_id(), 1, 29) for _ in range(501)]}),
    ]


def test_a_bad_append_is_400_and_stores_nothing(sync_server: SyncServer, account: Json) -> None:
    for name, body in bad_appends():
        answer = sync_server.post("/v1/records", body)
        assert answer.status_code == 400, name
        assert error_code(answer) == "invalid_request"
        assert SECRET not in answer.text
    assert all_changes(sync_server) == []


def test_bad_paging_parameters_are_400(sync_server: SyncServer, account: Json) -> None:
    for query in (
        "after=-1",
        "after=1.5",
        "after=abc",
        "after=99999999999999999999",
        "limit=0",
        "limit=1001",
    ):
        answer = sync_server.get(f"/v1/records?{query}")
        assert answer.status_code == 400, query
        assert error_code(answer) == "invalid_request"


def test_bodies_must_be_json_and_at_most_32_mib(sync_server: SyncServer, account: Json) -> None:
    url = sync_server.url + "/v1/records"
    headers = sync_server.headers()
    as_text = requests.post(url, data=b'{"records": []}', headers={**headers, "Content-Type": "text/plain"})
    assert as_text.status_code == 415
    assert error_code(as_text) == "unsupported_media_type"
    json_headers = {**headers, "Content-Type": "application/json"}
    utf16 = '{"records": []}'.encode("utf-16")
    for broken in (b"{", b'{"records": [NaN]}', b"\xff\xfe", b"[" * 100_000, utf16):
        answer = requests.post(url, data=broken, headers=json_headers, timeout=30)
        assert answer.status_code == 400
        assert error_code(answer) == "invalid_request"
    huge = requests.post(url, data=b" " * (MAX_BODY_BYTES + 1), headers=json_headers, timeout=60)
    assert huge.status_code == 413
    assert error_code(huge) == "payload_too_large"

    def chunks() -> Any:  # no Content-Length: the server must count as it reads
        for _ in range(MAX_BODY_BYTES // 2**20 + 1):
            yield b" " * 2**20

    streamed = requests.post(url, data=chunks(), headers=json_headers, timeout=60)
    assert streamed.status_code == 413


def test_unknown_paths_and_methods_get_the_one_error_shape(sync_server: SyncServer) -> None:
    missing = requests.get(sync_server.url + "/v1/nothing", timeout=30)
    assert missing.status_code == 404
    assert error_code(missing) == "not_found"
    wrong = requests.delete(sync_server.url + "/v1/account", headers=sync_server.headers(), timeout=30)
    assert wrong.status_code == 405
    assert error_code(wrong) == "method_not_allowed"
    assert set(wrong.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


# Rate limits -----------------------------------------------------------------


def test_a_key_over_its_budget_gets_429_with_retry_after(database_url: str, tmp_path: Path) -> None:
    # 2 requests at once, then one per 100 s: the third request in a row is over.
    with start_sync_server(
        database_url, "--rate-limit", "0.01", "--burst", "2", log=tmp_path / "server.log"
    ) as server:
        statuses = [server.get("/v1/account") for _ in range(3)]
        assert [s.status_code for s in statuses[:2]] == [404, 404]
        limited = statuses[2]
        assert limited.status_code == 429
        assert error_code(limited) == "rate_limited"
        assert 1 <= int(limited.headers["Retry-After"]) <= 100
        # Another key has its own budget.
        assert server.get("/v1/account", server.issue_key()).status_code == 404


def test_an_address_sending_bad_keys_is_slowed_down(sync_server: SyncServer) -> None:
    # The good key works once before, so the server knows it.
    assert sync_server.get("/v1/account").status_code == 404
    # 20 bad keys at once, then one a second: 60 in a row cannot all be 401.
    statuses = [
        requests.get(
            sync_server.url + "/v1/account", headers=sync_server.headers("sqk_" + "B" * 43)
        ).status_code
        for _ in range(60)
    ]
    assert statuses[0] == 401
    assert 429 in statuses
    assert set(statuses) == {401, 429}
    # A key seen to work is not affected by its address's bad ones.
    assert sync_server.get("/v1/account").status_code == 404


# Files and command line ------------------------------------------------------


def test_a_sqlite_database_is_private(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/new-dir/sync.sqlite3"
    with start_sync_server(url, log=tmp_path / "server.log") as server:
        assert server.post("/v1/account", new_account()).status_code == 201
        path = Path(urlsplit(url).path)
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert file.exists()
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file


def test_health(sync_server: SyncServer) -> None:
    assert requests.get(sync_server.url + "/v1/health", timeout=30).json() == {"status": "ok"}


# PostgreSQL going away -------------------------------------------------------


@pytest.fixture
def postgres_server(tmp_path: Path) -> Iterator[tuple[SyncServer, str]]:
    """A server on a fresh PostgreSQL database, and the database's name."""
    with fresh_postgres_database() as url, start_sync_server(url, log=tmp_path / "server.log") as server:
        yield server, urlsplit(url).path.lstrip("/")


def admin(statement: str) -> None:
    import psycopg

    with psycopg.connect(os.environ["SQUIRREL_TEST_POSTGRES_URL"], autocommit=True) as connection:
        connection.execute(statement)


def admin_count(query: str) -> int:
    import psycopg

    with psycopg.connect(os.environ["SQUIRREL_TEST_POSTGRES_URL"], autocommit=True) as connection:
        row = connection.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_connections_cut_by_postgresql_are_replaced_unnoticed(
    postgres_server: tuple[SyncServer, str],
) -> None:
    server, name = postgres_server
    assert server.post("/v1/account", new_account()).status_code == 201
    # What a PostgreSQL restart or an idle timeout does to the server's pooled connections.
    admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
    # Only once they are gone is every pooled connection certainly a dead one.
    deadline = time.monotonic() + 60
    while admin_count(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'"):
        assert time.monotonic() < deadline, "the terminated backends never went away"
        time.sleep(0.05)
    assert server.post("/v1/records", {"records": [record(memory_id(), 1)]}).status_code == 201
    assert len(all_changes(server)) == 1


def test_a_database_gone_is_503_unavailable_not_a_crash(postgres_server: tuple[SyncServer, str]) -> None:
    server, name = postgres_server
    assert server.post("/v1/account", new_account()).status_code == 201
    admin(f"DROP DATABASE {name} WITH (FORCE)")
    for answer in (
        server.get("/v1/account"),
        server.post("/v1/records", {"records": [record(memory_id(), 1)]}),
    ):
        assert answer.status_code == 503
        assert error_code(answer) == "unavailable"
    # Health asks the database at most every few seconds: it notices on its next check.
    deadline = time.monotonic() + 120
    while (health := requests.get(server.url + "/v1/health", timeout=30)).status_code == 200:
        assert time.monotonic() < deadline, "health never noticed the database was gone"
        time.sleep(0.5)
    assert health.status_code == 503
    assert error_code(health) == "unavailable"
    assert name not in server.log.read_text(), "the database's name is not logged"
