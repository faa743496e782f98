"""The MCP hosts' config files on this machine, and the squirrel-mcp entries in them.

`squirrel-mcp doctor` reads the files the hosts keep (Claude Desktop, Claude Code,
Cursor, VS Code, Codex, Gemini CLI; the project files of Claude Code, Cursor, VS Code
and Gemini CLI from the current directory) and finds each entry that runs squirrel-mcp: one named as `init`'s
block names it, or whose command or arguments name squirrel-mcp.

An entry keeps the text values of its `env` (`Entry.env`, hidden from its repr):
doctor tries them as the server the host starts would, and shows no secret of them.
A file is read only when it is a regular file of at most MAX_CONFIG_BYTES; a file
that does not parse is reported by its line and column, never by its content.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Literal

ENTRY_NAME = "squirrel-notes"
PLACEHOLDER = "<your passphrase>"
MAX_CONFIG_BYTES = 5_000_000

Format = Literal["json", "jsonc", "toml"]

# A command or argument naming squirrel-mcp: the script, `-m squirrel_mcp`, or a
# requirement for uvx or pipx (`squirrel-mcp[embeddings]`, `squirrel-mcp==1.0`).
_RUNS_SQUIRREL = re.compile(r"squirrel[-_]mcp(\.exe)?(\[[^\]]*\])?([=<>!~@].*)?", re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",\s*[}\]]")
# A value the host replaces as it starts the server: `${NAME}`, `${env:NAME}` (Cursor, VS Code), `$NAME`.
_HOST_VARIABLE = re.compile(r"\$\{[^}]+\}|^\$[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class HostFile:
    """One host's config file: which host, where, how it is written, and under which key."""

    host: str
    path: Path
    format: Format
    key: str


class Passphrase(Enum):
    """What an entry's `env` says of SQUIRREL_PASSPHRASE (never its value)."""

    SET = "set"
    ABSENT = "absent"
    EMPTY = "empty"
    PLACEHOLDER = "placeholder"
    VSCODE_INPUT = "input"
    # `${VAR}`, `${env:VAR}`, `$VAR`: a value the host fills in from its own environment as it starts it.
    HOST_VARIABLE = "variable"


@dataclass(frozen=True)
class Entry:
    """A squirrel-mcp entry of a host's config: its command and arguments, not its env.

    `project` is SQUIRREL_PROJECT in its env as the file has it (None: absent or null, which
    VS Code reads as unset; any other JSON or TOML value as parsed); `cwd` is the folder its
    config says the host starts it in (Codex's entries may have the key), when it is text.
    `host` names the host ("Codex"); `env` holds the text values of its env, the passphrase among
    them: never shown (it is left out of the repr), only tried.
    """

    where: str
    name: str
    command: str | None
    args: list[str]
    passphrase: Passphrase
    project: object = None
    cwd: str | None = None
    host: str = ""
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Unreadable:
    """A host's config file doctor could not read: what is wrong, and the fix.

    `fix` is empty when nothing is wrong with the file: it is only too large to read.
    """

    path: Path
    problem: str
    fix: str


def host_files(environ: Mapping[str, str], home: Path, cwd: Path) -> list[HostFile]:
    """The config files the MCP hosts read on this OS, whether or not they exist."""
    files = []
    app_data = _app_data(environ, home)
    if app_data is not None:
        desktop = app_data / "Claude" / "claude_desktop_config.json"
        files.append(HostFile("Claude Desktop", desktop, "json", "mcpServers"))
    files.append(HostFile("Claude Code", home / ".claude.json", "json", "mcpServers"))
    # `claude mcp add -s project` writes the project's own file, shared with its repository.
    files.append(HostFile("Claude Code", cwd / ".mcp.json", "json", "mcpServers"))
    files.append(HostFile("Cursor", home / ".cursor" / "mcp.json", "json", "mcpServers"))
    files.append(HostFile("Cursor", cwd / ".cursor" / "mcp.json", "json", "mcpServers"))
    # VS Code's own files allow comments and trailing commas.
    if app_data is not None:
        files.append(HostFile("VS Code", app_data / "Code" / "User" / "mcp.json", "jsonc", "servers"))
    files.append(HostFile("VS Code", cwd / ".vscode" / "mcp.json", "jsonc", "servers"))
    files.append(HostFile("Codex", home / ".codex" / "config.toml", "toml", "mcp_servers"))
    # Gemini CLI's settings allow comments too.
    files.append(HostFile("Gemini CLI", home / ".gemini" / "settings.json", "jsonc", "mcpServers"))
    files.append(HostFile("Gemini CLI", cwd / ".gemini" / "settings.json", "jsonc", "mcpServers"))
    return files


