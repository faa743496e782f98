"""The memory process trusts no hello blindly: one bad connection ends that connection alone.

Through the real processes: hosts' bridges, the vault's memory process, and raw connections
to its channel socket saying a crafted hello (as a buggy or hostile program of the same user
could). After each bad connection the process that served before still serves its hosts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters

from squirrel_mcp.core.config import Config
from squirrel_mcp.core.hello import Hello, identity, settings
from tests.conftest import PASSPHRASE, call, call_error, run_cli, secrets_of_this_test, server_params
from tests.shared_support import channel_of, memory_process, memory_processes, shared_host_env
from tests.sync.conftest import start_sync_server

pytestmark = [pytest.mark.anyio, pytest.mark.process]

# How long a raw connection waits for the memory process's answer (a backstop against a hang).
ANSWER_WAIT = 60.0


def retire(tmp_path: Path, *envs: dict[str, str]) -> None:
    """Kill the memory processes of `envs` and remove their channel directories, their logs kept.

    The secrets scan runs once the test has ended: it reads the logs' copies in `tmp_path`.
    """
    for env in envs:
        for pid in memory_processes(env):
            os.kill(pid, signal.SIGKILL)
        log = channel_of(env).log_path
        if log.exists():
            kept = tmp_path / f"memory-process-{channel_of(env).name}.log"
            shutil.copyfile(log, kept)
            secrets_of_this_test().stderr_files.append(kept)
    for env in envs:
        shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture
def shared_env(vault_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """vault_env for bridges, on a channel directory of this test; its processes killed after."""
    env = shared_host_env(vault_env)
    yield env
    retire(tmp_path, env)


def hello_of(env: dict[str, str], **changes: object) -> bytes:
    """The hello a bridge given `env` says, with `changes` made to its JSON fields."""
    config = Config.from_env(env)
    message = json.loads(Hello(identity(config), settings(config, env), config.passphrase).line())
    message.update(changes)
    return json.dumps(message).encode("ascii") + b"\n"


def say(env: dict[str, str], line: bytes) -> bytes:
    """`line` said on a raw connection to the vault's memory process; its answer (b"": closed unanswered)."""
    with closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as connection:
        connection.settimeout(ANSWER_WAIT)
        connection.connect(str(channel_of(env).socket_path))
        connection.sendall(line)
        answer = b""
        try:
            while not answer.endswith(b"\n") and (part := connection.recv(4096)):
                answer += part
        except ConnectionResetError:
            pass  # closed unanswered, with the hello still unread
        return answer


def log_of(env: dict[str, str]) -> str:
    return channel_of(env).log_path.read_text(encoding="utf-8", errors="replace")


# Settings: compared on an allow-list, named without values -------------------------------------


async def test_a_settings_refusal_names_the_setting_without_any_value(shared_env: dict[str, str]) -> None:
    """Only what the memory process reads is compared; a differing one is named, never its values."""
    database = "postgresql://squirrel:first-database-password@db.example.org/memories"
    other_database = "postgresql://squirrel:second-database-password@db.example.org/memories"
    secrets_of_this_test().add([database, other_database, "first-database-password"])
    first_env = {**shared_env, "SQUIRREL_SYNC_DATABASE": database, "SQUIRREL_MEMORY_EMBEDDINGS": "1"}
    async with Client(server_params(first_env)) as first:
        await call(first, "get_context")
        serving = memory_process(shared_env)
        # A variable the memory process does not read (the sync server's) does not keep a host out.
        async with Client(server_params({**first_env, "SQUIRREL_SYNC_DATABASE": other_database})) as same:
            await call(same, "get_context")
            assert memory_process(shared_env) == serving
        other = {**first_env, "SQUIRREL_SYNC_DATABASE": other_database, "SQUIRREL_MEMORY_EMBEDDINGS": "0"}
        async with Client(server_params(other)) as second:
            line = await call_error(second, "get_context")
        await call(first, "get_context")
    assert "runs with other settings than this host's (SQUIRREL_MEMORY_EMBEDDINGS differs)" in line
    assert "SQUIRREL_SYNC_DATABASE" not in line and "postgresql" not in line
    assert memory_processes(shared_env) == [serving]


