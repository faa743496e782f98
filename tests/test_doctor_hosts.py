"""doctor tries each host's entry as that host will run it: the entry's own passphrase, vault and keychain.

The fake hosts' configs (Claude Desktop, Claude Code and a project's `.mcp.json`, Cursor,
Codex, Gemini CLI) are written under the test's HOME; doctor runs as the CLI in a shell that sets neither
SQUIRREL_PASSPHRASE nor, mostly, SQUIRREL_VAULT (a user who keeps them in the hosts'
configs), twice: piped (no terminal) and on a pseudo-terminal. Each entry's line says
the truth in one line, the same both ways, and the terminal is never asked for what a
config holds: a prompt would go unanswered and the run be killed, which these tests see.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests import terminal
from tests import test_keychain_secret_service as keyring_tests
from tests.conftest import PASSPHRASE, run_cli, secrets_of_this_test
from tests.sync.conftest import start_sync_server
from tests.test_doctor import FROM_HOME, _hosts, _named, _script, _write

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(sys.platform == "win32", reason="the terminal runs are on a POSIX pseudo-terminal"),
]

# A real Secret Service for the keychain's case (a private D-Bus session and GNOME Keyring).
secret_service = keyring_tests.secret_service

WRONG = "a wrong passphrase 61f0"
API_KEY = "an API key with no server 2b7e"
NO_KEYCHAIN = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
# Bounds a run that hangs on a prompt; a run that does not ask ends well within it.
WITHIN = 120.0
UNLOCKS = "its SQUIRREL_PASSPHRASE unlocks the vault at"


def shell(env: dict[str, str], *keep: str) -> dict[str, str]:
    """`env` as the shell doctor runs in: no SQUIRREL_PASSPHRASE, and SQUIRREL_VAULT only if kept."""
    dropped = {"SQUIRREL_PASSPHRASE", "SQUIRREL_VAULT"} - set(keep)
    return {name: value for name, value in env.items() if name not in dropped}


def make_vault(env: dict[str, str], *options: str) -> Path:
    """`squirrel-mcp init` on env's vault (with `options`); its path."""
    made = run_cli(env, "init", *options)
    assert made.returncode == 0, made.stderr
    return Path(env["SQUIRREL_VAULT"])


def entry(**env: str) -> dict[str, object]:
    """A host's entry running this installation with `env`."""
    return {"command": str(_script()), "args": [], "env": env}


def servers(**entries: dict[str, object]) -> str:
    return json.dumps({"mcpServers": entries})


def doctor_both(env: dict[str, str], typed: str | None = None) -> tuple[int, list[str], list[str]]:
    """doctor piped and on a terminal, in HOME: the exit code, the piped lines, the terminal's lines.

    On the terminal, `typed` answers a passphrase prompt (None: nothing is typed, so a run that
    asks hangs until it is killed after WITHIN seconds).
    """
    for secret in (WRONG, API_KEY):
        secrets_of_this_test().add(secret)
    home = Path(env["HOME"])
    home.mkdir(parents=True, exist_ok=True)
    piped = run_cli(env, "doctor", stdin=b"", cwd=home)

    def answer(output: bytes) -> str | None:
        return typed if typed is not None and output.endswith(b"Passphrase: ") else None

    code, output = terminal.converse(["-m", "squirrel_mcp", "doctor"], env, answer, WITHIN, str(home))
    printed = piped.stdout.decode()
    for secret in (PASSPHRASE, WRONG, API_KEY):
        assert secret not in printed and secret not in piped.stderr.decode() and secret not in output
    assert code == piped.returncode, output
    return piped.returncode, printed.splitlines(), output.replace("\r\n", "\n").splitlines()


