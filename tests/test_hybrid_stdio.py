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
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import hooks, warmup
from squirrel_mcp_embeddings.integrity import PACKAGED_MODEL_DIR
from tests.conftest import PASSPHRASE, WARMING, call, needs_model, search_warm, search_when, server_params

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
        found = await search_warm(client, query="food allergies")
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


PROJECT = "github.com/zorblax/quokka-builds"


async def test_the_vector_file_is_sealed_survives_a_restart_and_is_rebuilt_after_tampering(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    async with server(hybrid_env, tmp_path) as (client, _):
        for memory in MEMORIES:
            await call(client, "save_memory", **memory)
        # A memory of a project: its vector is kept, its project is not.
        await call(client, "save_memory", text="Builds run on the quokka cluster", project=PROJECT)
        assert (await search_warm(client, query="food allergies"))["ranking"] == "hybrid"
    path = vector_file(hybrid_env)
    data = path.read_bytes()
    assert PROJECT.encode() not in data and b"zorblax" not in data
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for memory in MEMORIES:
        for word in memory["text"].split():
            if len(word) > 4:
                assert word.encode() not in data and word.encode("utf-16-le") not in data
    assert b"MiniLM" not in data

    # A restart reads the vectors: a warm search embeds nothing, so the file is not rewritten.
    written = path.stat().st_mtime_ns
    async with server(hybrid_env, tmp_path) as (client, errors):
        found = await search_warm(client, query="food allergies")
        assert found["results"][0]["text"] == "Is allergic to peanuts"
    assert path.stat().st_mtime_ns == written
    assert memory_lines(errors) == [READY]

    # Tampered with: discarded with one line, rebuilt, and read quietly at the next start.
    tampered = bytearray(data)
    tampered[len(tampered) // 2] ^= 0x40
    path.write_bytes(bytes(tampered))
    async with server(hybrid_env, tmp_path) as (client, errors):
        found = await search_warm(client, query="food allergies")
        assert found["results"][0]["text"] == "Is allergic to peanuts"
    assert memory_lines(errors) == [READY, warmup.REBUILT]
    assert path.read_bytes() != bytes(tampered)
    async with server(hybrid_env, tmp_path) as (client, errors):
        await search_warm(client, query="food allergies")
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
    assert memory_lines(errors) == [hooks.OFF]
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


# Enough memories that embedding them all takes seconds even on a fast machine with the
# runtime on one thread (about 1 ms each at best; 3.5 ms on the benchmark machine), while
# the first search by meaning comes within a few tenths of a second of the model loading.
BACKLOG = 2_000


def seed(vault: Path, count: int) -> None:
    """`count` memories in a new vault, saved through the real MemoryStore (no fsync: test data)."""
    store = MemoryStore.create(
        LocalVault(vault, create=True), PASSPHRASE, crypto.KdfParams(salt=b"w" * crypto.SALT_BYTES, n=2**14)
    )
    try:
        store._log.storage._db.execute("PRAGMA synchronous = OFF")  # type: ignore[attr-defined]
        store.save(entity="user", text="Is allergic to peanuts", category="profile", tags=[], keywords=[])
        for n in range(count - 1):
            store.save(
                entity="notes",
                text=f"Garden journal entry {n}: watered the tomatoes and noted the weather",
                category="note",
                tags=["garden"],
                keywords=[],
            )
    finally:
        store._log.storage.close()


async def test_a_search_during_the_warm_up_answers_at_once_with_a_note_and_progress(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    vault = Path(hybrid_env["SQUIRREL_VAULT"])
    vault.parent.mkdir(parents=True)
    seed(vault, BACKLOG)
    heard: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, total, message))

    async def search(query: str) -> dict[str, Any]:
        # A request carrying a progress token (the client sends one with a callback).
        result = await client.call_tool(
            "search_memory", {"query": query, "limit": 5}, progress_callback=progress
        )
        assert not result.is_error and result.structured_content is not None
        return result.structured_content

    async with server(hybrid_env, tmp_path) as (client, errors):
        # The first answer by meaning comes while the warm-up is still embedding.
        during = await search("garden tomatoes")
        while during["ranking"] != "hybrid":
            await anyio.sleep(0.2)
            during = await search("garden tomatoes")
        assert len(during["results"]) == 5 and during["total"] >= 5
        assert during["note"].startswith(WARMING)
        assert f"of {BACKLOG:,} memories are searchable by meaning so far" in during["note"]
        # Its progress notification (the client runs the callback in a task of its own).
        with anyio.fail_after(30):
            while not heard:
                await anyio.sleep(0.05)
        (done, total, message) = heard[-1]
        assert total == BACKLOG and 0 <= done < BACKLOG and message == during["note"]

        # Once every memory is embedded: no note, meaning finds the allergy, no progress is sent.
        warm = await search_warm(client, query="food allergies", limit=5)
        assert "note" not in warm, warm.get("note")
        assert warm["results"][0]["text"] == "Is allergic to peanuts"
        heard.clear()
        await search("food allergies")
        await search("garden")  # by then the client has run any callback the first one started
        assert heard == []
    # The server exited cleanly, having stopped the warm-up: no traceback, only the ready line.
    assert memory_lines(errors) == [READY]


async def test_stopping_during_the_warm_up_exits_cleanly_and_keeps_the_work_done(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    vault = Path(hybrid_env["SQUIRREL_VAULT"])
    vault.parent.mkdir(parents=True)
    seed(vault, BACKLOG)
    async with server(hybrid_env, tmp_path) as (client, errors):
        first = await search_when(client, "hybrid", query="garden")
        assert first["note"].startswith(WARMING)
    # Shut down mid-way: the batch in progress ends, the vectors so far are written, no traceback.
    assert memory_lines(errors) == [READY]
    kept = vector_file(hybrid_env).stat().st_size
    assert kept > 0
    async with server(hybrid_env, tmp_path) as (client, errors):
        again = await search_warm(client, query="food allergies", limit=5)
        assert "note" not in again and again["results"][0]["text"] == "Is allergic to peanuts"
    assert memory_lines(errors) == [READY]


async def test_a_restatement_in_other_words_is_named_by_meaning(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    async with server(hybrid_env, tmp_path) as (client, _):
        work = {"category": "preference", "tags": ["work"]}
        first = (await call(client, "save_memory", text="Hates meetings before 10 am", **work))["memory"]
        await call(client, "save_memory", text="Owns a red kayak")
        # The model started and every memory embedded.
        await search_warm(client, query="meetings")
        # One word in common: by words alone, no duplicate; in meaning, the same.
        again = await call(
            client,
            "save_memory",
            text="Dislikes meetings before 10am; keep mornings free",
            keywords=["calendar", "mornings"],
            **work,
        )
        (hint,) = again["possibleDuplicates"]
        assert hint["id"] == first["id"] and hint["overlap"] == 0.0 and 0.75 <= hint["meaning"] <= 1.0
        assert "update_memory" in again["note"]
        # Another fact of the same kind is not named.
        other = await call(client, "save_memory", text="Likes to have lunch at 12:30", **work)
        assert other["possibleDuplicates"] == [] and "note" not in other
