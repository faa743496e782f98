"""The command line: --version, init, export/import, and the errors a user can cause."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp import __version__
from tests.conftest import PASSPHRASE, call, default_vault, run_cli, server_params
from tests.terminal import converse


def test_version() -> None:
    result = run_cli({}, "--version")
    assert result.returncode == 0
    assert result.stdout.decode().strip() == f"squirrel-mcp {__version__}"


def test_init_creates_a_vault_and_prints_a_client_config(vault_env: dict[str, str]) -> None:
    result = run_cli(vault_env, "init")
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    block = json.loads(out[out.index("{") :])
    server = block["mcpServers"]["squirrel-notes"]
    # The block starts this very installation, by absolute path: hosts do not search the shell's PATH.
    assert (server["command"], server["args"]) == (sys.executable, ["-P", "-m", "squirrel_mcp"])
    assert server["env"]["SQUIRREL_VAULT"] == vault_env["SQUIRREL_VAULT"]
    assert PASSPHRASE not in out  # a placeholder, never the secret
    vault = Path(vault_env["SQUIRREL_VAULT"])
    assert vault.exists() and (vault.stat().st_mode & 0o777) == 0o600

    before = vault.read_bytes()
    again = run_cli(vault_env, "init")
    assert again.returncode == 1 and b"already exists" in again.stderr
    assert vault.read_bytes() == before


def test_init_with_a_relative_vault_prints_its_absolute_path(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    # A host runs the printed block in a folder of its own: a relative path there is another vault.
    folder = tmp_path / "project"
    folder.mkdir()
    env = {**vault_env, "SQUIRREL_VAULT": "vaults/mine.sqlite3"}
    result = run_cli(env, "init", cwd=folder)
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    server = json.loads(out[out.index("{") :])["mcpServers"]["squirrel-notes"]
    assert server["env"]["SQUIRREL_VAULT"] == str(folder / "vaults" / "mine.sqlite3")
    assert (folder / "vaults" / "mine.sqlite3").exists()


def test_the_printed_command_is_the_script_that_ran_or_the_uvx_form(tmp_path: Path) -> None:
    from squirrel_mcp.cli import account

    script = Path(sys.prefix) / "bin" / "squirrel-mcp"
    original = sys.argv[0]
    try:
        sys.argv[0] = str(script)
        assert account.server_command({}) == (str(script), [])
        # uvx runs the script from an environment in uv's cache (archive-v0/<hash>), with UV set.
        uv = tmp_path / "uv"
        (tmp_path / "uvx").touch()
        archive = tmp_path / "cache" / "archive-v0" / "AbC"
        original_prefix = sys.prefix
        sys.prefix = str(archive)
        try:
            command, args = account.server_command({"UV": str(uv)})
        finally:
            sys.prefix = original_prefix
        assert command == str(tmp_path / "uvx")
        # The README's two uvx blocks: with the plugin when it is installed, else word search only.
        assert args in (["--from", "squirrel-mcp[embeddings]", "squirrel-mcp"], ["squirrel-mcp"])
    finally:
        sys.argv[0] = original


def _converse(argv: list[str], env: dict[str, str], answers: list[str]) -> tuple[int, str]:
    """Run argv on a pseudo-terminal, typing each answer at the next passphrase prompt."""
    pending = list(answers)

    def answer(output: bytes) -> str | None:
        # Answer each prompt once it is shown: getpass flushes what was typed before it.
        prompts = output.count(b"Passphrase")
        if pending and output.endswith(b": ") and prompts > len(answers) - len(pending):
            return pending.pop(0)
        return None

    return converse(argv, env, answer)


def test_init_asks_twice_without_echo(vault_env: dict[str, str]) -> None:
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_PASSPHRASE"}
    vault = Path(vault_env["SQUIRREL_VAULT"])

    code, output = _converse(["-m", "squirrel_mcp", "init"], env, ["a long passphrase", "another one!"] * 3)
    assert code == 1 and "the two passphrases differ; nothing was created" in output
    assert "a long passphrase" not in output  # never echoed
    assert not vault.exists() or run_cli(vault_env, "export").returncode == 1

    code, output = _converse(["-m", "squirrel_mcp", "init"], env, ["tiny", "tiny", "tiny"])
    assert code == 1 and "at least 8" in output

    code, output = _converse(["-m", "squirrel_mcp", "init"], env, ["a long passphrase"] * 2)
    assert code == 0, output
    assert "a long passphrase" not in output
    unlocked = run_cli({**env, "SQUIRREL_PASSPHRASE": "a long passphrase"}, "export")
    assert unlocked.returncode == 0, unlocked.stderr


@pytest.mark.anyio
async def test_export_then_import_elsewhere_is_complete_and_idempotent(tmp_path: Path) -> None:
    # The server makes the source vault at its default place; import --create makes the target.
    source = {**default_vault(tmp_path / "a"), "SQUIRREL_PASSPHRASE": PASSPHRASE}
    target = {
        "SQUIRREL_VAULT": str(tmp_path / "b" / "vault.sqlite3"),
        "SQUIRREL_PASSPHRASE": "another passphrase",
    }
    async with Client(server_params(source)) as client:
        kept = (await call(client, "save_memory", text="Grows basil", tags=["garden"]))["memory"]
        await call(client, "update_memory", id=kept["id"], text="Grows basil and thyme", reason="more herbs")
        gone = (await call(client, "save_memory", text="Old phone number 555-0100"))["memory"]
        await call(client, "delete_memory", id=gone["id"])

    exported = tmp_path / "backup.json"
    result = run_cli(source, "export", "-o", str(exported))
    assert result.returncode == 0, result.stderr
    assert (exported.stat().st_mode & 0o777) == 0o600
    data = json.loads(exported.read_text())
    assert [len(m["revisions"]) for m in sorted(data["memories"], key=lambda m: m["id"] != kept["id"])] == [
        2,
        2,
    ]

    first = run_cli(target, "import", "--create", str(exported))
    assert first.returncode == 0, first.stderr
    assert b"4 revisions added" in first.stdout
    second = run_cli(target, "import", str(exported))
    assert second.returncode == 0 and b"0 revisions added, 4 already present" in second.stdout

    def memories(env: dict[str, str]) -> object:
        return json.loads(run_cli(env, "export").stdout)["memories"]

    assert memories(target) == memories(source)
    async with Client(server_params(target)) as client:
        history = (await call(client, "get_memory", id=kept["id"], history=True))["history"]
        assert [h["text"] for h in history] == ["Grows basil", "Grows basil and thyme"]
        assert (await call(client, "get_memory", id=gone["id"]))["deleted"] is True


def test_import_refuses_a_bad_file_without_echoing_it(vault_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"format": "squirrel-mcp-export", "version": 1, "memories": [{"id": "my secret"}]})
    )
    result = run_cli(vault_env, "import", str(bad))
    assert result.returncode == 1
    assert b"not a valid squirrel-mcp-export file" in result.stderr
    assert b"my secret" not in result.stderr
    missing = run_cli(vault_env, "import", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and b"No such file" in missing.stderr


# A valid export holding nothing: import checks its file before it opens the vault.
EMPTY_EXPORT = json.dumps(
    {
        "format": "squirrel-mcp-export",
        "version": 1,
        "exportedAt": "2026-01-01T00:00:00Z",
        "exportedBy": "a test",
        "memories": [],
    }
).encode()


def test_user_errors_are_one_clear_line(vault_env: dict[str, str]) -> None:
    no_vault = run_cli(vault_env, "export")
    assert no_vault.returncode == 1 and b"there is no vault" in no_vault.stderr
    # Import refuses a missing vault as the others do, in the same words; --create makes it.
    vault = Path(vault_env["SQUIRREL_VAULT"])
    for importer in ((), ("--from", "server-memory")):
        refused = run_cli(vault_env, "import", *importer, "-", stdin=b"" if importer else EMPTY_EXPORT)
        assert refused.returncode == 1 and refused.stderr == no_vault.stderr
    assert not vault.exists()
    created = run_cli(vault_env, "import", "--create", "-", stdin=EMPTY_EXPORT)
    assert created.returncode == 0, created.stderr
    assert b"created a new vault at" in created.stderr and vault.exists()

    # The server answers these as tool errors instead (tests/test_startup.py); the commands exit.
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_PASSPHRASE"}
    no_passphrase = run_cli(env, "import", "-", stdin=EMPTY_EXPORT)
    assert no_passphrase.returncode == 1 and b"SQUIRREL_PASSPHRASE is not set" in no_passphrase.stderr

    remote = run_cli({**vault_env, "SQUIRREL_API_BASE_URL": "https://example.invalid"}, "export")
    assert remote.returncode == 1 and b"SQUIRREL_API_BASE_URL" in remote.stderr


def test_a_wrong_passphrase_fails_clearly_and_touches_nothing(vault_env: dict[str, str]) -> None:
    assert run_cli(vault_env, "init").returncode == 0
    vault = Path(vault_env["SQUIRREL_VAULT"])
    before = {path.name: path.read_bytes() for path in vault.parent.iterdir()}
    wrong = {**vault_env, "SQUIRREL_PASSPHRASE": "not the passphrase"}
    for args in (("import", "-"), ("export",)):
        result = run_cli(wrong, *args, stdin=EMPTY_EXPORT)
        assert result.returncode == 1
        assert b"passphrase does not unlock this vault" in result.stderr
        assert b"not the passphrase" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert {path.name: path.read_bytes() for path in vault.parent.iterdir()} == before


def test_a_file_that_is_not_a_vault_is_refused(vault_env: dict[str, str]) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    vault.parent.mkdir(parents=True)
    vault.write_bytes(b"this is not a database" * 100)
    result = run_cli(vault_env, "export")
    assert result.returncode == 1 and b"not a readable squirrel-mcp vault" in result.stderr
    assert b"Traceback" not in result.stderr


def test_an_unknown_option_is_the_subcommands_error_under_its_usage(vault_env: dict[str, str]) -> None:
    for args in (
        ["search", "food", "--bogus"],
        ["doctor", "--bogus"],
        ["export", "--bogus=my secret"],
        ["ui", "--bogus"],
    ):
        result = run_cli(vault_env, *args)
        stderr = result.stderr.decode()
        assert result.returncode == 2, stderr
        assert stderr.startswith(f"usage: squirrel-mcp {args[0]} "), stderr
        assert f"squirrel-mcp {args[0]}: error: unrecognized option: --bogus" in stderr
        assert "my secret" not in stderr
    # A stray word may be part of a query: it is counted, never echoed.
    stray = run_cli(vault_env, "search", "food", "allergy").stderr.decode()
    assert "squirrel-mcp search: error: 1 unexpected argument" in stray and "allergy" not in stray
