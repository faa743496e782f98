"""`squirrel-mcp passphrase` against the reference sync server (SQLite and PostgreSQL).

The key is swapped with PUT /v1/account/key, a compare-and-swap: a change that
another machine made first refuses the second, which changes nothing. The
records stay as the server holds them; the new passphrase reads every memory
through the real server over stdio, and a machine that unlocked the account
before is told its key changed since.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import requests
from mcp import Client

from squirrel_mcp.book import rekey
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import KeyChanged, wire
from squirrel_mcp.storage.remote import RemoteStorage
from tests.conftest import PASSPHRASE, call, run_cli, served_error, server_params
from tests.sync.conftest import SyncServer
from tests.test_passphrase import NEW, Terminal, change, without

pytestmark = pytest.mark.process

CHEAP_KDF = crypto.KdfParams(salt=b"q" * crypto.SALT_BYTES, n=2**14)


def machine(tmp_path: Path, name: str, server: SyncServer) -> dict[str, str]:
    """The environment of one machine using the server's account: its own home and cache."""
    return {
        "SQUIRREL_API_BASE_URL": server.url,
        "SQUIRREL_API_KEY": server.api_key,
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(tmp_path / name / "home"),
        "XDG_DATA_HOME": str(tmp_path / name / "xdg-data"),
        "XDG_CACHE_HOME": str(tmp_path / name / "xdg-cache"),
        "SQUIRREL_MCP_PLUGINS": "",
    }


def stored(server: SyncServer) -> list[tuple[str, int, bytes]]:
    """Every record the server holds for the key's account."""
    storage = RemoteStorage(server.url, server.api_key)
    try:
        records, _ = storage.changes_since(0)
    finally:
        storage.close()
    return [(record.memory_id, record.revision, record.ciphertext) for record in records]


def unlocks(env: dict[str, str], passphrase: str) -> bool:
    """Whether `passphrase` opens the account (through the real command: export)."""
    return run_cli({**env, "SQUIRREL_PASSPHRASE": passphrase}, "export").returncode == 0


@pytest.mark.anyio
async def test_the_new_passphrase_reads_every_memory_and_other_machines_are_told(
    sync_server: SyncServer, tmp_path: Path
) -> None:
    here, there = machine(tmp_path, "here", sync_server), machine(tmp_path, "there", sync_server)
    assert run_cli(here, "init").returncode == 0
    async with Client(server_params(here)) as client:
        ids = [
            (await call(client, "save_memory", text=text))["memory"]["id"]
            for text in ("Sings bass", "Owns a cat")
        ]
        await call(client, "update_memory", id=ids[1], text="Owns two cats", reason="adopted")
    assert unlocks(there, PASSPHRASE)  # the other machine has unlocked it once: it knows the key
    before = stored(sync_server)

    code, out, err = change(here, PASSPHRASE, NEW)
    assert code == 0, err
    assert f"Changed the passphrase of the sync server at {sync_server.url}" in out
    assert "Other machines using this account need it too" in out
    assert stored(sync_server) == before

    line = await served_error(server_params(there))
    assert "the account's wrapped key changed since this machine last unlocked it" in line
    assert "set SQUIRREL_PASSPHRASE (in your MCP client's config too) to the new passphrase" in line
    async with Client(server_params({**there, "SQUIRREL_PASSPHRASE": NEW})) as client:
        listed = await call(client, "list_memories")
        assert {m["id"]: m["text"] for m in listed["memories"]} == {
            ids[0]: "Sings bass",
            ids[1]: "Owns two cats",
        }
        history = await call(client, "get_memory", id=ids[1], history=True)
        assert [revision["text"] for revision in history["history"]] == ["Owns a cat", "Owns two cats"]
    refused = run_cli(here, "export")
    assert (
        refused.returncode == 1 and b"the one `squirrel-mcp passphrase` set on this machine" in refused.stderr
    )


