"""Whether a host's entry unlocks its account, tried as the server that host starts would try it.

The server a host starts reads its settings from the entry's `env` laid over the
host's own environment, which is not this shell's: a desktop app's comes from the
login session, and Codex passes only a few variables on. So an entry is tried with
the SQUIRREL_* settings of its `env` alone (its passphrase, vault, sync server and
API key), the keychain filling in a secret its `env` lacks, as the server's start
does; never with this shell's.

A line says where the passphrase comes from and whether it unlocks, with the vault's
path or the sync server's address; never the passphrase nor the API key.
Each account and passphrase is tried once however many entries share them: an
unlock costs a key derivation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from squirrel_mcp.book.errors import NoAccountError
from squirrel_mcp.book.rekey import PassphraseChangedError
from squirrel_mcp.cli.hosts import Entry, Passphrase
from squirrel_mcp.cli.keychain import unlocks
from squirrel_mcp.cli.unlock import StaleKeychainError, from_keychain, open_storage, passphrase_entry
from squirrel_mcp.core.config import CACHE_DIR_VARIABLE, Config, ConfigError, location
from squirrel_mcp.core.keychain import NoKeychainError
from squirrel_mcp.keys.crypto import WrongPassphraseError
from squirrel_mcp.storage import Account, StorageError

# The variables that say which account the server opens and how it unlocks it.
SETTINGS = (
    "SQUIRREL_PASSPHRASE",
    "SQUIRREL_VAULT",
    "SQUIRREL_API_BASE_URL",
    "SQUIRREL_API_KEY",
    CACHE_DIR_VARIABLE,
)
KEEP_IT = "put SQUIRREL_PASSPHRASE in its env, or keep it in the keychain (`squirrel-mcp keychain store`"
NOT_TRIED: dict[Passphrase, tuple[str, str]] = {
    Passphrase.VSCODE_INPUT: ("SQUIRREL_PASSPHRASE comes from a VS Code input, asked once (not tried)", ""),
    Passphrase.HOST_VARIABLE: (
        "SQUIRREL_PASSPHRASE is a variable the host fills in from its own environment (not tried)",
        "",
    ),
    Passphrase.EMPTY: (
        "SQUIRREL_PASSPHRASE in its env is empty or not a string",
        "put your passphrase there, or remove the variable",
    ),
    Passphrase.PLACEHOLDER: (
        "SQUIRREL_PASSPHRASE in its env is still <your passphrase>",
        "put your passphrase in place of <your passphrase>",
    ),
}


@dataclass(frozen=True)
class Trial:
    """What an entry's line says of its account and passphrase, the fix, and the config that unlocked.

    `config` is the entry's, with the passphrase that unlocked its account; None when it did not
    unlock (or was not tried).
    """

    said: str
    fix: str = ""
    config: Config | None = None


class EntryTrials:
    """Tries each entry's account and passphrase, once per distinct account and secrets."""

    def __init__(self) -> None:
        self._tried: dict[tuple[object, ...], Trial] = {}
        self.unlocked: list[tuple[Entry, Config]] = []

    def trial(self, entry: Entry) -> Trial:
        """Where the entry's passphrase comes from and whether it unlocks its account, as one clause."""
        if entry.passphrase in (Passphrase.EMPTY, Passphrase.PLACEHOLDER):
            # The first thing to fix, whatever else its env says: the server would not unlock with it.
            return Trial(*NOT_TRIED[entry.passphrase])
        config = entry_config(entry)
        if isinstance(config, Trial):
            return config
        key = (config.vault_path, config.api_base_url, config.api_key, config.passphrase, entry.passphrase)
        if key not in self._tried:
            self._tried[key] = _try(config, entry.passphrase)
        found = self._tried[key]
        if found.config is not None:
            self.unlocked.append((entry, found.config))
        return found


