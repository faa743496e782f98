"""Settings read from the environment: every variable the README lists, in one place."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from squirrel_mcp.core.keychain import KeychainError

APP_NAME = "squirrel-mcp"
# The cache directory's override; the embeddings plugin keeps its vector file there too.
CACHE_DIR_VARIABLE = "SQUIRREL_MEMORY_CACHE_DIR"


def linux_user_directory(variable: str, in_home: str) -> Path | None:
    """On Linux, the XDG directory `variable` names (when absolute), else HOME's `in_home`.

    What platformdirs answers there, without importing it (and tempfile, shutil, random with
    it): a host's bridge reads the default paths and stays a few MB. None where platformdirs
    decides: another system, or no absolute HOME.
    """
    if sys.platform != "linux":
        return None
    given = os.environ.get(variable, "")
    if os.path.isabs(given):
        return Path(given)
    home = os.environ.get("HOME", "")
    return Path(home) / in_home if os.path.isabs(home) else None


def default_vault_path() -> Path:
    """The vault in the OS data directory (e.g. ~/.local/share/squirrel-mcp/vault.sqlite3)."""
    data = linux_user_directory("XDG_DATA_HOME", ".local/share")
    if data is not None:
        return data / APP_NAME / "vault.sqlite3"
    import platformdirs

    return platformdirs.user_data_path(APP_NAME, appauthor=False) / "vault.sqlite3"


def default_cache_dir() -> Path:
    """The OS cache directory (e.g. ~/.cache, or $XDG_CACHE_HOME): checkpoints go in its squirrel-mcp/."""
    cache = linux_user_directory("XDG_CACHE_HOME", ".cache")
    if cache is not None:
        return cache
    import platformdirs

    return Path(platformdirs.user_cache_dir())


class ConfigError(Exception):
    """The environment asks for something this server cannot do."""


class Config(NamedTuple):
    """What the server was told by its environment (a change is `config._replace(name=value)`)."""

    vault_path: Path
    passphrase: str | None
    api_base_url: str | None
    api_key: str | None
    # Where this machine keeps what it may lose (the log's checkpoints, the plugin's vector file).
    cache_dir: Path
    # `squirrel-mcp passphrase` only: the new passphrase, instead of asking for it.
    new_passphrase: str | None = None
    # Set by cli.unlock.from_keychain: the secrets read from the OS keychain ("passphrase",
    # "API key"), and why it could not be read when it could not (None: read, or not needed).
    from_keychain: frozenset[str] = frozenset()
    keychain_problem: KeychainError | None = None

    def __repr__(self) -> str:
        """The fields, the secrets as <hidden>: whoever prints a Config shows none."""
        secrets = ("passphrase", "api_key", "new_passphrase")
        shown = [
            f"{name}={'<hidden>' if name in secrets and value else repr(value)}"
            for name, value in self._asdict().items()
        ]
        return f"Config({', '.join(shown)})"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Config:
        """Read SQUIRREL_* variables (empty counts as unset)."""
        env = dict(os.environ) if env is None else env
        vault = env.get("SQUIRREL_VAULT") or None
        cache = env.get(CACHE_DIR_VARIABLE) or None
        return cls(
            vault_path=Path(vault).expanduser() if vault else default_vault_path(),
            passphrase=env.get("SQUIRREL_PASSPHRASE") or None,
            api_base_url=env.get("SQUIRREL_API_BASE_URL") or None,
            api_key=env.get("SQUIRREL_API_KEY") or None,
            cache_dir=Path(cache).expanduser() if cache else default_cache_dir(),
            new_passphrase=env.get("SQUIRREL_NEW_PASSPHRASE") or None,
        )

    @property
    def remote(self) -> bool:
        """True when memories live on a sync server rather than in the local vault."""
        return self.api_base_url is not None

    @property
    def lacks_secret(self) -> bool:
        """True when the passphrase, or a sync account's API key, is unset: the keychain may hold it."""
        return not self.passphrase or (self.remote and not self.api_key)

    def check(self) -> None:
        """Refuse a half-made or unsafe remote configuration rather than guess or ignore it."""
        if self.api_base_url is None:
            if self.api_key is not None:
                raise ConfigError(
                    "SQUIRREL_API_KEY is set but SQUIRREL_API_BASE_URL is not: set the sync server's URL, "
                    "or unset the key to use the local vault"
                )
            return
        check_api_base_url(self.api_base_url)
        if self.api_key is None:
            raise ConfigError(
                "SQUIRREL_API_BASE_URL is set but SQUIRREL_API_KEY is not, nor is it in the keychain: set "
                "the API key your sync server issued (or keep it in the keychain: `squirrel-mcp keychain "
                "store`)"
            )


def is_loopback(host: str) -> bool:
    """True for a loopback address (127.0.0.0/8, ::1) or the name localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def location(config: Config) -> str:
    """Where the memories live, for messages: the server's address or the vault's path."""
    if config.api_base_url is not None:
        parts = urlsplit(check_api_base_url(config.api_base_url))
        return f"the sync server at {parts.scheme}://{parts.netloc}"
    return f"the vault at {config.vault_path}"


def check_api_base_url(url: str) -> str:
    """The sync server's base URL without a trailing slash; ConfigError if it is unsafe or malformed.

    Only https is accepted, or plain http to a loopback address (a server on this
    machine, as in tests): the API key travels in every request's header and must
    not cross a network in cleartext. The URL is never echoed, since it could
    carry credentials.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ConfigError("SQUIRREL_API_BASE_URL is not a valid URL") from None
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigError("SQUIRREL_API_BASE_URL must be an https:// URL, e.g. https://sync.example.org")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("SQUIRREL_API_BASE_URL must not hold credentials: put the key in SQUIRREL_API_KEY")
    if parts.query or parts.fragment:
        raise ConfigError("SQUIRREL_API_BASE_URL must not have a query or a fragment")
    if parts.scheme == "http" and not is_loopback(host):
        raise ConfigError(
            "SQUIRREL_API_BASE_URL must use https: plain http is accepted only to a loopback address "
            "(127.0.0.1, ::1, localhost), so the API key never crosses a network in cleartext"
        )
    return url.rstrip("/")