def test_each_entry_is_tried_with_its_own_env_with_and_without_a_terminal(vault_env: dict[str, str]) -> None:
    vault = make_vault(vault_env, "--no-keychain")
    home = Path(vault_env["HOME"])
    typo = vault.with_name("vualt.sqlite3")
    files = [
        # Claude Desktop's file on Linux (XDG_CONFIG_HOME unset: ~/.config).
        _write(
            home / ".config" / "Claude" / "claude_desktop_config.json",
            servers(**{"squirrel-notes": entry(SQUIRREL_PASSPHRASE=PASSPHRASE, SQUIRREL_VAULT=str(vault))}),
        ),
        _write(
            home / ".claude.json",
            servers(**{"squirrel-notes": entry(SQUIRREL_PASSPHRASE=WRONG, SQUIRREL_VAULT=str(vault))}),
        ),
        _write(
            home / ".cursor" / "mcp.json",
            servers(notes=entry(SQUIRREL_PASSPHRASE=PASSPHRASE, SQUIRREL_API_KEY=API_KEY)),
        ),
        _write(
            home / ".codex" / "config.toml",
            f"[mcp_servers.squirrel-notes]\ncommand = {json.dumps(str(_script()))}\n"
            f"env = {{ SQUIRREL_PASSPHRASE = {json.dumps(PASSPHRASE)}, "
            f"SQUIRREL_VAULT = {json.dumps(str(typo))} }}\n",
        ),
        _write(
            home / ".gemini" / "settings.json",
            servers(**{"squirrel-notes": entry(SQUIRREL_VAULT=str(vault))}),
        ),
        # A project's own file for Claude Code (here the project is HOME): `${VAR}` is the host's to
        # fill in from its own environment, which doctor cannot see.
        _write(
            home / ".mcp.json",
            servers(
                **{
                    "from-the-host": entry(
                        SQUIRREL_PASSPHRASE="${SQUIRREL_PASSPHRASE}", SQUIRREL_VAULT=str(vault)
                    )
                }
            ),
        ),
    ]
    code, lines, on_terminal = doctor_both({**shell(vault_env), **NO_KEYCHAIN})
    assert code == 1
    assert on_terminal == lines
    names = ["squirrel-notes", "squirrel-notes", "notes", "squirrel-notes", "squirrel-notes", "from-the-host"]
    head = [f'{path}, entry "{name}": ' for path, name in zip(files, names, strict=True)]
    runs = f"runs {_script()} (this installation)"
    assert _hosts(lines) == [
        f"✓ host config: {head[0]}{runs}; {UNLOCKS} {vault}; {FROM_HOME}",
        f"✗ host config: {head[1]}{runs}; its SQUIRREL_PASSPHRASE does not unlock the vault at {vault}; "
        f"{FROM_HOME} → put the passphrase of `init` (or of the last `squirrel-mcp passphrase`) in its env",
        f"✓ host config: {head[5]}{runs}; the vault at {vault} holds an account; "
        "SQUIRREL_PASSPHRASE is a variable the host fills in from its own environment (not tried); "
        f"{FROM_HOME}",
        f"✗ host config: {head[2]}{runs}; SQUIRREL_API_KEY is set but SQUIRREL_API_BASE_URL is not: set the "
        "sync server's URL, or unset the key to use the local vault (in its env); "
        f"{FROM_HOME} → correct it in its env",
        f"✗ host config: {head[3]}{runs}; there is no vault at {typo}, the one it opens; {FROM_HOME} "
        "→ correct SQUIRREL_VAULT in its env, or run `squirrel-mcp init` with SQUIRREL_VAULT set to it",
        f"✗ host config: {head[4]}{runs}; its env sets no SQUIRREL_PASSPHRASE and no keychain is usable "
        f"here: the server starts only if the host's own environment sets it; {FROM_HOME} "
        "→ put SQUIRREL_PASSPHRASE in its env, or keep it in the keychain (`squirrel-mcp keychain store` "
        "with its SQUIRREL_VAULT)",
    ]
    # This shell names no vault and the default one does not exist: the account checked is the one
    # the first entry that unlocks opens, with its passphrase (not asked on the terminal).
    assert _named(lines, "config") == (
        f"✓ config: memories kept in the local vault of {head[0].removesuffix(': ')} "
        "(this shell names none, and the default vault does not exist)"
    )
    assert _named(lines, "passphrase") == (
        f"✓ passphrase: unlocks the account (0 memories) with the passphrase of {head[0].removesuffix(': ')}"
    )
    assert _named(lines, "log integrity").startswith("✓ ")


