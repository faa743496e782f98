"""`squirrel-mcp doctor`: is this installation ready to serve, and if not, what to fix.

One line per check, ✓ or ✗, a failed one with its fix: the settings, the vault
or the sync server, the passphrase, the log's integrity (it must extend what this
machine saw of it; `--accept-log` accepts it as it is), the plugins, each plugin's own checks (the
`doctor_checks` hook: the embeddings plugin checks its model and vector file),
and the command an MCP host's config must run, with the project each host's entry
will be in. Exit status 0 when every check passed, 1 when any failed.

It prints paths, names and counts only: never memory text, a passphrase, a key
or any value of a host config's env but SQUIRREL_PROJECT's (a project's name).

A host's project is SQUIRREL_PROJECT when its entry's env sets it, else the
project of the folder the host starts squirrel-mcp in. A config rarely says that
folder (Codex's `cwd` key, when an entry has it), so the line says so and names the
project this folder would be, as a host started here would see it (from the
folder alone: a host's environment is not this shell's).

The passphrase comes from SQUIRREL_PASSPHRASE, else from the OS keychain, else is
asked on the terminal; the keychain's line says which, and whether the entry kept
there still unlocks the account (squirrel_mcp.cli.keychain.state).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

import pluggy

from squirrel_mcp.book.checkpoint import ACCEPT_COMMAND, records
from squirrel_mcp.book.errors import NoAccountError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.cli import hosts, keychain
from squirrel_mcp.cli.account import server_command
from squirrel_mcp.cli.hooks_check import hook_checks
from squirrel_mcp.cli.unlock import (
    USER_ERRORS,
    StaleKeychainError,
    from_keychain,
    open_storage,
    open_store,
)
from squirrel_mcp.core.config import Config, ConfigError, location
from squirrel_mcp.core.projects import PROJECT_VARIABLE, ProjectError, session_project
from squirrel_mcp.keys.crypto import WrongPassphraseError
from squirrel_mcp.plugins.checks import Check
from squirrel_mcp.plugins.manager import DEFAULT_PLUGINS, get_plugin_manager, load_plugins, one_plugin_caller
from squirrel_mcp.storage import StorageError

INIT_FIX = "run `squirrel-mcp init` to create it"
HOSTS = "Claude Desktop, Claude Code, Cursor, VS Code, Codex"


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


def check_host_command(config: Config, *, found: int) -> Check:
    """No host's config has an entry (`found` files were read): the block to put in one.

    It fails when the command `init` prints cannot be run.
    """
    command, args = server_command()
    env = [] if "passphrase" in config.from_keychain else ["SQUIRREL_PASSPHRASE"]
    if config.remote:
        env += ["SQUIRREL_API_BASE_URL"]
        env += [] if "API key" in config.from_keychain else ["SQUIRREL_API_KEY"]
    elif config.vault_path != Config.from_env({}).vault_path:
        env.append(f"SQUIRREL_VAULT={config.vault_path}")
    where = f"{found} found" if found else "none found"
    detail = (
        f"no squirrel-mcp entry in an MCP host's config here ({HOSTS}: {where}); "
        f'put in your MCP host\'s config: "command": {json.dumps(command)}, "args": {json.dumps(args)}, '
        f'"env": {", ".join(env) or "none"} (`squirrel-mcp init` printed the whole block)'
    )
    path = Path(command)
    if path.is_absolute() and not (path.is_file() and os.access(path, os.X_OK)):
        return Check("host config", False, detail, f"{command} cannot be run; reinstall squirrel-mcp")
    return Check("host config", True, detail)


def check_hosts(config: Config, environ: dict[str, str]) -> list[Check]:
    """One check per squirrel-mcp entry of the hosts' configs, and per file that cannot be read.

    With no entry anywhere, the one check of `check_host_command`.
    """
    cwd = Path.cwd()
    here = folder_project(cwd)
    checks: list[Check] = []
    seen: set[Path] = set()
    entries = 0
    for file in hosts.host_files(environ, Path.home(), cwd):
        try:
            if not file.path.exists():
                continue
            # The current directory may be the home directory: one file, read once.
            real = file.path.resolve()
        except OSError as error:
            fix = "check the owner and permissions of its folders"
            checks.append(Check("host config", False, f"{file.path} cannot be read ({error.strerror})", fix))
            continue
        if real in seen:
            continue
        seen.add(real)
        found, unreadable = hosts.read_host_file(file, cwd)
        if unreadable is not None:
            detail = f"{unreadable.path} {unreadable.problem}"
            checks.append(Check("host config", not unreadable.fix, detail, unreadable.fix))
        checks += [check_entry(entry, environ, here) for entry in found]
        entries += len(found)
    if not entries:
        checks.append(check_host_command(config, found=len(seen)))
    return checks


def check_entry(entry: hosts.Entry, environ: Mapping[str, str], here: str = "") -> Check:
    """An entry's command can be run (which one it runs), where its passphrase comes from, its project.

    `here`: the project a host started in this folder would be in, as `folder_project` says it.
    """
    this_command, this_args = server_command()
    use_this = f'set "command" to {json.dumps(this_command)}'
    if this_args:
        use_this += f' and "args" to {json.dumps(this_args)}'
    head = f"{entry.where}, entry {json.dumps(entry.name, ensure_ascii=False)}:"
    if entry.command is None:
        return Check("host config", False, f"{head} has no command", use_this)
    launcher = _launcher(entry.command, entry.args)
    path, problem = _resolve(entry.command, environ)
    fixes = []
    if path is None:
        runs = problem
        if launcher is not None:
            fixes.append(f"install {LAUNCHED_BY[launcher]}, or give its absolute path, or {use_this}")
        elif problem.endswith("not executable"):
            fixes.append(f"make it executable (chmod +x), or {use_this}")
        else:
            fixes.append(use_this)
    elif launcher is not None:
        runs = f"runs through {launcher}, not this installation"
    elif _is_this_installation(path, entry.args):
        runs = f"runs {path} (this installation)"
        if entry.args[:2] == ["-m", "squirrel_mcp"]:
            runs += ", without -P: Python imports first from the folder a host starts it in"
            fixes.append(f"{use_this}, so that no `json.py` or plugin of that folder runs in it")
    else:
        runs = f"runs {path}, not this installation (that is {' '.join([this_command, *this_args])})"
    if path is not None and path != Path(entry.command):
        runs += "; found on your PATH, which a host not started from your shell may not have"
    elif path is not None and not path.is_absolute():
        runs += "; a relative path, found from this directory, which a host may not start it in"
    said, fix = PASSPHRASE_SAID[entry.passphrase]
    fixes += [fix] if fix else []
    project, project_fix = project_said(entry, here)
    fixes += [project_fix] if project_fix else []
    return Check("host config", not fixes, f"{head} {runs}; {said}; {project}", "; ".join(fixes))


def folder_project(folder: Path) -> str:
    """The project of a host started in `folder`, from the folder alone, as a line says it."""
    try:
        project = session_project({}, folder)
    except ProjectError:
        return f"a project its path cannot name (so set {PROJECT_VARIABLE})"
    except OSError:
        return "not known (the folder cannot be read)"
    return "none" if project is None else project


def project_said(entry: hosts.Entry, here: str) -> tuple[str, str]:
    """Which project the entry's host will be in, and the fix when its SQUIRREL_PROJECT is wrong."""
    value = entry.project
    fix = f"correct {PROJECT_VARIABLE} in its env (a name, or empty for none), or remove it: the folder says"
    if isinstance(value, str) and "${" in value:
        # VS Code fills in its variables (${workspaceFolder}, an input) as it starts the server.
        return f"project: what the host puts in {PROJECT_VARIABLE} (its env holds a ${{...}} variable)", ""
    if isinstance(value, str):
        try:
            project = session_project({PROJECT_VARIABLE: value}, Path.cwd())
        except ProjectError as error:
            return f"project: {error} (in its env)", fix
        return f"project: {project or 'none'} ({PROJECT_VARIABLE} in its env)", ""
    if value is not None:
        return f"project: {PROJECT_VARIABLE} in its env is not text", fix
    if entry.cwd is not None and os.path.isabs(entry.cwd) and os.path.isdir(entry.cwd):
        return f"project: {folder_project(Path(entry.cwd))} (that of its cwd)", ""
    return (
        "project: that of the folder the host starts it in, which its config does not say "
        f"(started in this folder: {here})",
        "",
    )


