"""`squirrel-mcp hooks install|uninstall HOST`: this installation's hooks in an agent host's settings.

Each host runs a command at a session's start, at each prompt and before it compacts the
context, writing its JSON on the command's stdin (`squirrel-mcp hook EVENT --host HOST`
reads it). Where and how each keeps them:

- Claude Code: `~/.claude/settings.json` (--user) or `.claude/settings.json` (--project), key
  `hooks` -> event -> a list of groups `{matcher?, hooks: [{type: "command", command,
  timeout}]}`, the timeout in seconds. Events SessionStart (its matcher filters the start's
  source: none, so every start, resume, clear and compaction gets the context),
  UserPromptSubmit (no matcher), PreCompact.
- Codex: `~/.codex/hooks.json` (or `$CODEX_HOME/hooks.json`), `.codex/hooks.json` in a
  project, the same shape and events as Claude Code's, the timeout in seconds. Codex also reads
  inline `[[hooks.EVENT]]` tables of config.toml, but writes its own trust records under
  `[hooks.state]` there: a file of its own keeps our entries apart from that. Codex runs a new
  command hook only once the user has trusted it (its /hooks view).
- Gemini CLI: `~/.gemini/settings.json` or `.gemini/settings.json`, the same `hooks` shape, events
  SessionStart, BeforeAgent (a submitted prompt) and PreCompress, the timeout in milliseconds;
  a handler may carry a `name` the CLI shows in its logs.

The command is this installation's absolute path (a host does not start hooks from your
shell's PATH), quoted for the shell the host runs it with. Nothing secret is written: the hook
unlocks through the keychain or is admitted by the vault's running memory process.

A file is edited as text (squirrel_mcp.cli.json_edit): only our entries are added or removed,
so a second install changes nothing and install then uninstall gives the original bytes back.
Before a change, the file as it was is kept in FILE.squirrel-mcp.bak.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from squirrel_mcp.cli import json_edit
from squirrel_mcp.cli.errors import UserError
from squirrel_mcp.cli.hosts import MAX_CONFIG_BYTES

BACKUP_SUFFIX = ".squirrel-mcp.bak"
BOM = "\ufeff"
# A hook answers within its deadline (SQUIRREL_HOOK_DEADLINE, 2 s by default) or prints nothing;
# the host's own limit is a little longer, so that it never kills a hook that is finishing.
TIMEOUT_SECONDS = 3
# One of our commands: squirrel-mcp (its script, `-m squirrel_mcp`, or uvx's requirement) and ` hook `.
_OURS = re.compile(r"squirrel[-_]mcp", re.IGNORECASE)


@dataclass(frozen=True)
class Host:
    """An agent host: its name, its events (the host's name, then ours), and its settings file."""

    name: str
    events: tuple[tuple[str, str], ...]
    folder: str
    file: str
    timeout: int
    named: bool = False


_CLAUDE_EVENTS = (
    ("SessionStart", "session-start"),
    ("UserPromptSubmit", "prompt"),
    ("PreCompact", "pre-compact"),
)
HOSTS = {
    "claude-code": Host("Claude Code", _CLAUDE_EVENTS, ".claude", "settings.json", TIMEOUT_SECONDS),
    "codex": Host("Codex", _CLAUDE_EVENTS, ".codex", "hooks.json", TIMEOUT_SECONDS),
    "gemini": Host(
        "Gemini CLI",
        (("SessionStart", "session-start"), ("BeforeAgent", "prompt"), ("PreCompress", "pre-compact")),
        ".gemini",
        "settings.json",
        TIMEOUT_SECONDS * 1000,
        named=True,
    ),
}


def settings_path(host: str, *, project: bool, environ: dict[str, str], home: Path, cwd: Path) -> Path:
    """The file `host` reads its hooks from: the user's, or the project's in `cwd`."""
    spec = HOSTS[host]
    if project:
        return cwd / spec.folder / spec.file
    if host == "codex" and os.path.isabs(environ.get("CODEX_HOME", "")):
        return Path(environ["CODEX_HOME"]) / spec.file
    return home / spec.folder / spec.file


def program() -> list[str]:
    """The words that start this installation, as `init`'s block has them (absolute paths)."""
    # Here, not at the top: the command line imports this module, and account.py the vault's code.
    from squirrel_mcp.cli.account import server_command

    command, args = server_command()
    if args[1:] == ["-m", "squirrel_mcp"]:
        # Run as `python -m squirrel_mcp`: the installation's own script, when it has one, says
        # what it runs to whoever reads the settings file.
        name = "squirrel-mcp.exe" if sys.platform == "win32" else "squirrel-mcp"
        script = Path(sysconfig.get_path("scripts")) / name
        if script.is_file():
            return [str(script)]
    return [command, *args]


def hook_command(event: str, host: str) -> str:
    """The shell command the host runs for `event`."""
    words = [*program(), "hook", event, "--host", host]
    if sys.platform == "win32":
        return subprocess.list2cmdline(words)
    return shlex.join(words)


def is_ours(command: object) -> bool:
    """Whether a hook's command is one of squirrel-mcp's (whichever installation wrote it)."""
    return isinstance(command, str) and " hook " in command and _OURS.search(command) is not None


def _group(host: str, event: str) -> dict[str, object]:
    spec = HOSTS[host]
    handler: dict[str, object] = {
        "type": "command",
        "command": hook_command(event, host),
        "timeout": spec.timeout,
    }
    if spec.named:
        handler = {"name": f"squirrel-mcp {event}", **handler}
    return {"hooks": [handler]}


def read_settings(path: Path) -> str:
    """The settings file's text ("" when there is none); a file that is not a JSON object is refused."""
    try:
        if not path.exists():
            return ""
        if not path.is_file():
            raise UserError(f"{path} is not a regular file; nothing was written")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise UserError(f"{path} is larger than {MAX_CONFIG_BYTES // 1_000_000} MB; nothing was written")
        raw = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path} cannot be read ({error.strerror}); nothing was written") from None
    try:
        text = raw.decode("utf-8")
        if not text.removeprefix(BOM).strip():
            return text  # an empty file: no settings yet
        data = json.loads(text.removeprefix(BOM))
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; nothing was written") from None
    except json.JSONDecodeError as error:
        # Its position only: the message of a decoder may quote the file, which may hold secrets.
        where = f"line {error.lineno}, column {error.colno}"
        raise UserError(f"{path} is not valid JSON ({where}); nothing was written") from None
    except RecursionError:
        raise UserError(f"{path} is not valid JSON (nested too deeply); nothing was written") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object; nothing was written")
    if not isinstance(data.get("hooks", {}), dict):
        raise UserError(f"{path}: its `hooks` is not an object; nothing was written")
    return text


