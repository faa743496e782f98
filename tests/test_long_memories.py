"""Long memories read whole by the model: through the real server over stdio, with the real model.

A memory longer than the model's window (256 tokens) is also embedded as overlapping
passages, and its cosine to a query is the best of its passages' and its whole text's;
a memory that fits is embedded exactly as before. The set is tests/data/long_memories.json
(tests/long_memories.py): facts placed inside long memories, asked about in other words.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.core.models import Revision
from squirrel_mcp.plugin_api import SEALED_PREFIX, TAG_BYTES, seal_in_place
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import embedder, hooks, passages, vectors, warmup
from tests.conftest import PASSPHRASE, call, needs_model, search_warm, secrets_of_this_test
from tests.long_memories import LONGEST, POSITIONS, SHORTEST, LongMemory, load, shared_words
from tests.test_hybrid_stdio import READY, hybrid_env, memory_lines, server, vector_file

__all__ = ["hybrid_env"]  # the fixture, imported for the tests below

SET = load()
SHORT = {"text": "Prefers tea over coffee in the afternoon", "entity": "user", "category": "preference"}
# Facts whose question shares no word with their memory, placed last, past the model's window.
AT_THE_END = ("kyoto-trip", "home-server", "laptop-setup", "training-plan")


def test_the_set_holds_long_memories_whose_fact_no_question_word_finds() -> None:
    assert len(SET) >= 15 and len({memory.name for memory in SET}) == len(SET)
    for memory in SET:
        for position in POSITIONS:
            assert SHORTEST <= len(memory.text(position)) <= LONGEST, (memory.name, position)
        assert memory.fact not in memory.text(None)
        # No word of the question finds the fact, the rest of the memory or its entity.
        assert shared_words(memory.question, f"{memory.entity} {memory.text('last')}") == [], memory.name
    assert [len(m.text("first").split("\n\n")[0]) for m in SET] == [len(m.fact) for m in SET]


def test_the_table_keeps_each_memorys_passages_through_puts_removals_and_its_file(tmp_path: Path) -> None:
    """Cosines are the best of whole text and passages, whatever rows moved; the file keeps them all."""
    dimensions, rng = 8, np.random.default_rng(7)

    def unit(rows: int) -> vectors.Matrix:
        made = rng.standard_normal((rows, dimensions)).astype(np.float32)
        normed: vectors.Matrix = made / np.linalg.norm(made, axis=1, keepdims=True)
        return normed

    table = vectors.VectorTable(dimensions)
    held: dict[str, tuple[vectors.Matrix, vectors.Matrix]] = {}
    for step in range(300):
        memory_id = f"m{rng.integers(40)}"
        if rng.random() < 0.3:
            table.remove(memory_id)
            held.pop(memory_id, None)
        else:
            whole, passages = unit(1), unit(int(rng.integers(0, 6)))
            table.put_many([(memory_id, step)], whole, [passages])
            held[memory_id] = (whole[0], passages)
        query = unit(1)[0]
        expected = {
            memory_id: max([float(whole @ query), *(passages @ query).tolist()])
            for memory_id, (whole, passages) in held.items()
        }
        got = dict(zip(table.ids, table.cosines(query).tolist(), strict=True))
        assert got.keys() == expected.keys()
        assert all(abs(got[memory_id] - expected[memory_id]) < 1e-5 for memory_id in held)
        assert table.passage_count == sum(len(passages) for _, passages in held.values())

    stamp = vectors.Stamp("stand-in", "0" * 64, warmup.RECIPE_VERSION, dimensions)
    key = bytes(32)
    vectors.save(tmp_path / "v.bin", table, key, "account", stamp)
    read = vectors.load(tmp_path / "v.bin", key, "account", stamp)
    assert read is not None and sorted(read.ids) == sorted(held)
    for memory_id, (whole, passages) in held.items():
        assert np.array_equal(read.vector(memory_id), whole)
        assert np.array_equal(read.passages(memory_id), passages)
    # Read from the file (rows and passages where they were decrypted), then changed: removals
    # still move the right rows, and a new memory grows both matrices.
    for memory_id in list(held)[::2]:
        read.remove(memory_id)
        del held[memory_id]
    whole, more = unit(1), unit(70)
    read.put_many([("new", 1)], whole, [more])
    held["new"] = (whole[0], more)
    query = unit(1)[0]
    for memory_id, cosine in zip(read.ids, read.cosines(query).tolist(), strict=True):
        whole, passages = held[memory_id]
        assert abs(cosine - max([float(whole @ query), *(passages @ query).tolist()])) < 1e-5


def test_windows_cover_every_token_with_the_overlap() -> None:
    assert passages.windows(100, 128, 64) == [(0, 100)]
    assert passages.windows(300, 128, 64) == [(0, 128), (64, 192), (128, 256), (172, 300)]
    for count in range(129, 700, 37):
        spans = passages.windows(count, 128, 64)
        assert spans[0][0] == 0 and spans[-1][1] == count
        assert all(end - start == 128 for start, end in spans)
        assert all(later[0] <= earlier[1] - 64 for earlier, later in itertools.pairwise(spans))


def word_offsets(text: str) -> list[tuple[int, int]]:
    """A stand-in tokenizer: one token per run of non-spaces."""
    return [match.span() for match in re.finditer(r"\S+", text)]


def test_passages_are_sentences_a_short_one_joined_to_the_next_a_long_one_cut() -> None:
    text = (
        "Agenda:\nThe release went out on Monday with two regressions in the export.\n"
        "- a list item without a full stop that runs on and on for many words here and there again\n"
        "Priya's daughter was born on Tuesday night, so she is away until March! Done."
    )
    found = passages.passages(text, word_offsets(text), size=16, overlap=4, shortest=4)
    assert found == [
        "Agenda:\nThe release went out on Monday with two regressions in the export.",
        "- a list item without a full stop that runs on and on for many words",
        "without a full stop that runs on and on for many words here and there again",
        "Priya's daughter was born on Tuesday night, so she is away until March! Done.",
    ]
    # Every passage is a piece of the text, and every word of it is in one.
    assert all(piece in text for piece in found)
    assert set(text.split()) <= {word for piece in found for word in piece.split()}
    assert passages.passages("Short.", word_offsets("Short.")) == ["Short."]
    # Full-width marks end a sentence with no space after them (one token per character here).
    chinese = "今天开会讨论了预算问题。明天放假不上班。"
    characters = [(n, n + 1) for n in range(len(chinese))]
    assert passages.passages(chinese, characters, shortest=4) == [
        "今天开会讨论了预算问题。",
        "明天放假不上班。",
    ]


@pytest.fixture(scope="module")
def model() -> embedder.Embedder:
    """The shipped model as the server starts it (one runtime thread)."""
    return embedder.load(threads=hooks.RUNTIME_THREADS)


def by_name(name: str) -> LongMemory:
    (memory,) = (memory for memory in SET if memory.name == name)
    return memory


def stored_table(
    env: dict[str, str], model: embedder.Embedder
) -> tuple[vectors.VectorTable, dict[str, Revision]]:
    """The server's vector file, opened with the vault's key (the server has ended); and text -> memory."""
    storage = LocalVault(Path(env["SQUIRREL_VAULT"]), create=False)
    try:
        store = MemoryStore.unlock(storage, PASSPHRASE)
        ids = {memory.text: memory for memory in store.current()}
        key = MemoryReader(store).derive_key(vectors.KEY_PURPOSE)
        table = vectors.load(vector_file(env), key, store.account_id, stamp(model))
    finally:
        storage.close()
    assert table is not None
    return table, ids


def stamp(model: embedder.Embedder, recipe: int = warmup.RECIPE_VERSION) -> vectors.Stamp:
    manifest = model.manifest
    return vectors.Stamp(manifest.model, hooks.manifest_sha256(), recipe, manifest.dimensions)


@needs_model
@pytest.mark.anyio
async def test_a_long_memory_is_found_by_a_fact_at_its_end(
    hybrid_env: dict[str, str], tmp_path: Path
) -> None:
    async with server(hybrid_env, tmp_path) as (client, errors):
        await call(client, "save_memory", **SHORT)
        saved = {}
        for memory in SET:
            answer = await call(client, "save_memory", text=memory.text("last"), entity=memory.entity)
            saved[memory.name] = answer["memory"]["id"]
        for name in AT_THE_END:
            found = await search_warm(client, query=by_name(name).question)
            first = [hit["id"] for hit in found["results"][:5]]
            assert saved[name] in first, name
            hit = found["results"][first.index(saved[name])]
            # Found by meaning alone: no word of the question is in it.
            assert hit["lexicalScore"] == 0 and hit["semanticScore"] >= 0.35
    assert memory_lines(errors) == [READY]


async def save_short_and_long(env: dict[str, str], tmp_path: Path, text: str, entity: str) -> None:
    """SHORT and a long memory saved through a hybrid server, which has embedded both when it stops."""
    async with server(env, tmp_path) as (client, _):
        await call(client, "save_memory", **SHORT)
        await call(client, "save_memory", text=text, entity=entity)
        await search_warm(client, query="tea")


@needs_model
@pytest.mark.anyio
async def test_a_short_memory_keeps_its_vector_bit_for_bit_and_a_long_one_gains_passages(
    hybrid_env: dict[str, str], tmp_path: Path, model: embedder.Embedder
) -> None:
    long = by_name("lasagna")
    await save_short_and_long(hybrid_env, tmp_path, long.text("middle"), long.entity)
    table, memories = stored_table(hybrid_env, model)
    short, whole = memories[SHORT["text"]], memories[long.text("middle")]

    # The short memory: one vector, the very one its recipe gave before passages existed.
    assert model.fits(warmup.recipe(short)) and warmup.passages_of(model, short) == []
    assert np.array_equal(table.vector(short.id), model.embed([warmup.recipe(short)])[0])
    assert len(table.passages(short.id)) == 0

    # The long one: its whole text's vector (cut at the window, as before) and one per sentence.
    assert not model.fits(warmup.recipe(whole))
    assert np.array_equal(table.vector(whole.id), model.embed([warmup.recipe(whole)])[0])
    pieces = warmup.passages_of(model, whole)
    assert f"{long.entity}: {long.fact}" in pieces and len(pieces) >= len(long.paragraphs) + 1
    assert np.allclose(table.passages(whole.id), model.embed(pieces), atol=1e-6)
    assert table.passage_count == len(pieces)


def old_format_file(table: vectors.VectorTable, old: vectors.Stamp, key: bytes, account_id: str) -> bytes:
    """A vector file as the version before passages wrote it: recipe 1, one whole-text row per memory."""
    header = vectors.HEADER
    meta = json.dumps(
        {
            "model": old.model,
            "manifestSha256": old.manifest_sha256,
            "recipe": old.recipe,
            "dimensions": old.dimensions,
            "rows": [list(row) for row in zip(table.ids, table.revisions, strict=True)],
        },
        separators=(",", ":"),
    ).encode()
    at = len(header) + SEALED_PREFIX
    meta += b" " * (-(at + 4 + len(meta)) % 4)
    rows = table.matrix().astype("<f4").tobytes()
    buffer = bytearray(header) + bytes(SEALED_PREFIX) + struct.pack(">I", len(meta)) + meta + rows
    buffer += bytes(TAG_BYTES)
    seal_in_place(key, memoryview(buffer)[len(header) :], header + account_id.encode())
    return bytes(buffer)


@needs_model
@pytest.mark.anyio
async def test_a_vector_file_from_before_passages_is_embedded_again_once(
    hybrid_env: dict[str, str], tmp_path: Path, model: embedder.Embedder
) -> None:
    long = by_name("kyoto-trip")
    await save_short_and_long(hybrid_env, tmp_path, long.text("last"), long.entity)
    table, _ = stored_table(hybrid_env, model)
    storage = LocalVault(Path(hybrid_env["SQUIRREL_VAULT"]), create=False)
    try:
        store = MemoryStore.unlock(storage, PASSPHRASE)
        key, account_id = MemoryReader(store).derive_key(vectors.KEY_PURPOSE), store.account_id
    finally:
        storage.close()
    path = vector_file(hybrid_env)
    path.write_bytes(old_format_file(table, stamp(model, recipe=1), key, account_id))

    # Read without a complaint, found stale, embedded again: now the fact at the end is found.
    async with server(hybrid_env, tmp_path) as (client, errors):
        found = await search_warm(client, query=long.question)
        assert [hit["text"] for hit in found["results"][:5]].count(long.text("last")) == 1
    assert memory_lines(errors) == [READY]
    upgraded, _ = stored_table(hybrid_env, model)
    assert len(upgraded) == 2 and upgraded.passage_count > 0

    # Once: the next start reads the new file and writes nothing.
    written = path.stat().st_mtime_ns
    async with server(hybrid_env, tmp_path) as (client, errors):
        await search_warm(client, query=long.question)
    assert path.stat().st_mtime_ns == written
    assert memory_lines(errors) == [READY]


@needs_model
def test_the_diagnostic_reads_a_long_memory_by_its_passages(tmp_path: Path) -> None:
    """squirrel-mcp-diagnose ranks and scores a long memory by its best passage, as search does."""
    vault = tmp_path / "data" / "vault.sqlite3"
    vault.parent.mkdir(mode=0o700)
    store = MemoryStore.create(LocalVault(vault, create=True), PASSPHRASE)
    for memory in SET:
        store.save(entity=memory.entity, text=memory.text("last"), category="note", tags=[], keywords=[])
    store._log.storage.close()
    queries = tmp_path / "queries.json"
    asked = [by_name(name) for name in AT_THE_END]
    queries.write_text(json.dumps([{"query": m.question, "expect": m.fact[:24]} for m in asked]))
    secrets_of_this_test().add([m.question for m in asked] + [m.text("last") for m in SET])
    done = subprocess.run(
        [str(Path(sys.executable).with_name("squirrel-mcp-diagnose")), str(queries)],
        env={
            "PATH": os.environ["PATH"],
            "SQUIRREL_VAULT": str(vault),
            "SQUIRREL_PASSPHRASE": PASSPHRASE,
            "HOME": str(tmp_path / "home"),
            "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
            "SQUIRREL_MCP_PLUGINS": "embeddings",
            "TMPDIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if " · cosine " in line]
    assert len(lines) == len(asked)
    for line in lines:
        # A match among the first 5, above the floor: only a passage reads a fact at the end.
        assert re.search(r"  match [1-5] of \d+ · by meaning [1-5] of \d+ · .* above the floor$", line), line