LAUNCHED_BY = {"uvx": "uv (it provides uvx)", "pipx run": "pipx"}

PASSPHRASE_SAID: dict[hosts.Passphrase, tuple[str, str]] = {
    hosts.Passphrase.SET: ("SQUIRREL_PASSPHRASE is set in this file", ""),
    hosts.Passphrase.ABSENT: (
        "SQUIRREL_PASSPHRASE is not in its env: the server must get it elsewhere (the keychain, or the "
        "host's environment)",
        "",
    ),
    hosts.Passphrase.VSCODE_INPUT: ("SQUIRREL_PASSPHRASE comes from a VS Code input, asked once", ""),
    hosts.Passphrase.EMPTY: (
        "SQUIRREL_PASSPHRASE in its env is empty or not a string",
        "put your passphrase there, or remove the variable",
    ),
    hosts.Passphrase.PLACEHOLDER: (
        f"SQUIRREL_PASSPHRASE in its env is still {hosts.PLACEHOLDER}",
        f"put your passphrase in place of {hosts.PLACEHOLDER}",
    ),
}


def _resolve(command: str, environ: Mapping[str, str]) -> tuple[Path | None, str]:
    """The file `command` runs (a bare name looked up on PATH), or None and what is wrong."""
    # A command that sets a variable (`X=… squirrel-mcp`) may hold a secret: not shown.
    shown = re.sub(r"[\x00-\x1f\x7f]", "?", command)
    if "=" in command:
        shown = "its command (not shown: it holds a `=`)"
    if not re.search(r"[/\\]", command):
        found = shutil.which(command, path=environ.get("PATH", os.defpath))
        return (Path(found), "") if found else (None, f"{shown} is not found on PATH")
    path = Path(command)
    try:
        if not path.exists():
            return None, f"{shown} does not exist"
    except OSError as error:
        return None, f"{shown} cannot be reached ({error.strerror})"
    if not path.is_file() or not os.access(path, os.X_OK):
        return None, f"{shown} is not executable"
    return path, ""


