"""`squirrel-mcp keychain store | forget | status`: the passphrase (and API key) in the OS keychain.

With the passphrase kept there, an MCP host's config needs no secret: the
server reads the keychain when SQUIRREL_PASSPHRASE is not set. `store` keeps
the passphrase only once it has unlocked the account, so a mistyped one is
never kept. Nothing here prints a secret: entries are named by what they hold
and where (squirrel_mcp.core.keychain).
"""

from __future__ import annotations

import sys

from squirrel_mcp.book.errors import NoAccountError
from squirrel_mcp.cli.unlock import (
    UserError,
    check_kdf,
    explaining,
    from_keychain,
    get_passphrase,
    open_storage,
    passphrase_entry,
    stale_entry,
)
from squirrel_mcp.core import keychain
from squirrel_mcp.core.config import Config, check_api_base_url, location
from squirrel_mcp.core.keychain import NoKeychainError
from squirrel_mcp.keys.crypto import WrongPassphraseError, unwrap_data_key
from squirrel_mcp.plugins.checks import Check
from squirrel_mcp.storage import NO_REMOTE_ACCOUNT


def entries(config: Config) -> list[keychain.Entry]:
    """The keychain entries of the configured account: its passphrase's, and its API key's on a server."""
    found = [passphrase_entry(config)]
    if config.api_base_url is not None:
        found.append(keychain.api_key_entry(check_api_base_url(config.api_base_url)))
    return found


def unlocks(config: Config, passphrase: str) -> None:
    """Refuse `passphrase` unless it unwraps the configured account's data key (WrongPassphraseError)."""
    storage = open_storage(config, create=False)
    try:
        account = storage.load_account()
        if account is None:
            where = location(config)
            raise NoAccountError(
                f"{where} {NO_REMOTE_ACCOUNT}" if config.remote else f"{where} holds no account"
            )
        check_kdf(config, account.kdf)
        with explaining(config, storage):
            unwrap_data_key(passphrase, account.kdf, account.account_id, account.wrapped_data_key)
    finally:
        storage.close()


def store(config: Config) -> None:
    """Keep the passphrase (and, on a sync server, the API key) in the keychain.

    The passphrase is SQUIRREL_PASSPHRASE, or asked on the terminal; the API key is
    SQUIRREL_API_KEY, or the one the keychain already holds.
    """
    if config.api_base_url is not None and config.api_key is None:
        api_key = keychain.read(keychain.api_key_entry(check_api_base_url(config.api_base_url)))
        config = config._replace(api_key=api_key)
    if not config.passphrase and not sys.stdin.isatty():
        raise UserError(
            "SQUIRREL_PASSPHRASE is not set (and there is no terminal to ask on); nothing was kept"
        )
    passphrase = get_passphrase(config, confirm=False)
    unlocks(config, passphrase)
    if config.api_base_url is not None and config.api_key is not None:
        keychain.write(keychain.api_key_entry(check_api_base_url(config.api_base_url)), config.api_key)
    keychain.write(passphrase_entry(config), passphrase)


def cmd_store(config: Config) -> int:
    """`keychain store`: keep the secrets, then print the entries and what the host config may drop."""
    store(config)
    for entry in entries(config):
        print(f"Kept in the keychain: {entry}")
    dropped = "SQUIRREL_PASSPHRASE and SQUIRREL_API_KEY" if config.remote else "SQUIRREL_PASSPHRASE"
    print(f"Your MCP client's config no longer needs {dropped} in its env: remove it from there.")
    return 0


def cmd_forget(config: Config) -> int:
    """`keychain forget`: remove the configured account's entries; saying so for each one."""
    for entry in entries(config):
        removed = keychain.delete(entry)
        print(f"{'Removed' if removed else 'Not in the keychain'}: {entry}")
    print("The server now needs SQUIRREL_PASSPHRASE in its env (or `squirrel-mcp keychain store`).")
    return 0


def state(config: Config) -> Check:
    """The keychain's part of `doctor` and `keychain status`: where the passphrase comes from.

    `config` is as `from_keychain` returns it. One of: the environment (the keychain is
    not asked), a keychain entry that unlocks the account, a stale one (it no longer
    does), or no keychain entry (none kept, or no keychain usable here).
    """
    from_keychain = "passphrase" in config.from_keychain
    if config.passphrase and not from_keychain:
        return Check("keychain", True, "not asked: the passphrase comes from SQUIRREL_PASSPHRASE")
    entry = passphrase_entry(config)
    problem = config.keychain_problem
    if isinstance(problem, NoKeychainError):
        return Check("keychain", True, f"none: {problem}")
    if problem is not None:
        return Check("keychain", False, f"entry {entry} cannot be read: {problem}")
    if config.passphrase is None:
        return Check(
            "keychain",
            True,
            f"no entry {entry}: the passphrase is set in SQUIRREL_PASSPHRASE (a host's config, in its env) "
            "or typed",
        )
    try:
        unlocks(config, config.passphrase)
    except WrongPassphraseError:
        return Check("keychain", False, stale_entry(config), "run `squirrel-mcp keychain store`")
    return Check("keychain", True, f"the passphrase comes from entry {entry}, and it unlocks the account")


def cmd_status(config: Config) -> int:
    """`keychain status`: the keychain's state, one line (✓ or ✗); 0 when it is usable as it is."""
    check = state(from_keychain(config._replace(passphrase=None)))
    print(check.line())
    return 0 if check.ok else 1


def cmd_keychain(config: Config, action: str) -> int:
    """Run `keychain ACTION`."""
    if action == "store":
        return cmd_store(config)
    if action == "forget":
        return cmd_forget(config)
    if action == "status":
        return cmd_status(config)
    raise UserError(f"keychain: unknown action {action!r}")
