"""Start-up of the real server over stdio: it answers at once, unlocks after, and never exits on a bad unlock.

The handshake and tools/list do not wait for the unlock (scrypt, opening the
storage, pulling, decrypting, indexing); tool calls do. When the unlock fails,
the server prints its one line on stderr once and keeps serving: every tool
call is answered with that line, and nothing is written.
"""

from __future__ import annotations

import sqlite3
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import anyio
import anyio.to_thread
import pytest
from mcp import Client

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE, call, call_error, run_cli, secrets_of_this_test, server_params
from tests.sync.conftest import serve_on_loopback, start_sync_server

CHEAP_KDF = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
TOOL_COUNT = 8
# A backstop only: how long the test waits for the server to reach the held request.
REACH_WITHIN = 120.0


def server_lines() -> list[str]:
    """The stderr lines of the last server this test started (read once it has stopped)."""
    path = secrets_of_this_test().stderr_files[-1]
    return path.read_text(encoding="utf-8").strip().splitlines()


def make_vault(path: Path) -> None:
    """A vault with one memory, made through the library (cheap key derivation)."""
    vault = LocalVault(path, create=True)
    try:
        store = MemoryStore.create(vault, PASSPHRASE, CHEAP_KDF)
        store.save(entity="user", text="keeps bees on the roof", category="fact", tags=[], keywords=[])
    finally:
        vault.close()