def _launcher(command: str, args: list[str]) -> str | None:
    """The launcher (uvx, pipx run) when the command installs squirrel-mcp as it starts it."""
    name = re.split(r"[/\\]", command)[-1].lower().removesuffix(".exe")
    if name == "uvx" or (name == "uv" and args[:2] == ["tool", "run"]):
        return "uvx"
    if name == "pipx" and args[:1] == ["run"]:
        return "pipx run"
    return None


def _is_this_installation(path: Path, args: list[str]) -> bool:
    """`path` is this interpreter's squirrel-mcp script, or this interpreter with `[-P] -m squirrel_mcp`."""
    real = os.path.realpath(path)
    if (args[1:] if args[:1] == ["-P"] else args)[:2] == ["-m", "squirrel_mcp"]:
        # Not resolved alone: a venv's python links to an interpreter that lacks squirrel_mcp.
        python = Path(sys.executable).absolute()
        return path.absolute().parent == python.parent and real == os.path.realpath(python)
    if args:
        return False
    user = sysconfig.get_preferred_scheme("user")
    folders = {sysconfig.get_path("scripts"), sysconfig.get_path("scripts", user)}
    scripts = [Path(folder) / name for folder in folders for name in ("squirrel-mcp", "squirrel-mcp.exe")]
    command, own_args = server_command()
    if not own_args:
        scripts.append(Path(command))
    return any(script.is_file() and os.path.realpath(script) == real for script in scripts)


def run(config: Config, environ: dict[str, str] | None = None, *, accept_log: bool = False) -> int:
    """Run every check, print one line each on stdout; 0 when all passed, else 1.

    With `accept_log`, the log's check accepts the log as it is now (`--accept-log`).
    """
    environ = dict(os.environ) if environ is None else environ
    # An unusable SQUIRREL_API_BASE_URL is left as it is: the config check says what is wrong.
    with contextlib.suppress(ConfigError):
        config = from_keychain(config)
    checks = [check_config(config)]
    store = None
    if checks[0].ok:
        checks.append(check_storage(config))
        if checks[-1].ok:
            checks.append(keychain.state(config))
            passphrase, store = check_passphrase(config)
            checks.append(passphrase)
            if store is not None:
                checks.append(check_log(store, accept=accept_log))
    loaded, pm = check_plugins(environ)
    checks += loaded
    checks += plugin_checks(pm, config, store)
    checks += check_hosts(config, environ)
    checks += hook_checks(environ, Path.home(), Path.cwd())
    for check in checks:
        print(check.line())
    sys.stdout.flush()
    return 0 if all(check.ok for check in checks) else 1