def test_a_correct_setup_passes_with_the_passphrase_its_host_config_holds(vault_env: dict[str, str]) -> None:
    vault = make_vault(vault_env, "--no-keychain")
    home = Path(vault_env["HOME"])
    desktop = _write(
        home / ".config" / "Claude" / "claude_desktop_config.json",
        servers(**{"squirrel-notes": entry(SQUIRREL_PASSPHRASE=PASSPHRASE, SQUIRREL_VAULT=str(vault))}),
    )
    # The shell names the same vault, but not its passphrase: the config's is used, not asked for.
    code, lines, on_terminal = doctor_both({**shell(vault_env, "SQUIRREL_VAULT"), **NO_KEYCHAIN})
    assert (code, on_terminal) == (0, lines)
    assert all(line.startswith("✓ ") for line in lines), lines
    assert _named(lines, "passphrase") == (
        "✓ passphrase: unlocks the account (0 memories) with the passphrase of "
        f'{desktop}, entry "squirrel-notes"'
    )
    assert _hosts(lines) == [
        f'✓ host config: {desktop}, entry "squirrel-notes": runs {_script()} (this installation); '
        f"{UNLOCKS} {vault}; {FROM_HOME}"
    ]


def test_no_host_config_is_said_without_a_check_mark(vault_env: dict[str, str]) -> None:
    make_vault(vault_env, "--no-keychain")
    env = {**shell(vault_env, "SQUIRREL_VAULT"), **NO_KEYCHAIN}
    code, lines, on_terminal = doctor_both(env, typed=PASSPHRASE)
    # Nothing failed, and neither the hosts nor (piped) the passphrase could be checked: `–`, exit 0.
    assert code == 0
    [host] = _hosts(lines)
    assert host.startswith(
        "– host config: no squirrel-mcp entry in an MCP host's config here "
        "(Claude Desktop, Claude Code, Cursor, VS Code, Codex, Gemini CLI: none found); "
        'put in your MCP host\'s config: "command": '
    )
    assert _named(lines, "passphrase") == (
        f"– passphrase: not tried: nothing here gives the passphrase of the vault at {env['SQUIRREL_VAULT']} "
        "(neither SQUIRREL_PASSPHRASE, the keychain nor a host entry that unlocks it) and there is no "
        "terminal to ask on"
    )
    assert [line[:1] for line in lines].count("✓") == len(lines) - 2
    # On a terminal, with no config holding it, the passphrase is asked once and tried.
    assert on_terminal.count("Passphrase: ") == 1
    assert _named(on_terminal, "passphrase") == "✓ passphrase: unlocks the account (0 memories)"
    assert [line for line in on_terminal if "host config" in line] == [host]


