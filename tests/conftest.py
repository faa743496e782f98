"""Shared fixtures: a throwaway vault, and the real server over stdio through the mcp client."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

PASSPHRASE = "correct horse battery staple"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def vault_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a server on a fresh vault in tmp_path (created at first start)."""
    return {
        "SQUIRREL_VAULT": str(tmp_path / "data" / "vault.sqlite3"),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        # Installed plugins never leak into tests: a test that wants one names it.
        "SQUIRREL_MCP_PLUGINS": "",
    }


def server_params(env: dict[str, str]) -> StdioServerParameters:
    """Start the installed server the way an MCP client does."""
    return StdioServerParameters(command=sys.executable, args=["-m", "squirrel_mcp"], env=env)


def run_cli(
    env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run `squirrel-mcp ARGS` with exactly `env` (plus PATH), capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "squirrel_mcp", *args],
        env={"PATH": os.environ["PATH"], **env},
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
async def client(vault_env: dict[str, str]) -> AsyncIterator[Client]:
    """A connected mcp client of a server on a fresh vault."""
    async with Client(server_params(vault_env)) as connected:
        yield connected


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured output."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; its error text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text = result.content[0]
    assert text.type == "text"
    return text.text
