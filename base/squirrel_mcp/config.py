"""Settings read from the environment: every variable the README lists, in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "squirrel-mcp"


def default_vault_path() -> Path:
    """The vault in the OS data directory (e.g. ~/.local/share/squirrel-mcp/vault.sqlite3)."""
    return platformdirs.user_data_path(APP_NAME, appauthor=False) / "vault.sqlite3"


class ConfigError(Exception):
    """The environment asks for something this server cannot do."""


@dataclass(frozen=True)
class Config:
    """What the server was told by its environment."""

    vault_path: Path
    passphrase: str | None
    api_base_url: str | None
    api_key: str | None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Config:
        """Read SQUIRREL_* variables (empty counts as unset)."""
        env = dict(os.environ) if env is None else env
        vault = env.get("SQUIRREL_VAULT") or None
        return cls(
            vault_path=Path(vault).expanduser() if vault else default_vault_path(),
            passphrase=env.get("SQUIRREL_PASSPHRASE") or None,
            api_base_url=env.get("SQUIRREL_API_BASE_URL") or None,
            api_key=env.get("SQUIRREL_API_KEY") or None,
        )

    def check_local(self) -> None:
        """Refuse a remote configuration this version cannot serve, rather than ignore it."""
        if self.api_base_url:
            raise ConfigError(
                "SQUIRREL_API_BASE_URL is set, but this version of squirrel-mcp serves only the "
                "local vault; unset it to use the local vault"
            )
