"""Fixtures for the sync tests: a real `squirrel-mcp-sync` process on a fresh database.

    database_url   a fresh, empty database: SQLite in tmp_path, and (the same test
                   again) a PostgreSQL database made for this test and dropped after
    sync_server    `squirrel-mcp-sync serve` on a free loopback port over that
                   database, with one API key already issued (SyncServer below)
    start_sync_server(database_url, *args)
                   the same as a context manager, for tests that need other options

PostgreSQL comes from SQUIRREL_TEST_POSTGRES_URL, a superuser URL on a throwaway
cluster (`eval "$(bash .ci/postgres start)"`; `nox -s tests` starts one itself).
Unset, the PostgreSQL half of each test is skipped, saying so; set but unusable,
it fails. With SQUIRREL_TEST_POSTGRES_REQUIRED=1 (as .ci/run sets) unset fails too,
so CI cannot pass without having run them.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

POSTGRES_ENV = "SQUIRREL_TEST_POSTGRES_URL"
POSTGRES_REQUIRED_ENV = "SQUIRREL_TEST_POSTGRES_REQUIRED"
KEY_PATTERN = re.compile(r"sqk_[A-Za-z0-9_-]{43}")
_SERVING = re.compile(r"serving (http://\S+) \((\w+)\)")
START_TIMEOUT_S = 60
# High enough that no functional test meets the per-key budget; the rate-limit
# tests start their own server with a low one.
TEST_RATE = ("--rate-limit", "100000", "--burst", "100000")


def sync_command(*args: str) -> list[str]:
    """argv running the installed `squirrel-mcp-sync` with `args`."""
    return [sys.executable, "-m", "squirrel_mcp.syncserver", *args]


def issue_key(database_url: str) -> str:
    """A new API key for `database_url`, through `squirrel-mcp-sync issue-key`."""
    done = subprocess.run(
        sync_command("issue-key"),
        env={**os.environ, "SQUIRREL_SYNC_DATABASE": database_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    assert KEY_PATTERN.fullmatch(key), "issue-key printed something other than one key"
    return key


@dataclass
class SyncServer:
    """A running reference server: its base URL, one issued key, its database."""

    url: str
    api_key: str
    database_url: str
    dialect: str
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def issue_key(self) -> str:
        """Another API key (a new, empty account slot) on this server's database."""
        return issue_key(self.database_url)

    def headers(self, key: str | None = None) -> dict[str, str]:
        """Authorization header for `key` (default: the issued one)."""
        return {"Authorization": f"Bearer {key or self.api_key}"}

    def get(self, path: str, key: str | None = None, **kwargs: object) -> requests.Response:
        """GET `path` (e.g. "/v1/account") with the key."""
        return requests.get(self.url + path, headers=self.headers(key), timeout=30, **kwargs)  # type: ignore[arg-type]

    def post(self, path: str, body: object, key: str | None = None) -> requests.Response:
        """POST `body` as JSON to `path` with the key."""
        return requests.post(self.url + path, json=body, headers=self.headers(key), timeout=60)

    def database_bytes(self) -> bytes:
        """Everything the database holds, raw: every file (SQLite) or every cell (PostgreSQL).

        For a test that looks for plaintext, keys or passphrases in what the
        server stored.
        """
        if self.dialect == "sqlite":
            path = Path(urlsplit(self.database_url).path)
            return b"".join(
                Path(f"{path}{suffix}").read_bytes()
                for suffix in ("", "-wal", "-shm")
                if Path(f"{path}{suffix}").exists()
            )
        import psycopg

        chunks = []
        with psycopg.connect(self.database_url) as connection:
            for table in ("sync_meta", "slots", "api_keys", "records"):
                for row in connection.execute(f"SELECT * FROM {table}"):
                    for cell in row:
                        chunks.append(cell if isinstance(cell, bytes) else str(cell).encode())
        return b"\n".join(chunks)


def _postgres_admin_url() -> str:
    url = os.environ.get(POSTGRES_ENV)
    if url:
        return url
    if os.environ.get(POSTGRES_REQUIRED_ENV) == "1":
        pytest.fail(f"{POSTGRES_REQUIRED_ENV}=1 but {POSTGRES_ENV} is unset")
    pytest.skip(f'{POSTGRES_ENV} is unset (eval "$(bash .ci/postgres start)" sets it; nox -s tests does)')


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new empty PostgreSQL database on the test cluster; dropped afterwards."""
    admin_url = _postgres_admin_url()
    import psycopg

    name = f"squirrel_test_{secrets.token_hex(6)}"
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f"CREATE DATABASE {name}")
    except psycopg.Error as error:
        pytest.fail(f"{POSTGRES_ENV} is set but PostgreSQL cannot be used: {error}")
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL: SQLite, then PostgreSQL (see the module docstring)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/sync-db/sync.sqlite3"
    else:
        with fresh_postgres_database() as url:
            yield url


@contextmanager
def start_sync_server(
    database_url: str, *args: str, log: Path | None = None, preexec_fn: Callable[[], None] | None = None
) -> Iterator[SyncServer]:
    """Run `squirrel-mcp-sync serve` on a free loopback port; stop it on exit.

    `preexec_fn` runs in the child before the server starts (to set its resource limits).
    """
    key = issue_key(database_url)
    if log is None:
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"squirrel-sync-{secrets.token_hex(4)}.log"
    with log.open("wb") as sink:
        # The database URL goes by environment, as docs/sync-server.md advises.
        process = subprocess.Popen(
            sync_command("serve", "--port", "0", *TEST_RATE, *args),
            env={**os.environ, "SQUIRREL_SYNC_DATABASE": database_url},
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        match = None
        while match is None:
            match = _SERVING.search(log.read_text(errors="replace"))
            if process.poll() is not None:
                raise AssertionError(f"the sync server exited early:\n{log.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the sync server did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        server = SyncServer(match.group(1), key, database_url, match.group(2), log, process)
        # Listening is announced just before uvicorn serves; wait until it answers.
        while True:
            try:
                requests.get(server.url + "/v1/health", timeout=5)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def sync_server(database_url: str, tmp_path: Path) -> Iterator[SyncServer]:
    """The reference server on a fresh database (SQLite, then PostgreSQL), one key issued."""
    with start_sync_server(database_url, log=tmp_path / "sync-server.log") as server:
        yield server


@contextmanager
def serve_on_loopback(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` from a thread on a free loopback port; yields the base URL, stops on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
