"""`squirrel-mcp doctor`: is this installation ready to serve, and if not, what to fix.

One line per check, ✓ or ✗, a failed one with its fix: the settings, the vault
or the sync server, the passphrase, the log's integrity (it must extend what this
machine saw of it; `--accept-log` accepts it as it is), the plugins, each plugin's own checks (the
`doctor_checks` hook: the embeddings plugin checks its model and vector file),
each MCP host's entry tried as that host will run it (squirrel_mcp.cli.host_checks),
and the hooks. What doctor could not check is marked `–`, neither passed nor failed:
no host entry anywhere, or no passphrase to try. Exit status 0 when no check
failed, 1 when any did.

It prints paths, names and counts only: never memory text, a passphrase, a key
or any value of a host config's env but SQUIRREL_PROJECT's (a project's name),
SQUIRREL_VAULT's path and the sync server's address.

The passphrase comes from SQUIRREL_PASSPHRASE, else from the OS keychain, else from
a host's entry whose passphrase unlocks the same account (doctor has just read and
tried it: it is not asked again), else is asked on the terminal; without a terminal
it is not tried. The keychain's line says whether the entry kept there still
unlocks the account (squirrel_mcp.cli.keychain.state).

The account checked is the one this shell's settings name. When they name none
(no SQUIRREL_VAULT, no SQUIRREL_API_BASE_URL) and the default vault does not
exist, it is that of the first host entry that unlocks: the vault a host uses,
rather than one nothing uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pluggy

from squirrel_mcp.book.checkpoint import ACCEPT_COMMAND, records
from squirrel_mcp.book.errors import NoAccountError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.cli import hosts, keychain
from squirrel_mcp.cli.entry_unlock import EntryTrials, stored_account
from squirrel_mcp.cli.hooks_check import hook_checks
from squirrel_mcp.cli.host_checks import Unchecked, check_hosts
from squirrel_mcp.cli.unlock import (
    USER_ERRORS,
    StaleKeychainError,
    from_keychain,
    open_store,
)
from squirrel_mcp.core.config import Config, ConfigError, location
from squirrel_mcp.keys.crypto import WrongPassphraseError
from squirrel_mcp.plugins.checks import Check
from squirrel_mcp.plugins.manager import DEFAULT_PLUGINS, get_plugin_manager, load_plugins, one_plugin_caller
from squirrel_mcp.storage import StorageError

INIT_FIX = "run `squirrel-mcp init` to create it"
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def check_config(config: Config, whose: str = "") -> Check:
    """The SQUIRREL_* settings make sense together; `whose`: the host entry they are taken from, if any."""
    try:
        config.check()
    except ConfigError as error:
        return Check("config", False, str(error), "correct the variable it names")
    where = "a sync server" if config.remote else "the local vault"
    if whose:
        where += f" of {whose} (this shell names none, and the default vault does not exist)"
    return Check("config", True, f"memories kept in {where}")


def check_storage(config: Config) -> Check:
    """The vault is there and holds an account, or the sync server answers and holds this key's."""
    name = "sync server" if config.remote else "vault"
    try:
        account = stored_account(config)
    except StorageError as error:
        fix = (
            "start the sync server, or correct SQUIRREL_API_BASE_URL and SQUIRREL_API_KEY"
            if config.remote
            else f"{INIT_FIX}, or point SQUIRREL_VAULT at your vault"
        )
        return Check(name, False, str(error), fix)
    if account is None:
        return Check(name, False, f"{location(config)} holds no account", INIT_FIX)
    found = "answers and holds an account" if config.remote else "holds an account"
    return Check(name, True, f"{location(config)} {found}")


def check_passphrase(config: Config, trials: EntryTrials) -> tuple[Check, MemoryStore | None]:
    """The passphrase unlocks the account: SQUIRREL_PASSPHRASE or the keychain's, a host entry's, or asked.

    A host entry's passphrase that unlocked the same account is used rather than asked for
    again; with none of them and no terminal, the check is `Unchecked`.
    """
    whose = ""
    if not config.passphrase:
        found = same_account(config, trials)
        if found is not None:
            entry, unlocked = found
            config = config._replace(passphrase=unlocked.passphrase)
            whose = f" with the passphrase of {_named(entry)}"
        elif not sys.stdin.isatty():
            return Unchecked(
                "passphrase",
                f"not tried: nothing here gives the passphrase of {location(config)} (neither "
                "SQUIRREL_PASSPHRASE, the keychain nor a host entry that unlocks it) and there is no "
                "terminal to ask on",
            ), None
    try:
        store = open_store(config, create=False)
    except StaleKeychainError as error:
        return Check("passphrase", False, str(error), "run `squirrel-mcp keychain store`"), None
    except WrongPassphraseError as error:
        return Check(
            "passphrase",
            False,
            str(error),
            "set SQUIRREL_PASSPHRASE to the passphrase of `init`, or of the last `squirrel-mcp passphrase`",
        ), None
    except USER_ERRORS as error:
        fix = "set SQUIRREL_PASSPHRASE (the MCP host's config passes it in `env`)"
        if isinstance(error, StorageError | NoAccountError):
            fix = "fix the vault or sync server line first"
        return Check("passphrase", False, str(error), fix), None
    count = len(store.current())
    return Check("passphrase", True, f"unlocks the account ({count} memories){whose}"), store


def same_account(config: Config, trials: EntryTrials) -> tuple[hosts.Entry, Config] | None:
    """The first host entry whose settings unlocked the account `config` names, and those settings."""
    for entry, unlocked in trials.unlocked:
        server = (unlocked.api_base_url, unlocked.api_key)
        if config.remote and server == (config.api_base_url, config.api_key):
            return entry, unlocked
        if not config.remote and not unlocked.remote and _same_file(unlocked.vault_path, config.vault_path):
            return entry, unlocked
    return None


