"""Opening the configured vault or sync account: the passphrase, the storage, the unlock.

Every command and the server unlock through `open_store`. The passphrase comes
from SQUIRREL_PASSPHRASE, else from the OS keychain (`from_keychain`), else is
asked on the terminal without echo; the sync server's API key from
SQUIRREL_API_KEY, else from the keychain. Errors a user
can cause (`USER_ERRORS`) become one line (`error_line`) that names what to
change and never a secret or memory text.
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from squirrel_mcp.book import rekey
from squirrel_mcp.book.checkpoint import Place
from squirrel_mcp.book.errors import LogDivergedError, NoAccountError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.transfer import ImportFileError, field_locations
from squirrel_mcp.cli.errors import UserError as UserError
from squirrel_mcp.core import heap, keychain
from squirrel_mcp.core.config import (
    APP_NAME,
    Config,
    ConfigError,
    check_api_base_url,
    default_vault_path,
    location,
)
from squirrel_mcp.core.keychain import KeychainError, NoKeychainError
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.keys.crypto import KEY_CHANGE_PURPOSE, KdfParams, WrongPassphraseError
from squirrel_mcp.storage import NO_REMOTE_ACCOUNT, Account, AccountExists, Storage, StorageError
from squirrel_mcp.storage.local import LocalVault, tell_corrected_modes

MIN_PASSPHRASE = 8
# How often a new passphrase is asked for (too short, or confirmed differently) before giving up.
PASSPHRASE_ATTEMPTS = 3
# `export` wrote its file but left out revisions it could not read (see the module docstring).


class StaleKeychainError(WrongPassphraseError):
    """The passphrase kept in the keychain does not unlock the account (changed since it was kept)."""


def stale_entry(config: Config) -> str:
    """The line for a keychain entry whose passphrase no longer unlocks the account."""
    return (
        f"the passphrase in the keychain entry {passphrase_entry(config)} does not unlock "
        f"{location(config)} (it was changed since, perhaps on another machine): run `squirrel-mcp keychain "
        "store` with the current passphrase, or set SQUIRREL_PASSPHRASE in the server's env"
    )


# Errors a user can cause and fix: one line on stderr, no traceback (their messages hold no secret).
USER_ERRORS = (
    UserError,
    ConfigError,
    StorageError,
    WrongPassphraseError,
    KeychainError,
    NoAccountError,
    ImportFileError,
    LogDivergedError,
)


def get_passphrase(config: Config, *, confirm: bool, prompt: str = "Passphrase: ") -> str:
    """SQUIRREL_PASSPHRASE, or asked on the terminal without echo.

    `confirm` (a new account's): asked twice, at least MIN_PASSPHRASE characters.
    """
    if config.passphrase:
        return config.passphrase
    if not sys.stdin.isatty():
        raise UserError(
            f"SQUIRREL_PASSPHRASE is not set (and there is no terminal to ask on){_keychain_said(config)}"
        )
    if confirm:
        return ask_new_passphrase(prompt, "nothing was created")
    return getpass.getpass(prompt)


def ask_new_passphrase(prompt: str, nothing: str) -> str:
    """A new passphrase asked on the terminal, then again to confirm.

    Too short, or confirmed differently, it is asked for again: PASSPHRASE_ATTEMPTS
    times in all, then UserError saying which it was the last time.
    """
    problem = ""
    for attempt in range(PASSPHRASE_ATTEMPTS):
        if attempt:
            print(f"{problem[0].upper()}{problem[1:]}; try again.", file=sys.stderr)
        first = getpass.getpass(prompt)
        if len(first) < MIN_PASSPHRASE:
            problem = f"the passphrase must have at least {MIN_PASSPHRASE} characters"
        elif getpass.getpass(f"{prompt.removesuffix(': ')} again: ") != first:
            problem = "the two passphrases differ"
        else:
            return first
    raise UserError(f"{problem}; {nothing}")


def check_new_passphrase(variable: str, passphrase: str, nothing: str) -> None:
    """Refuse a new passphrase from `variable` shorter than the prompt accepts (an existing one may be)."""
    if len(passphrase) < MIN_PASSPHRASE:
        raise UserError(
            f"{variable} is too short for a new passphrase: it must have at least {MIN_PASSPHRASE} "
            f"characters; {nothing} (an existing vault or account opens with any passphrase)"
        )


def open_storage(config: Config, *, create: bool) -> Storage:
    """The configured backend: the sync server's API when SQUIRREL_API_BASE_URL is set, else the vault.

    A vault that does not exist is made only when `create`; else `no_vault`'s line refuses it.
    """
    config.check()
    if config.api_base_url is not None and config.api_key is not None:
        # Imported here: the local vault's start-up does not pay for importing requests.
        from squirrel_mcp.storage.remote import RemoteStorage

        return RemoteStorage(check_api_base_url(config.api_base_url), config.api_key)
    # lexists: a dangling link is refused by LocalVault as a link, not said to be missing.
    if not create and not os.path.lexists(config.vault_path):
        raise StorageError(no_vault(config))
    vault = LocalVault(config.vault_path, create=create)
    tell_corrected_modes(vault)
    return vault


def checkpoints(config: Config, *, read_only: bool = False) -> Place:
    """Where this machine keeps the checkpoints of the configured log (squirrel_mcp.book.checkpoint)."""
    if config.api_base_url is not None:
        location = check_api_base_url(config.api_base_url)
    else:
        location = str(config.vault_path.resolve())
    return Place(config.cache_dir / APP_NAME, location, read_only=read_only)


def passphrase_entry(config: Config) -> keychain.Entry:
    """The keychain entry of the configured account's passphrase: its vault's full path, or its server."""
    if config.api_base_url is not None:
        return keychain.passphrase_entry(check_api_base_url(config.api_base_url))
    return keychain.vault_passphrase_entry(config.vault_path)


def from_keychain(config: Config) -> Config:
    """`config` with the secrets the environment does not set read from the OS keychain.

    SQUIRREL_PASSPHRASE and SQUIRREL_API_KEY win: with both set (or the key not needed)
    the keychain is not asked, and keyring is not even imported. A keychain that cannot be
    read leaves the secret unset, with the reason in `keychain_problem`.
    """
    if not config.lacks_secret:
        return config
    wanted_key = config.api_base_url is not None and config.api_key is None
    api_key, passphrase = config.api_key, config.passphrase
    said: set[str] = set()
    try:
        if wanted_key and config.api_base_url is not None:
            api_key = keychain.read(keychain.api_key_entry(check_api_base_url(config.api_base_url)))
            said |= {"API key"} if api_key else set()
        if not passphrase:
            passphrase = keychain.read(passphrase_entry(config))
            said |= {"passphrase"} if passphrase else set()
    except KeychainError as error:
        problem: KeychainError | None = error
    else:
        problem = None
    return config._replace(
        api_key=api_key or None,
        passphrase=passphrase or None,
        from_keychain=frozenset(said),
        keychain_problem=problem,
    )


def _keychain_said(config: Config) -> str:
    """What the keychain said of a passphrase the environment does not set, for the line saying so."""
    problem = config.keychain_problem
    if problem is None:
        return (
            f"; nor is it in the keychain (entry {passphrase_entry(config)}: "
            "`squirrel-mcp keychain store` keeps it there)"
        )
    if isinstance(problem, NoKeychainError):
        return "; no keychain is usable on this machine to keep it in"
    return f"; the keychain entry {passphrase_entry(config)} could not be read: {problem}"


def missing_passphrase(config: Config, *, existed: bool) -> str:
    """What is wrong when the server starts without SQUIRREL_PASSPHRASE: a vault to open, or none yet.

    Running `init` is the fix only where there is nothing to open: on an existing vault
    it would be refused, and the passphrase is what the server's config lacks.
    """
    if config.remote:
        return (
            f"SQUIRREL_PASSPHRASE is not set: the account on {location(config)} opens only with its "
            "passphrase; set SQUIRREL_PASSPHRASE in the server's env (the MCP client's config), or, for "
            f"a new account, run `squirrel-mcp init` first{_keychain_said(config)}"
        )
    if existed:
        return (
            f"SQUIRREL_PASSPHRASE is not set: the vault at {config.vault_path} exists and opens only "
            "with its passphrase; set SQUIRREL_PASSPHRASE to it in the server's env (the MCP client's "
            f"config){_keychain_said(config)}"
        )
    return (
        f"SQUIRREL_PASSPHRASE is not set and there is no vault at {config.vault_path} yet: run "
        "`squirrel-mcp init` to create one (it asks for a passphrase and prints the MCP client's config)"
    )


def at_default_location(config: Config) -> bool:
    """True when the configured vault is the default one (SQUIRREL_VAULT unset, or naming that same file).

    Only there does a server make a vault that does not exist yet: a SQUIRREL_VAULT
    naming another path that does not exist is most likely mistyped, and a new empty
    vault there would have the agent believe it has no memories.
    """
    return not config.remote and config.vault_path.absolute() == default_vault_path().absolute()


def server_creates(config: Config) -> bool:
    """Whether the server (or the memory process) may create what it opens: `open_store`'s `create`.

    A local vault only at the default location. On a sync server only `init` creates an
    account whatever this says; there it picks the line for a missing passphrase.
    """
    return config.remote or at_default_location(config)


def no_vault(config: Config) -> str:
    """The line for a local vault that does not exist, which this command or server will not create."""
    if at_default_location(config):
        return f"there is no vault at {config.vault_path} yet: run `squirrel-mcp init` to create one"
    return (
        f"there is no vault at {config.vault_path}, the path SQUIRREL_VAULT names: correct SQUIRREL_VAULT "
        "(in the MCP client's config, for the server), or run `squirrel-mcp init` to create a vault there; "
        "nothing was created"
    )


def open_store(
    config: Config,
    *,
    create: bool,
    progress: Callable[[int, int], None] | None = None,
    read_only: bool = False,
    created: Callable[[str], None] | None = None,
) -> MemoryStore:
    """Unlock the configured account (creating a local vault's first when `create` and it is missing).

    A local vault that is missing and not to be created is refused with `no_vault`'s line.
    `created` is told the line said when a new vault or account was made (it is logged too).

    On a sync server only `init` creates the account: a missing one is NoAccountError.
    `progress` becomes the store's (told how far each pull's decryption has got).
    `read_only` (a process that only looks, as the diagnostic): the log is checked
    against this machine's checkpoint, which is never moved; nothing is written to
    the cache directory (no snapshot, no key fingerprint).
    The secrets the environment does not set are read from the keychain first. Large
    blocks freed from here on go back to the OS (`heap.return_large_blocks`): the
    log, the snapshot and the plugins that start on the store are read after it.
    """
    heap.return_large_blocks()
    config = from_keychain(config)
    config.check()
    existed = config.remote or config.vault_path.exists()
    if not config.passphrase and create:
        raise UserError(missing_passphrase(config, existed=existed))
    if create and config.passphrase and not existed:
        check_new_passphrase("SQUIRREL_PASSPHRASE", config.passphrase, "no vault was created")
    storage = open_storage(config, create=create)
    try:
        account = storage.load_account()
        if account is not None:
            check_kdf(config, account.kdf)
        passphrase = get_passphrase(config, confirm=False)
        if account is None:
            if config.remote:
                # Only `init` creates an account on a server: one that answers "no account"
                # may have lost its database, and serving would then write into an empty memory.
                raise NoAccountError(f"{location(config)} {NO_REMOTE_ACCOUNT}")
            if not create:
                raise NoAccountError(f"the vault at {config.vault_path} holds no account")
            check_new_passphrase("SQUIRREL_PASSPHRASE", passphrase, "no account was created")
            try:
                store = MemoryStore.create(storage, passphrase, checkpoints=checkpoints(config))
            except AccountExists:
                # Another process created it since the look (two hosts started at once on a
                # new vault): this one unlocks that account like any existing one.
                account = storage.load_account()
                if account is None:
                    raise
                check_kdf(config, account.kdf)
            else:
                store.progress = progress
                # An existing file without an account is one whose creation was cut short,
                # or one emptied since: either way the user should hear of the new account.
                news = (
                    f"created a new vault at {config.vault_path}"
                    if not existed
                    else f"the vault at {config.vault_path} held no account; created a new one in it"
                )
                log_line(news)
                if created is not None:
                    created(news)
                return store
        with explaining(config, storage):
            store = MemoryStore.unlock(
                storage, passphrase, checkpoints(config, read_only=read_only), progress=progress
            )
        # The account read before the unlock: if the key changed in between, the next
        # unlock with this passphrase remembers the right one.
        if not read_only:
            remember_key(config, account)
            # An account made before verifiers were kept gets its verifier here, once.
            if rekey.ensure_verifier(storage, account, store.derive_key(KEY_CHANGE_PURPOSE)) is False:
                log_line(foreign_verifier(config))
        return store
    except BaseException:
        storage.close()
        raise


@contextmanager
def explaining(config: Config, storage: Storage) -> Iterator[None]:
    """A wrong passphrase's error, or a PassphraseChangedError when this machine can tell it was changed.

    A passphrase read from the keychain that does not unlock is a stale entry: the
    line names the entry and how to renew it.
    """
    try:
        yield
    except WrongPassphraseError:
        if "passphrase" in config.from_keychain:
            raise StaleKeychainError(stale_entry(config)) from None
        changed = rekey.explain(
            config.cache_dir / APP_NAME, storage.load_account(), location(config), remote=config.remote
        )
        if changed is None:
            raise
        raise changed from None


def foreign_verifier(config: Config) -> str:
    """The line for an account whose key-change verifier its own data key did not make."""
    where = location(config)
    if not config.remote:
        return (
            f"{where} holds a key-change verifier its data key did not make: the account record was "
            "tampered with; `squirrel-mcp passphrase` is refused on it"
        )
    return (
        f"{where} holds a key-change verifier for this account that its data key did not make: someone "
        "holding the API key but not the passphrase set it, and with it can replace the account's "
        "wrapped key. Ask the server's operator to revoke that API key and issue a new one, then to run "
        "`squirrel-mcp-sync clear-verifier` (the next unlock sets the right verifier); until then "
        "`squirrel-mcp passphrase` is refused"
    )


def remember_key(config: Config, account: Account, *, changed_here: bool = False) -> None:
    """Remember the key this machine unlocked (or set); a cache that cannot be written only costs the hint."""
    try:
        rekey.remember(config.cache_dir / APP_NAME, account, changed_here=changed_here)
    except OSError as error:
        log_line(
            f"cannot write to the cache directory {config.cache_dir / APP_NAME} ({error.strerror}): "
            "a later change of the passphrase will be reported as a wrong passphrase"
        )


def check_kdf(config: Config, kdf: KdfParams) -> None:
    """Refuse stored key-derivation parameters outside the bounds, before any passphrase is asked for.

    They come from the vault file or the sync server; out of bounds, scrypt would
    take gigabytes or minutes (derive_kek refuses them too, but as a bug's ValueError).
    """
    try:
        kdf.validate()
    except ValueError as error:
        raise StorageError(
            f"the key parameters of {location(config)} are out of bounds ({error}): this squirrel-mcp "
            "did not make them, so the account record was damaged or tampered with"
        ) from None


def error_line(error: Exception) -> str | None:
    """The one line telling the user what went wrong and what to change; None for a bug."""
    if isinstance(error, USER_ERRORS):
        return str(error)
    if isinstance(error, ValidationError):
        # Data that does not fit a model: name the fields, never the values (memory text).
        return f"invalid data at: {field_locations(error)}"
    if isinstance(error, OSError):
        # A missing or unreadable file given on the command line; the path is the user's own.
        return f"{error.strerror}: {error.filename}"
    return None
