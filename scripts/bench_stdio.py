"""The real server over stdio, as the retrieval benchmarks drive it: a vault, its saves, its searches.

scripts/bench_locomo.py and scripts/bench_longmemeval.py measure what an agent gets:
each starts `python -m squirrel_mcp` over stdio through the `mcp` client, saves every
turn with save_memory, then searches with search_memory, once with no plugin (words
only) and once with the embeddings plugin after it has embedded every memory (hybrid).
Every server is its own process (SQUIRREL_MCP_SHARED=0), started and ended here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PASSPHRASE = "benchmark passphrase, not a secret"
# How long the plugin may take to embed a vault before the run gives up.
WARM_TIMEOUT = 1800.0
LIMIT = 10


@dataclass(frozen=True)
class Item:
    """One thing to save: `key` names it in the benchmark's key (a turn's id), never sent."""

    key: str
    entity: str
    text: str


def server_env(vault: Path, cache: Path, *, plugins: bool) -> dict[str, str]:
    """The environment of one server: its vault, passphrase and cache; no plugin when `plugins` is off."""
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG")}
    env.update(
        SQUIRREL_VAULT=str(vault), SQUIRREL_PASSPHRASE=PASSPHRASE, SQUIRREL_MEMORY_CACHE_DIR=str(cache)
    )
    # A server of its own: the figures are one process's, started and ended per vault.
    env["SQUIRREL_MCP_SHARED"] = "0"
    if not plugins:
        env["SQUIRREL_MCP_PLUGINS"] = ""
    return env


def init_vault(vault: Path, cache: Path) -> None:
    """A new vault at `vault` (`squirrel-mcp init`)."""
    subprocess.run(
        [sys.executable, "-m", "squirrel_mcp", "init"],
        env=server_env(vault, cache, plugins=False),
        capture_output=True,
        check=True,
    )


async def save_items(vault: Path, cache: Path, items: Sequence[Item]) -> dict[str, set[str]]:
    """Save every item through save_memory, in order; memory id -> the keys it holds.

    A save of the same text for the same entity writes nothing and answers the memory
    already there, so one memory may stand for several items.
    """
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "squirrel_mcp"], env=server_env(vault, cache, plugins=False)
    )
    held: dict[str, set[str]] = {}
    async with Client(params) as client:
        for item in items:
            result = await client.call_tool("save_memory", {"text": item.text, "entity": item.entity})
            if result.is_error:
                # The key, not the text: a benchmark's output names no memory's content.
                raise SystemExit(f"benchmark: saving {item.key} failed")
            memory_id = (result.structured_content or {})["memory"]["id"]
            held.setdefault(memory_id, set()).add(item.key)
    return held


async def server_rankings(
    vault: Path,
    cache: Path,
    queries: Sequence[str],
    *,
    plugins: bool,
    python: str = sys.executable,
    limit: int = LIMIT,
    probe: bool = False,
) -> tuple[list[list[str]], list[float]]:
    """Each query's result ids (up to `limit`) and round-trip seconds; with the plugin, once warm.

    `python` runs the server: this installation's, or another one's (a baseline build).
    `probe`: search the first query once, untimed, before the timed searches, as the
    plugin's warm-up wait does: a server's first search reads its whole index, so a run
    of one search per server would time only that.
    """
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    expected = "hybrid" if plugins else "lexical"
    params = StdioServerParameters(
        command=python, args=["-m", "squirrel_mcp"], env=server_env(vault, cache, plugins=plugins)
    )
    async with Client(params) as client:
        began = time.monotonic()
        while plugins:
            probe = (await client.call_tool("search_memory", {"query": queries[0]})).structured_content or {}
            if probe.get("ranking") == "hybrid" and "note" not in probe:
                break
            if time.monotonic() - began > WARM_TIMEOUT:
                raise SystemExit("benchmark: the plugin did not finish embedding in time")
            await anyio.sleep(1.0)
        if probe and not plugins:
            await client.call_tool("search_memory", {"query": queries[0]})
        rankings: list[list[str]] = []
        seconds: list[float] = []
        for query in queries:
            started = time.perf_counter()
            result = await client.call_tool("search_memory", {"query": query, "limit": limit})
            seconds.append(time.perf_counter() - started)
            found: dict[str, Any] = result.structured_content or {}
            if result.is_error or (found.get("results") and found.get("ranking") != expected):
                raise SystemExit(f"benchmark: a {expected} search failed or fell back")
            rankings.append([hit["id"] for hit in found["results"]])
    return rankings, seconds


def write_section(report: Path, header: str, section: str, label: str) -> None:
    """Write `header`, then `section` (headed `## label`), then the report's other sections as they were.

    So a before and an after, each from its own run, can stand side by side.
    """
    kept: list[str] = []
    if report.exists():
        parts = re.split(r"(?m)^(?=## )", report.read_text(encoding="utf-8"))
        kept = [part.rstrip() + "\n" for part in parts[1:] if not part.startswith(f"## {label}\n")]
    report.write_text("\n".join([header, section, *kept]), encoding="utf-8")
