"""The public interface: the live tools/list of the real server equals the committed one.

tests/data/tools_list.json is what an agent's host sees (names, titles,
descriptions, annotations, input and output schemas), so a change to it is a
change of the interface and is made on purpose: rewrite the file with
`SQUIRREL_WRITE_TOOLS_LIST=1 pytest tests/test_tools_list.py` and commit it with
the change that caused it.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from tests.conftest import server_params

pytestmark = pytest.mark.anyio

COMMITTED = Path(__file__).parent / "data" / "tools_list.json"


# The same whatever plugins are installed: none, or the embeddings plugin (the example
# ranker's install is compared in tests/test_install.py).
@pytest.mark.parametrize("plugins", ["", "embeddings"])
async def test_tools_list_is_the_committed_one(
    vault_env: dict[str, str], tmp_path: Path, plugins: str
) -> None:
    vault_env["SQUIRREL_MCP_PLUGINS"] = plugins
    # The bare session, not mcp.Client: Client stamps the server's name and version into
    # the result's meta, which is not interface and would change at every release.
    with (tmp_path / "stderr-tools-list.txt").open("w", encoding="utf-8") as errors:
        async with (
            stdio_client(server_params(vault_env), errlog=errors) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = (await session.list_tools()).model_dump(mode="json")
    live = json.dumps(listed, sort_keys=True, indent=1) + "\n"
    if os.environ.get("SQUIRREL_WRITE_TOOLS_LIST") == "1" and not plugins:
        COMMITTED.write_text(live, encoding="utf-8")
    committed = COMMITTED.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True), live.splitlines(keepends=True), "committed", "live", n=2
        )
    )
    assert live == committed, f"tools/list changed; if on purpose, rewrite {COMMITTED.name}:\n{diff}"
