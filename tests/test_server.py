"""Every tool through the real server process over stdio, through the mcp client."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import call, call_error, server_params

pytestmark = pytest.mark.anyio

TOOLS = {
    "get_context",
    "search_memory",
    "save_memory",
    "update_memory",
    "get_memory",
    "delete_memory",
    "restore_memory",
    "list_memories",
}
MEMORY_KEYS = {
    "id",
    "entity",
    "text",
    "tags",
    "keywords",
    "category",
    "project",
    "createdAt",
    "updatedAt",
    "revision",
}


def record_count(env: dict[str, str]) -> int:
    with sqlite3.connect(env["SQUIRREL_VAULT"]) as db:
        count: int = db.execute("SELECT count(*) FROM records").fetchone()[0]
    return count


async def save(client: Client, text: str, **fields: Any) -> dict[str, Any]:
    memory: dict[str, Any] = (await call(client, "save_memory", text=text, **fields))["memory"]
    return memory


async def test_tools_are_typed_and_described(client: Client) -> None:
    listed = (await client.list_tools()).tools
    assert {tool.name for tool in listed} == TOOLS
    for tool in listed:
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.output_schema is not None, tool.name
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"


async def test_save_then_search_returns_the_documented_shape(client: Client) -> None:
    saved = await save(
        client, "Is allergic to peanuts", category="profile", tags=["health"], keywords=["food"]
    )
    assert set(saved) == MEMORY_KEYS
    assert saved["revision"] == 1 and saved["entity"] == "user"
    await save(client, "Drives a blue bicycle to work", category="fact")

    found = await call(client, "search_memory", query="peanuts")
    assert set(found) == {"results", "total", "ranking"}
    assert found["ranking"] == "lexical" and found["total"] == 1
    (hit,) = found["results"]
    assert set(hit) == MEMORY_KEYS | {"score", "lexicalScore", "semanticScore"}
    assert hit["id"] == saved["id"]
    assert hit["semanticScore"] is None
    assert hit["lexicalScore"] == 1.0 and hit["score"] > 0


async def test_search_filters_limit_and_total(client: Client) -> None:
    for n in range(5):
        await save(client, f"Garden note {n}: water the tomatoes", category="note", tags=["garden"])
    await save(client, "Tomatoes give her a rash", category="profile", tags=["health"])
    everything = await call(client, "search_memory", query="tomatoes", limit=2)
    assert everything["total"] == 6 and len(everything["results"]) == 2
    scores = [hit["score"] for hit in (await call(client, "search_memory", query="tomatoes"))["results"]]
    assert scores == sorted(scores, reverse=True)
    by_category = await call(client, "search_memory", query="tomatoes", category="profile")
    assert [hit["text"] for hit in by_category["results"]] == ["Tomatoes give her a rash"]
    by_tag = await call(client, "search_memory", query="tomatoes", tags=["GARDEN"])
    assert by_tag["total"] == 5


async def test_search_without_letters_or_digits_gets_a_note(client: Client) -> None:
    await save(client, "Likes emoji")
    found = await call(client, "search_memory", query="?! 🙂 ...")
    assert found["results"] == [] and found["total"] == 0
    assert "cannot be searched" in found["note"]


async def test_base_package_returns_no_near_misses(client: Client) -> None:
    await save(client, "Plays the cello on Sundays")
    found = await call(client, "search_memory", query="violin lessons", nearMisses=True)
    assert found == {"results": [], "total": 0, "ranking": "lexical"}


async def test_get_context_gives_profile_preferences_recent_and_counts(client: Client) -> None:
    empty = await call(client, "get_context")
    assert empty["total"] == 0 and empty["profile"] == [] and empty["unreadable"] == []
    await save(client, "Name is Dana", category="profile")
    await save(client, "Prefers short answers", category="preference")
    for n in range(3):
        await save(client, f"Dentist appointment {n}", category="event")
    context = await call(client, "get_context", recent=2)
    assert [m["text"] for m in context["profile"]] == ["Name is Dana"]
    assert [m["text"] for m in context["preferences"]] == ["Prefers short answers"]
    assert [m["text"] for m in context["recent"]] == ["Dentist appointment 2", "Dentist appointment 1"]
    assert context["counts"]["event"] == 3 and context["counts"]["task"] == 0
    assert context["total"] == 5


async def test_save_points_at_likely_duplicates(client: Client) -> None:
    first = await save(client, "Is allergic to peanuts", category="profile")
    # The same words with a tag more: a memory of its own (an identical one is stored once).
    answer = await call(
        client, "save_memory", text="Is allergic to peanuts", category="profile", tags=["food"]
    )
    assert answer["memory"]["id"] != first["id"]
    assert [d["id"] for d in answer["possibleDuplicates"]] == [first["id"]]
    assert "update_memory" in answer["note"]
    unrelated = await call(client, "save_memory", text="Owns a red kayak")
    assert unrelated["possibleDuplicates"] == [] and "note" not in unrelated


async def test_a_restatement_with_other_tags_is_named_and_another_fact_is_not(client: Client) -> None:
    health = {"category": "profile", "tags": ["health"], "keywords": ["allergy", "food"]}
    first = await call(client, "save_memory", text="Allergic to peanuts", **health)
    restated = await call(
        client,
        "save_memory",
        text="Is allergic to peanuts; carries an EpiPen",
        category="profile",
        tags=["health", "allergy"],
        keywords=["peanut allergy", "epinephrine", "anaphylaxis"],
    )
    assert [(d["id"], d["overlap"]) for d in restated["possibleDuplicates"]] == [(first["memory"]["id"], 1.0)]
    assert "update_memory" in restated["note"]
    # The same tags, keywords and entity, one word of the text in common: another fact.
    other = await call(client, "save_memory", text="Allergic to shellfish", **health)
    assert other["possibleDuplicates"] == [] and "note" not in other


async def test_correction_writes_a_revision_and_keeps_the_old_one(client: Client) -> None:
    saved = await save(client, "Lives in Lyon", category="fact", tags=["home"])
    changed = await call(client, "update_memory", id=saved["id"], text="Lives in Marseille", reason="moved")
    assert changed["memory"]["revision"] == 2 and changed["previousRevision"] == 1
    assert changed["memory"]["createdAt"] == saved["createdAt"]
    assert changed["memory"]["tags"] == ["home"]

    read = await call(client, "get_memory", id=saved["id"], history=True)
    assert read["memory"]["text"] == "Lives in Marseille" and read["deleted"] is False
    first, second = read["history"]
    assert (first["revision"], first["text"], first["change"]) == (1, "Lives in Lyon", "created")
    assert (second["revision"], second["text"], second["reason"]) == (2, "Lives in Marseille", "moved")
    assert "history" not in await call(client, "get_memory", id=saved["id"])
    assert (await call(client, "search_memory", query="Lyon"))["total"] == 0


async def test_correction_against_a_stale_revision_is_refused(client: Client) -> None:
    saved = await save(client, "Works at Acme")
    await call(client, "update_memory", id=saved["id"], text="Works at Globex")
    error = await call_error(
        client, "update_memory", id=saved["id"], text="Works at Initech", expectedRevision=1
    )
    assert "revision 2, not 1" in error
    assert (await call(client, "get_memory", id=saved["id"]))["memory"]["text"] == "Works at Globex"


async def test_delete_hides_and_restore_brings_back(client: Client) -> None:
    saved = await save(client, "Has a cat named Miso", tags=["pets"])
    deleted = await call(client, "delete_memory", id=saved["id"], reason="asked to forget")
    assert deleted["deleted"] is True and deleted["memory"]["revision"] == 2
    assert (await call(client, "search_memory", query="Miso"))["total"] == 0
    assert (await call(client, "list_memories"))["total"] == 0
    listed = await call(client, "list_memories", includeDeleted=True)
    assert [(m["id"], m["deleted"]) for m in listed["memories"]] == [(saved["id"], True)]
    assert (await call(client, "get_memory", id=saved["id"]))["deleted"] is True

    # A second delete changes nothing and says so; a correction of a deleted memory is refused.
    assert "deleted already" in (await call(client, "delete_memory", id=saved["id"]))["note"]
    assert "restore_memory" in await call_error(client, "update_memory", id=saved["id"], text="x")

    restored = await call(client, "restore_memory", id=saved["id"])
    assert restored["memory"]["revision"] == 3 and restored["memory"]["text"] == "Has a cat named Miso"
    assert (await call(client, "search_memory", query="Miso"))["total"] == 1
    assert "not deleted" in (await call(client, "restore_memory", id=saved["id"]))["note"]
    history = (await call(client, "get_memory", id=saved["id"], history=True))["history"]
    assert [h["change"] for h in history] == ["created", "deleted", "restored"]


async def test_list_memories_filters_and_pages(client: Client) -> None:
    for n in range(7):
        await save(client, f"Book {n} to read", category="task", entity="Reading list", tags=["books"])
    await save(client, "Sister is called Anna", category="profile", entity="Anna")
    page = await call(client, "list_memories", category="task", offset=5, limit=5)
    assert page["total"] == 7 and len(page["memories"]) == 2
    assert [m["text"] for m in page["memories"]] == ["Book 1 to read", "Book 0 to read"]
    assert (await call(client, "list_memories", entity="anna"))["total"] == 1
    assert (await call(client, "list_memories", tags=["books"]))["total"] == 7


BAD_CALLS = [
    ("get_memory", {"id": "0123456789abcdef"}, "no memory has the id"),
    ("get_memory", {"id": "../etc/passwd"}, "id"),
    ("get_memory", {}, "id"),
    ("save_memory", {"text": ""}, "text"),
    ("save_memory", {"text": "   "}, "text"),
    ("save_memory", {"text": "x" * 4001}, "text"),
    ("save_memory", {"text": "ok", "entity": "e" * 201}, "entity"),
    ("save_memory", {"text": "ok", "entity": "two\nlines"}, "single line"),
    ("save_memory", {"text": "ok", "tags": [f"t{n}" for n in range(21)]}, "tags"),
    ("save_memory", {"text": "ok", "tags": [""]}, "tags"),
    ("save_memory", {"text": "ok", "category": "secrets"}, "category"),
    ("save_memory", {"text": 123}, "text"),
    ("save_memory", {"text": ["a list"]}, "text"),
    ("save_memory", {"text": "bell\x07"}, "control characters"),
    ("save_memory", {"text": "nul\x00byte"}, "control characters"),
    ("search_memory", {"query": ""}, "query"),
    ("search_memory", {"query": "x", "limit": -1}, "limit"),
    ("search_memory", {"query": "x", "limit": 51}, "limit"),
    ("search_memory", {"query": "x", "limit": "ten"}, "limit"),
    ("list_memories", {"offset": -5}, "offset"),
    ("update_memory", {"id": "0123456789abcdef", "text": "y"}, "no memory has the id"),
    ("update_memory", {"id": "0123456789abcdef"}, "nothing to change"),
    ("delete_memory", {"id": "0123456789abcdef"}, "no memory has the id"),
    ("restore_memory", {"id": "0123456789abcdef"}, "no memory has the id"),
]


@pytest.mark.parametrize(("tool", "arguments", "expected"), BAD_CALLS)
async def test_bad_input_is_a_clear_error_and_writes_nothing(
    client: Client, vault_env: dict[str, str], tool: str, arguments: dict[str, Any], expected: str
) -> None:
    kept = await save(client, "Prefers tea over coffee", category="preference")
    before = record_count(vault_env)
    error = await call_error(client, tool, **arguments)
    assert expected in error
    assert record_count(vault_env) == before
    # The server keeps serving, and what was there is intact.
    assert (await call(client, "get_memory", id=kept["id"]))["memory"]["text"] == "Prefers tea over coffee"


async def test_argument_errors_do_not_echo_the_text(client: Client) -> None:
    secret = "my bank PIN is 4921" + "!" * 4000
    error = await call_error(client, "save_memory", text=secret)
    assert "bank PIN" not in error and "4921" not in error
    error = await call_error(client, "save_memory", text="ok", category="bank PIN 4921")
    assert "4921" not in error


async def test_memories_survive_a_restart(vault_env: dict[str, str]) -> None:
    async with Client(server_params(vault_env)) as first:
        saved = await save(first, "Birthday is on March 3rd", category="profile")
        await call(first, "update_memory", id=saved["id"], text="Birthday is on March 4th", reason="typo")
    async with Client(server_params(vault_env)) as second:
        read = await call(second, "get_memory", id=saved["id"], history=True)
        assert [h["text"] for h in read["history"]] == [
            "Birthday is on March 3rd",
            "Birthday is on March 4th",
        ]
        assert (await call(second, "search_memory", query="birthday"))["total"] == 1


async def test_two_servers_on_one_vault_see_each_other(vault_env: dict[str, str]) -> None:
    async with Client(server_params(vault_env)) as one, Client(server_params(vault_env)) as two:
        saved = await save(one, "Training for a marathon in April")
        assert (await call(two, "search_memory", query="marathon"))["total"] == 1
        await call(two, "update_memory", id=saved["id"], text="Training for a marathon in May")
        stale = await call_error(one, "update_memory", id=saved["id"], text="x", expectedRevision=1)
        assert "revision 2" in stale
        assert (await call(one, "get_memory", id=saved["id"]))["memory"]["text"].endswith("May")


async def test_the_vault_holds_no_plaintext(vault_env: dict[str, str]) -> None:
    secrets = ["Zanzibarian", "quokkaphile", "Xylophonist Olaf", "tag-morbleu", "kw-blorptastic"]
    secrets.append("github.com/zorblax/quokka-repo")
    async with Client(server_params(vault_env)) as client:
        saved = await save(
            client,
            "Is a Zanzibarian quokkaphile",
            entity="Xylophonist Olaf",
            tags=[secrets[3]],
            keywords=[secrets[4]],
            project=secrets[5],
        )
        await call(client, "update_memory", id=saved["id"], text="Is a Zanzibarian quokkaphile, retired")
        # Read the files while the server holds them (WAL not yet checkpointed) and after.
        files_open = _vault_bytes(Path(vault_env["SQUIRREL_VAULT"]))
    files_closed = _vault_bytes(Path(vault_env["SQUIRREL_VAULT"]))
    for blob in (files_open, files_closed):
        assert len(blob) > 0
        for secret in secrets:
            assert secret.encode() not in blob
            assert secret.lower().encode() not in blob.lower()


def _vault_bytes(vault: Path) -> bytes:
    return b"".join(path.read_bytes() for path in vault.parent.iterdir() if path.is_file())


async def test_files_are_private(vault_env: dict[str, str]) -> None:
    async with Client(server_params(vault_env)) as client:
        await save(client, "Something private")
        vault = Path(vault_env["SQUIRREL_VAULT"])
        assert (vault.parent.stat().st_mode & 0o777) == 0o700
        for path in vault.parent.iterdir():
            assert (path.stat().st_mode & 0o077) == 0, path


async def test_a_tampered_record_is_reported_by_id_and_the_rest_still_served(
    vault_env: dict[str, str],
) -> None:
    async with Client(server_params(vault_env)) as client:
        damaged = await save(client, "This record will be damaged")
        healthy = await save(client, "This record stays healthy")
    with sqlite3.connect(vault_env["SQUIRREL_VAULT"]) as db:
        (blob,) = db.execute(
            "SELECT ciphertext FROM records WHERE memory_id = ?", (damaged["id"],)
        ).fetchone()
        flipped = bytearray(blob)
        flipped[len(flipped) // 2] ^= 0x01
        db.execute("UPDATE records SET ciphertext = ? WHERE memory_id = ?", (bytes(flipped), damaged["id"]))
    async with Client(server_params(vault_env)) as client:
        error = await call_error(client, "get_memory", id=damaged["id"])
        assert damaged["id"] in error and "unreadable" in error
        assert (await call(client, "get_memory", id=healthy["id"]))["memory"]["text"] == healthy["text"]
        context = await call(client, "get_context")
        assert context["unreadable"] == [damaged["id"]] and context["total"] == 1
        assert (await call(client, "search_memory", query="record"))["total"] == 1
