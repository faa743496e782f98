"""`squirrel-mcp doctor`: one line per check, ✓ or ✗ with the fix (– when not checked), exit 1 when any fails.

tests/test_doctor_hosts.py tries the hosts' entries with their own passphrases, vaults and keychain.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp_embeddings.integrity import MANIFEST_NAME, PACKAGED_MODEL_DIR
from tests.conftest import PASSPHRASE, call, needs_model, run_cli, secrets_of_this_test, server_params

SECRET_TEXT = "Takes insulin every morning"
# The passphrase written in the fake hosts' configs: never printed, nor any other env value.
CONFIG_PASSPHRASE = "config passphrase 7d41"
CONFIG_SECRETS = [
    CONFIG_PASSPHRASE,
    "an API key in a config 93ab",
    "a secret in a broken file 55c2",
    "a project that is no name 4c1e",
]
# What an entry's line says of its project when neither its env nor its config says it, run from
# the home directory (no project).
FROM_THE_FOLDER = "project: that of the folder the host starts it in, which its config does not say"
FROM_HOME = f"{FROM_THE_FOLDER} (started in this folder: none)"
NO_KEYCHAIN = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


def _doctor(env: dict[str, str], cwd: Path | None = None) -> tuple[int, list[str]]:
    """Run doctor in `cwd` (default: the home directory, which is no project)."""
    for secret in CONFIG_SECRETS:
        secrets_of_this_test().add(secret)  # stderr is scanned for them too
    if cwd is None:
        cwd = Path(env["HOME"])
        cwd.mkdir(parents=True, exist_ok=True)
    result = run_cli(env, "doctor", cwd=cwd)
    lines = result.stdout.decode().splitlines()
    # Every line is a check; none shows a memory, a passphrase or a secret of a host config.
    assert lines and all(line[:2] in ("✓ ", "✗ ", "– ") for line in lines), lines
    for secret in [SECRET_TEXT, PASSPHRASE, *CONFIG_SECRETS]:
        assert secret not in result.stdout.decode() and secret not in result.stderr.decode()
    return result.returncode, lines


def _named(lines: list[str], name: str) -> str:
    found = [line for line in lines if line[2:].startswith(f"{name}:")]
    assert len(found) == 1, (name, lines)
    return found[0]


@pytest.fixture
async def vault_with_a_memory(vault_env: dict[str, str]) -> dict[str, str]:
    async with Client(server_params(vault_env)) as client:
        await call(client, "save_memory", text=SECRET_TEXT)
    return vault_env


@needs_model
@pytest.mark.anyio
async def test_a_healthy_setup_passes_every_check(vault_with_a_memory: dict[str, str]) -> None:
    env = {**vault_with_a_memory, "SQUIRREL_MCP_PLUGINS": "embeddings"}
    code, lines = _doctor(env)
    assert code == 0, lines
    names = [line[2:].split(":")[0] for line in lines]
    assert names == [
        "config",
        "vault",
        "keychain",
        "passphrase",
        "log integrity",
        "plugins loaded",
        "model verified",
        "vector file",
        "host config",
    ]
    assert _named(lines, "keychain") == "✓ keychain: not asked: the passphrase comes from SQUIRREL_PASSPHRASE"
    assert _named(lines, "passphrase") == "✓ passphrase: unlocks the account (1 memories)"
    assert _named(lines, "plugins loaded") == "✓ plugins loaded: embeddings"
    assert "files match the manifest" in _named(lines, "model verified")
    assert '"command"' in _named(lines, "host config") and "SQUIRREL_PASSPHRASE" in lines[-1]


@pytest.mark.anyio
async def test_a_wrong_passphrase_fails_its_check(vault_with_a_memory: dict[str, str]) -> None:
    code, lines = _doctor(vault_with_a_memory)
    assert code == 0, lines
    assert _named(lines, "plugins loaded").startswith("✓ plugins loaded: none besides")

    wrong = {**vault_with_a_memory, "SQUIRREL_PASSPHRASE": "not the passphrase"}
    code, lines = _doctor(wrong)
    assert code == 1
    line = _named(lines, "passphrase")
    assert line.startswith("✗ passphrase: ") and "→ set SQUIRREL_PASSPHRASE" in line
    assert "not the passphrase" not in "\n".join(lines)
    assert [line[:1] for line in lines].count("✗") == 1


def test_no_vault_fails_its_check(vault_env: dict[str, str]) -> None:
    code, lines = _doctor(vault_env)
    assert code == 1
    assert "→ run `squirrel-mcp init`" in _named(lines, "vault")


@needs_model
@pytest.mark.anyio
async def test_a_missing_model_file_fails_its_check(
    vault_with_a_memory: dict[str, str], tmp_path: Path
) -> None:
    # A copy of the model's directory (links: the files are large) without its tokenizer.
    copy = tmp_path / "model"
    copy.mkdir()
    for path in PACKAGED_MODEL_DIR.iterdir():
        if path.name != "tokenizer.json":
            (copy / path.name).symlink_to(path)
    assert (copy / MANIFEST_NAME).exists()
    env = {
        **vault_with_a_memory,
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MEMORY_MODEL_DIR": str(copy),
    }
    code, lines = _doctor(env)
    assert code == 1
    line = _named(lines, "model verified")
    assert line.startswith("✗ model verified: not loadable (missing: tokenizer.json)")
    assert "SQUIRREL_MEMORY_MODEL_DIR" in line
    assert [line[:1] for line in lines].count("✗") == 1


def test_an_unreachable_sync_server_fails_its_check(vault_env: dict[str, str]) -> None:
    # A port nothing listens on: bound, then closed.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **vault_env,
        "SQUIRREL_API_BASE_URL": f"http://127.0.0.1:{port}",
        "SQUIRREL_API_KEY": "an API key of thirty-two characters",
    }
    code, lines = _doctor(env)
    assert code == 1
    line = _named(lines, "sync server")
    assert line.startswith(f"✗ sync server: cannot reach the sync server at http://127.0.0.1:{port}")
    assert "→ start the sync server" in line
    assert "thirty-two" not in "\n".join(lines)
    assert "SQUIRREL_API_KEY" in _named(lines, "host config")


# The host configs: doctor reads them under HOME, and the project files in its current directory.


def _script() -> Path:
    """This installation's `squirrel-mcp` script, as a pipx or venv install runs it."""
    name = "squirrel-mcp.exe" if sys.platform == "win32" else "squirrel-mcp"
    script = Path(sysconfig.get_path("scripts")) / name
    assert script.is_file(), script
    return script


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _entry(
    command: str | Path, passphrase: str = CONFIG_PASSPHRASE, args: list[str] | None = None, vault: str = ""
) -> dict[str, object]:
    env = {"SQUIRREL_PASSPHRASE": passphrase} | ({"SQUIRREL_VAULT": vault} if vault else {})
    return {"command": str(command), "args": args or [], "env": env}


