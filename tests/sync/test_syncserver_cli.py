"""`squirrel-mcp-sync` as an operator meets it, and the pieces that need no server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from squirrel_mcp.syncserver import keys
from squirrel_mcp.syncserver.ratelimit import MAX_BUCKETS, RateLimiter
from tests.sync.conftest import KEY_PATTERN, issue_key, start_sync_server, sync_command


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "SQUIRREL_SYNC_DATABASE"}
    return subprocess.run(
        sync_command(*args),
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_issue_key_prints_one_new_key_each_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sync.sqlite3"
    first, second = issue_key(url), issue_key(url)
    assert KEY_PATTERN.fullmatch(first)
    assert first != second
    assert (tmp_path / "sync.sqlite3").read_bytes().count(first.encode()) == 0


def test_a_database_is_required_and_its_url_checked(tmp_path: Path) -> None:
    missing = run("serve")
    assert missing.returncode == 2
    assert "SQUIRREL_SYNC_DATABASE" in missing.stderr
    relative = run("issue-key", "--database", "sqlite://relative.db")
    assert relative.returncode == 1
    assert "sqlite:///ABSOLUTE/PATH" in relative.stderr
    unknown = run("issue-key", "--database", "mysql://somewhere/db")
    assert unknown.returncode == 1


def test_an_unreachable_postgresql_is_reported_without_its_password() -> None:
    # Port 9 on loopback: nothing listens, so the connection is refused at once.
    done = run("serve", env={"SQUIRREL_SYNC_DATABASE": "postgresql://squirrel:hunter2-secret@127.0.0.1:9/db"})
    assert done.returncode == 1
    assert "cannot connect to the postgresql database" in done.stderr
    assert "hunter2-secret" not in done.stderr + done.stdout


def test_records_survive_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sync.sqlite3"
    account = {
        "id": "0" * 32,
        "kdf": {"alg": "scrypt", "salt": "A" * 22 + "==", "n": 16384, "r": 8, "p": 1},
        "wrappedDataKey": "B" * 84,
    }
    with start_sync_server(url, log=tmp_path / "one.log") as server:
        assert server.post("/v1/account", account).status_code == 201
        assert server.post(
            "/v1/records", {"records": [{"memoryId": "1" * 16, "revision": 1, "ciphertext": "C" * 40}]}
        ).ok
        key = server.api_key
    with start_sync_server(url, log=tmp_path / "two.log") as again:
        page = again.get("/v1/records", key).json()
        assert [(r["seq"], r["ciphertext"]) for r in page["records"]] == [(1, "C" * 40)]
        assert again.get("/v1/account", key).json()["id"] == "0" * 32


def test_the_startup_line_names_the_url_and_database_kind_but_not_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/private-name.sqlite3"
    with start_sync_server(url, log=tmp_path / "server.log") as server:
        assert server.dialect == "sqlite"
        assert server.url.startswith("http://127.0.0.1:")
    assert "private-name" not in (tmp_path / "server.log").read_text()


def test_bearer_header_parsing() -> None:
    key = keys.new_key()
    assert keys.key_from_header(f"Bearer {key}") == key
    assert keys.key_from_header(f"bearer {key}") == key
    assert keys.key_from_header(f"Bearer {key} extra") is None
    assert keys.key_from_header(f"Bearer {key}\n") == key  # surrounding whitespace is not part of it
    assert keys.key_from_header(f"Token {key}") is None
    assert keys.key_from_header(f"Bearer {key[:-1]}") is None
    assert keys.key_from_header(None) is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_buckets_refill_at_their_rate_and_say_how_long_to_wait() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("a") == 1  # half a second for the next token, rounded up
    assert limiter.take("b") is None  # buckets are per key
    clock.now += 0.5
    assert limiter.take("a") is None
    assert limiter.take("a") == 1
    clock.now += 100
    assert [limiter.take("a") for _ in range(4)] == [None, None, None, 1]  # never more than the burst


def test_slow_rates_give_long_waits() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=0.01, burst=1, clock=clock)
    assert limiter.take("a") is None
    assert limiter.take("a") == 100


def test_the_bucket_table_stays_bounded() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=0.001, burst=1, clock=clock)
    for address in range(MAX_BUCKETS + 50):
        assert limiter.take(address) is None  # a new address starts full
    assert len(limiter._buckets) <= MAX_BUCKETS
    assert limiter.take(MAX_BUCKETS + 49) is not None  # the newest are still tracked
