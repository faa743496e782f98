"""Two machines, one sync server: two real MCP server processes, each with its own dirs.

Each "machine" is a `squirrel-mcp` process started the way an MCP client starts
it, with its own HOME, data and cache directories (with remote storage, what is
local to a machine is its cache), and the same SQUIRREL_API_BASE_URL, API key
and passphrase. Between them and the reference server sits a recording proxy on
loopback, so the tests can grep every byte the real processes sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anyio
import pytest
import requests
from mcp import Client

from tests.conftest import PASSPHRASE, call, needs_model, run_cli, search_warm, served_error, server_params
from tests.sync.conftest import SyncServer, serve_on_loopback, start_sync_server

pytestmark = pytest.mark.anyio

# Forwarded both ways; everything else (hop-by-hop, lengths) is the proxy's own business.
FORWARDED = ("Authorization", "Content-Type", "Accept", "User-Agent", "Retry-After", "WWW-Authenticate")


@dataclass
class Exchange:
    """One request through the proxy, as the client sent it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


class RecordingProxy:
    """A loopback HTTP proxy in front of the sync server that keeps every request it forwards."""

    def __init__(self, upstream: str) -> None:
        self.exchanges: list[Exchange] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {name: self.headers[name] for name in FORWARDED if name in self.headers}
                answer = requests.request(
                    self.command,
                    upstream + self.path,
                    headers=headers,
                    data=body or None,
                    timeout=60,
                    allow_redirects=False,
                )
                proxy.exchanges.append(
                    Exchange(self.command, self.path, dict(self.headers), body, answer.status_code)
                )
                self.send_response(answer.status_code)
                for name in FORWARDED:
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.handler = Handler
        # Set while the fixture serves `handler` (serve_on_loopback).
        self.url = ""

    def sent(self) -> bytes:
        """Every request line, header and body the machines sent, as one blob to grep."""
        lines = []
        for exchange in self.exchanges:
            lines.append(f"{exchange.method} {exchange.path}".encode())
            lines.extend(f"{name}: {value}".encode() for name, value in exchange.headers.items())
            lines.append(exchange.body)
        return b"\n".join(lines)


@pytest.fixture
def proxy(sync_server: SyncServer) -> Iterator[RecordingProxy]:
    recording = RecordingProxy(sync_server.url)
    with serve_on_loopback(recording.handler) as recording.url:
        yield recording