def _hosts(lines: list[str]) -> list[str]:
    return [line for line in lines if line[2:].startswith("host config:")]


def test_a_host_entry_that_runs_this_installation_passes(vault_env: dict[str, str]) -> None:
    home, vault = Path(vault_env["HOME"]), vault_env["SQUIRREL_VAULT"]
    assert run_cli(vault_env, "init", "--no-keychain").returncode == 0
    entry = _entry(_script(), PASSPHRASE, vault=vault)
    cursor = _write(home / ".cursor" / "mcp.json", json.dumps({"mcpServers": {"squirrel-notes": entry}}))
    _write(home / ".gemini" / "settings.json", json.dumps({"mcpServers": {"two\nlines": entry}}))
    code, lines = _doctor(vault_env)
    assert code == 0, lines
    unlocks = f"its SQUIRREL_PASSPHRASE unlocks the vault at {vault}"
    assert _hosts(lines) == [
        f'✓ host config: {cursor}, entry "squirrel-notes": runs {_script()} (this installation); '
        f"{unlocks}; {FROM_HOME}",
        # A name is shown escaped: every check stays one line.
        f'✓ host config: {home / ".gemini" / "settings.json"}, entry "two\\nlines": runs {_script()} '
        f"(this installation); {unlocks}; {FROM_HOME}",
    ]


