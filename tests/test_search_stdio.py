"""The spec's word-matching rules again, through the real server over stdio."""

from __future__ import annotations

import pytest
from mcp import Client

from tests.conftest import call
from tests.test_search import CASES, MEMORIES, UNSEARCHABLE

pytestmark = pytest.mark.anyio


async def test_spec_examples_through_the_server(client: Client) -> None:
    for text in MEMORIES:
        await call(client, "save_memory", text=text)
    for rule, query, expected in CASES:
        found = await call(client, "search_memory", query=query, limit=50)
        assert found["ranking"] == "lexical" and "note" not in found, rule
        scores = {hit["text"]: hit["lexicalScore"] for hit in found["results"]}
        assert scores == pytest.approx(expected, abs=1e-6), rule
        assert found["total"] == len(expected), rule
        ranked = [hit["score"] for hit in found["results"]]
        assert ranked == sorted(ranked, reverse=True), rule
    for query in UNSEARCHABLE:
        found = await call(client, "search_memory", query=query)
        assert found["results"] == [] and found["total"] == 0
        assert "cannot be searched" in found["note"]


async def test_the_server_index_follows_corrections_deletes_and_filters(client: Client) -> None:
    saved = (await call(client, "save_memory", text="Runs Pi-hole at home", tags=["network"]))["memory"]
    await call(client, "save_memory", text="Pihole blocks ads", category="fact")
    found = await call(client, "search_memory", query="pihole", tags=["NETWORK"])
    assert [hit["id"] for hit in found["results"]] == [saved["id"]] and found["total"] == 1
    assert (await call(client, "search_memory", query="pihole", category="fact"))["total"] == 1
    assert (await call(client, "search_memory", query="pihole", limit=1))["total"] == 2
    await call(client, "update_memory", id=saved["id"], text="Runs AdGuard at home", reason="switched")
    assert (await call(client, "search_memory", query="pihole"))["total"] == 1
    assert (await call(client, "search_memory", query="adguard"))["total"] == 1
    await call(client, "delete_memory", id=saved["id"])
    assert (await call(client, "search_memory", query="adguard"))["total"] == 0
