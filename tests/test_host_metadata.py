"""What a host reads before any call: titles, annotations, descriptions, the skill prompt, capabilities.

Checked through the Python `mcp` client and through the TypeScript SDK (the
client most hosts are built on), each against the real server over stdio.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from tests.conftest import TS_CLIENT, secrets_of_this_test, server_params

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "docs" / "skill" / "squirrel-notes" / "SKILL.md"

READERS = {"get_context", "search_memory", "get_memory", "list_memories"}
WRITERS = {"save_memory", "update_memory", "delete_memory", "restore_memory"}
# Repeating any writer with the same arguments changes nothing more: the repeat finds the memory
# as asked and writes nothing (tests/test_agent_edges.py checks it against the vault).
IDEMPOTENT = WRITERS


def check_tools(tools: list[dict[str, Any]]) -> None:
    """Every tool as a host sees it on the wire (camelCase JSON)."""
    assert {tool["name"] for tool in tools} == READERS | WRITERS
    for tool in tools:
        name, hints = tool["name"], tool["annotations"]
        assert tool["title"], name
        assert hints["readOnlyHint"] is (name in READERS), name
        assert hints["openWorldHint"] is False, name
        if name in WRITERS:
            assert hints["destructiveHint"] is False, name
            assert hints["idempotentHint"] is (name in IDEMPOTENT), name
        description: str = tool["description"]
        summary, _, rest = description.partition("\n")
        assert summary.strip() == summary and summary.endswith("."), name
        assert rest == "" or rest.startswith("\n"), f"{name}: a blank line after the summary"
        assert "\n " not in description and description == description.strip(), f"{name} is indented"
    delete = next(tool for tool in tools if tool["name"] == "delete_memory")
    assert "tombstone" in delete["description"] and "restore_memory" in delete["description"]


def check_prompts(prompts: list[dict[str, Any]], fetched_text: str) -> None:
    assert [prompt["name"] for prompt in prompts] == ["squirrel-notes"]
    assert prompts[0]["title"] and prompts[0]["description"]
    assert not prompts[0].get("arguments")
    assert fetched_text == SKILL.read_text(encoding="utf-8")


def check_capabilities(capabilities: dict[str, Any]) -> None:
    assert capabilities.get("tools") is not None
    assert capabilities.get("prompts") is not None
    assert capabilities.get("resources") is None


async def test_the_mcp_client_sees_titles_annotations_the_skill_and_no_resources(client: Client) -> None:
    tools = [tool.model_dump(mode="json", by_alias=True) for tool in (await client.list_tools()).tools]
    check_tools(tools)
    prompts = [
        prompt.model_dump(mode="json", by_alias=True) for prompt in (await client.list_prompts()).prompts
    ]
    fetched = await client.get_prompt("squirrel-notes")
    (message,) = fetched.messages
    assert message.role == "user" and message.content.type == "text"
    check_prompts(prompts, message.content.text)
    check_capabilities(client.server_capabilities.model_dump(mode="json", by_alias=True))
    with pytest.raises(MCPError, match=r"[Mm]ethod not found"):
        await client.list_resources()


async def test_input_schemas_are_plain_types_and_repeated_fields_share_bounds(client: Client) -> None:
    schemas = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
    for name, schema in schemas.items():
        for field, prop in schema["properties"].items():
            # Strict hosts mishandle `anyOf [T, null]`; every input is one plain type.
            assert "anyOf" not in prop and prop.get("type") not in (None, "null"), f"{name}.{field}"
            assert prop.get("default", "absent") is not None, f"{name}.{field} defaults to null"
    saved_tags = schemas["save_memory"]["properties"]["tags"]
    for name in ("search_memory", "list_memories", "update_memory"):
        tags = schemas[name]["properties"]["tags"]
        assert tags["items"] == saved_tags["items"] and tags["maxItems"] == saved_tags["maxItems"], name
    assert schemas["search_memory"]["properties"]["tags"]["default"] == []


def test_the_typescript_sdk_sees_titles_annotations_the_skill_and_no_resources(
    ts_sdk: Path, vault_env: dict[str, str]
) -> None:
    server = server_params(vault_env)
    result = subprocess.run(
        ["node", str(ts_sdk / TS_CLIENT.name), server.command, *server.args],
        env={"PATH": os.environ["PATH"], **(server.env or vault_env)},
        capture_output=True,
        timeout=300,
        check=False,
    )
    stderr = result.stderr.decode(errors="replace")
    secrets_of_this_test().texts.append(("stderr of the TypeScript host", stderr))
    assert result.returncode == 0, stderr
    seen = json.loads(result.stdout)
    check_tools(seen["tools"])
    (message,) = seen["fetched"]["squirrel-notes"]["messages"]
    assert message["role"] == "user" and message["content"]["type"] == "text"
    check_prompts(seen["prompts"], message["content"]["text"])
    check_capabilities(seen["capabilities"])
