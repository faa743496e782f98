"""`squirrel-mcp passphrase` on the local vault: on a terminal and from the environment.

The real command in its own process: it re-wraps the data key under the new
passphrase and leaves every record as it was; a wrong current passphrase, a new
one too short, the same or given twice differently, and a change made meanwhile
by another process all leave the vault as it was. A machine that unlocked the
vault before is told its key changed since. New vaults made from
SQUIRREL_PASSPHRASE need the prompt's 8 characters; existing ones open with any.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import select
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import Account
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE, call, run_cli, secrets_of_this_test, served_error, server_params

pytestmark = pytest.mark.process

NEW = "a new passphrase, long enough"
CHEAP_KDF = crypto.KdfParams(salt=b"p" * crypto.SALT_BYTES, n=2**14)
TEXTS = ["Grows basil on the balcony", "Allergic to penicillin", "Prefers trains to planes"]


class Terminal:
    """A command on a pseudo-terminal: wait for a prompt, type a line, read what it showed."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        secrets_of_this_test().add_env(env)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: becomes the command, its terminal is the pty
            os.execve(sys.executable, [sys.executable, *argv], {"PATH": os.environ["PATH"], **env})
        self.output = b""

    def _read(self, timeout: float) -> bool:
        """Read what is there within `timeout` seconds; False once the command closed the terminal."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the command ended
            return False
        self.output += chunk
        return bool(chunk)

    def answer(self, prompt: str, line: str) -> None:
        """Wait until the output ends with `prompt` (a new one since the last answer), then type `line`."""
        deadline = time.monotonic() + 60
        while not self.output.endswith(prompt.encode()):
            assert time.monotonic() < deadline and self._read(0.5), self.text()
        self.output += b"\n"  # so that the same prompt asked again is told apart
        os.write(self.fd, line.encode() + b"\n")

    def finish(self) -> tuple[int, str]:
        """The exit code once the command ended (killed after 60 s), and everything it showed."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._read(0.5):
            pass
        if time.monotonic() >= deadline:
            os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        secrets_of_this_test().texts.append(("the terminal of squirrel-mcp passphrase", self.text()))
        return os.waitstatus_to_exitcode(status), self.text()

    def text(self) -> str:
        """What the terminal showed so far."""
        return self.output.decode(errors="replace")


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    """`env` without the variables `names`."""
    return {key: value for key, value in env.items() if key not in names}


def create_vault(env: dict[str, str], passphrase: str = PASSPHRASE) -> None:
    """The vault of `env`, made in this process with a cheap KDF, holding TEXTS."""
    vault = LocalVault(Path(env["SQUIRREL_VAULT"]), create=True)
    try:
        store = MemoryStore.create(vault, passphrase, CHEAP_KDF)
        for text in TEXTS:
            store.save(entity="user", text=text, category="fact", tags=[], keywords=[])
    finally:
        vault.close()


def account_row(env: dict[str, str]) -> str:
    """The vault's account record as stored (KDF parameters and wrapped key)."""
    with sqlite3.connect(env["SQUIRREL_VAULT"]) as db:
        (value,) = db.execute("SELECT value FROM meta WHERE key = 'account'").fetchone()
    return str(value)


def records(env: dict[str, str]) -> list[tuple[object, ...]]:
    """Every stored record, as it is stored."""
    with sqlite3.connect(env["SQUIRREL_VAULT"]) as db:
        return db.execute("SELECT * FROM records ORDER BY seq").fetchall()


def unlocks(env: dict[str, str], passphrase: str) -> bool:
    """Whether `passphrase` opens the vault of `env` (through the real command: export)."""
    return run_cli({**env, "SQUIRREL_PASSPHRASE": passphrase}, "export").returncode == 0


