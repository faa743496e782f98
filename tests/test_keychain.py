"""The keychain layer in one interpreter: time bound, failure lines, and keyring left unimported.

The real Secret Service is exercised in test_keychain_secret_service.py; here keyring's
own backends (the failing one, and a throwaway one registered for the test) stand in.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyring.errors import KeyringLocked

from squirrel_mcp.core import keychain
from squirrel_mcp.core.keychain import KeychainError, NoKeychainError

SECRET = "a secret no line may hold"


class Throwaway(KeyringBackend):
    """A backend that raises `error`, or blocks on `hold`, or keeps entries in a dict."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}
        self.error: Exception | None = None
        self.hold = threading.Event()
        self.blocking = False

    def _act(self) -> None:
        if self.blocking:
            self.hold.wait(60)
        if self.error is not None:
            raise self.error

    def get_password(self, service: str, username: str) -> str | None:
        self._act()
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self._act()
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self._act()
        from keyring.errors import PasswordDeleteError

        if self.entries.pop((service, username), None) is None:
            raise PasswordDeleteError("no such entry")


@pytest.fixture
def backend() -> Iterator[Throwaway]:
    before = keyring.get_keyring()
    throwaway = Throwaway()
    keyring.set_keyring(throwaway)
    try:
        yield throwaway
    finally:
        throwaway.hold.set()
        keyring.set_keyring(before)


ENTRY = keychain.passphrase_entry("the vault at /tmp/vault.sqlite3")


def test_an_entry_is_written_read_and_deleted(backend: Throwaway) -> None:
    assert keychain.read(ENTRY) is None
    keychain.write(ENTRY, SECRET)
    assert backend.entries == {("squirrel-mcp", "passphrase of the vault at /tmp/vault.sqlite3"): SECRET}
    assert keychain.read(ENTRY) == SECRET
    assert keychain.delete(ENTRY) is True
    assert keychain.delete(ENTRY) is False


def test_a_keychain_that_never_answers_fails_at_the_bound(
    backend: Throwaway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keychain, "TIMEOUT", 0.5)
    backend.blocking = True
    started = time.monotonic()
    with pytest.raises(KeychainError, match=r"did not answer within 0\.5 s") as caught:
        keychain.read(ENTRY)
    assert 0.5 <= time.monotonic() - started < 30
    assert "set SQUIRREL_PASSPHRASE" in str(caught.value)


@pytest.mark.parametrize(
    ("error", "expected", "kind"),
    [
        (KeyringLocked(SECRET), "the keychain is locked and was not unlocked", KeychainError),
        (RuntimeError(SECRET), "the keychain failed (RuntimeError) when asked to read it", KeychainError),
    ],
)
def test_a_failing_backend_is_one_line_without_its_message(
    backend: Throwaway, error: Exception, expected: str, kind: type[KeychainError]
) -> None:
    backend.error = error
    with pytest.raises(kind) as caught:
        keychain.read(ENTRY)
    line = str(caught.value)
    assert line.startswith(expected) and SECRET not in line and "\n" not in line
    assert not isinstance(caught.value, NoKeychainError)


def test_no_backend_is_no_keychain() -> None:
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        with pytest.raises(NoKeychainError, match="no keychain is usable on this machine"):
            keychain.read(ENTRY)
    finally:
        keyring.set_keyring(before)


@pytest.mark.process
def test_a_passphrase_in_the_environment_leaves_keyring_unimported() -> None:
    program = (
        "import sys\n"
        "from squirrel_mcp.cli.unlock import from_keychain\n"
        "from squirrel_mcp.core.config import Config\n"
        "config = from_keychain(Config.from_env({'SQUIRREL_PASSPHRASE': 'long enough passphrase'}))\n"
        "assert config.from_keychain == frozenset() and config.keychain_problem is None\n"
        "print('keyring' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