def entry_config(entry: Entry) -> Config | Trial:
    """The settings the server of `entry` reads, or the Trial saying why they cannot be used."""
    env = {name: value for name, value in entry.env.items() if name in SETTINGS}
    if entry.passphrase is not Passphrase.SET:
        # A VS Code input or a host's variable is filled in by the host as it starts the server: its
        # text here is not the passphrase.
        env.pop("SQUIRREL_PASSPHRASE", None)
    vault = env.get("SQUIRREL_VAULT", "")
    if vault and not os.path.isabs(os.path.expanduser(vault)):
        if entry.cwd is None or not os.path.isabs(entry.cwd):
            return Trial(
                "its SQUIRREL_VAULT is a relative path, from a folder its config does not say",
                "give SQUIRREL_VAULT in its env as an absolute path",
            )
        env["SQUIRREL_VAULT"] = str(Path(entry.cwd) / vault)
    config = Config.from_env(env)
    try:
        config.check()
    except ConfigError as error:
        if config.api_base_url is None or config.api_key is not None:
            return Trial(f"{error} (in its env)", "correct it in its env")
    return config


def _try(config: Config, passphrase: Passphrase) -> Trial:
    """Open the account and try the passphrase the entry's server would get."""
    if config.lacks_secret:
        # As the server's start: the keychain fills in what the env does not set.
        try:
            config = from_keychain(config)
            config.check()
        except ConfigError as error:
            return Trial(f"{error} (in its env)", "correct it in its env")
    account = _account(config)
    if account is not None:
        return account
    where = location(config)
    if passphrase in NOT_TRIED:
        said, fix = NOT_TRIED[passphrase]
        return Trial(f"{where} holds an account; {said}", fix)
    if "passphrase" in config.from_keychain:
        source = f"the passphrase in the keychain entry {passphrase_entry(config)}"
        fix = "run `squirrel-mcp keychain store` with the current passphrase"
    elif config.passphrase is not None:
        source = "its SQUIRREL_PASSPHRASE"
        fix = "put the passphrase of `init` (or of the last `squirrel-mcp passphrase`) in its env"
    else:
        return _no_passphrase(config)
    try:
        unlocks(config, config.passphrase or "")
    except PassphraseChangedError as error:
        return Trial(f"{source} does not unlock {where}: {_after(str(error), where)}", fix)
    except StaleKeychainError:
        return Trial(f"{source} does not unlock {where}: it was changed since it was kept there", fix)
    except WrongPassphraseError:
        return Trial(f"{source} does not unlock {where}", fix)
    except (StorageError, NoAccountError) as error:
        # Read between the look and the unlock, or key parameters this squirrel-mcp did not make.
        return Trial(str(error), "correct the vault or sync server its env names")
    return Trial(f"{source} unlocks {where}", "", config)


def _after(message: str, where: str) -> str:
    """The reason a PassphraseChangedError gives, without its opening words (the line says them)."""
    opening = f"the passphrase does not unlock {where}: "
    return message.removeprefix(opening)


def stored_account(config: Config) -> Account | None:
    """The account record the vault or sync server holds (None: none); StorageError when it cannot say."""
    storage = open_storage(config, create=False)
    try:
        return storage.load_account()
    finally:
        storage.close()


def _account(config: Config) -> Trial | None:
    """None when the vault or sync server holds an account; else the Trial saying what is wrong."""
    try:
        account = stored_account(config)
    except StorageError as error:
        if config.remote:
            return Trial(str(error), "start the sync server, or correct SQUIRREL_API_BASE_URL in its env")
        if not os.path.lexists(config.vault_path):
            return Trial(
                f"there is no vault at {config.vault_path}, the one it opens",
                "correct SQUIRREL_VAULT in its env, or run `squirrel-mcp init` with SQUIRREL_VAULT set to it",
            )
        return Trial(str(error), "correct SQUIRREL_VAULT in its env")
    if account is None:
        return Trial(f"{location(config)} holds no account", "run `squirrel-mcp init`, or correct its env")
    return None


def _no_passphrase(config: Config) -> Trial:
    """The Trial of an entry whose env sets no passphrase and whose keychain gave none."""
    entry = passphrase_entry(config)
    problem = config.keychain_problem
    if isinstance(problem, NoKeychainError):
        kept = "no keychain is usable here"
    elif problem is not None:
        kept = f"the keychain entry {entry} cannot be read ({problem})"
    else:
        kept = f"the keychain has no entry {entry}"
    vault = "" if config.remote else " with its SQUIRREL_VAULT"
    return Trial(
        f"its env sets no SQUIRREL_PASSPHRASE and {kept}: the server starts only if the host's own "
        "environment sets it",
        f"{KEEP_IT}{vault})",
    )