def change(env: dict[str, str], current: str, new: str) -> tuple[int, str, str]:
    """`squirrel-mcp passphrase` from the environment: exit code, stdout, stderr."""
    result = run_cli({**env, "SQUIRREL_PASSPHRASE": current, "SQUIRREL_NEW_PASSPHRASE": new}, "passphrase")
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.mark.anyio
async def test_the_new_passphrase_unlocks_every_memory_through_the_server(vault_env: dict[str, str]) -> None:
    async with Client(server_params(vault_env)) as client:
        saved = [(await call(client, "save_memory", text=text))["memory"]["id"] for text in TEXTS]
        await call(client, "update_memory", id=saved[0], text="Grows basil and thyme", reason="more herbs")
        await call(client, "delete_memory", id=saved[2], reason="moved")
    before, stored = account_row(vault_env), records(vault_env)

    code, out, err = change(vault_env, PASSPHRASE, NEW)
    assert code == 0, err
    assert "Changed the passphrase" in out and "SQUIRREL_PASSPHRASE" in out
    assert records(vault_env) == stored  # not one record touched
    old, new = LocalVault(Path(vault_env["SQUIRREL_VAULT"]), create=False), None
    try:
        new = old.load_account()
    finally:
        old.close()
    assert new is not None and account_row(vault_env) != before
    # A fresh salt and the default cost (the vault was made by the server, at the default cost).
    assert new.kdf.salt not in before.encode() and (new.kdf.n, new.kdf.r, new.kdf.p) == (2**17, 8, 1)

    refused = run_cli(vault_env, "export")
    assert refused.returncode == 1
    assert b"its key is the one `squirrel-mcp passphrase` set on this machine" in refused.stderr

    async with Client(server_params({**vault_env, "SQUIRREL_PASSPHRASE": NEW})) as client:
        listed = await call(client, "list_memories", includeDeleted=True)
        texts = {memory["id"]: memory["text"] for memory in listed["memories"]}
        assert texts == {saved[0]: "Grows basil and thyme", saved[1]: TEXTS[1], saved[2]: TEXTS[2]}
        history = await call(client, "get_memory", id=saved[0], history=True)
        assert [revision["text"] for revision in history["history"]] == [TEXTS[0], "Grows basil and thyme"]
        assert (await call(client, "get_context"))["unreadable"] == []


def test_a_wrong_current_passphrase_changes_nothing(vault_env: dict[str, str]) -> None:
    create_vault(vault_env)
    before = account_row(vault_env)
    code, _, err = change(vault_env, "not the passphrase", NEW)
    assert code == 1 and "does not unlock" in err
    assert account_row(vault_env) == before
    assert unlocks(vault_env, PASSPHRASE) and not unlocks(vault_env, NEW)


def test_a_new_passphrase_too_short_the_same_or_missing_is_refused(vault_env: dict[str, str]) -> None:
    create_vault(vault_env)
    before = account_row(vault_env)
    code, _, err = change(vault_env, PASSPHRASE, "tiny")
    assert code == 1 and "SQUIRREL_NEW_PASSPHRASE is too short" in err and "at least 8" in err
    code, _, err = change(vault_env, PASSPHRASE, PASSPHRASE)
    assert code == 1 and "the new passphrase is the current one; nothing was changed" in err
    missing = run_cli(vault_env, "passphrase")
    assert missing.returncode == 1
    assert b"SQUIRREL_NEW_PASSPHRASE is not set (and there is no terminal to ask on)" in missing.stderr
    assert account_row(vault_env) == before
    nowhere = run_cli({**vault_env, "SQUIRREL_VAULT": str(Path(vault_env["HOME"]) / "none")}, "passphrase")
    assert nowhere.returncode == 1 and b"there is no vault at" in nowhere.stderr


def test_on_a_terminal_it_asks_the_current_passphrase_then_the_new_one_twice(
    vault_env: dict[str, str],
) -> None:
    create_vault(vault_env)
    env = without(vault_env, "SQUIRREL_PASSPHRASE")
    argv = ["-m", "squirrel_mcp", "passphrase"]

    terminal = Terminal(argv, env)
    terminal.answer("Current passphrase: ", PASSPHRASE)
    # Confirmed differently, it is asked again, three times in all.
    for _ in range(3):
        terminal.answer("New passphrase: ", NEW)
        terminal.answer("New passphrase again: ", NEW + " but not quite")
    code, output = terminal.finish()
    assert code == 1 and "The two passphrases differ; try again." in output
    assert "the two passphrases differ; nothing was changed" in output

    terminal = Terminal(argv, env)
    terminal.answer("Current passphrase: ", PASSPHRASE)
    for _ in range(3):
        terminal.answer("New passphrase: ", "tiny")
    code, output = terminal.finish()
    assert code == 1 and "at least 8 characters; try again" in output
    assert "at least 8 characters; nothing was changed" in output

    terminal = Terminal(argv, env)
    terminal.answer("Current passphrase: ", "not the passphrase")
    code, output = terminal.finish()
    assert code == 1 and "does not unlock" in output and "New passphrase" not in output
    assert unlocks(vault_env, PASSPHRASE)

    terminal = Terminal(argv, env)
    terminal.answer("Current passphrase: ", PASSPHRASE)
    terminal.answer("New passphrase: ", "tiny")
    terminal.answer("New passphrase: ", NEW)
    terminal.answer("New passphrase again: ", NEW)
    code, output = terminal.finish()
    assert code == 0 and "Changed the passphrase" in output, output
    assert PASSPHRASE not in output and NEW not in output  # never echoed
    assert unlocks(vault_env, NEW) and not unlocks(vault_env, PASSPHRASE)


