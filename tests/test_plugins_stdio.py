"""Ranking plugins through the real server over stdio: a faulty one never breaks a search.

The plugin here is installed the way pip would (a dist-info folder with an entry
point, on PYTHONPATH), and its behaviour is chosen by FAULTY_RANKER_MODE.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from tests.conftest import call, server_params
from tests.test_plugins import fake_distribution

pytestmark = pytest.mark.anyio

FAULTY_SOURCE = """
import math
import os
import time

from squirrel_mcp.plugins.hookspecs import hookimpl
from squirrel_mcp.search.ranking import RankedHit, Ranking

MODE = os.environ["FAULTY_RANKER_MODE"]


@hookimpl
def rank_memories(query, candidates, total, options):
    if MODE == "raises":
        raise ValueError("cannot rank " + query + " " + candidates[0].memory.text)
    if MODE == "hangs":
        time.sleep(60)
    if MODE == "nan":
        hits = [RankedHit(c.memory.id, math.nan, c.lexical_score) for c in candidates]
        return Ranking(hits, total, "hybrid")
    if MODE == "unknown":
        return Ranking([RankedHit("0123456789abcdef", 1.0, 0.0)], 1, "hybrid")
    if MODE == "wrong type":
        return [c.memory.id for c in candidates]
    weakest_first = list(reversed(candidates))[: options.limit]
    return Ranking(
        [
            RankedHit(c.memory.id, float(len(weakest_first) - n), c.lexical_score, 0.25)
            for n, c in enumerate(weakest_first)
        ],
        total,
        "hybrid",
    )
"""
TEXTS = [
    "Keeps a quokka named Biscuit",
    "The quokka sleeps in the greenhouse",
    "Feeds the quokka clover daily",
]
QUERY = "quokka clover greenhouse"


@pytest.fixture
def plugin_env(tmp_path: Path, vault_env: dict[str, str]) -> dict[str, str]:
    where = tmp_path / "site"
    where.mkdir()
    fake_distribution(where, "faulty", "faulty_ranker", FAULTY_SOURCE)
    return {**vault_env, "PYTHONPATH": str(where), "SQUIRREL_MCP_PLUGINS": "faulty"}


async def session(
    env: dict[str, str], tmp_path: Path, *, save: bool
) -> tuple[list[dict[str, Any]], str, Any]:
    """Two searches (saving the memories first if asked), their results, the server's stderr, the tools."""
    errors = tmp_path / f"stderr-{time.monotonic_ns()}.txt"
    with errors.open("w") as errlog:
        async with Client(stdio_client(server_params(env), errlog=errlog)) as client:
            if save:
                for text in TEXTS:
                    await call(client, "save_memory", text=text, category="fact")
            found = [await call(client, "search_memory", query=QUERY, limit=2) for _ in range(2)]
            tools = (await client.list_tools()).model_dump(mode="json")
    return found, errors.read_text(), tools


def without_score(found: dict[str, Any]) -> dict[str, Any]:
    return {**found, "results": [{k: v for k, v in hit.items() if k != "score"} for hit in found["results"]]}


@pytest.mark.parametrize("mode", ["raises", "nan", "unknown", "wrong type", "hangs"])
async def test_a_faulty_ranker_leaves_the_search_lexical_with_one_line(
    mode: str, plugin_env: dict[str, str], tmp_path: Path
) -> None:
    lexical, _, _ = await session({**plugin_env, "SQUIRREL_MCP_PLUGINS": ""}, tmp_path, save=True)
    begun = time.monotonic()
    found, stderr, _ = await session({**plugin_env, "FAULTY_RANKER_MODE": mode}, tmp_path, save=False)
    if mode == "hangs":
        # One wait of the 10 s bound, then the plugin is set aside: the second search is quick.
        assert 10 <= time.monotonic() - begun < 30
    # Scores fade with time between searches; the rest is the lexical answer exactly.
    assert [without_score(f) for f in found] == [without_score(lexical[0])] * 2
    assert found[0]["ranking"] == "lexical" and all(h["semanticScore"] is None for h in found[0]["results"])
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("squirrel-mcp: plugin faulty failed in rank_memories ("), (
        lines
    )
    for secret in [QUERY, *QUERY.split(), *TEXTS, "Biscuit"]:
        assert secret not in stderr


async def test_a_working_ranker_is_used_and_the_tools_do_not_change(
    plugin_env: dict[str, str], tmp_path: Path
) -> None:
    lexical, _, base_tools = await session({**plugin_env, "SQUIRREL_MCP_PLUGINS": ""}, tmp_path, save=True)
    ranked, stderr, plugin_tools = await session(
        {**plugin_env, "FAULTY_RANKER_MODE": "ok"}, tmp_path, save=False
    )
    assert stderr == ""
    assert ranked[0]["ranking"] == "hybrid" and lexical[0]["ranking"] == "lexical"
    assert [h["semanticScore"] for h in ranked[0]["results"]] == [0.25, 0.25]
    assert ranked[0]["total"] == lexical[0]["total"] == 3
    assert ranked[0]["results"][0]["id"] not in {h["id"] for h in lexical[0]["results"]}
    assert json.dumps(plugin_tools, sort_keys=True) == json.dumps(base_tools, sort_keys=True)


async def test_trace_shows_hook_calls_without_text(plugin_env: dict[str, str], tmp_path: Path) -> None:
    env = {**plugin_env, "FAULTY_RANKER_MODE": "ok", "SQUIRREL_MCP_TRACE_HOOKS": "1"}
    _, stderr, _ = await session(env, tmp_path, save=True)
    arguments = "query=str, candidates=list[3], total=int, options=RankOptions"
    assert f"squirrel-mcp: hook rank_memories({arguments}) -> [faulty]" in stderr.splitlines()
    assert "squirrel-mcp: hook rank_memories returned Ranking[2 hits, hybrid]" in stderr.splitlines()
    for secret in [QUERY, *QUERY.split(), *TEXTS]:
        assert secret not in stderr