def test_an_entry_whose_passphrase_is_in_the_keychain(
    secret_service: keyring_tests.SecretService, vault_env: dict[str, str]
) -> None:
    env = secret_service.env
    vault = make_vault({**env, "SQUIRREL_PASSPHRASE": PASSPHRASE}, "--keychain")
    # Claude Desktop's file under XDG_CONFIG_HOME, which the Secret Service's environment sets.
    desktop = _write(
        Path(env["XDG_CONFIG_HOME"]) / "Claude" / "claude_desktop_config.json",
        servers(**{"squirrel-notes": entry(SQUIRREL_VAULT=str(vault))}),
    )
    kept = f"the passphrase in the keychain entry squirrel-mcp / passphrase of the vault at {vault.resolve()}"
    head = f'✓ host config: {desktop}, entry "squirrel-notes": runs {_script()} (this installation); '
    code, lines, on_terminal = doctor_both(shell(env))
    assert (code, on_terminal) == (0, lines)
    assert _hosts(lines) == [f"{head}{kept} unlocks the vault at {vault}; {FROM_HOME}"]

    # The passphrase changed without the keychain hearing of it: the entry no longer unlocks.
    changed = run_cli(
        {**env, **NO_KEYCHAIN, "SQUIRREL_PASSPHRASE": PASSPHRASE, "SQUIRREL_NEW_PASSPHRASE": WRONG},
        "passphrase",
    )
    assert changed.returncode == 0, changed.stderr
    code, lines, on_terminal = doctor_both(shell(env))
    assert (code, on_terminal) == (1, lines)
    [line] = _hosts(lines)
    assert line == (
        f"{head.replace('✓', '✗')}{kept} does not unlock the vault at {vault}: it was changed since it was "
        f"kept there; {FROM_HOME} → run `squirrel-mcp keychain store` with the current passphrase"
    )


def test_an_entry_on_a_sync_server_is_tried_with_its_url_and_api_key(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    with start_sync_server(f"sqlite:///{tmp_path}/sync-db/sync.sqlite3", log=tmp_path / "sync.log") as sync:
        remote = {"SQUIRREL_API_BASE_URL": sync.url, "SQUIRREL_API_KEY": sync.api_key}
        secrets_of_this_test().add(sync.api_key)
        made = run_cli({**vault_env, **remote}, "init", "--no-keychain")
        assert made.returncode == 0, made.stderr
        home = Path(vault_env["HOME"])
        claude = _write(
            home / ".claude.json",
            servers(
                right=entry(SQUIRREL_PASSPHRASE=PASSPHRASE, **remote),
                wrong=entry(SQUIRREL_PASSPHRASE=WRONG, **remote),
            ),
        )
        code, lines, on_terminal = doctor_both({**shell(vault_env), **NO_KEYCHAIN})
    assert (code, on_terminal) == (1, lines)
    assert not [line for line in lines if sync.api_key in line]
    server = f"the sync server at {sync.url}"
    assert _hosts(lines) == [
        f'✓ host config: {claude}, entry "right": runs {_script()} (this installation); '
        f"its SQUIRREL_PASSPHRASE unlocks {server}; {FROM_HOME}",
        f'✗ host config: {claude}, entry "wrong": runs {_script()} (this installation); '
        f"its SQUIRREL_PASSPHRASE does not unlock {server}; {FROM_HOME} "
        "→ put the passphrase of `init` (or of the last `squirrel-mcp passphrase`) in its env",
    ]
    # This shell names no account: the one checked is the sync server the first entry unlocks.
    assert _named(lines, "sync server") == f"✓ sync server: {server} answers and holds an account"


def test_an_entrys_line_stays_one_line_whatever_its_env_holds(vault_env: dict[str, str]) -> None:
    home = Path(vault_env["HOME"])
    forged = f"{home}/gone\n✓ vault: a line the config wrote"
    claude = _write(
        home / ".claude.json",
        servers(**{"squirrel-notes": entry(SQUIRREL_PASSPHRASE=PASSPHRASE, SQUIRREL_VAULT=forged)}),
    )
    code, lines, on_terminal = doctor_both({**shell(vault_env, "SQUIRREL_VAULT"), **NO_KEYCHAIN})
    assert (code, on_terminal) == (1, lines)
    assert not [line for line in lines if "a line the config wrote" in line and not line.startswith("✗ host")]
    [line] = _hosts(lines)
    assert line.startswith(
        f'✗ host config: {claude}, entry "squirrel-notes": runs {_script()} (this installation); '
        f"there is no vault at {home}/gone?✓ vault: a line the config wrote, the one it opens; "
    )
