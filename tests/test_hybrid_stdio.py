"""Hybrid search through the real server over stdio, with the real model and the installed plugin.

The plugin is registered the way a user gets it: the entry point `embeddings` of
the installed squirrel-mcp-embeddings (SQUIRREL_MCP_PLUGINS=embeddings here,
since the other tests keep installed plugins out). Its model must be in the
package (the tests session fetches it first).
"""

from __future__ import annotations

import stat
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from squirrel_mcp_embeddings import plugin
from squirrel_mcp_embeddings.integrity import PACKAGED_MODEL_DIR
from tests.conftest import call, needs_model, search_when, server_params

pytestmark = [
    pytest.mark.anyio,
    needs_model,
]

MEMORIES = [
    {"text": "Is allergic to peanuts", "entity": "user", "category": "profile", "tags": ["health"]},
    {"text": "Runs Pi-hole on a Raspberry Pi for DNS ad blocking", "entity": "home network"},
    {"text": "Prefers short answers with code first", "category": "preference"},
    {"text": "Sister Anna lives in Zürich", "entity": "Anna (sister)", "category": "fact"},
]
READY = "memory: local embeddings ready"


@pytest.fixture
def hybrid_env(vault_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {
        **vault_env,
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "cache"),
    }


@asynccontextmanager
async def server(env: dict[str, str], tmp_path: Path) -> AsyncIterator[tuple[Client, Path]]:
    """A connected client, and the file its server's stderr goes to."""
    errors = tmp_path / f"stderr-{time.monotonic_ns()}.txt"
    with errors.open("w") as errlog:
        async with Client(stdio_client(server_params(env), errlog=errlog)) as client:
            yield client, errors


def memory_lines(errors: Path) -> list[str]:
    """The plugin's lines (the server may also say it created the vault)."""
    return [line for line in errors.read_text().splitlines() if not line.startswith("squirrel-mcp: created")]


def vector_file(env: dict[str, str]) -> Path:
    (path,) = (Path(env["SQUIRREL_MEMORY_CACHE_DIR"]) / "squirrel-notes").glob("memory-vectors-*.bin")
    return path


async def test_food_allergies_finds_the_peanut_allergy_by_meaning(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    async with server(hybrid_env, tmp_path) as (client, errors):
        for memory in MEMORIES:
            await call(client, "save_memory", **memory)
        found = await search_when(client, "hybrid", query="food allergies")
        assert found["ranking"] == "hybrid"
        assert found["results"][0]["text"] == "Is allergic to peanuts"
        assert found["results"][0]["lexicalScore"] == 0 and found["results"][0]["semanticScore"] > 0.35
        assert found["total"] == len(found["results"])
        assert not any(hit.get("nearMiss") for hit in found["results"])

        asked = await call(client, "search_memory", query="food allergies", nearMisses=True)
        misses = [hit for hit in asked["results"] if hit.get("nearMiss")]
        assert 1 <= len(misses) <= 3 and asked["total"] == found["total"]
        assert asked["results"][: len(found["results"])] == found["results"]
        assert all(hit["score"] == 0 and hit["lexicalScore"] == 0 for hit in misses)

        # Words still win: a hit holding every query word scores above 0.5.
        words = await call(client, "search_memory", query="peanuts")
        assert words["results"][0]["text"] == "Is allergic to peanuts" and words["results"][0]["score"] >= 0.5

        # Filters hold for memories found by meaning alone.
        filtered = await call(
            client, "search_memory", query="food allergies", category="fact", nearMisses=True
        )
        assert all(hit["category"] == "fact" for hit in filtered["results"])

        punctuation = await call(client, "search_memory", query="?!", nearMisses=True)
        assert punctuation["ranking"] == "hybrid" and "only by meaning" in punctuation["note"]
    assert memory_lines(errors) == [READY]


async def test_the_vector_file_is_sealed_survives_a_restart_and_is_rebuilt_after_tampering(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    async with server(hybrid_env, tmp_path) as (client, _):
        for memory in MEMORIES:
            await call(client, "save_memory", **memory)
        assert (await search_when(client, "hybrid", query="food allergies"))["ranking"] == "hybrid"
    path = vector_file(hybrid_env)
    data = path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for memory in MEMORIES:
        for word in memory["text"].split():
            if len(word) > 4:
                assert word.encode() not in data and word.encode("utf-16-le") not in data
    assert b"MiniLM" not in data

    # A restart reads the vectors: a warm search embeds nothing, so the file is not rewritten.
    written = path.stat().st_mtime_ns
    async with server(hybrid_env, tmp_path) as (client, errors):
        found = await search_when(client, "hybrid", query="food allergies")
        assert found["results"][0]["text"] == "Is allergic to peanuts"
    assert path.stat().st_mtime_ns == written
    assert memory_lines(errors) == [READY]

    # Tampered with: discarded with one line, rebuilt, and read quietly at the next start.
    tampered = bytearray(data)
    tampered[len(tampered) // 2] ^= 0x40
    path.write_bytes(bytes(tampered))
    async with server(hybrid_env, tmp_path) as (client, errors):
        found = await search_when(client, "hybrid", query="food allergies")
        assert found["results"][0]["text"] == "Is allergic to peanuts"
    assert memory_lines(errors) == [READY, plugin.REBUILT]
    assert path.read_bytes() != bytes(tampered)
    async with server(hybrid_env, tmp_path) as (client, errors):
        await search_when(client, "hybrid", query="food allergies")
    assert memory_lines(errors) == [READY]


async def test_embeddings_off_gives_lexical_with_one_line(hybrid_env: dict[str, str], tmp_path: Path) -> None:
    env = {**hybrid_env, "SQUIRREL_MEMORY_EMBEDDINGS": "0"}
    async with server(env, tmp_path) as (client, errors):
        for memory in MEMORIES:
            await call(client, "save_memory", **memory)
        await anyio.sleep(1)
        found = await call(client, "search_memory", query="food allergies", nearMisses=True)
        assert found == {"results": [], "total": 0, "ranking": "lexical"}
        words = await call(client, "search_memory", query="peanuts")
        assert words["ranking"] == "lexical" and words["results"][0]["semanticScore"] is None
    assert memory_lines(errors) == [plugin.OFF]
    assert not (Path(env["SQUIRREL_MEMORY_CACHE_DIR"]) / "squirrel-notes").exists()


async def test_a_model_that_fails_its_check_is_refused_with_the_reason(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    copy = tmp_path / "model-copy"
    copy.mkdir()
    for name in ("model-manifest.json", "tokenizer.json"):
        (copy / name).write_bytes((PACKAGED_MODEL_DIR / name).read_bytes())
    env = {**hybrid_env, "SQUIRREL_MEMORY_MODEL_DIR": str(copy)}
    async with server(env, tmp_path) as (client, errors):
        await call(client, "save_memory", text="Is allergic to peanuts")
        await anyio.sleep(1)
        found = await call(client, "search_memory", query="peanuts")
        assert found["ranking"] == "lexical"
    expected = "memory: local embeddings were not loaded (missing: model.onnx); memory search is lexical only"
    assert memory_lines(errors) == [expected]
