"""`squirrel-mcp doctor`: is this installation ready to serve, and if not, what to fix.

One line per check, ✓ or ✗, a failed one with its fix: the settings, the vault
or the sync server, the passphrase, the log's integrity (it must extend what this
machine saw of it; `--accept-log` accepts it as it is), the plugins, each plugin's own checks (the
`doctor_checks` hook: the embeddings plugin checks its model and vector file),
and the command an MCP host's config must run. Exit status 0 when every check
passed, 1 when any failed.

It prints paths, names and counts only: never memory text, a passphrase or a key.
The passphrase comes from SQUIRREL_PASSPHRASE, or is asked on the terminal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pluggy

from squirrel_mcp.book.checkpoint import ACCEPT_COMMAND, records
from squirrel_mcp.book.errors import NoAccountError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.cli.account import server_command
from squirrel_mcp.cli.unlock import USER_ERRORS, location, open_storage, open_store
from squirrel_mcp.core.config import Config, ConfigError
from squirrel_mcp.keys.crypto import WrongPassphraseError
from squirrel_mcp.plugins.checks import Check
from squirrel_mcp.plugins.manager import DEFAULT_PLUGINS, get_plugin_manager, load_plugins, one_plugin_caller
from squirrel_mcp.storage import StorageError

INIT_FIX = "run `squirrel-mcp init` to create it"


def check_config(config: Config) -> Check:
    """The SQUIRREL_* settings make sense together."""
    try:
        config.check()
    except ConfigError as error:
        return Check("config", False, str(error), "correct the variable it names")
    where = "a sync server" if config.remote else "the local vault"
    return Check("config", True, f"memories kept in {where}")


def check_storage(config: Config) -> Check:
    """The vault is there and holds an account, or the sync server answers and holds this key's."""
    name = "sync server" if config.remote else "vault"
    try:
        storage = open_storage(config, create=False)
        try:
            account = storage.load_account()
        finally:
            storage.close()
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


def check_passphrase(config: Config) -> tuple[Check, MemoryStore | None]:
    """The passphrase (SQUIRREL_PASSPHRASE, or asked on a terminal) unlocks the account."""
    try:
        store = open_store(config, create=False)
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
    return Check("passphrase", True, f"unlocks the account ({count} memories)"), store


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
    safe = dataclasses.replace(config, passphrase=None, api_key=None)
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


def check_host_command(config: Config) -> Check:
    """The command an MCP host must run, as `init` prints it, and that it can be run."""
    command, args = server_command()
    env = ["SQUIRREL_PASSPHRASE"]
    if config.remote:
        env += ["SQUIRREL_API_BASE_URL", "SQUIRREL_API_KEY"]
    elif config.vault_path != Config.from_env({}).vault_path:
        env.append(f"SQUIRREL_VAULT={config.vault_path}")
    detail = (
        f'in your MCP host\'s config: "command": {json.dumps(command)}, "args": {json.dumps(args)}, '
        f'"env": {", ".join(env)} (`squirrel-mcp init` printed the whole block)'
    )
    path = Path(command)
    if path.is_absolute() and not (path.is_file() and os.access(path, os.X_OK)):
        return Check("host config", False, detail, f"{command} cannot be run; reinstall squirrel-mcp")
    return Check("host config", True, detail)


def run(config: Config, environ: dict[str, str] | None = None, *, accept_log: bool = False) -> int:
    """Run every check, print one line each on stdout; 0 when all passed, else 1.

    With `accept_log`, the log's check accepts the log as it is now (`--accept-log`).
    """
    environ = dict(os.environ) if environ is None else environ
    checks = [check_config(config)]
    store = None
    if checks[0].ok:
        checks.append(check_storage(config))
        if checks[-1].ok:
            passphrase, store = check_passphrase(config)
            checks.append(passphrase)
            if store is not None:
                checks.append(check_log(store, accept=accept_log))
    loaded, pm = check_plugins(environ)
    checks += loaded
    checks += plugin_checks(pm, config, store)
    checks.append(check_host_command(config))
    for check in checks:
        print(check.line())
    sys.stdout.flush()
    return 0 if all(check.ok for check in checks) else 1