def files_of(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


async def assert_every_call_fails_with(client: Client, expected: str) -> str:
    """Every tool, even with bad arguments, answers the one line; tools/list still answers."""
    assert len((await client.list_tools()).tools) == TOOL_COUNT
    line = await call_error(client, "get_context")
    assert expected in line
    assert line.startswith("squirrel-mcp: ")
    assert await call_error(client, "save_memory", text="keeps bees on the roof") == line
    assert await call_error(client, "search_memory", query="") == line
    assert len((await client.list_tools()).tools) == TOOL_COUNT
    return line


class HeldAccount(BaseHTTPRequestHandler):
    """A sync server that holds the account request until the test releases it, then refuses the key."""

    arrived: ClassVar[threading.Event]
    release: ClassVar[threading.Event]

    def do_GET(self) -> None:
        self.arrived.set()
        self.release.wait(REACH_WITHIN * 2)
        body = b'{"error": {"code": "unauthorized", "message": "unknown key"}}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test's output is the server's."""


@pytest.mark.anyio
async def test_the_handshake_and_tools_list_are_answered_while_the_unlock_waits(
    vault_env: dict[str, str],
) -> None:
    # The unlock needs the sync server's account; that server holds the request until released,
    # so everything answered before the release was answered while the unlock was still running.
    arrived, release = threading.Event(), threading.Event()
    handler = type("Held", (HeldAccount,), {"arrived": arrived, "release": release})
    with serve_on_loopback(handler) as url:
        env = {**vault_env, "SQUIRREL_API_BASE_URL": url, "SQUIRREL_API_KEY": "sqk_" + "u" * 43}
        try:
            async with Client(server_params(env)) as client:
                assert await anyio.to_thread.run_sync(arrived.wait, REACH_WITHIN)
                assert not release.is_set()
                tools = await client.list_tools()
                assert len(tools.tools) == TOOL_COUNT
                answers: list[str] = []

                async def first_call() -> None:
                    answers.append(await call_error(client, "get_context"))

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(first_call)
                    # Answered while the first tool call still waits for the unlock.
                    assert len((await client.list_tools()).tools) == TOOL_COUNT
                    assert answers == []
                    release.set()
                assert "did not accept SQUIRREL_API_KEY (401)" in answers[0]
                await assert_every_call_fails_with(client, answers[0])
        finally:
            release.set()
    assert server_lines() == [answers[0]]


@pytest.mark.anyio
async def test_a_wrong_passphrase_is_every_tool_calls_answer_and_nothing_is_written(
    vault_env: dict[str, str],
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    make_vault(vault)
    before = files_of(vault.parent)
    async with Client(server_params({**vault_env, "SQUIRREL_PASSPHRASE": "not the passphrase"})) as client:
        line = await assert_every_call_fails_with(client, "passphrase does not unlock this vault")
    assert server_lines() == [line]
    assert files_of(vault.parent) == before


@pytest.mark.anyio
async def test_a_damaged_vault_is_every_tool_calls_answer_and_nothing_is_written(
    vault_env: dict[str, str],
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    make_vault(vault)
    with sqlite3.connect(vault) as db:
        db.execute("UPDATE meta SET value = '{\"id\": 7' WHERE key = 'account'")
    db.close()
    before = files_of(vault.parent)
    async with Client(server_params(vault_env)) as client:
        line = await assert_every_call_fails_with(client, str(vault))
    assert server_lines() == [line]
    assert files_of(vault.parent) == before


@pytest.mark.anyio
async def test_no_passphrase_and_no_vault_creates_nothing(vault_env: dict[str, str]) -> None:
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_PASSPHRASE"}
    async with Client(server_params(env)) as client:
        line = await assert_every_call_fails_with(client, "SQUIRREL_PASSPHRASE is not set")
    assert server_lines() == [line]
    assert not Path(vault_env["SQUIRREL_VAULT"]).parent.exists()


@pytest.mark.anyio
async def test_a_vault_path_that_does_not_exist_is_every_calls_answer_and_nothing_is_made(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    """A mistyped SQUIRREL_VAULT is never made a new, empty vault that the agent would believe."""
    typo = tmp_path / "vaults" / "vualt.sqlite3"
    env = {**vault_env, "SQUIRREL_VAULT": str(typo)}
    async with Client(server_params(env)) as client:
        line = await assert_every_call_fails_with(
            client, f"there is no vault at {typo}, the path SQUIRREL_VAULT"
        )
        for tool, arguments in (("list_memories", {}), ("get_memory", {"id": "0123456789abcdef"})):
            assert await call_error(client, tool, **arguments) == line
    assert server_lines() == [line]
    assert "nothing was created" in line and "squirrel-mcp init" in line
    assert not typo.parent.exists() and not Path(vault_env["SQUIRREL_VAULT"]).parent.exists()
    # The commands refuse the same path in the same words, the page among them.
    for command in (("list",), ("ui", "--no-browser")):
        ran = run_cli(env, *command)
        assert (ran.returncode, ran.stderr.decode()) == (1, f"{line}\n"), command
    assert not typo.parent.exists()


@pytest.mark.anyio
async def test_a_first_start_at_the_default_location_makes_the_vault_and_says_so_once(
    vault_env: dict[str, str],
) -> None:
    # SQUIRREL_VAULT unset: the default vault of this XDG_DATA_HOME, which vault_env names.
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_VAULT"}
    vault = Path(vault_env["SQUIRREL_VAULT"])
    async with Client(server_params(env)) as client:
        first = await call(client, "get_context")
        again = await call(client, "get_context")
        searched = await call(client, "search_memory", query="bees")
    assert (
        first["note"] == f"Created a new vault at {vault} as this server started: it holds no memories yet."
    )
    assert again.get("note") is None and searched.get("note") is None
    assert server_lines() == [f"squirrel-mcp: created a new vault at {vault}"]
    assert vault.exists()


COUNTS = (
    "SELECT (SELECT count(*) FROM slots), (SELECT count(*) FROM slots WHERE account_id IS NOT NULL), "
    "(SELECT count(*) FROM records)"
)


def record_counts(database: Path) -> tuple[int, ...]:
    """How many slots the sync server's database holds, how many with an account, how many records."""
    with sqlite3.connect(database) as db:
        counts = tuple(db.execute(COUNTS).fetchone())
    db.close()
    return counts


@pytest.mark.anyio
async def test_a_key_the_sync_server_refuses_is_every_tool_calls_answer(
    tmp_path: Path, vault_env: dict[str, str]
) -> None:
    database = tmp_path / "sync-db" / "sync.sqlite3"
    with start_sync_server(f"sqlite:///{database}", log=tmp_path / "sync-server.log") as server:
        remote = {**vault_env, "SQUIRREL_API_BASE_URL": server.url, "SQUIRREL_API_KEY": server.api_key}
        assert run_cli(remote, "init").returncode == 0
        before = record_counts(database)
        refused = {**remote, "SQUIRREL_API_KEY": "sqk_" + "r" * 43}
        async with Client(server_params(refused)) as client:
            line = await assert_every_call_fails_with(client, "did not accept SQUIRREL_API_KEY (401)")
        assert server_lines() == [line]
        assert record_counts(database) == before


# The real entry point, with a spy on the moment the server is built and starts reading
# its input (from there on, answering the handshake is light): it prints which of the
# vault's and the model's modules were imported by then. The unlock's own bound on
# waiting for that moment is lifted, so that a slow machine cannot start the unlock's
# imports before the spy looks.
HANDSHAKE_SPY = """
import sys
from squirrel_mcp.cli import serve
from squirrel_mcp.server.opening import Opening

serve.SERVING_WAIT = 600.0
original = Opening.serving
HEAVY = {"squirrel_mcp.book.memories", "squirrel_mcp.cli.unlock", "squirrel_mcp.keys.crypto",
         "squirrel_mcp.storage.local", "squirrel_mcp_embeddings.vectors", "squirrel_mcp_embeddings.ranker"}


def spy(self):
    roots = {"Crypto", "numpy", "onnxruntime"}
    loaded = sorted(m for m in sys.modules if m in HEAVY or m.split(".")[0] in roots)
    print(f"loaded when serving: {len(loaded)} {loaded[:5]}", file=sys.stderr, flush=True)
    Opening.serving = original
    original(self)


Opening.serving = spy
from squirrel_mcp.cli.main import main

sys.exit(main([]))
"""


@pytest.mark.anyio
async def test_the_server_is_built_before_the_vault_or_the_model_code_is_imported(
    vault_env: dict[str, str],
) -> None:
    # With the embeddings plugin loaded, as most installs have it; a server of its own (the
    # spy is in this process: a memory process builds its server the same way).
    env = {**vault_env, "SQUIRREL_MCP_PLUGINS": "embeddings", "SQUIRREL_MCP_SHARED": "0"}
    make_vault(Path(env["SQUIRREL_VAULT"]))
    params = server_params(env)
    params = params.model_copy(update={"args": ["-c", HANDSHAKE_SPY]})
    async with Client(params) as client:
        assert len((await client.list_tools()).tools) == TOOL_COUNT
        # Then the store opens as always: a save and a search through it.
        saved = await client.call_tool(
            "save_memory", {"text": "grows tomatoes on the balcony", "entity": "user"}
        )
        assert not saved.is_error
        found = await client.call_tool("search_memory", {"query": "tomatoes"})
        assert found.structured_content is not None
        assert [hit["text"] for hit in found.structured_content["results"]] == [
            "grows tomatoes on the balcony"
        ]
    assert "loaded when serving: 0 []" in server_lines()
