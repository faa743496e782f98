"""The `squirrel-mcp` command with SQUIRREL_API_BASE_URL: configuration, init, export, import.

The real command in a subprocess, against the reference server on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import PASSPHRASE, run_cli, served_error, server_params
from tests.sync.conftest import SyncServer


def remote_env(tmp_path: Path, server: SyncServer, key: str | None = None) -> dict[str, str]:
    return {
        "SQUIRREL_API_BASE_URL": server.url,
        "SQUIRREL_API_KEY": key or server.api_key,
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(tmp_path / "machine" / "home"),
        "XDG_DATA_HOME": str(tmp_path / "machine" / "xdg-data"),
        "XDG_CACHE_HOME": str(tmp_path / "machine" / "xdg-cache"),
        "SQUIRREL_MCP_PLUGINS": "",
    }


def one_line(result: object) -> str:
    stderr = result.stderr.decode()  # type: ignore[attr-defined]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("url", "key", "expected"),
    [
        ("https://sync.example.org", None, "SQUIRREL_API_BASE_URL is set but SQUIRREL_API_KEY is not"),
        (None, "sqk_" + "x" * 43, "SQUIRREL_API_KEY is set but SQUIRREL_API_BASE_URL is not"),
        ("http://sync.example.org", "sqk_" + "x" * 43, "SQUIRREL_API_BASE_URL must use https"),
        ("http://192.0.2.10:8765", "sqk_" + "x" * 43, "SQUIRREL_API_BASE_URL must use https"),
        ("ftp://sync.example.org", "sqk_" + "x" * 43, "must be an https:// URL"),
        ("https://me:pw@sync.example.org", "sqk_" + "x" * 43, "must not hold credentials"),
    ],
)
@pytest.mark.anyio
async def test_a_half_made_or_cleartext_remote_configuration_is_refused(
    vault_env: dict[str, str], url: str | None, key: str | None, expected: str
) -> None:
    env = dict(vault_env)
    if url:
        env["SQUIRREL_API_BASE_URL"] = url
    if key:
        env["SQUIRREL_API_KEY"] = key
    lines = [await served_error(server_params(env))]
    for args in (("init",), ("export",)):
        result = run_cli(env, *args)
        assert result.returncode == 1
        lines.append(one_line(result))
    for line in lines:
        assert expected in line
        # One line naming the variable; neither the URL (it may hold credentials) nor the key.
        assert (url or "@@") not in line and (key or "@@") not in line
    assert not Path(vault_env["SQUIRREL_VAULT"]).exists()


def test_init_creates_the_account_on_the_server_once(sync_server: SyncServer, tmp_path: Path) -> None:
    env = remote_env(tmp_path, sync_server)
    missing = run_cli(env, "export")
    assert missing.returncode == 1
    assert one_line(missing) == (
        f"squirrel-mcp: the sync server at {sync_server.url} holds no account for this API key: "
        "if this is a new account, run `squirrel-mcp init`; "
        "if it held your memories, the server has lost them"
    )

    created = run_cli(env, "init")
    assert created.returncode == 0, created.stderr
    out = created.stdout.decode()
    assert f"Created an encrypted account on the sync server at {sync_server.url}" in out
    block = json.loads(out[out.index("{") :])
    assert block["mcpServers"]["squirrel-notes"]["env"] == {
        "SQUIRREL_PASSPHRASE": "<your passphrase>",
        "SQUIRREL_API_BASE_URL": sync_server.url,
        "SQUIRREL_API_KEY": "<your API key>",
    }
    assert sync_server.api_key.encode() not in created.stdout + created.stderr
    assert sync_server.get("/v1/account").status_code == 200

    again = run_cli(env, "init")
    assert again.returncode == 1
    assert "already holds an account for this API key; nothing was changed" in one_line(again)

    wrong = run_cli({**env, "SQUIRREL_PASSPHRASE": "not the passphrase"}, "export")
    assert wrong.returncode == 1
    assert "passphrase does not unlock" in one_line(wrong)
    # No local vault anywhere under this machine's directories.
    assert not list((tmp_path / "machine").rglob("*.sqlite3"))


def test_export_and_import_move_memories_between_a_vault_and_a_server(
    sync_server: SyncServer, tmp_path: Path, vault_env: dict[str, str]
) -> None:
    # Memories with a history, made in a local vault through the real commands.
    tandem = _export(["Owns a tandem", "Sold the tandem"], "aa")
    local = run_cli(vault_env, "import", "--create", "-", stdin=tandem)
    assert local.returncode == 0, local.stderr
    from_vault = run_cli(vault_env, "export")
    assert from_vault.returncode == 0

    env = remote_env(tmp_path, sync_server)
    assert run_cli(env, "init").returncode == 0
    imported = run_cli(env, "import", "-", stdin=from_vault.stdout)
    assert imported.returncode == 0, imported.stderr
    assert b"imported 1 memories: 2 revisions added, 0 already present" in imported.stdout
    again = run_cli(env, "import", "-", stdin=from_vault.stdout)
    assert b"0 revisions added, 2 already present, 0 conflicting" in again.stdout

    from_server = run_cli(env, "export", "-o", str(tmp_path / "server.json"))
    assert from_server.returncode == 0, from_server.stderr
    server_file = tmp_path / "server.json"
    assert server_file.stat().st_mode & 0o777 == 0o600
    assert json.loads(server_file.read_bytes())["memories"] == json.loads(from_vault.stdout)["memories"]

    # And back into a second, empty vault.
    other_vault = {**vault_env, "SQUIRREL_VAULT": str(tmp_path / "other" / "vault.sqlite3")}
    back = run_cli(other_vault, "import", "--create", str(server_file))
    assert back.returncode == 0, back.stderr
    assert (
        json.loads(run_cli(other_vault, "export").stdout)["memories"]
        == json.loads(from_vault.stdout)["memories"]
    )

    # A conflicting history (same id and revision, other text) is reported and left alone.
    clash = run_cli(env, "import", "-", stdin=_export(["Owns a unicycle"], "aa"))
    assert clash.returncode == 1
    assert b"1 conflicting (left as they were)" in clash.stdout
    assert b"unicycle" not in clash.stdout + clash.stderr


def _export(texts: list[str], suffix: str) -> bytes:
    """An export file with one memory whose revisions have `texts`."""
    memory_id = "00000000000000" + suffix
    stamp = "2026-01-01T00:00:00Z"
    revisions = [
        {
            "id": memory_id,
            "entity": "user",
            "text": text,
            "tags": [],
            "keywords": [],
            "category": "fact",
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": number,
            "change": "created" if number == 1 else "corrected",
        }
        for number, text in enumerate(texts, start=1)
    ]
    return json.dumps(
        {
            "format": "squirrel-mcp-export",
            "version": 1,
            "exportedAt": stamp,
            "exportedBy": "test",
            "memories": [{"id": memory_id, "revisions": revisions}],
        }
    ).encode()
