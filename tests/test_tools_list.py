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

from tests.conftest import plugin_path, server_params

pytestmark = pytest.mark.anyio

COMMITTED = Path(__file__).parent / "data" / "tools_list.json"
EXAMPLE_RANKER = (
    Path(__file__).resolve().parents[1]
    / "docs"
    / "examples"
    / "squirrel-mcp-reverse-ranker"
    / "squirrel_mcp_reverse_ranker.py"
)


# The same whatever plugins are installed: none, the embeddings plugin, or the example ranker
# (here as an install leaves it; tests/test_install.py installs its wheel and compares too).
@pytest.mark.parametrize("plugins", ["", "embeddings", "reverse"])
async def test_tools_list_is_the_committed_one(
    vault_env: dict[str, str], tmp_path: Path, plugins: str
) -> None:
    vault_env["SQUIRREL_MCP_PLUGINS"] = plugins
    if plugins == "reverse":
        vault_env["PYTHONPATH"] = plugin_path(tmp_path / "plugins", EXAMPLE_RANKER, "reverse")
    # The bare session, not mcp.Client: Client stamps the server's name and version into
    # the result's meta, which is not interface and would change at every release.
    with (tmp_path / "stderr-tools-list.txt").open("w", encoding="utf-8") as errors:
        async with (
            stdio_client(server_params(vault_env), errlog=errors) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = (await session.list_tools()).model_dump(mode="json")
            if plugins:
                # The plugin did load and rank: the list above is its server's, not a fall-back's.
                searched = await session.call_tool("search_memory", {"query": "anything"})
                assert searched.structured_content is not None
                assert searched.structured_content["ranking"] == "hybrid" or plugins == "embeddings"
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