def installed(text: str, host: str, where: Path) -> str:
    """`text` (of the file `where`) with this installation's hooks for `host`, each replacing any of ours."""
    bom, body = (BOM, text[1:]) if text.startswith(BOM) else ("", text)
    body = body if body.strip() else "{\n}\n"
    for event, ours in HOSTS[host].events:
        group = _group(host, ours)
        hooks = json.loads(body).get("hooks", {})
        groups = hooks.get(event)
        if groups is not None and not isinstance(groups, list):
            raise UserError(f"{where}: its `hooks.{event}` is not a list; nothing was written")
        commands = [command for command in commands_of(groups or []) if is_ours(command)]
        if group in (groups or []) and len(commands) == 1:
            continue
        body = _add(_without(body, event), event, group)
    return bom + body


def uninstalled(text: str) -> str:
    """`text` without any hook of squirrel-mcp's, in every event."""
    bom, body = (BOM, text[1:]) if text.startswith(BOM) else ("", text)
    return bom + _without(body, None) if body.strip() else text


def commands_of(groups: list[object]) -> list[object]:
    """The commands of a host's list of hook groups for one event (anything else is skipped)."""
    return [
        handler.get("command")
        for group in groups
        if isinstance(group, dict) and isinstance(group.get("hooks"), list)
        for handler in group["hooks"]
        if isinstance(handler, dict)
    ]


def _add(text: str, event: str, group: dict[str, object]) -> str:
    root = json_edit.root(text)
    hooks = json_edit.find(text, root, "hooks")
    if hooks is None:
        return json_edit.insert(text, root, "hooks", {event: [group]})
    groups = json_edit.find(text, hooks.value, event)
    if groups is None:
        return json_edit.insert(text, hooks.value, event, [group])
    return json_edit.insert(text, groups.value, None, group)


def _without(text: str, event: str | None) -> str:
    """`text` without our handlers (of `event`, or of every event); a container left empty goes too."""
    while (chain := _find_ours(text, event)) is not None:
        for opening, index in reversed(chain):
            # The outermost level is the `hooks` member of the document itself: removed last.
            if len(json_edit.members(text, opening)[0]) > 1 or (opening, index) == chain[0]:
                text = json_edit.remove(text, opening, index)
                break
    return text


