"""A hostile or broken sync server cannot exhaust, hang or mislead the client.

Through the real `squirrel-mcp` command and server:

- a hostile server on loopback that answers a pull with a body far past the
  client's cap (with and without a Content-Length), with `more: true` forever,
  or a byte at a time: each run ends with one clear line, in bounded memory
  (the peak RSS of the process is measured), and in bounded time (the
  operation's deadline);
- the reference server with an empty account slot: serve, export and import
  refuse in one line and create nothing; only `init` creates the account;
- a memory whose newest revision is garbage (appended in the local vault, or by
  a key holder on the reference server): served at its newest readable
  revision with a note saying so; update and delete write above the garbage.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import StorageError, remote, transport
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp.storage.remote import RemoteStorage
from tests.conftest import (
    PASSPHRASE,
    call,
    call_error,
    run_cli,
    secrets_of_this_test,
    served_error,
    server_params,
)
from tests.sync.conftest import SyncServer, serve_on_loopback

API_KEY = "sqk_" + "h" * 43
CHEAP_KDF = crypto.KdfParams(salt=b"h" * crypto.SALT_BYTES, n=2**14)
MiB = 2**20
# The hostile bodies: far past the client's cap, so reading one whole would show in the RSS.
HUGE = 256 * MiB
# What the command may use at its peak: the interpreter and its imports (about 110 MiB
# here) and one capped page read twice over; a 256 MiB body read whole is far above.
RSS_BOUND = 200 * MiB
# The length of the trickled body: a byte a second, it would take over two hours.
TRICKLED = 8_000
# A hostile server stops trickling after this long whatever happens, so no test thread
# outlives its test by much; the client's deadline is well inside it.
TRICKLE_FOR = 3 * transport.OPERATION_DEADLINE


def account_body() -> dict[str, Any]:
    """A real account whose data key the test passphrase unwraps (cheap KDF)."""
    account_id = secrets.token_hex(16)
    wrapped = crypto.wrap_data_key(PASSPHRASE, CHEAP_KDF, account_id, crypto.new_data_key())
    return {
        "id": account_id,
        "kdf": {
            "alg": "scrypt",
            "salt": base64.b64encode(CHEAP_KDF.salt).decode(),
            "n": CHEAP_KDF.n,
            "r": CHEAP_KDF.r,
            "p": CHEAP_KDF.p,
        },
        "wrappedDataKey": base64.b64encode(wrapped).decode(),
        "createdAt": "2026-01-01T00:00:00Z",
    }


def one_record_page(after: int) -> bytes:
    seq = after + 1
    record = {
        "seq": seq,
        "memoryId": f"{seq:016x}",
        "revision": 1,
        "ciphertext": base64.b64encode(b"x" * 40).decode(),
        "storedAt": "2026-01-01T00:00:00Z",
    }
    return json.dumps({"records": [record], "cursor": seq, "more": True}).encode()


class Hostile:
    """A loopback server that answers the account honestly and a pull the way `mode` says.

    huge-declared  200 with a Content-Length of HUGE (and then that many bytes)
    huge-streamed  200 without a length, HUGE bytes until the connection closes
    endless        a page of one record with `more: true`, every time
    trickle        200 with a small length, then the body a byte a second
    trickle-head   the status line, then the headers a byte a second
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.account = account_body()
        self.pages = 0
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    if self.path.startswith("/v1/account"):
                        self._send(json.dumps(hostile.account).encode())
                    elif self.path.startswith("/v1/records"):
                        hostile.pages += 1
                        hostile.answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up: what the test wants

            def _send(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.handler = Handler
        self.url = ""

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        write = handler.wfile.write
        if self.mode == "endless":
            after = int(handler.path.split("after=")[1].split("&")[0])
            data = one_record_page(after)
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            write(data)
            return
        if self.mode == "trickle-head":
            write(b"HTTP/1.1 200 OK\r\n")
            for _ in range(int(TRICKLE_FOR)):
                write(b"X")
                handler.wfile.flush()
                time.sleep(1)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if self.mode == "huge-declared":
            handler.send_header("Content-Length", str(HUGE))
        elif self.mode == "trickle":
            # Well within the cap: only the time it takes is wrong.
            handler.send_header("Content-Length", str(TRICKLED))
        handler.end_headers()
        if self.mode == "trickle":
            for _ in range(int(TRICKLE_FOR)):
                write(b" ")
                handler.wfile.flush()
                time.sleep(1)
            return
        # A JSON page that never ends: its opening, then spaces, a MiB at a time.
        write(b'{"records": [')
        blank = b" " * MiB
        for _ in range(HUGE // MiB):
            write(blank)


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[Hostile]:
    server = Hostile(request.param)
    with serve_on_loopback(server.handler) as server.url:
        yield server


def hostile_env(tmp_path: Path, url: str) -> dict[str, str]:
    return {
        "SQUIRREL_API_BASE_URL": url,
        "SQUIRREL_API_KEY": API_KEY,
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        "SQUIRREL_MCP_PLUGINS": "",
    }


# Starts the command from a small process of its own and reports the command's peak RSS.
# Linux carries a process's high-water RSS across exec, and a child forked straight from
# pytest starts with pytest's (hundreds of MiB after other tests): measured that way, the
# figure would depend on what ran before. Forked from this launcher, it starts near 10 MiB.
LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def run_measured(env: dict[str, str], *args: str) -> tuple[int, str, int]:
    """Run `squirrel-mcp ARGS`: its exit status, stderr and peak RSS in bytes.

    No time limit of the test's own stops it: the command must end by itself
    (the subprocess timeout is a backstop far past the client's deadline).
    """
    secrets_of_this_test().add_env(env)
    result = subprocess.run(
        [sys.executable, "-c", LAUNCHER, sys.executable, "-m", "squirrel_mcp", *args],
        env={"PATH": os.environ["PATH"], **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=4 * transport.OPERATION_DEADLINE,
        check=True,
    )
    text = result.stderr.decode(errors="replace")
    secrets_of_this_test().texts.append((f"stderr of squirrel-mcp {' '.join(args)}", text))
    # ru_maxrss is in KiB on Linux.
    peak_kib, status = (int(word) for word in result.stdout.split())
    return status, text, peak_kib * 1024


def assert_one_line(stderr: str, *expected: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    for part in expected:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("hostile", ["huge-declared", "huge-streamed"], indirect=True)
def test_a_body_past_the_cap_is_refused_in_bounded_memory(hostile: Hostile, tmp_path: Path) -> None:
    status, stderr, peak = run_measured(hostile_env(tmp_path, hostile.url), "export")
    assert status == 1
    line = assert_one_line(
        stderr,
        f"the sync server at {hostile.url} sent a page of changes larger than "
        f"{remote.MAX_PAGE_BYTES / MiB:.1f} MiB, the most this client reads; refused",
    )
    assert "records" not in line
    assert peak < RSS_BOUND, f"peak RSS {peak / MiB:.0f} MiB"
    print(f"{hostile.mode}: refused, peak RSS {peak / MiB:.0f} MiB")


@pytest.mark.parametrize("hostile", ["endless"], indirect=True)
def test_a_server_answering_more_forever_is_stopped(hostile: Hostile, tmp_path: Path) -> None:
    status, stderr, peak = run_measured(hostile_env(tmp_path, hostile.url), "export")
    assert status == 1
    assert_one_line(
        stderr,
        f"the sync server at {hostile.url} sent more than {remote.MAX_PULL_PAGES:,} pages of changes "
        "in one pull, more than any real account holds; refused",
    )
    # The page past the cap is never asked for.
    assert hostile.pages == remote.MAX_PULL_PAGES
    assert peak < RSS_BOUND, f"peak RSS {peak / MiB:.0f} MiB"
    print(f"endless: stopped after {hostile.pages} pages, peak RSS {peak / MiB:.0f} MiB")


@pytest.mark.parametrize("hostile", ["trickle"], indirect=True)
def test_a_trickled_body_is_cut_off_at_the_deadline(hostile: Hostile, tmp_path: Path) -> None:
    # The real deadline: the command ends by itself, or the backstop kills it and this fails.
    started = time.monotonic()
    status, stderr, _ = run_measured(hostile_env(tmp_path, hostile.url), "export")
    took = time.monotonic() - started
    assert status == 1
    assert_one_line(
        stderr,
        f"the sync server at {hostile.url} did not finish answering within "
        f"{transport.OPERATION_DEADLINE:g} s; gave up after 1 attempt",
    )
    print(f"trickle: cut off after {took:.0f} s")


@pytest.mark.parametrize("hostile", ["trickle-head", "trickle"], indirect=True)
def test_a_trickle_in_the_headers_or_the_body_meets_the_deadline(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same deadline holds while the headers arrive (a shorter one, in process, to keep this quick)."""
    storage = RemoteStorage(hostile.url, API_KEY)
    try:
        assert storage.load_account() is not None
        with monkeypatch.context() as patched:
            patched.setattr(transport, "OPERATION_DEADLINE", 2.0)
            with pytest.raises(
                StorageError, match=r"did not finish answering within 2 s; gave up after 1 attempt"
            ):
                storage.changes_since(0)
        # The connection the watch shut down is not reused: the next operation works.
        assert storage.load_account() is not None
    finally:
        storage.close()


# --- only `init` creates an account on a sync server -----------------------------------


def remote_env(tmp_path: Path, server: SyncServer, key: str) -> dict[str, str]:
    return {**hostile_env(tmp_path, server.url), "SQUIRREL_API_KEY": key}


@pytest.mark.anyio
async def test_serve_export_and_import_never_create_an_account(
    sync_server: SyncServer, tmp_path: Path
) -> None:
    """A server answering "no account" (a new key, or a server that lost its database) is reported."""
    key = sync_server.issue_key()
    env = remote_env(tmp_path, sync_server, key)
    expected = (
        f"squirrel-mcp: the sync server at {sync_server.url} holds no account for this API key: "
        "if this is a new account, run `squirrel-mcp init`; "
        "if it held your memories, the server has lost them"
    )
    export_file = tmp_path / "empty.json"
    export_file.write_text(
        json.dumps(
            {
                "format": "squirrel-mcp-export",
                "version": 1,
                "exportedAt": "2026-01-01T00:00:00Z",
                "exportedBy": "test",
                "memories": [],
            }
        )
    )
    assert await served_error(server_params(env)) == expected
    assert sync_server.get("/v1/account", key).status_code == 404
    for args in (("export",), ("import", str(export_file))):
        result = run_cli(env, *args, stdin=b"")
        assert result.returncode == 1, result.stderr
        assert result.stderr.decode().strip().splitlines() == [expected]
        assert sync_server.get("/v1/account", key).status_code == 404
    assert run_cli(env, "init").returncode == 0
    async with Client(server_params(env)) as client:
        saved = await call(client, "save_memory", text="Keeps a sourdough starter called Gerald")
    assert [m["id"] for m in json.loads(run_cli(env, "export").stdout)["memories"]] == [saved["memory"]["id"]]


# --- a memory whose newest revision is garbage ------------------------------------------


def make_vault(path: Path) -> None:
    vault = LocalVault(path, create=True)
    try:
        MemoryStore.create(vault, PASSPHRASE, CHEAP_KDF)
    finally:
        vault.close()


def append_garbage(vault: Path, memory_id: str) -> int:
    """A random ciphertext at the memory's next revision, written straight into SQLite; its number."""
    with sqlite3.connect(vault) as db:
        (last,) = db.execute("SELECT max(revision) FROM records WHERE memory_id = ?", (memory_id,)).fetchone()
        db.execute(
            "INSERT INTO records (memory_id, revision, ciphertext) VALUES (?, ?, ?)",
            (memory_id, last + 1, secrets.token_bytes(200)),
        )
    return int(last) + 1


async def check_served_at_the_readable_revision(
    env: dict[str, str],
    memory_id: str,
    bad: int,
    text: str,
    broken: str | None,
    add_garbage: Callable[[], None],
) -> None:
    """get/context/search/update/delete/restore on a memory whose revision `bad` (its newest) is garbage."""
    async with Client(server_params(env)) as client:
        got = await call(client, "get_memory", id=memory_id, history=True)
        assert got["memory"]["text"] == text and got["memory"]["revision"] == bad - 1
        assert f"Revision {bad} of this memory failed its integrity check" in got["note"]
        assert f"writes revision {bad + 1}" in got["note"]
        assert [r["revision"] for r in got["history"]] == list(range(1, bad))
        context = await call(client, "get_context")
        assert context["olderRevision"] == [memory_id]
        assert context["unreadable"] == ([broken] if broken else [])
        found = await call(client, "search_memory", query="sourdough starter")
        assert [hit["id"] for hit in found["results"]] == [memory_id]

        updated = await call(client, "update_memory", id=memory_id, text="Keeps a rye starter called Gerald")
        assert updated["memory"]["revision"] == bad + 1
        got = await call(client, "get_memory", id=memory_id)
        assert got["memory"]["text"] == "Keeps a rye starter called Gerald" and "note" not in got
        assert (await call(client, "get_context"))["olderRevision"] == []

    # Garbage again above the correction: delete and restore write above it too.
    add_garbage()
    async with Client(server_params(env)) as client:
        deleted = await call(client, "delete_memory", id=memory_id, reason="moved house")
        assert deleted["deleted"] and deleted["memory"]["revision"] == bad + 3
        restored = await call(client, "restore_memory", id=memory_id)
        assert restored["memory"]["revision"] == bad + 4
        if broken:
            # A memory none of whose revisions can be read stays unreadable by id.
            for tool in ("get_memory", "update_memory", "delete_memory"):
                extra = {"text": "A new text"} if tool == "update_memory" else {}
                error = await call_error(client, tool, id=broken, **extra)
                assert broken in error and "unreadable" in error, error


@pytest.mark.anyio
async def test_a_garbage_newest_revision_in_the_vault_falls_back_and_can_be_written_over(
    vault_env: dict[str, str],
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    make_vault(vault)
    async with Client(server_params(vault_env)) as client:
        saved = (await call(client, "save_memory", text="Keeps a sourdough starter"))["memory"]
        await call(client, "update_memory", id=saved["id"], text="Keeps a sourdough starter called Gerald")
        other = (await call(client, "save_memory", text="Owns a green kayak"))["memory"]
    bad = append_garbage(vault, saved["id"])
    # The other memory's only revision replaced by garbage: no revision of it can be read.
    with sqlite3.connect(vault) as db:
        db.execute(
            "UPDATE records SET ciphertext = ? WHERE memory_id = ?", (secrets.token_bytes(200), other["id"])
        )
    # A record replaced in place changes the log this machine saw: it writes nothing on it until
    # the log is accepted (tests/test_log_integrity.py); the appended garbage alone would not.
    assert run_cli(vault_env, "doctor", "--accept-log").returncode == 0
    await check_served_at_the_readable_revision(
        vault_env,
        saved["id"],
        bad,
        "Keeps a sourdough starter called Gerald",
        other["id"],
        lambda: append_garbage(vault, saved["id"]) and None,
    )


@pytest.mark.anyio
async def test_a_key_holder_appending_garbage_on_the_server_cannot_brick_a_memory(
    sync_server: SyncServer, tmp_path: Path
) -> None:
    env = remote_env(tmp_path, sync_server, sync_server.api_key)
    assert run_cli(env, "init").returncode == 0
    async with Client(server_params(env)) as client:
        saved = (await call(client, "save_memory", text="Keeps a sourdough starter"))["memory"]
        await call(client, "update_memory", id=saved["id"], text="Keeps a sourdough starter called Gerald")

    def garbage() -> None:
        records = sync_server.get("/v1/records").json()["records"]
        last = max(r["revision"] for r in records if r["memoryId"] == saved["id"])
        answer = sync_server.post(
            "/v1/records",
            {
                "records": [
                    {
                        "memoryId": saved["id"],
                        "revision": last + 1,
                        "ciphertext": base64.b64encode(secrets.token_bytes(200)).decode(),
                    }
                ]
            },
        )
        assert answer.status_code == 201, answer.text

    garbage()
    await check_served_at_the_readable_revision(
        env, saved["id"], 3, "Keeps a sourdough starter called Gerald", None, garbage
    )
