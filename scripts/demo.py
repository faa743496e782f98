"""The demo: the real squirrel-mcp server over stdio, on a throwaway vault.

It saves a few memories through the MCP client exactly as an agent would, then
searches them and prints what comes back. The vault lives in a temporary
directory that is deleted at the end; nothing touches your real vault.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

MEMORIES = [
    {"text": "Is allergic to peanuts", "entity": "user", "category": "profile", "tags": ["health", "food"]},
    {"text": "Prefers short answers with code first", "category": "preference", "tags": ["style"]},
    {
        "text": "Runs Pi-hole on a Raspberry Pi for DNS ad blocking",
        "entity": "home network",
        "category": "fact",
    },
    {
        "text": "Sister Anna lives in Zürich and visits in December",
        "entity": "Anna (sister)",
        "category": "fact",
    },
    {"text": "Learning to make crème brûlée", "category": "project", "tags": ["cooking"]},
    {"text": "Dentist appointment on Friday at 9", "category": "event", "keywords": ["teeth"]},
]
QUERIES = ["peanuts", "pihole", "creme brulee", "Zurich", "teeth", "food allergies", "🙂"]


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool; stop the demo on an error."""
    result = await client.call_tool(tool, arguments)
    if result.is_error or result.structured_content is None:
        raise SystemExit(f"{tool} failed: {result.content}")
    return result.structured_content


async def main() -> None:
    """Save the memories, then run each query and print the hits."""
    with tempfile.TemporaryDirectory(prefix="squirrel-demo-") as scratch:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "squirrel_mcp"],
            env={
                "SQUIRREL_VAULT": str(Path(scratch) / "vault.sqlite3"),
                "SQUIRREL_PASSPHRASE": "demo passphrase",
            },
        )
        async with Client(params) as client:
            tools = await client.list_tools()
            names = ", ".join(tool.name for tool in tools.tools)
            print(f"squirrel-mcp over stdio: {len(tools.tools)} tools ({names})")
            for memory in MEMORIES:
                await call(client, "save_memory", **memory)
            print(f"saved {len(MEMORIES)} memories into a throwaway encrypted vault\n")
            for query in QUERIES:
                found = await call(client, "search_memory", query=query, limit=3)
                print(f"search_memory({query!r}) -> ranking {found['ranking']}, total {found['total']}")
                for hit in found["results"]:
                    semantic = "—" if hit["semanticScore"] is None else f"{hit['semanticScore']:.3f}"
                    print(
                        f"    score {hit['score']:.3f}  lexical {hit['lexicalScore']:.2f}  "
                        f"semantic {semantic}  {hit['text']}"
                    )
                if found.get("note"):
                    print(f"    note: {found['note']}")
            context = await call(client, "get_context")
            print(f"\nget_context: {context['total']} memories, by category {context['counts']}")
    print(
        "\nHybrid ranking (search by meaning, so 'food allergies' finds the peanut allergy) comes with "
        "squirrel-mcp-embeddings once its model ships; until then every search here is lexical."
    )


if __name__ == "__main__":
    anyio.run(main)
