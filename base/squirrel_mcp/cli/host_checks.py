"""doctor's lines on the MCP hosts' configs: one per squirrel-mcp entry, tried as its host will run it.

Each line says which command the entry runs (whether it can be run, and whether it
is this installation), whether its account unlocks with what its own `env` and the
keychain give the server (squirrel_mcp.cli.entry_unlock), and the project the host
will be in. With no entry anywhere, one line says so and gives the block to put in
a host's config: nothing was checked, so it is neither passed nor failed (`–`), and
it does not fail doctor (the host may be one whose config doctor does not read).

A host's project is SQUIRREL_PROJECT when its entry's env sets it, else the
project of the folder the host starts squirrel-mcp in. A config rarely says that
folder (Codex's `cwd` key, when an entry has it), so the line says so and names the
project this folder would be, as a host started here would see it (from the
folder alone: a host's environment is not this shell's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from squirrel_mcp.cli import hosts
from squirrel_mcp.cli.account import server_command
from squirrel_mcp.cli.entry_unlock import EntryTrials
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.projects import PROJECT_VARIABLE, ProjectError, session_project
from squirrel_mcp.plugins.checks import Check

HOSTS = "Claude Desktop, Claude Code, Cursor, VS Code, Codex, Gemini CLI"


class Unchecked(Check):
    """A line for what doctor could not check: neither passed nor failed, marked `–`; it fails nothing."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(name, True, detail)

    def line(self) -> str:
        """`– name: detail`."""
        return f"– {self.name}: {self.detail}"


def check_host_command(config: Config, *, found: int) -> Check:
    """No host's config has an entry (`found` files were read): the block to put in one.

    Nothing is checked but the command `init` prints: the line fails when that cannot be
    run, and is otherwise `Unchecked`.
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
    return Unchecked("host config", detail)


def check_hosts(config: Config, environ: dict[str, str], trials: EntryTrials) -> list[Check]:
    """One check per squirrel-mcp entry of the hosts' configs, and per file that cannot be read.

    Each entry's account is tried through `trials`, which keeps the configs that unlocked.
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
        checks += [check_entry(entry, environ, here, trials) for entry in found]
        entries += len(found)
    if not entries:
        checks.append(check_host_command(config, found=len(seen)))
    return checks


def check_entry(entry: hosts.Entry, environ: Mapping[str, str], here: str, trials: EntryTrials) -> Check:
    """An entry's command can be run (which one it runs), whether its account unlocks, its project.

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
    trial = trials.trial(entry)
    fixes += [trial.fix] if trial.fix else []
    project, project_fix = project_said(entry, here)
    fixes += [project_fix] if project_fix else []
    return Check("host config", not fixes, f"{head} {runs}; {trial.said}; {project}", "; ".join(fixes))


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