def _app_data(environ: Mapping[str, str], home: Path) -> Path | None:
    """Where desktop applications keep their settings on this OS (None: not known)."""
    if sys.platform == "win32":
        return Path(environ["APPDATA"]) if environ.get("APPDATA") else None
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    config_home = environ.get("XDG_CONFIG_HOME", "")
    return Path(config_home) if os.path.isabs(config_home) else home / ".config"


def read_host_file(file: HostFile, cwd: Path) -> tuple[list[Entry], Unreadable | None]:
    """The squirrel-mcp entries of one existing file, or why it could not be read."""
    path = file.path
    try:
        if not path.is_file():
            return [], Unreadable(path, "is not a regular file", "replace it with the host's config file")
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            limit = MAX_CONFIG_BYTES / 1e6
            too_large = f"is {size / 1e6:.1f} MB, more than the {limit:.0f} MB doctor reads; not checked"
            return [], Unreadable(path, too_large, "")
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        return [], Unreadable(path, f"cannot be read ({error.strerror})", "check its owner and permissions")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return [], Unreadable(path, "is not UTF-8 text", "save it as UTF-8")
    data, problem = _parse(text, file.format)
    if problem is not None:
        return [], Unreadable(path, problem, "correct that line: the host cannot read the file either")
    if not isinstance(data, dict):
        return [], Unreadable(path, "does not hold a JSON object", "make it one object, as the README shows")
    entries = list(_entries(data.get(file.key), str(path), file.host))
    if file.host == "Claude Code":
        # `claude mcp add` without `-s user` keeps the entry under the project's directory.
        projects = data.get("projects")
        project = projects.get(str(cwd)) if isinstance(projects, dict) else None
        if isinstance(project, dict):
            entries += _entries(project.get(file.key), f"{path} (project {cwd})", file.host)
    return entries, None


def _parse(text: str, format: Format) -> tuple[object, str | None]:
    """The parsed file, or where it fails to parse ("is not valid JSON (line 3, column 5)")."""
    if format == "toml":
        try:
            return tomllib.loads(text), None
        except tomllib.TOMLDecodeError as error:
            # The message may quote the file; only its position is shown.
            where = re.search(r"at line (\d+), column (\d+)", str(error))
            position = f" (line {where[1]}, column {where[2]})" if where else ""
            return None, f"is not valid TOML{position}"
    try:
        return json.loads(_strip_jsonc(text) if format == "jsonc" else text), None
    except json.JSONDecodeError as error:
        return None, f"is not valid JSON (line {error.lineno}, column {error.colno})"
    except RecursionError:
        return None, "is not valid JSON (nested too deeply)"


def _strip_jsonc(text: str) -> str:
    """JSON with comments and trailing commas as plain JSON, every line where it was."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif char == ",":
            out.append(" " if _TRAILING_COMMA.match(text, i) else ",")
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _entries(servers: object, where: str, host: str) -> Iterator[Entry]:
    """The squirrel-mcp entries of a host's table of servers."""
    if not isinstance(servers, dict):
        return
    for name, server in servers.items():
        if not isinstance(server, dict):
            continue
        command = server.get("command")
        raw_args = server.get("args")
        args = [arg for arg in raw_args if isinstance(arg, str)] if isinstance(raw_args, list) else []
        words = [command, *args] if isinstance(command, str) else args
        if name != ENTRY_NAME and not any(_names_squirrel(word) for word in words):
            continue
        given = server.get("env")
        env = given if isinstance(given, dict) else {}
        cwd = server.get("cwd")
        yield Entry(
            where,
            str(name),
            command if isinstance(command, str) else None,
            args,
            _passphrase(env.get("SQUIRREL_PASSPHRASE")),
            env.get("SQUIRREL_PROJECT"),
            cwd if isinstance(cwd, str) else None,
            host,
            {str(key): value for key, value in env.items() if isinstance(value, str)},
        )


def _names_squirrel(word: str) -> bool:
    return _RUNS_SQUIRREL.fullmatch(re.split(r"[/\\]", word)[-1]) is not None


def _passphrase(value: object) -> Passphrase:
    if value is None:
        return Passphrase.ABSENT
    if value == "" or not isinstance(value, str):
        return Passphrase.EMPTY
    if value.strip() == PLACEHOLDER:
        return Passphrase.PLACEHOLDER
    if value.startswith("${input:"):
        return Passphrase.VSCODE_INPUT
    if _HOST_VARIABLE.search(value):
        return Passphrase.HOST_VARIABLE
    return Passphrase.SET