def _same_file(one: Path, other: Path) -> bool:
    try:
        return one.resolve() == other.resolve()
    except OSError:
        return one.absolute() == other.absolute()


def account_to_check(config: Config, environ: Mapping[str, str], trials: EntryTrials) -> tuple[Config, str]:
    """The settings whose account doctor checks, and the host entry they come from ("": this shell's).

    This shell's, unless they name no account and the default vault does not exist while a
    host's entry unlocks one: then that entry's.
    """
    named = environ.get("SQUIRREL_VAULT") or environ.get("SQUIRREL_API_BASE_URL")
    if named or os.path.lexists(config.vault_path) or not trials.unlocked:
        return config, ""
    entry, unlocked = trials.unlocked[0]
    # Without its secrets: the keychain, then that entry's passphrase, are found again as for the
    # shell's own settings, and the lines say where the passphrase came from.
    api_key = None if "API key" in unlocked.from_keychain else unlocked.api_key
    bare = unlocked._replace(passphrase=None, api_key=api_key, from_keychain=frozenset())
    return bare, _named(entry)


def _named(entry: hosts.Entry) -> str:
    """The entry as a line names it: its file, and its name quoted (escaped: a line stays one line)."""
    return f"{entry.where}, entry {json.dumps(entry.name, ensure_ascii=False)}"


def check_log(store: MemoryStore, *, accept: bool) -> Check:
    """The log extends this machine's checkpoint of it; with `accept`, the log as it is becomes it."""
    problem = store.log_problem
    if accept:
        count = store.accept_log()
        what = "accepted as it is now" if problem is not None else "extends what this machine saw; accepted"
        return Check("log integrity", True, f"{what} ({records(count)}); writing is allowed")
    if problem is not None:
        return Check(
            "log integrity",
            False,
            f"{problem}; nothing is written to it",
            f"if you restored a backup or expect this, run `{ACCEPT_COMMAND}`; "
            "if not, restore the vault or the sync server's data from a backup first",
        )
    return Check("log integrity", True, "the log extends what this machine saw of it")


def check_plugins(environ: dict[str, str]) -> tuple[list[Check], pluggy.PluginManager]:
    """Every plugin SQUIRREL_MCP_PLUGINS allows loaded: one check, plus one per failure."""
    failures: list[str] = []
    pm = get_plugin_manager()
    load_plugins(pm, environ, log=failures.append)
    names = sorted(str(pm.get_name(plugin)) for plugin in pm.get_plugins())
    installed = [name for name in names if name not in DEFAULT_PLUGINS]
    if installed:
        checks = [Check("plugins loaded", True, ", ".join(installed))]
    else:
        checks = [Check("plugins loaded", True, "none besides the built-in lexical ranker (search by words)")]
    fix = "reinstall it, or leave it out of SQUIRREL_MCP_PLUGINS"
    checks += [Check("plugin", False, failure, fix) for failure in failures]
    return checks, pm


def plugin_checks(pm: pluggy.PluginManager, config: Config, store: MemoryStore | None) -> list[Check]:
    """The checks each plugin's `doctor_checks` returns; one that raises is a failed check."""
    # A plugin needs neither the passphrase nor the API key.
    safe = config._replace(passphrase=None, api_key=None)
    memories = None if store is None else MemoryReader(store)
    checks: list[Check] = []
    for plugin in pm.get_plugins():
        name = str(pm.get_name(plugin))
        caller = one_plugin_caller(pm, "doctor_checks", name)
        if not caller.get_hookimpls():
            continue
        try:
            answers = caller(config=safe, memories=memories)
        except Exception as error:
            checks.append(Check(f"plugin {name}", False, f"its checks failed ({type(error).__name__})"))
            continue
        for answer in answers:
            if not isinstance(answer, list) or not all(isinstance(check, Check) for check in answer):
                checks.append(Check(f"plugin {name}", False, "its checks are not a list of Check"))
                continue
            checks += answer
    return checks


def run(config: Config, environ: dict[str, str] | None = None, *, accept_log: bool = False) -> int:
    """Run every check, print one line each on stdout; 1 when any failed, else 0.

    With `accept_log`, the log's check accepts the log as it is now (`--accept-log`).
    """
    environ = dict(os.environ) if environ is None else environ
    # The hosts' entries are tried first: the passphrase check uses one that unlocked.
    trials = EntryTrials()
    entry_checks = check_hosts(config, environ, trials)
    config, whose = account_to_check(config, environ, trials)
    # An unusable SQUIRREL_API_BASE_URL is left as it is: the config check says what is wrong.
    with contextlib.suppress(ConfigError):
        config = from_keychain(config)
    checks = [check_config(config, whose)]
    store = None
    if checks[0].ok:
        checks.append(check_storage(config))
        if checks[-1].ok:
            checks.append(keychain.state(config))
            passphrase, store = check_passphrase(config, trials)
            checks.append(passphrase)
            if store is not None:
                checks.append(check_log(store, accept=accept_log))
    loaded, pm = check_plugins(environ)
    checks += loaded
    checks += plugin_checks(pm, config, store)
    checks += entry_checks
    checks += hook_checks(environ, Path.home(), Path.cwd())
    for check in checks:
        # A path from a host's config may hold a line break: each check stays one line.
        print(CONTROL_CHARACTERS.sub("?", check.line()))
    sys.stdout.flush()
    return 0 if all(check.ok for check in checks) else 1