# A connection's failure ends that connection alone ---------------------------------------------


async def test_a_hello_whose_text_does_not_encode_ends_only_its_connection(
    shared_env: dict[str, str],
) -> None:
    """A lone surrogate in any string of the hello: that connection is refused, the others served on."""
    async with Client(server_params(shared_env)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        serving = memory_process(shared_env)
        config = Config.from_env(shared_env)
        crafted = [
            {"passphrase": "\ud800"},
            {"passphrase": PASSPHRASE + "\udfff"},
            {"identity": identity(config) + "\udc80"},
            {"settings": {**settings(config, shared_env), "SQUIRREL_MEMORY_EMBEDDINGS": "\ud834"}},
        ]
        for changes in crafted:
            refused = json.loads(say(shared_env, hello_of(shared_env, **changes)) or "{}").get("refused")
            assert refused is not None and "text that is not Unicode" in refused
            assert memory_process(shared_env) == serving
        found = await call(first, "search_memory", query="bees")
        assert memory_process(shared_env) == serving
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    # Said at least once, and at most once a bad hello: the same line again within a minute is
    # left out of the shared log (so once, unless the machine took a minute between them).
    closed = log_of(shared_env).count("a connection that is no bridge was closed (text that is not Unicode)")
    assert 1 <= closed <= len(crafted)
    assert "Traceback" not in log_of(shared_env)


def set_kdf(vault: Path, **params: int) -> None:
    """The vault's account record given these scrypt parameters (as a damaged or hostile file holds)."""
    with closing(sqlite3.connect(vault)) as db, db:
        (value,) = db.execute("SELECT value FROM meta WHERE key = 'account'").fetchone()
        account = json.loads(value)
        account["kdf"].update(params)
        db.execute("UPDATE meta SET value = ? WHERE key = 'account'", (json.dumps(account),))


async def test_a_changed_passphrase_that_cannot_be_checked_is_refused_and_the_process_serves_on(
    shared_env: dict[str, str],
) -> None:
    """The key record now asks for scrypt beyond the bounds an unlock accepts: a refusal, not an end."""
    async with Client(server_params(shared_env)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        serving = memory_process(shared_env)
        set_kdf(Path(shared_env["SQUIRREL_VAULT"]), n=2**30)
        other = "another passphrase to check"
        secrets_of_this_test().add(other)
        answer = say(shared_env, hello_of(shared_env, passphrase=other))
        assert memory_process(shared_env) == serving
        found = await call(first, "search_memory", query="bees")
    refused = json.loads(answer)["refused"]
    assert "this host's passphrase is not the one the memory process" in refused
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    log = log_of(shared_env)
    assert "a changed passphrase could not be checked (ValueError); it was refused" in log
    assert "Traceback" not in log and other not in log


async def test_a_changed_passphrase_checked_against_a_sync_server_gone_is_refused(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    """The account's sync server stops answering: a hello with another passphrase is refused, no end."""
    with start_sync_server(f"sqlite:///{tmp_path}/sync-db/sync.sqlite3", log=tmp_path / "sync.log") as server:
        # SQUIRREL_VAULT is left in (unused with a sync server): memory_processes finds the process by it.
        env = shared_host_env(
            {**vault_env, "SQUIRREL_API_BASE_URL": server.url, "SQUIRREL_API_KEY": server.api_key}
        )
        assert run_cli(env, "init").returncode == 0
        try:
            async with Client(server_params(env)) as first:
                await call(
                    first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact"
                )
                serving = memory_process(env)
                server.process.send_signal(signal.SIGTERM)
                server.process.wait(timeout=60)
                answer = say(env, hello_of(env, passphrase="another passphrase to check"))
                assert memory_process(env) == serving
                # Served on: its calls are answered by the same process (the server's absence their answer).
                line = (await first.call_tool("get_context", {})).content[0]
                assert memory_process(env) == serving
            log = log_of(env)
        finally:
            retire(tmp_path, env)
    assert "this host's passphrase is not the one the memory process" in json.loads(answer)["refused"]
    assert line.type == "text" and "ended before answering" not in line.text
    assert "a changed passphrase could not be checked (" in log
    assert "Traceback" not in log


# The channel's identity: its parts told apart ----------------------------------------------------


async def test_two_vaults_whose_paths_run_together_get_a_memory_process_each(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    """A vault path holding " cache " and a cache path holding it too never share one process."""
    root = tmp_path / "v"
    # Spelt one after the other, "vault V cache C" is the same text for both hosts.
    one = {
        **shared_env,
        "SQUIRREL_VAULT": f"{root}/a cache {root}/b",
        "SQUIRREL_MEMORY_CACHE_DIR": f"{root}/c",
    }
    two = {
        **shared_env,
        "SQUIRREL_VAULT": f"{root}/a",
        "SQUIRREL_MEMORY_CACHE_DIR": f"{root}/b cache {root}/c",
    }
    Path(f"{root}/a cache {root}").mkdir(parents=True)
    Path(f"{root}/b cache {root}/c").mkdir(parents=True)
    # Made first: a server makes no vault at a path SQUIRREL_VAULT names.
    for env in (one, two):
        assert run_cli(env, "init").returncode == 0
    try:
        async with Client(server_params(one)) as first:
            await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
            async with Client(server_params(two)) as second:
                listed = await call(second, "list_memories", limit=10)
                assert len(memory_processes(one)) == 1 and len(memory_processes(two)) == 1
                assert memory_process(one) != memory_process(two)
    finally:
        retire(tmp_path, one, two)
    assert listed["memories"] == []
    assert Path(two["SQUIRREL_VAULT"]).exists()


# A name the host chose never reaches the log -----------------------------------------------------


@pytest.mark.parametrize("shared", ["1", "0"])
async def test_an_unknown_prompt_name_is_answered_and_never_logged(
    vault_env: dict[str, str], shared: str, tmp_path: Path
) -> None:
    """prompts/get of a name no prompt has: an error naming the prompts there are; no log holds the name."""
    name, argument = "a prompt name the host chose, private-7f3a", "an argument the host chose, 9c1e"
    secrets_of_this_test().add([name, argument])
    env = {**shared_host_env(vault_env), "SQUIRREL_MCP_SHARED": shared}
    command = [sys.executable, "-m", "squirrel_mcp"]
    secrets_of_this_test().add_env(env)
    try:
        async with Client(StdioServerParameters(command=command[0], args=command[1:], env=env)) as client:
            with pytest.raises(MCPError) as raised:
                await client.get_prompt(name)
            with pytest.raises(MCPError) as given_arguments:
                await client.get_prompt("squirrel-notes", {"topic": argument})
            await call(client, "get_context")
        stderr = secrets_of_this_test().stderr_files[-1]
        logged = stderr.read_text(encoding="utf-8") + (log_of(env) if shared == "1" else "")
    finally:
        retire(tmp_path, env)
    assert "Traceback" not in logged
    assert name not in str(raised.value)
    assert "squirrel-notes" in str(raised.value)
    assert argument not in str(given_arguments.value)


# `squirrel-mcp passphrase` tells the running memory process ------------------------------------


async def test_the_passphrase_command_switches_the_running_process_at_once(
    shared_env: dict[str, str],
) -> None:
    """After `squirrel-mcp passphrase`, the old passphrase is refused at once; the new one is served."""
    new = "the passphrase after the change"
    async with Client(server_params(shared_env)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        serving = memory_process(shared_env)
        changed = run_cli({**shared_env, "SQUIRREL_NEW_PASSPHRASE": new}, "passphrase")
        assert changed.returncode == 0, changed.stderr
        # No host has brought the new passphrase yet: the old one is refused all the same.
        async with Client(server_params(shared_env)) as old:
            line = await call_error(old, "get_context")
        async with Client(server_params({**shared_env, "SQUIRREL_PASSPHRASE": new})) as renewed:
            found = await call(renewed, "search_memory", query="bees")
        # The host connected before the change is served on, by the same process.
        await call(first, "get_context")
        assert memory_process(shared_env) == serving
    assert "this host's passphrase is not the one the memory process" in line
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    assert "The running memory process of this vault now admits only the new passphrase." in (
        changed.stdout.decode()
    )