def test_a_change_made_meanwhile_by_another_process_is_refused(vault_env: dict[str, str]) -> None:
    create_vault(vault_env)
    terminal = Terminal(["-m", "squirrel_mcp", "passphrase"], without(vault_env, "SQUIRREL_PASSPHRASE"))
    terminal.answer("Current passphrase: ", PASSPHRASE)
    terminal.answer("New passphrase: ", NEW)
    # While the first waits at its prompt, holding the key it read, another process changes it.
    other = "the other process's passphrase"
    assert change(vault_env, PASSPHRASE, other)[0] == 0
    terminal.answer("New passphrase again: ", NEW)
    code, output = terminal.finish()
    assert code == 1
    assert "was changed by another process while this command ran; nothing was changed here" in output
    assert unlocks(vault_env, other) and not unlocks(vault_env, NEW) and not unlocks(vault_env, PASSPHRASE)


def test_a_vault_made_before_verifiers_gets_its_own_at_the_first_unlock(vault_env: dict[str, str]) -> None:
    # The account record as an earlier squirrel-mcp wrote it: no key-change verifier.
    vault = LocalVault(Path(vault_env["SQUIRREL_VAULT"]), create=True)
    try:
        data_key, account_id = crypto.new_data_key(), "0123456789abcdef" * 2
        wrapped = crypto.wrap_data_key(PASSPHRASE, CHEAP_KDF, account_id, data_key)
        vault.create_account(Account(account_id, CHEAP_KDF, wrapped))
    finally:
        vault.close()
    assert "keyChangeVerifier" not in account_row(vault_env)
    done = run_cli(vault_env, "export")
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    verifier = crypto.key_change_verifier(crypto.key_change_proof(data_key))
    assert json.loads(account_row(vault_env))["keyChangeVerifier"] == base64.b64encode(verifier).decode()
    code, _, err = change(vault_env, PASSPHRASE, NEW)
    assert code == 0, err
    assert unlocks(vault_env, NEW) and not unlocks(vault_env, PASSPHRASE)


@pytest.mark.anyio
async def test_a_machine_that_unlocked_before_is_told_the_passphrase_was_changed(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    # Another machine: the same vault (as a synced folder would give it), its own cache.
    elsewhere = {**vault_env, "XDG_CACHE_HOME": str(tmp_path / "elsewhere-cache")}
    assert unlocks(elsewhere, PASSPHRASE)
    never = {**vault_env, "XDG_CACHE_HOME": str(tmp_path / "new-cache")}
    assert change(vault_env, PASSPHRASE, NEW)[0] == 0

    told = run_cli(elsewhere, "export")
    assert told.returncode == 1
    assert b"the account's wrapped key changed since this machine last unlocked it" in told.stderr
    line = await served_error(server_params(elsewhere))
    assert "the account's wrapped key changed since this machine last unlocked it" in line
    # One that never unlocked it cannot tell, and says what it knows.
    plain = run_cli(never, "export")
    assert plain.returncode == 1 and b"does not unlock this vault" in plain.stderr
    assert b"was changed" not in plain.stderr
    # With the new passphrase it unlocks, and from then on knows the new key.
    assert unlocks(elsewhere, NEW)
    again = run_cli(elsewhere, "export")
    assert again.returncode == 1 and b"was changed" not in again.stderr


@pytest.mark.anyio
async def test_a_new_vault_needs_8_characters_and_an_existing_one_opens_with_any(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    short = {**vault_env, "SQUIRREL_PASSPHRASE": "short"}
    vault = Path(vault_env["SQUIRREL_VAULT"])
    refused = run_cli(short, "init")
    assert refused.returncode == 1
    assert b"SQUIRREL_PASSPHRASE is too short for a new passphrase: it must have at least 8" in refused.stderr
    export = tmp_path / "empty.json"
    export.write_text(
        '{"format": "squirrel-mcp-export", "version": 1, "exportedAt": "2026-01-01T00:00:00Z", '
        '"exportedBy": "a test", "memories": []}'
    )
    imported = run_cli(short, "import", "--create", str(export))
    assert imported.returncode == 1 and b"at least 8 characters; no vault was created" in imported.stderr
    line = await served_error(server_params(short))
    assert "at least 8 characters; no vault was created" in line
    assert not vault.exists()

    create_vault(vault_env, "short")  # as an earlier squirrel-mcp could make it
    assert unlocks(vault_env, "short")
    assert change(vault_env, "short", NEW)[0] == 0
    assert unlocks(vault_env, NEW)