def test_the_key_is_swapped_only_over_the_one_read(sync_server: SyncServer) -> None:
    first, second = (RemoteStorage(sync_server.url, sync_server.api_key) for _ in range(2))
    try:
        MemoryStore.create(first, PASSPHRASE, CHEAP_KDF)
        # Two machines read the key, each makes a new one; the first to swap wins.
        read_first, read_second = first.load_account(), second.load_account()
        assert read_first is not None and read_first == read_second
        key = crypto.unwrap_data_key(
            PASSPHRASE, read_first.kdf, read_first.account_id, read_first.wrapped_data_key
        )
        proof = crypto.key_change_proof(key)
        mine, theirs = rekey.rekey(read_first, key, NEW), rekey.rekey(read_first, key, "their new passphrase")
        first.replace_key(read_first, mine, proof)
        with pytest.raises(
            KeyChanged, match="another machine changed the passphrase meanwhile; nothing was changed"
        ):
            second.replace_key(read_first, theirs, proof)
        assert second.load_account() == mine
    finally:
        first.close()
        second.close()

    # On the wire: 409 key_changed naming no value; the new key's cost bounds; a slot without account.
    stale = wire.json_body(wire.KeyChange.of(read_first, theirs, proof))
    answer = requests.put(
        sync_server.url + "/v1/account/key", json=stale, headers=sync_server.headers(), timeout=30
    )
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "key_changed"
    for value in (
        stale["expected"]["wrappedDataKey"],
        stale["new"]["wrappedDataKey"],
        stale["new"]["kdf"]["salt"],
        stale["proof"],
    ):
        assert value not in answer.text
    costly = {**stale, "new": {**stale["new"], "kdf": {**stale["new"]["kdf"], "n": 2**20, "r": 32}}}
    answer = requests.put(
        sync_server.url + "/v1/account/key", json=costly, headers=sync_server.headers(), timeout=30
    )
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith("new.kdf")
    empty = sync_server.issue_key()
    answer = requests.put(
        sync_server.url + "/v1/account/key", json=stale, headers=sync_server.headers(empty), timeout=30
    )
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "no_account"
    garbage = {
        **stale,
        "expected": {**stale["expected"], "wrappedDataKey": base64.b64encode(os.urandom(61)).decode()},
    }
    answer = requests.put(
        sync_server.url + "/v1/account/key", json=garbage, headers=sync_server.headers(), timeout=30
    )
    assert answer.status_code == 409
    assert unlocks_account(sync_server, NEW)


def unlocks_account(server: SyncServer, passphrase: str) -> bool:
    """Whether `passphrase` unwraps the key the server holds now (in this process)."""
    storage = RemoteStorage(server.url, server.api_key)
    try:
        account = storage.load_account()
    finally:
        storage.close()
    assert account is not None
    try:
        crypto.unwrap_data_key(passphrase, account.kdf, account.account_id, account.wrapped_data_key)
    except crypto.WrongPassphraseError:
        return False
    return True


def test_a_change_by_another_machine_meanwhile_is_refused(sync_server: SyncServer, tmp_path: Path) -> None:
    here, there = machine(tmp_path, "here", sync_server), machine(tmp_path, "there", sync_server)
    storage = RemoteStorage(sync_server.url, sync_server.api_key)
    try:
        MemoryStore.create(storage, PASSPHRASE, CHEAP_KDF)
    finally:
        storage.close()
    terminal = Terminal(["-m", "squirrel_mcp", "passphrase"], without(here, "SQUIRREL_PASSPHRASE"))
    terminal.answer("Current passphrase: ", PASSPHRASE)
    terminal.answer("New passphrase: ", NEW)
    # While this machine waits at its prompt, holding the key it read, the other changes it.
    theirs = "the other machine's passphrase"
    assert change(there, PASSPHRASE, theirs)[0] == 0
    terminal.answer("New passphrase again: ", NEW)
    code, output = terminal.finish()
    assert code == 1
    assert "was changed by another machine while this command ran; nothing was changed here" in output
    assert unlocks_account(sync_server, theirs)
    assert not unlocks_account(sync_server, NEW) and not unlocks_account(sync_server, PASSPHRASE)
