"""`squirrel-mcp hooks install|uninstall HOST`, through the real command on real settings files.

Each host's file already holds settings and hooks of its own, written by hand (its own
indentation, a line kept short, non-ASCII text): install adds only our entries (every byte of
the file stays, in order, around them), a second install changes nothing, uninstall gives
the original bytes back, a dry run writes nothing, a file that does not parse is refused, and
doctor reports what is installed and whether it can be run.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import random
import shlex
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from squirrel_mcp.cli import json_edit
from tests.conftest import PASSPHRASE, run_cli, secrets_of_this_test

BAK = ".squirrel-mcp.bak"
# A value kept in a settings file: never printed, not even in the line refusing a broken file.
FILE_SECRET = "an API key in the settings 4f1d"
# The events of each host, in its own names, and ours.
EVENTS = {
    "claude-code": {
        "SessionStart": "session-start",
        "UserPromptSubmit": "prompt",
        "PreCompact": "pre-compact",
    },
    "codex": {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "PreCompact": "pre-compact"},
    "gemini": {"SessionStart": "session-start", "BeforeAgent": "prompt", "PreCompress": "pre-compact"},
}
FILES = {
    "claude-code": ".claude/settings.json",
    "codex": ".codex/hooks.json",
    "gemini": ".gemini/settings.json",
}
# The host's limit on a hook: a little above the hook's own 2 s deadline (Gemini CLI counts in ms).
TIMEOUTS = {"claude-code": 3, "codex": 3, "gemini": 3000}

# A file as a person keeps it: four spaces, a short list on one line, non-ASCII, another
# tool's hooks at one of our events and at another, and a setting that holds a secret.
THEIRS = """{
    "model": "opus",
    "env": {"SOME_TOKEN": "<secret>"},
    "permissions": {"allow": ["Bash(ls)", "Read"]},
    "hooks": {
        "SessionStart": [
            {
                "matcher": "startup",
                "hooks": [{"type": "command", "command": "echo 'café ☕' >> ~/starts.log"}]
            }
        ],
        "Stop": [
            {"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}
        ]
    }
}
""".replace("<secret>", FILE_SECRET)


def _script() -> Path:
    name = "squirrel-mcp.exe" if sys.platform == "win32" else "squirrel-mcp"
    script = Path(sysconfig.get_path("scripts")) / name
    assert script.is_file(), script
    return script


def _hooks(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    secrets_of_this_test().add(FILE_SECRET)
    result = run_cli(env, "hooks", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert PASSPHRASE not in out
    return out


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    path.chmod(mode)
    return path


def _only_added(before: bytes, after: bytes) -> None:
    """Every byte of `before` is in `after`, in order: the change only inserts."""
    matcher = difflib.SequenceMatcher(None, before.decode(), after.decode(), autojunk=False)
    changes = {tag for tag, *_ in matcher.get_opcodes()}
    assert changes <= {"equal", "insert"}, matcher.get_opcodes()


def _ours(data: dict[str, object], event: str) -> list[dict[str, object]]:
    hooks = data["hooks"]
    assert isinstance(hooks, dict)
    return [
        handler
        for group in hooks.get(event, [])
        for handler in group["hooks"]
        if "squirrel-mcp" in handler["command"] and " hook " in handler["command"]
    ]


@pytest.mark.parametrize("host", ["claude-code", "codex", "gemini"])
def test_install_adds_only_our_entries_a_second_changes_nothing_uninstall_restores(
    vault_env: dict[str, str], host: str
) -> None:
    home = Path(vault_env["HOME"])
    settings = _write(home / FILES[host], THEIRS, 0o640)
    original = settings.read_bytes()

    out = _hooks(vault_env, "install", host)
    installed = settings.read_bytes()
    assert str(settings) in out and FILE_SECRET not in out
    _only_added(original, installed)
    data = json.loads(installed)
    for event, ours in EVENTS[host].items():
        [handler] = _ours(data, event)
        assert shlex.split(handler["command"]) == [str(_script()), "hook", ours, "--host", host]
        assert handler["type"] == "command" and handler["timeout"] == TIMEOUTS[host]
    # Their hooks and settings are all there; no passphrase was written.
    assert data["hooks"]["Stop"] == json.loads(original)["hooks"]["Stop"]
    assert data["hooks"]["SessionStart"][0] == json.loads(original)["hooks"]["SessionStart"][0]
    assert PASSPHRASE.encode() not in installed
    # The file as it was, kept with its mode; the settings file keeps its own.
    backup = settings.with_name(settings.name + BAK)
    assert backup.read_bytes() == original
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640 == stat.S_IMODE(settings.stat().st_mode)

    assert "nothing changed" in _hooks(vault_env, "install", host)
    assert settings.read_bytes() == installed
    assert backup.read_bytes() == original

    _hooks(vault_env, "uninstall", host)
    assert settings.read_bytes() == original
    assert backup.read_bytes() == installed
    assert "nothing changed" in _hooks(vault_env, "uninstall", host)


def test_a_new_file_is_made_private_and_uninstall_leaves_an_empty_object(vault_env: dict[str, str]) -> None:
    settings = Path(vault_env["HOME"]) / FILES["gemini"]
    # An empty file is no settings yet, not a broken one.
    _write(Path(vault_env["HOME"]) / FILES["claude-code"], "\n")
    _hooks(vault_env, "install", "claude-code")
    assert _ours(json.loads((Path(vault_env["HOME"]) / FILES["claude-code"]).read_text()), "PreCompact")
    _hooks(vault_env, "install", "gemini")
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    assert not settings.with_name(settings.name + BAK).exists()
    # Gemini CLI shows a hook's name in its logs.
    names = [
        handler["name"]
        for event in EVENTS["gemini"]
        for handler in _ours(json.loads(settings.read_text()), event)
    ]
    assert names == ["squirrel-mcp session-start", "squirrel-mcp prompt", "squirrel-mcp pre-compact"]
    _hooks(vault_env, "uninstall", "gemini")
    assert json.loads(settings.read_text()) == {}


def test_project_and_user_files(vault_env: dict[str, str], tmp_path: Path) -> None:
    home, project = Path(vault_env["HOME"]), tmp_path / "project"
    project.mkdir()
    _hooks(vault_env, "install", "claude-code", "--project", cwd=project)
    assert _ours(json.loads((project / ".claude" / "settings.json").read_text()), "UserPromptSubmit")
    assert not (home / ".claude").exists()
    _hooks(vault_env, "install", "claude-code", "--user", cwd=project)
    assert _ours(json.loads((home / ".claude" / "settings.json").read_text()), "UserPromptSubmit")
    # Codex keeps its user files in CODEX_HOME when it is set.
    codex_home = tmp_path / "codex-home"
    _hooks({**vault_env, "CODEX_HOME": str(codex_home)}, "install", "codex", cwd=project)
    assert _ours(json.loads((codex_home / "hooks.json").read_text()), "SessionStart")
    # Codex keeps its trust records in config.toml's [hooks.state]; hooks written there too run as well.
    config = _write(project / ".codex" / "config.toml", '[hooks.state."x"]\ntrusted_hash = "ab"\n')
    out = _hooks(vault_env, "install", "codex", "--project", cwd=project)
    assert _ours(json.loads((project / ".codex" / "hooks.json").read_text()), "PreCompact")
    assert "trust" in out and "holds hooks too" not in out
    config.write_text('[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = "command"\ncommand = "say done"\n')
    _hooks(vault_env, "uninstall", "codex", "--project", cwd=project)
    out = _hooks(vault_env, "install", "codex", "--project", cwd=project)
    assert f"{config} holds hooks too: Codex runs both files' (and warns)" in out
    assert not (home / ".codex").exists()


def test_a_dry_run_prints_the_diff_and_writes_nothing(vault_env: dict[str, str], tmp_path: Path) -> None:
    home = Path(vault_env["HOME"])
    settings = _write(home / FILES["claude-code"], THEIRS)
    out = _hooks(vault_env, "install", "claude-code", "--dry-run")
    added = [line for line in out.splitlines() if line.startswith("+") and "squirrel-mcp hook" in line]
    assert len(added) == 3 and f"--- {settings}" in out
    assert settings.read_text() == THEIRS and not settings.with_name(settings.name + BAK).exists()
    # No file: none made.
    project = tmp_path / "project"
    project.mkdir()
    assert "squirrel-mcp hook prompt" in _hooks(
        vault_env, "install", "gemini", "--project", "--dry-run", cwd=project
    )
    assert not (project / ".gemini").exists()
    # Uninstalling, likewise.
    _hooks(vault_env, "install", "claude-code")
    installed = settings.read_bytes()
    out = _hooks(vault_env, "uninstall", "claude-code", "--dry-run")
    assert (
        len([line for line in out.splitlines() if line.startswith("-") and "squirrel-mcp hook" in line]) == 3
    )
    assert settings.read_bytes() == installed


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '{\n  "env": {"SOME_TOKEN": "<secret>"},\n  "hooks": {\n}',
            "is not valid JSON (line 4, column 2)",
        ),
        ('["<secret>"]', "does not hold a JSON object"),
        ('{"hooks": ["<secret>"]}', "its `hooks` is not an object"),
        (
            '{"hooks": {"UserPromptSubmit": {"command": "<secret>"}}}',
            "its `hooks.UserPromptSubmit` is not a list",
        ),
    ],
)
def test_a_settings_file_that_is_not_a_hosts_is_refused_naming_only_the_file(
    vault_env: dict[str, str], text: str, problem: str
) -> None:
    secrets_of_this_test().add(FILE_SECRET)
    text = text.replace("<secret>", FILE_SECRET)
    settings = _write(Path(vault_env["HOME"]) / FILES["claude-code"], text)
    for action in ("install", "uninstall"):
        result = run_cli(vault_env, "hooks", action, "claude-code")
        if action == "uninstall" and "UserPromptSubmit" in text:
            # Nothing of ours to remove: no event is read as a list of hooks.
            assert result.returncode == 0
            continue
        assert result.returncode == 1
        separator = ": " if problem.startswith("its") else " "
        expected = f"squirrel-mcp: {settings}{separator}{problem}; nothing was written"
        assert result.stderr.decode().splitlines() == [expected]
        assert result.stdout == b""
    assert settings.read_text() == text
    assert not settings.with_name(settings.name + BAK).exists()


def test_install_replaces_our_old_entries_and_uninstall_keeps_what_is_not_ours(
    vault_env: dict[str, str],
) -> None:
    settings = Path(vault_env["HOME"]) / FILES["claude-code"]
    # An older installation's hook, and someone's own hook put in the same group as ours.
    old = "/old/venv/bin/squirrel-mcp hook prompt --host claude-code"
    theirs = {"type": "command", "command": "say hello"}
    group = {"hooks": [{"type": "command", "command": old}, theirs]}
    _write(settings, json.dumps({"hooks": {"UserPromptSubmit": [group]}}, indent=2))
    _hooks(vault_env, "install", "claude-code")
    data = json.loads(settings.read_text())
    [ours] = _ours(data, "UserPromptSubmit")
    assert ours["command"].startswith(shlex.quote(str(_script())))
    assert theirs in [handler for g in data["hooks"]["UserPromptSubmit"] for handler in g["hooks"]]
    _hooks(vault_env, "uninstall", "claude-code")
    assert json.loads(settings.read_text()) == {"hooks": {"UserPromptSubmit": [{"hooks": [theirs]}]}}


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_a_linked_settings_file_stays_a_link(vault_env: dict[str, str], tmp_path: Path) -> None:
    kept = _write(tmp_path / "dotfiles" / "settings.json", THEIRS)
    link = Path(vault_env["HOME"]) / FILES["claude-code"]
    link.parent.mkdir(parents=True)
    link.symlink_to(kept)
    _hooks(vault_env, "install", "claude-code")
    assert link.is_symlink() and _ours(json.loads(kept.read_text()), "SessionStart")


def test_doctor_says_which_hooks_are_installed_and_whether_they_run(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    home, project = Path(vault_env["HOME"]), tmp_path / "project"
    project.mkdir()
    secrets_of_this_test().add(FILE_SECRET)
    claude = _write(home / FILES["claude-code"], THEIRS)
    _hooks(vault_env, "install", "claude-code")
    _hooks(vault_env, "install", "gemini", "--project", cwd=project)
    # An installation since removed, at one event only.
    gone = {
        "hooks": {
            "SessionStart": [
                {
                    "hooks": [
                        {"type": "command", "command": "/gone/squirrel-mcp hook session-start --host codex"}
                    ]
                }
            ]
        }
    }
    codex = _write(home / FILES["codex"], json.dumps(gone))
    other = _write(project / FILES["claude-code"], '{"hooks": {}}')
    broken = _write(home / ".gemini" / "settings.json", '{"env": "' + FILE_SECRET + '"')
    result = run_cli(vault_env, "doctor", cwd=project)
    lines = [line for line in result.stdout.decode().splitlines() if line[2:].startswith("hooks:")]
    assert FILE_SECRET not in result.stdout.decode()
    gemini = project / FILES["gemini"]
    assert lines == [
        f"✓ hooks: {claude} (Claude Code): squirrel-mcp's at SessionStart, UserPromptSubmit, PreCompact; "
        "each command can be run",
        f"– hooks: {other} (Claude Code): none of squirrel-mcp's "
        "(`squirrel-mcp hooks install claude-code` adds them)",
        f"✗ hooks: {codex} (Codex): squirrel-mcp's at SessionStart; missing at UserPromptSubmit, PreCompact; "
        "/gone/squirrel-mcp does not exist "
        "→ run `squirrel-mcp hooks install codex`: it writes this installation's command",
        f"✗ hooks: {broken} (Gemini CLI) is not valid JSON (line 1, column {len(broken.read_text()) + 1}) "
        "→ correct it: the host cannot read it either",
        f"✓ hooks: {gemini} (Gemini CLI): squirrel-mcp's at SessionStart, BeforeAgent, PreCompress; "
        "each command can be run",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "{\n}\n",
        '{"a": [1, 2]}',
        '{\n\t"x": {},\n\t"y": [\n\t\t1\n\t]\n}\n',
        '{\r\n    "k": "v"\r\n}\r\n',
    ],
)
def test_json_edit_removes_exactly_what_it_inserted(text: str) -> None:
    for key in ("x", "new"):
        root = json_edit.root(text)
        inserted = json_edit.insert(text, root, key, {"list": [1, {"é": None}]})
        data = json.loads(inserted)
        assert data[key] == {"list": [1, {"é": None}]}
        index = len(json_edit.members(inserted, root)[0]) - 1
        restored = json_edit.remove(inserted, root, index)
        assert restored == text or (text == "{\n}\n" and restored == "{}\n")


@pytest.mark.skipif(sys.platform == "win32", reason="the hosts run hooks through sh here")
@pytest.mark.skipif(
    importlib.util.find_spec("squirrel_mcp.cli.hook") is None,
    reason="`squirrel-mcp hook` is not in this tree",
)
@pytest.mark.parametrize("host", ["claude-code", "codex", "gemini"])
def test_the_installed_pre_compact_command_runs_through_the_shell(
    vault_env: dict[str, str], host: str
) -> None:
    # The one hook that needs no vault: what the host's shell makes of the command as written.
    settings = Path(vault_env["HOME"]) / FILES[host]
    _hooks(vault_env, "install", host)
    event = "PreCompress" if host == "gemini" else "PreCompact"
    [handler] = _ours(json.loads(settings.read_text()), event)
    given = {
        "session_id": "s",
        "transcript_path": "/nowhere",
        "cwd": str(settings.parent),
        "trigger": "manual",
    }
    result = subprocess.run(
        ["/bin/sh", "-c", handler["command"]],
        input=json.dumps({**given, "hook_event_name": event}).encode(),
        env={"PATH": os.environ["PATH"], **vault_env},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert b"save_memory" in result.stdout


def _squeezed(text: str) -> str:
    return "".join(text.split())


def test_json_edit_round_trips_documents_of_every_layout() -> None:
    # Seeded: the same documents every run.
    chance = random.Random(45)

    def value(depth: int) -> object:
        kind = chance.randrange(6 if depth < 3 else 3)
        if kind == 0:
            return chance.choice([0, -1.5, 1e300, True, None])
        if kind == 1:
            return chance.choice(["", 'é\\"x', "a]}{[,:"])
        if kind == 2:
            return []
        if kind == 3:
            return [value(depth + 1) for _ in range(chance.randrange(4))]
        return {f"k{i}": value(depth + 1) for i in range(chance.randrange(4))}

    for _ in range(300):
        document = {f"top{i}": value(1) for i in range(chance.randrange(4))}
        indent = chance.choice([None, 2, 4, "\t"])
        separators = chance.choice([None, (",", ":"), (", ", ": ")])
        text = json.dumps(document, indent=indent, separators=separators, ensure_ascii=chance.random() < 0.5)
        text += chance.choice(["", "\n"])
        containers = [json_edit.root(text)]
        for opening in containers:
            containers += [m.value for m in json_edit.members(text, opening)[0] if text[m.value] in "[{"]
        opening = chance.choice(containers)
        key = "added" if text[opening] == "{" else None
        inserted = json_edit.insert(text, opening, key, {"hooks": [1, "two"]})
        count = len(json_edit.members(inserted, opening)[0])
        assert json_edit.members(inserted, opening)[0][-1].key == key
        json.loads(inserted)
        restored = json_edit.remove(inserted, opening, count - 1)
        # An empty container gets its member on a line of its own; emptied again, it closes up.
        assert restored == text or (count == 1 and _squeezed(restored) == _squeezed(text))
