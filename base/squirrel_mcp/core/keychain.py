"""The OS keychain: the passphrase and the sync server's API key kept out of every config file.

Through the `keyring` library: macOS Keychain, Windows Credential Manager, the
freedesktop Secret Service on Linux (GNOME Keyring, KWallet). Only the Linux
Secret Service is tested here; the others are keyring's own backends.

One entry per secret and storage location, under the service name `squirrel-mcp`,
its user name saying what it holds and where: `passphrase of the vault at
/home/me/.local/share/squirrel-mcp/vault.sqlite3`, `API key of https://sync.example.org`.
The keychain's own window shows that name.

Every call is bounded in time (`TIMEOUT`): a locked Secret Service may answer
a read by showing an unlock prompt and waiting for it, forever where nobody
can see the prompt (an MCP host starting the server, a terminal over ssh).
keyring is imported on first use only: a server given SQUIRREL_PASSPHRASE
never pays for it. Errors are `KeychainError`, one line naming what is wrong
with the keychain and what to do, never a secret.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

SERVICE = "squirrel-mcp"
# Seconds a keychain call may take, the unlock prompt's wait included, before it counts as failed.
TIMEOUT = 10.0
WHAT_TO_DO = "unlock the keychain, or set SQUIRREL_PASSPHRASE in the server's env"

T = TypeVar("T")


class KeychainError(Exception):
    """The keychain cannot be used now: none on this machine, locked, or failing. The message says which."""


class NoKeychainError(KeychainError):
    """No keychain that keyring can use is on this machine (a headless Linux box, say)."""


class Entry(NamedTuple):
    """One secret's place in the keychain: the service name and the user name its window shows."""

    user: str
    service: str = SERVICE

    def __str__(self) -> str:
        return f"{self.service} / {self.user}"


def passphrase_entry(where: str) -> Entry:
    """The entry of the passphrase of the account at `where` (the vault's path or the server's URL)."""
    return Entry(f"passphrase of {where}")


def vault_passphrase_entry(vault_path: Path) -> Entry:
    """The entry of the passphrase of the local vault at `vault_path` (its full path names it)."""
    return passphrase_entry(f"the vault at {vault_path.resolve()}")


def api_key_entry(api_base_url: str) -> Entry:
    """The entry of the API key of the sync server at `api_base_url` (checked, without a trailing slash)."""
    return Entry(f"API key of {api_base_url}")


def read(entry: Entry) -> str | None:
    """The secret kept in `entry`; None when there is none (KeychainError when the keychain cannot say)."""

    def get() -> str | None:
        import keyring

        return keyring.get_password(entry.service, entry.user)

    return _bounded(get, "read")


def write(entry: Entry, secret: str) -> None:
    """Keep `secret` in `entry`, replacing what it held."""

    def put() -> None:
        import keyring

        keyring.set_password(entry.service, entry.user, secret)

    _bounded(put, "write to")


def delete(entry: Entry) -> bool:
    """Remove `entry`; False when there was none."""

    def remove() -> bool:
        import keyring
        from keyring.errors import PasswordDeleteError

        try:
            keyring.delete_password(entry.service, entry.user)
        except PasswordDeleteError:
            # What every backend raises for an entry that does not exist.
            return False
        return True

    return _bounded(remove, "remove from")


def _bounded(call: Callable[[], T], verb: str) -> T:
    """`call()` in a daemon thread, given TIMEOUT seconds; its failures as one KeychainError line.

    A daemon thread: one still waiting on an unlock prompt when the process ends
    does not keep it alive.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # handed to the waiting thread, which explains it
            failure.append(error)

    thread = threading.Thread(target=run, name="squirrel-mcp-keychain", daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    if thread.is_alive():
        raise KeychainError(
            f"the keychain did not answer within {TIMEOUT:g} s (it is probably locked and waiting for an "
            f"unlock prompt nobody can see): {WHAT_TO_DO}"
        )
    if failure:
        raise _explain(failure[0], verb) from None
    return outcome[0]


def _explain(error: BaseException, verb: str) -> KeychainError:
    """The line for a keyring failure; its type is named, its message is not (a backend's, unchecked)."""
    try:
        from keyring.errors import KeyringLocked, NoKeyringError
    except ImportError:
        return KeychainError(
            "the keyring library is not installed: reinstall squirrel-mcp, or set SQUIRREL_PASSPHRASE"
        )
    if isinstance(error, NoKeyringError):
        return NoKeychainError(
            "no keychain is usable on this machine (keyring found no backend; on Linux that is a Secret "
            "Service such as GNOME Keyring or KWallet, running in this session's D-Bus): set "
            "SQUIRREL_PASSPHRASE in the server's env instead"
        )
    if isinstance(error, KeyringLocked):
        return KeychainError(f"the keychain is locked and was not unlocked: {WHAT_TO_DO}")
    return KeychainError(
        f"the keychain failed ({type(error).__name__}) when asked to {verb} it: {WHAT_TO_DO}"
    )
