"""The demo: the real squirrel-mcp server over stdio, lexical and hybrid side by side.

Two servers run on one throwaway vault (the local vault is safe with two
processes): one with SQUIRREL_MEMORY_EMBEDDINGS=0, so its search is lexical, and
one with the embeddings plugin's local model, so its search is hybrid. The
memories are saved through the MCP client exactly as an agent would, then every
query goes to both. The vault and the vector file live in a temporary directory
that is deleted at the end; nothing touches your real vault.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

MEMORIES = [
    {"text": "Is allergic to peanuts", "entity": "user", "category": "profile", "tags": ["health"]},
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
QUERIES = ["food allergies", "peanuts", "pihole", "creme brulee", "family visiting in winter", "teeth", "🙂"]


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool; stop the demo on an error."""
    result = await client.call_tool(tool, arguments)
    if result.is_error or result.structured_content is None:
        raise SystemExit(f"{tool} failed: {result.content}")
    return result.structured_content


def show(label: str, found: dict[str, Any]) -> None:
    print(f"  {label:<8} ranking {found['ranking']}, total {found['total']}")
    for hit in found["results"]:
        semantic = "—" if hit["semanticScore"] is None else f"{hit['semanticScore']:.3f}"
        miss = "  (near miss)" if hit.get("nearMiss") else ""
        print(
            f"    score {hit['score']:.3f}  lexical {hit['lexicalScore']:.2f}  "
            f"semantic {semantic:>5}  {hit['text']}{miss}"
        )
    if found.get("note"):
        print(f"    note: {found['note']}")


async def main() -> None:
    """Save the memories, then run each query on both servers and print the hits."""
    with tempfile.TemporaryDirectory(prefix="squirrel-demo-") as scratch:
        env = {
            # The default vault of this data directory: the one place a server makes a vault itself.
            "XDG_DATA_HOME": str(Path(scratch) / "data"),
            "SQUIRREL_PASSPHRASE": "demo passphrase",
            "SQUIRREL_MEMORY_CACHE_DIR": str(Path(scratch) / "cache"),
            # Two servers with different settings side by side: each a server of its own.
            "SQUIRREL_MCP_SHARED": "0",
        }
        server = [sys.executable, "-m", "squirrel_mcp"]
        lexical_params = StdioServerParameters(
            command=server[0], args=server[1:], env={**env, "SQUIRREL_MEMORY_EMBEDDINGS": "0"}
        )
        async with Client(lexical_params) as lexical:
            tools = await lexical.list_tools()
            names = ", ".join(tool.name for tool in tools.tools)
            print(f"squirrel-mcp over stdio: {len(tools.tools)} tools ({names})")
            for memory in MEMORIES:
                await call(lexical, "save_memory", **memory)
            print(f"saved {len(MEMORIES)} memories into a throwaway encrypted vault")
            async with Client(StdioServerParameters(command=server[0], args=server[1:], env=env)) as hybrid:
                # The model loads in the background (about a second); until then search is lexical.
                deadline = time.monotonic() + 60
                while (await call(hybrid, "search_memory", query="warm up"))["ranking"] != "hybrid":
                    if time.monotonic() > deadline:
                        raise SystemExit("the embeddings plugin did not become ready (see stderr above)")
                    await anyio.sleep(0.2)
                print("a second server on the same vault has its local model ready\n")
                for query in QUERIES:
                    print(f"search_memory({query!r}, limit=3)")
                    show("lexical", await call(lexical, "search_memory", query=query, limit=3))
                    show("hybrid", await call(hybrid, "search_memory", query=query, limit=3))
                retry = "restaurant booking"
                print(f"search_memory({retry!r}, nearMisses=true): nothing matches, so near misses")
                show("hybrid", await call(hybrid, "search_memory", query=retry, nearMisses=True))
            context = await call(lexical, "get_context")
            print(f"\nget_context: {context['total']} memories, by category {context['counts']}")


if __name__ == "__main__":
    anyio.run(main)