def _find_ours(text: str, event: str | None) -> list[tuple[int, int]] | None:
    """Where our first handler is: (container, index) from the document down to the handler."""
    root = json_edit.root(text)
    members = json_edit.members(text, root)[0]
    for at_hooks, hooks in enumerate(members):
        if hooks.key != "hooks" or text[hooks.value] != "{":
            continue
        for at_event, groups in enumerate(json_edit.members(text, hooks.value)[0]):
            if (event is not None and groups.key != event) or text[groups.value] != "[":
                continue
            for at_group, group in enumerate(json_edit.members(text, groups.value)[0]):
                handlers = json_edit.find(text, group.value, "hooks") if text[group.value] == "{" else None
                if handlers is None or text[handlers.value] != "[":
                    continue
                for at_handler, handler in enumerate(json_edit.members(text, handlers.value)[0]):
                    value = json.loads(text[handler.value : handler.end])
                    if isinstance(value, dict) and is_ours(value.get("command")):
                        return [
                            (root, at_hooks),
                            (hooks.value, at_event),
                            (groups.value, at_group),
                            (handlers.value, at_handler),
                        ]
    return None


def write_atomically(path: Path, text: str, mode: int) -> None:
    """Replace `path` with `text`: a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        # Tight while it is written; then the mode the file is to have.
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def change(path: Path, new: str, *, dry_run: bool) -> bool:
    """Write `new` to `path` (a backup of the old file first), or with `dry_run` print the diff.

    False when `new` is what the file holds: nothing is written or printed.
    """
    # A settings file kept elsewhere and linked (a dotfiles folder) stays a link: its target changes.
    target = Path(os.path.realpath(path))
    old = read_settings(target)
    if new == old:
        return False
    if dry_run:
        diff = difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), str(path), f"{path} (after)"
        )
        sys.stdout.writelines(line if line.endswith("\n") else line + "\n" for line in diff)
        return True
    mode = 0o600
    if target.exists():
        mode = target.stat().st_mode & 0o777
        write_atomically(target.with_name(target.name + BACKUP_SUFFIX), old, mode)
    write_atomically(target, new, mode)
    return True


def cmd_hooks(args: argparse.Namespace) -> int:
    """`squirrel-mcp hooks install|uninstall HOST [--user|--project] [--dry-run]`."""
    path = settings_path(
        args.host, project=args.project, environ=dict(os.environ), home=Path.home(), cwd=Path.cwd()
    )
    spec = HOSTS[args.host]
    text = read_settings(Path(os.path.realpath(path)))
    existed = path.exists()
    new = installed(text, args.host, path) if args.action == "install" else uninstalled(text)
    changed = change(path, new, dry_run=args.dry_run)
    events = ", ".join(event for event, _ours in spec.events)
    backup = f"; the file as it was is in {path}{BACKUP_SUFFIX}" if existed else ""
    if args.action == "install":
        if not changed:
            print(f"{spec.name}: its hooks in {path} are already this installation's; nothing changed")
        elif args.dry_run:
            print(f"{spec.name}: the change above would install its hooks ({events}); nothing was written")
        else:
            print(f"{spec.name}: hooks installed in {path} ({events}){backup}")
            if args.host == "codex":
                print("Codex runs a new hook once you have trusted it: open /hooks in Codex and trust them")
                if _inline_hooks(path.with_name("config.toml")):
                    print(
                        f"{path.with_name('config.toml')} holds hooks too: Codex runs both files' (and warns)"
                    )
        return 0
    if not changed:
        print(f"{spec.name}: no squirrel-mcp hook in {path}; nothing changed")
    elif args.dry_run:
        print(f"{spec.name}: the change above would remove squirrel-mcp's hooks; nothing was written")
    else:
        print(f"{spec.name}: squirrel-mcp's hooks removed from {path}{backup}")
    return 0


def _inline_hooks(config: Path) -> bool:
    """Whether Codex's config.toml holds hooks of its own (its `[hooks.state]` trust records aside)."""
    try:
        hooks = tomllib.loads(config.read_text(encoding="utf-8")).get("hooks")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(hooks, dict) and any(key != "state" for key in hooks)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `squirrel-mcp hooks install|uninstall HOST`."""
    hooks = commands.add_parser(
        "hooks",
        help="install or remove the hooks that give Claude Code, Codex or Gemini CLI the memory "
        "at a session's start and at each prompt",
    )
    hooks.add_argument(
        "action", choices=["install", "uninstall"], help="install: add or update them; uninstall: remove them"
    )
    hooks.add_argument("host", choices=sorted(HOSTS), help="the agent host whose settings file to change")
    scope = hooks.add_mutually_exclusive_group()
    scope.add_argument(
        "--user", dest="project", action="store_false", help="your settings, for every project (the default)"
    )
    scope.add_argument(
        "--project", dest="project", action="store_true", help="the settings file of the current directory"
    )
    hooks.add_argument("--dry-run", action="store_true", help="print the change as a diff; write nothing")
    hooks.set_defaults(run=cmd_hooks, project=False)
