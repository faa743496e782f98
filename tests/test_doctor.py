"""`squirrel-mcp doctor`: one line per check, ✓ or ✗ with the fix, exit 1 when any fails."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp_embeddings.integrity import MANIFEST_NAME, PACKAGED_MODEL_DIR
from tests.conftest import PASSPHRASE, call, needs_model, run_cli, server_params

SECRET_TEXT = "Takes insulin every morning"


def _doctor(env: dict[str, str]) -> tuple[int, list[str]]:
    result = run_cli(env, "doctor")
    lines = result.stdout.decode().splitlines()
    # Every line is a check; none shows a memory or the passphrase.
    assert lines and all(line[:2] in ("✓ ", "✗ ") for line in lines), lines
    assert SECRET_TEXT not in result.stdout.decode() and PASSPHRASE not in result.stdout.decode()
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
        "passphrase",
        "log integrity",
        "plugins loaded",
        "model verified",
        "vector file",
        "host config",
    ]
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
