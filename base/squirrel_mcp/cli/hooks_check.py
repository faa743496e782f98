"""doctor's lines on the hooks: for each agent host's settings file here, which of squirrel-mcp's are in it.

A line per file that exists (the user's and the current directory's, for Claude Code,
Codex and Gemini CLI; for Codex, its config.toml's inline hooks too): the events our hooks
are installed at, the ones missing, and whether each command can be run (its program exists
and is executable). A file with none of ours is neither passed nor failed (`–`): the hooks are
optional, and a ✓ would say they are there. It shows paths
and event names only, never another hook's command nor a value of the file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

from squirrel_mcp.cli.errors import UserError
from squirrel_mcp.cli.hooks_install import BOM, HOSTS, commands_of, is_ours, read_settings, settings_path
from squirrel_mcp.cli.host_checks import Unchecked
from squirrel_mcp.plugins.checks import Check

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def hook_checks(environ: Mapping[str, str], home: Path, cwd: Path) -> list[Check]:
    """One check per host settings file that exists, user's then project's, each read once."""
    checks: list[Check] = []
    seen: set[Path] = set()
    for host in HOSTS:
        for project in (False, True):
            path = settings_path(host, project=project, environ=dict(environ), home=home, cwd=cwd)
            files = [path]
            if host == "codex":
                files.append(path.with_name("config.toml"))
            for file in files:
                try:
                    # The current directory may be the home directory: one file, read once.
                    real = file.resolve()
                    if real in seen or not file.is_file():
                        continue
                except OSError:
                    continue
                seen.add(real)
                check = _check(host, file, project, environ)
                if check is not None:
                    checks.append(check)
    return checks


def _check(host: str, path: Path, project: bool, environ: Mapping[str, str]) -> Check | None:
    spec = HOSTS[host]
    install = f"run `squirrel-mcp hooks install {host}{' --project' if project else ''}`"
    head = f"{path} ({spec.name})"
    hooks = _hooks(path)
    if isinstance(hooks, str):
        return Check("hooks", False, f"{head} {hooks}", "correct it: the host cannot read it either")
    if hooks is None:
        # config.toml that does not parse: the host config check names it already.
        return None
    found = {
        event: commands
        for event, groups in hooks.items()
        if isinstance(groups, list)
        and (commands := [c for c in commands_of(groups) if isinstance(c, str) and is_ours(c)])
    }
    if not found:
        if path.suffix == ".toml":
            return None
        adds = f"`squirrel-mcp hooks install {host}` adds them"
        return Unchecked("hooks", f"{head}: none of squirrel-mcp's ({adds})")
    events = [event for event, _ours in spec.events]
    missing = [event for event in events if event not in found]
    problems = sorted(
        {problem for commands in found.values() for c in commands if (problem := _runnable(c, environ))}
    )
    at = ", ".join(event for event in events if event in found) or "no event it uses"
    detail = f"{head}: squirrel-mcp's at {at}"
    if missing:
        detail += f"; missing at {', '.join(missing)}"
    detail += "; " + "; ".join(problems) if problems else "; each command can be run"
    ok = not missing and not problems
    return Check("hooks", ok, detail, "" if ok else f"{install}: it writes this installation's command")


def _hooks(path: Path) -> dict[str, object] | str | None:
    """The file's `hooks` table; what is wrong with a JSON file; None for a TOML file that does not parse."""
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return None
    else:
        try:
            data = json.loads(read_settings(path).removeprefix(BOM).strip() or "{}")
        except UserError as error:
            return str(error).removeprefix(str(path)).removesuffix("; nothing was written").strip(": ")
    hooks = data.get("hooks")
    return hooks if isinstance(hooks, dict) else {}


def _runnable(command: str, environ: Mapping[str, str]) -> str:
    """What keeps `command` from running ("" when its program is there and executable)."""
    try:
        words = shlex.split(command, posix=sys.platform != "win32")
    except ValueError:
        return "a command's quotes do not close"
    if words and _ASSIGNMENT.match(words[0]):
        # A variable set in the settings file may be a secret: it is not shown.
        return "a command sets a variable first (not shown): no passphrase belongs in a settings file"
    program = words[0].strip('"') if words else ""
    shown = re.sub(r"[\x00-\x1f\x7f]", "?", program)
    if not re.search(r"[/\\]", program):
        found = shutil.which(program, path=environ.get("PATH", os.defpath))
        return "" if found else f"{shown} is not found on PATH"
    path = Path(program)
    if not path.is_file():
        return f"{shown} does not exist"
    if not os.access(path, os.X_OK):
        return f"{shown} is not executable"
    return ""