def machine_env(tmp_path: Path, name: str, url: str, key: str) -> dict[str, str]:
    """One machine's environment: the shared server, key and passphrase; its own directories."""
    home = tmp_path / name
    return {
        "SQUIRREL_API_BASE_URL": url,
        "SQUIRREL_API_KEY": key,
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        # Set to show it is not used: with remote storage no local vault is made.
        "SQUIRREL_VAULT": str(home / "vault.sqlite3"),
        "HOME": str(home / "home"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "SQUIRREL_MCP_PLUGINS": "",
    }


@dataclass
class Machines:
    a: Client
    b: Client
    envs: tuple[dict[str, str], dict[str, str]]


@pytest.fixture
async def machines(tmp_path: Path, sync_server: SyncServer, proxy: RecordingProxy) -> AsyncIterator[Machines]:
    """Two MCP server processes on one account of the sync server (created by `init` on A)."""
    env_a = machine_env(tmp_path, "machine-a", proxy.url, sync_server.api_key)
    env_b = machine_env(tmp_path, "machine-b", proxy.url, sync_server.api_key)
    created = run_cli(env_a, "init")
    assert created.returncode == 0, created.stderr
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(Client(server_params(env_a)))
        b = await stack.enter_async_context(Client(server_params(env_b)))
        yield Machines(a, b, (env_a, env_b))


async def search_until_found(
    client: Client, query: str, memory_id: str, revision: int = 1, **arguments: Any
) -> dict[str, Any]:
    """search_memory (with `arguments`) until it finds `memory_id` at `revision` or later.

    A machine may pull up to PULL_INTERVAL (2 s) late, so it may first answer from
    its view as it was.
    """
    for _ in range(40):
        found = await call(client, "search_memory", query=query, **arguments)
        if any(hit["id"] == memory_id and hit["revision"] >= revision for hit in found["results"]):
            return found
        await anyio.sleep(0.25)
    raise AssertionError(f"{memory_id} at revision {revision} was never found by {query!r}")


async def test_a_memory_saved_on_one_machine_is_found_on_the_other(
    machines: Machines, sync_server: SyncServer, proxy: RecordingProxy
) -> None:
    saved = (
        await call(
            machines.a,
            "save_memory",
            text="Keeps a sourdough starter called Quenelle in the fridge",
            category="fact",
            tags=["baking"],
        )
    )["memory"]
    found = await search_until_found(machines.b, "sourdough starter", saved["id"])
    assert found["results"][0]["text"] == "Keeps a sourdough starter called Quenelle in the fridge"
    assert found["results"][0]["tags"] == ["baking"]

    # And back: B's correction reaches A.
    await call(machines.b, "update_memory", id=saved["id"], text="Quenelle the starter died in May")
    found = await search_until_found(machines.a, "starter died", saved["id"], revision=2)
    assert found["results"][0]["text"] == "Quenelle the starter died in May"

    # Neither machine made a local vault: what is local with remote storage is the cache.
    for env in machines.envs:
        assert not Path(env["SQUIRREL_VAULT"]).exists()
    # Both machines' requests went through the recording proxy.
    assert {e.path for e in proxy.exchanges} >= {"/v1/account", "/v1/records"}


async def test_a_concurrent_correction_yields_one_winner_and_no_loss(machines: Machines) -> None:
    saved = (await call(machines.a, "save_memory", text="Parks on level 3", category="fact"))["memory"]
    # Both machines read revision 1.
    got = (await call(machines.b, "get_memory", id=saved["id"]))["memory"]
    assert got["revision"] == 1

    outcomes: dict[str, Any] = {}

    async def correct(name: str, client: Client, text: str) -> None:
        outcomes[name] = await client.call_tool(
            "update_memory", {"id": saved["id"], "text": text, "expectedRevision": 1}
        )

    async with anyio.create_task_group() as group:
        group.start_soon(correct, "a", machines.a, "Parks on level 5")
        group.start_soon(correct, "b", machines.b, "Parks on level 7")

    errors = {name for name, result in outcomes.items() if result.is_error}
    assert len(errors) == 1, {name: result.content for name, result in outcomes.items()}
    (loser,) = errors
    winner = "b" if loser == "a" else "a"
    message = outcomes[loser].content[0].text
    # Either the loser pulled after the winner wrote (a stale expectedRevision), or both
    # passed the check and the server's 409 decided: both are reported, neither overwrites.
    assert "is at revision 2, not 1" in message or "changed by another process" in message
    winning_text = outcomes[winner].structured_content["memory"]["text"]
    losing_text = "Parks on level 7" if winning_text == "Parks on level 5" else "Parks on level 5"

    for client in (machines.a, machines.b):
        read = await call(client, "get_memory", id=saved["id"], history=True)
        assert [r["revision"] for r in read["history"]] == [1, 2]
        assert [r["text"] for r in read["history"]] == ["Parks on level 3", winning_text]
        assert read["memory"]["text"] == winning_text

    # The loser, told to re-read, retries on revision 2: history keeps all three.
    retried = await call(
        machines.a if loser == "a" else machines.b,
        "update_memory",
        id=saved["id"],
        text=losing_text,
        expectedRevision=2,
    )
    assert retried["memory"]["revision"] == 3
    for client in (machines.a, machines.b):
        history = await history_until(client, saved["id"], revisions=3)
        assert [r["text"] for r in history] == ["Parks on level 3", winning_text, losing_text]


async def history_until(client: Client, memory_id: str, revisions: int) -> list[dict[str, Any]]:
    """get_memory's history once it has `revisions` entries (a machine may pull up to 2 s late)."""
    for _ in range(40):
        history: list[dict[str, Any]] = (await call(client, "get_memory", id=memory_id, history=True))[
            "history"
        ]
        if len(history) >= revisions:
            return history
        await anyio.sleep(0.25)
    raise AssertionError(f"{memory_id} never reached {revisions} revisions")


async def test_no_plaintext_on_the_wire_or_in_the_servers_database(
    machines: Machines, sync_server: SyncServer, proxy: RecordingProxy
) -> None:
    texts = {
        "text": "Grandmother Eulalie's recipe uses cardamom and saffron",
        "entity": "Eulalie",
        "tag": "heirloom-recipes",
        "keyword": "cardamom-saffron",
        "reason": "the oven runs hot, so bake at 170",
        "correction": "Eulalie's recipe: bake at 170 not 180",
        "project": "github.com/eulalie/heirloom-kitchen",
    }
    saved = (
        await call(
            machines.a,
            "save_memory",
            text=texts["text"],
            entity=texts["entity"],
            tags=[texts["tag"]],
            keywords=[texts["keyword"]],
            category="preference",
            project=texts["project"],
        )
    )["memory"]
    await call(machines.a, "update_memory", id=saved["id"], text=texts["correction"], reason=texts["reason"])
    await call(machines.b, "delete_memory", id=saved["id"], reason=texts["reason"])
    await call(machines.b, "restore_memory", id=saved["id"])
    await search_until_found(machines.a, "cardamom saffron", saved["id"], project=texts["project"])

    sent = proxy.sent()
    assert b"POST /v1/records" in sent  # the writes did go through the proxy
    held = sync_server.database_bytes()
    assert len(held) > 0
    for plaintext in [*texts.values(), "cardamom", "saffron", "Eulalie", PASSPHRASE]:
        for form in {plaintext.encode(), json.dumps(plaintext).encode()}:
            assert form not in sent, plaintext
            assert form not in held, plaintext
    # The API key is sent only as the bearer token, and the server keeps only its hash.
    assert sync_server.api_key.encode() not in held
    for exchange in proxy.exchanges:
        assert sync_server.api_key.encode() not in exchange.body
        assert exchange.headers["Authorization"] == f"Bearer {sync_server.api_key}"


def test_a_wrong_or_missing_key_gets_401_and_nothing_else(sync_server: SyncServer, tmp_path: Path) -> None:
    env = machine_env(tmp_path, "machine-a", sync_server.url, sync_server.api_key)
    assert run_cli(env, "init").returncode == 0
    assert run_cli(env, "import", "-", stdin=export_with_one_memory()).returncode == 0

    wrong = "sqk_" + "B" * 43
    for headers in ({"Authorization": f"Bearer {wrong}"}, {}, {"Authorization": "Basic dXNlcjpwYXNz"}):
        for path in ("/v1/account", "/v1/records"):
            answer = requests.get(sync_server.url + path, headers=headers, timeout=30)
            assert answer.status_code == 401
            assert answer.headers["WWW-Authenticate"] == "Bearer"
            body = answer.json()
            assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
            assert body["error"]["code"] == "unauthorized"
            assert b"ciphertext" not in answer.content and b"kdf" not in answer.content
        answer = requests.post(
            sync_server.url + "/v1/records", json={"records": []}, headers=headers, timeout=30
        )
        assert answer.status_code == 401

    # Through the client: one line that names the cause, not the key. A command exits with
    # it; the server keeps serving and answers every tool call with it.
    expected = (
        f"squirrel-mcp: the sync server at {sync_server.url} did not accept SQUIRREL_API_KEY "
        "(401): check the key"
    )
    for key in (wrong, "not-even-shaped-like-a-key"):
        bad = {**env, "SQUIRREL_API_KEY": key}
        result = run_cli(bad, "export")
        assert result.returncode == 1
        assert result.stderr.decode().strip().splitlines() == [expected]
        assert key.encode() not in result.stdout + result.stderr
        assert anyio.run(served_error, server_params(bad)) == expected
    # And the account is untouched: the right key still reads the one memory.
    exported = json.loads(run_cli(env, "export").stdout)
    assert [m["revisions"][0]["text"] for m in exported["memories"]] == ["Rides a green tandem"]


def export_with_one_memory() -> bytes:
    stamp = "2026-01-01T00:00:00Z"
    revision = {
        "id": "00000000000000aa",
        "entity": "user",
        "text": "Rides a green tandem",
        "tags": [],
        "keywords": [],
        "category": "fact",
        "createdAt": stamp,
        "updatedAt": stamp,
        "revision": 1,
        "change": "created",
    }
    return json.dumps(
        {
            "format": "squirrel-mcp-export",
            "version": 1,
            "exportedAt": stamp,
            "exportedBy": "test",
            "memories": [{"id": "00000000000000aa", "revisions": [revision]}],
        }
    ).encode()


async def test_a_machine_reports_a_vanished_server_clearly(tmp_path: Path, database_url: str) -> None:
    """The server goes away mid-session: tools fail with a clear error, the MCP server lives on."""
    with start_sync_server(database_url, log=tmp_path / "first.log") as first:
        env = machine_env(tmp_path, "machine-a", first.url, first.api_key)
        assert run_cli(env, "init").returncode == 0
        async with Client(server_params(env)) as client:
            await call(client, "save_memory", text="Waters the ficus on Sundays", category="task")
            first.process.terminate()
            first.process.wait(timeout=20)
            # Past the pull interval, so the search must pull, and cannot.
            await anyio.sleep(2.5)
            result = await client.call_tool("search_memory", {"query": "ficus"})
            assert result.is_error
            text = result.content[0].text
            assert f"cannot reach the sync server at {first.url} (connection failed)" in text
            assert first.api_key not in text and "ficus" not in text
            # The MCP server is still there for the next call.
            assert len((await client.list_tools()).tools) == 8


@needs_model
async def test_search_by_meaning_on_the_other_machine_with_its_own_vector_file(
    tmp_path: Path, sync_server: SyncServer
) -> None:
    """With squirrel-mcp-embeddings: B finds A's memory by meaning; the vectors stay in B's cache."""
    env_a = {**machine_env(tmp_path, "machine-a", sync_server.url, sync_server.api_key)}
    env_b = {**machine_env(tmp_path, "machine-b", sync_server.url, sync_server.api_key)}
    env_b["SQUIRREL_MCP_PLUGINS"] = "embeddings"
    assert run_cli(env_a, "init").returncode == 0
    async with Client(server_params(env_a)) as a:
        saved = (await call(a, "save_memory", text="Is allergic to peanuts", category="profile"))["memory"]
        await call(a, "save_memory", text="Drives a blue bicycle to work", category="fact")
    async with Client(server_params(env_b)) as b:
        # B embeds what it pulled in the background: wait until the warm-up is done.
        found = await search_warm(b, query="food allergies")
        assert found["ranking"] == "hybrid" and "note" not in found, found.get("note")
        assert found["results"][0]["id"] == saved["id"]
        assert found["results"][0]["lexicalScore"] == 0  # by meaning: no query word is in it
    (vectors,) = Path(env_b["XDG_CACHE_HOME"]).rglob("memory-vectors-*.bin")
    assert vectors.parent.name == "squirrel-notes"
    assert b"peanuts" not in vectors.read_bytes()
    assert not list(Path(env_a["XDG_CACHE_HOME"]).rglob("memory-vectors-*.bin"))
    assert b"memory-vectors" not in sync_server.database_bytes()