def test_a_host_entry_whose_command_is_missing_fails_with_the_fix(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    home = Path(vault_env["HOME"])
    gone = tmp_path / "uninstalled" / "squirrel-mcp"
    codex = _write(
        home / ".codex" / "config.toml",
        f"[mcp_servers.notes]\ncommand = {json.dumps(str(gone))}\n"
        f'env = {{ SQUIRREL_PASSPHRASE = "{CONFIG_PASSPHRASE}" }}\n'
        # A command that sets a variable is not shown: it may hold a secret.
        f'[mcp_servers.squirrel-notes]\ncommand = "SQUIRREL_PASSPHRASE={CONFIG_PASSPHRASE} squirrel-mcp"\n',
    )
    code, lines = _doctor(vault_env)
    assert code == 1
    line, hidden = _hosts(lines)
    assert line.startswith(f'✗ host config: {codex}, entry "notes": {gone} does not exist; ')
    assert hidden.startswith(
        f'✗ host config: {codex}, entry "squirrel-notes": '
        "its command (not shown: it holds a `=`) is not found on PATH"
    )
    # The fix: the command this installation runs as (doctor runs here as `python -m squirrel_mcp`).
    assert (
        f'→ set "command" to {json.dumps(sys.executable)} and "args" to ["-P", "-m", "squirrel_mcp"]; '
        in line
    )


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no execute bit")
def test_a_command_that_is_not_executable_fails(vault_env: dict[str, str], tmp_path: Path) -> None:
    home = Path(vault_env["HOME"])
    plain = _write(tmp_path / "bin" / "squirrel-mcp", "not a program")
    os.chmod(plain, 0o644)
    _write(home / ".claude.json", json.dumps({"mcpServers": {"squirrel-notes": _entry(plain)}}))
    code, lines = _doctor(vault_env)
    assert code == 1
    [line] = _hosts(lines)
    assert f"{plain} is not executable" in line and "→ make it executable (chmod +x)" in line


def test_a_config_that_does_not_parse_fails_naming_its_file_and_line(vault_env: dict[str, str]) -> None:
    home = Path(vault_env["HOME"])
    broken = _write(home / ".claude.json", f'{{"mcpServers": {{\n  "notes": {CONFIG_SECRETS[2]}\n}}}}')
    codex = _write(home / ".codex" / "config.toml", f"[mcp_servers.notes]\ncommand = {CONFIG_SECRETS[2]}\n")
    code, lines = _doctor(vault_env)
    assert code == 1
    hosts = _hosts(lines)
    assert hosts[0] == (
        f"✗ host config: {broken} is not valid JSON (line 2, column 12) "
        "→ correct that line: the host cannot read the file either"
    )
    assert hosts[1].startswith(f"✗ host config: {codex} is not valid TOML (line 2, column 11)")
    assert hosts[2].startswith("– host config: no squirrel-mcp entry in an MCP host's config here")


def test_no_entry_in_any_host_config_is_said_plainly(vault_env: dict[str, str]) -> None:
    home = Path(vault_env["HOME"])
    _write(home / ".cursor" / "mcp.json", json.dumps({"mcpServers": {"weather": _entry("/usr/bin/weather")}}))
    _code, lines = _doctor(vault_env)
    [line] = _hosts(lines)
    # Nothing is set up, so nothing was checked: no ✓ (test_doctor_hosts.py has the exit code).
    assert line.startswith(
        "– host config: no squirrel-mcp entry in an MCP host's config here "
        "(Claude Desktop, Claude Code, Cursor, VS Code, Codex, Gemini CLI: 1 found); "
        'put in your MCP host\'s config: "command": '
    )
    assert "SQUIRREL_PASSPHRASE" in line and "weather" not in line


@pytest.mark.skipif(sys.platform == "win32", reason="the fake uvx is a shell script")
def test_project_files_uvx_entries_and_passphrases_not_in_the_file(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    home, project = Path(vault_env["HOME"]), tmp_path / "project"
    bin_dir = tmp_path / "bin"
    uvx = _write(bin_dir / "uvx", "#!/bin/sh\n")
    uvx.chmod(0o755)
    env = {**vault_env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **NO_KEYCHAIN}
    vault = vault_env["SQUIRREL_VAULT"]
    assert run_cli(env, "init", "--no-keychain").returncode == 0
    # VS Code's file: its key is `servers`, and it may hold comments and trailing commas.
    vscode = _write(
        project / ".vscode" / "mcp.json",
        '{\n  // the passphrase is asked once\n  "servers": {"mine": '
        + json.dumps(
            _entry(
                "uvx",
                "${input:squirrel-passphrase}",
                ["--from", "squirrel-mcp[embeddings]", "squirrel-mcp"],
                vault,
            )
        )
        + ",},\n}\n",
    )
    cursor = _write(
        project / ".cursor" / "mcp.json",
        json.dumps(
            {"mcpServers": {"squirrel-notes": {"command": str(_script()), "env": {"SQUIRREL_VAULT": vault}}}}
        ),
    )
    claude = _write(
        home / ".claude.json",
        json.dumps({"mcpServers": {"squirrel-notes": _entry(_script(), "<your passphrase>")}}),
    )
    code, lines = _doctor(env, cwd=project)
    assert code == 1
    # A plain folder is its own project: its path.
    here = f"{FROM_THE_FOLDER} (started in this folder: {project.resolve()})"
    assert _hosts(lines) == [
        f'✗ host config: {claude}, entry "squirrel-notes": runs {_script()} (this installation); '
        f"SQUIRREL_PASSPHRASE in its env is still <your passphrase>; {here} "
        "→ put your passphrase in place of <your passphrase>",
        f'✗ host config: {cursor}, entry "squirrel-notes": runs {_script()} (this installation); '
        "its env sets no SQUIRREL_PASSPHRASE and no keychain is usable here: the server starts only if the "
        f"host's own environment sets it; {here} → put SQUIRREL_PASSPHRASE in its env, or keep it in the "
        "keychain (`squirrel-mcp keychain store` with its SQUIRREL_VAULT)",
        f'✓ host config: {vscode}, entry "mine": runs through uvx, not this installation; '
        f"found on your PATH, which a host not started from your shell may not have; the vault at {vault} "
        f"holds an account; SQUIRREL_PASSPHRASE comes from a VS Code input, asked once (not tried); {here}",
    ]


def test_a_config_too_large_is_not_read(vault_env: dict[str, str]) -> None:
    home = Path(vault_env["HOME"])
    large = _write(home / ".claude.json", '{"mcpServers": {}}' + " " * 6_000_000)
    _code, lines = _doctor(vault_env)
    line = _hosts(lines)[0]
    assert line == f"✓ host config: {large} is 6.0 MB, more than the 5 MB doctor reads; not checked"


def _git(cwd: Path, *args: str) -> None:
    """Run git with none of this machine's config read."""
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="the test makes a real git repository")
def test_each_entry_says_which_project_its_host_will_be_in(vault_env: dict[str, str], tmp_path: Path) -> None:
    home = Path(vault_env["HOME"])
    # Doctor runs in a repository's subfolder: a host started there is in the repository's project.
    repository = tmp_path / "checkouts" / "api"
    (repository / "src").mkdir(parents=True)
    _git(repository, "init", "-q")
    _git(repository, "remote", "add", "origin", "https://github.com/acme/api.git")
    notes = tmp_path / "notes"
    notes.mkdir()
    script = json.dumps(str(_script()))
    assert run_cli(vault_env, "init", "--no-keychain").returncode == 0
    vault = vault_env["SQUIRREL_VAULT"]
    unlocking = {"SQUIRREL_PASSPHRASE": PASSPHRASE, "SQUIRREL_VAULT": vault}

    def entry(name: str, project: str | None = None, cwd: Path | None = None) -> str:
        env = unlocking | ({} if project is None else {"SQUIRREL_PROJECT": project})
        lines = [f"[mcp_servers.{name}]", f"command = {script}"]
        lines += [] if cwd is None else [f"cwd = {json.dumps(str(cwd))}"]
        lines += [f"env = {{ {', '.join(f'{key} = {json.dumps(value)}' for key, value in env.items())} }}"]
        return "\n".join(lines) + "\n"

    codex = _write(
        home / ".codex" / "config.toml",
        entry("squirrel-web", "github.com/acme/web")
        + entry("squirrel-everywhere", "")
        + entry("squirrel-notes", cwd=notes)
        + entry("squirrel-here")
        + entry("squirrel-wrong", f"two\n{CONFIG_SECRETS[3]}"),
    )
    vscode = _write(
        repository / "src" / ".vscode" / "mcp.json",
        json.dumps(
            {
                "servers": {
                    "squirrel-notes": {
                        "command": str(_script()),
                        "env": {**unlocking, "SQUIRREL_PROJECT": "${input:p}"},
                    }
                }
            }
        ),
    )
    code, lines = _doctor(vault_env, cwd=repository / "src")
    assert code == 1
    # What each line says after its passphrase (each entry's unlocks).
    said = [
        line.split(f"its SQUIRREL_PASSPHRASE unlocks the vault at {vault}; ")[1] for line in _hosts(lines)
    ]
    wrong = "correct SQUIRREL_PROJECT in its env (a name, or empty for none), or remove it: the folder says"
    assert said == [
        "project: what the host puts in SQUIRREL_PROJECT (its env holds a ${...} variable)",
        "project: github.com/acme/web (SQUIRREL_PROJECT in its env)",
        "project: none (SQUIRREL_PROJECT in its env)",
        f"project: {notes.resolve()} (that of its cwd)",
        f"{FROM_THE_FOLDER} (started in this folder: github.com/acme/api)",
        f"project: SQUIRREL_PROJECT: must be a single line (in its env) → {wrong}",
    ]
    assert [line[:1] for line in _hosts(lines)] == ["✓"] * 5 + ["✗"]
    assert _hosts(lines)[0].startswith(f"✓ host config: {vscode}, ")
    assert _hosts(lines)[1].startswith(f'✓ host config: {codex}, entry "squirrel-web": ')
