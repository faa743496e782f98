"""The command line as a person uses it: prompts on a terminal, clear refusals, search/list/show."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import PASSPHRASE, WARM_WAIT, call, needs_model, run_cli, server_params
from tests.test_cli import _converse
from tests.test_hybrid_stdio import seed


def _without_passphrase(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key != "SQUIRREL_PASSPHRASE"}


def _export_file(tmp_path: Path, vault_env: dict[str, str]) -> Path:
    """An export of a vault holding nothing, written by the real CLI."""
    assert run_cli(vault_env, "init").returncode == 0
    path = tmp_path / "backup.json"
    result = run_cli(vault_env, "export", "-o", str(path))
    assert result.returncode == 0, result.stderr
    return path


@pytest.mark.parametrize(
    ("answers", "asked_again"),
    [
        (["tiny", "a long passphrase", "a long passphrase"], "at least 8 characters; try again"),
        (
            ["a long passphrase", "a long passfrase", "a long passphrase", "a long passphrase"],
            "The two passphrases differ; try again.",
        ),
    ],
    ids=["too short", "the two entries differ"],
)
def test_init_asks_again_after_a_refused_entry(
    vault_env: dict[str, str], answers: list[str], asked_again: str
) -> None:
    env = _without_passphrase(vault_env)
    code, output = _converse(["-m", "squirrel_mcp", "init"], env, answers)
    assert code == 0, output
    assert asked_again in output
    assert "a long pass" not in output
    unlocked = run_cli({**env, "SQUIRREL_PASSPHRASE": "a long passphrase"}, "export")
    assert unlocked.returncode == 0, unlocked.stderr


def test_import_asks_for_the_passphrase_on_a_terminal(vault_env: dict[str, str], tmp_path: Path) -> None:
    backup = _export_file(tmp_path, vault_env)
    env = _without_passphrase(vault_env)
    code, output = _converse(["-m", "squirrel_mcp", "import", str(backup)], env, [PASSPHRASE])
    assert code == 0, output
    assert "imported 0 memories" in output
    assert PASSPHRASE not in output

    code, output = _converse(["-m", "squirrel_mcp", "import", str(backup)], env, ["not the passphrase"])
    assert code == 1 and "passphrase does not unlock" in output

    # Without a terminal, it says what to set.
    no_terminal = run_cli(env, "import", str(backup))
    assert no_terminal.returncode == 1 and b"SQUIRREL_PASSPHRASE is not set" in no_terminal.stderr


def test_import_errors_say_what_is_wrong_without_quoting(vault_env: dict[str, str], tmp_path: Path) -> None:
    backup = json.loads(_export_file(tmp_path, vault_env).read_text())
    secret = "my secret diagnosis"
    revision = {
        "id": "0123456789abcdef",
        "entity": "user",
        "text": secret * 300,  # over the 4000 characters a memory may hold
        "category": "fact",
        "createdAt": "2026-01-01T00:00:00Z",
        "updatedAt": "2026-01-01T00:00:00Z",
        "revision": 1,
        "change": "created",
    }
    cases = {
        b"{" + secret.encode(): b"is not JSON (line 1, column 2)",
        b"\xffx" + secret.encode(): b"is not UTF-8 text",
        json.dumps([secret]).encode(): b'is not a squirrel-mcp export: it lacks "format"',
        json.dumps({**backup, "format": secret}).encode(): b"is not a squirrel-mcp export",
        json.dumps({**backup, "version": 7}).encode(): b"of a version this squirrel-mcp does not read",
        json.dumps({**backup, "memories": [{"id": revision["id"], "revisions": [revision]}]}).encode(): (
            b"problems at: memories.0.revisions.0.text (String should have at most 4000 characters)"
        ),
    }
    for number, (content, expected) in enumerate(cases.items()):
        path = tmp_path / f"bad-{number}.json"
        path.write_bytes(content)
        result = run_cli(vault_env, "import", str(path))
        assert result.returncode == 1, content[:40]
        assert expected in result.stderr, result.stderr
        assert secret.encode() not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_export_refuses_a_missing_directory_and_an_existing_file(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    assert run_cli(vault_env, "init").returncode == 0
    missing = tmp_path / "no such dir" / "backup.json"
    result = run_cli(vault_env, "export", "-o", str(missing))
    assert result.returncode == 1 and b"does not exist; create it first" in result.stderr
    assert not missing.parent.exists()

    existing = tmp_path / "backup.json"
    existing.write_text("keep me")
    result = run_cli(vault_env, "export", "-o", str(existing))
    assert result.returncode == 1 and b"exists; add --force" in result.stderr
    assert existing.read_text() == "keep me"
    assert run_cli(vault_env, "export", "-o", str(existing), "--force").returncode == 0
    assert json.loads(existing.read_text())["format"] == "squirrel-mcp-export"


async def _fill(env: dict[str, str]) -> dict[str, str]:
    """Three memories saved through the real server: one corrected, one deleted. Their ids by name."""
    async with Client(server_params(env)) as client:
        basil = (await call(client, "save_memory", text="Grows basil on the balcony", tags=["garden"]))[
            "memory"
        ]
        await call(
            client,
            "update_memory",
            id=basil["id"],
            text="Grows basil and thyme on the balcony",
            reason="more herbs",
        )
        bike = await call(
            client,
            "save_memory",
            text="Rides a blue bicycle to work",
            entity="Anna (sister)",
            category="fact",
        )
        phone = (await call(client, "save_memory", text="Old phone number 555-0100"))["memory"]
        await call(client, "delete_memory", id=phone["id"])
    return {"basil": basil["id"], "bike": bike["memory"]["id"], "phone": phone["id"]}


def _json(result: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


@pytest.mark.anyio
async def test_list_and_show_print_what_the_tools_return(vault_env: dict[str, str]) -> None:
    ids = await _fill(vault_env)
    async with Client(server_params(vault_env)) as client:
        listed = await call(client, "list_memories", includeDeleted=True, limit=2)
        shown = await call(client, "get_memory", id=ids["basil"], history=True)
    assert _json(run_cli(vault_env, "list", "--include-deleted", "--limit", "2", "--json")) == listed
    assert _json(run_cli(vault_env, "show", ids["basil"], "--json")) == shown

    lines = run_cli(vault_env, "list", "--include-deleted").stdout.decode().splitlines()
    assert len(lines) == 4 and lines[-1] == "memories 1-3 of 3"
    assert any(
        line.startswith(ids["bike"]) and "Anna (sister): Rides a blue bicycle" in line for line in lines
    )
    assert any(line.startswith(ids["phone"]) and line.endswith("(deleted)") for line in lines)
    paged = run_cli(vault_env, "list", "--limit", "1").stdout.decode().splitlines()
    assert paged[-1] == "memories 1-1 of 2; --offset 1 for more"

    block = run_cli(vault_env, "show", ids["basil"]).stdout.decode()
    assert "Grows basil and thyme on the balcony" in block
    history = block[block.index("history") :].splitlines()[1:]
    assert "created" in history[0] and "Grows basil on the balcony" in history[0]
    assert "corrected  changed text · reason: more herbs · Grows basil and thyme" in history[1]


@pytest.mark.anyio
async def test_show_says_what_each_revision_changed_and_why(vault_env: dict[str, str]) -> None:
    long_text = "Grows basil, thyme, rosemary and sage " + "in clay pots on the sunny balcony " * 4
    async with Client(server_params(vault_env)) as client:
        memory = (await call(client, "save_memory", text="Grows basil", tags=["garden"]))["memory"]
        await call(client, "update_memory", id=memory["id"], text=long_text, reason="more herbs")
        await call(client, "update_memory", id=memory["id"], tags=["garden", "herbs"])
        await call(client, "update_memory", id=memory["id"], category="fact", reason="not a note")
        await call(client, "delete_memory", id=memory["id"], reason="moved away")
    block = run_cli(vault_env, "show", memory["id"]).stdout.decode()
    history = block[block.index("history") :].splitlines()[1:]
    assert len(history) == 5
    assert "created" in history[0] and history[0].endswith("Grows basil")
    # The reason comes before the text, so cutting a long text to the line keeps it.
    assert "corrected  changed text · reason: more herbs · Grows basil, thyme" in history[1]
    assert history[1].endswith("…")
    assert history[2].endswith("corrected  changed tags · tags now: garden, herbs")
    assert history[3].endswith("corrected  changed category · reason: not a note")
    assert history[4].endswith("deleted    reason: moved away")


@pytest.mark.anyio
async def test_search_ranks_as_the_tool_does(vault_env: dict[str, str]) -> None:
    ids = await _fill(vault_env)
    async with Client(server_params(vault_env)) as client:
        expected = await call(client, "search_memory", query="balcony herbs", limit=5)
    found = _json(run_cli(vault_env, "search", "balcony herbs", "--limit", "5", "--json"))
    # The scores decay with the seconds between the two searches; everything else is the same.
    strip = [{k: v for k, v in hit.items() if k != "score"} for hit in expected["results"]]
    assert [{k: v for k, v in hit.items() if k != "score"} for hit in found["results"]] == strip
    assert (found["total"], found["ranking"]) == (expected["total"], "lexical")
    assert found["results"][0]["id"] == ids["basil"]

    text = run_cli(vault_env, "search", "bicycle", "--category", "fact").stdout.decode()
    assert text.startswith(f"{ids['bike']}  Anna (sister) · fact · no project · score ")
    assert "    Rides a blue bicycle to work" in text
    assert text.rstrip().endswith("1 of 1 matches shown · ranking lexical")
    none = run_cli(vault_env, "search", "bicycle", "--tag", "garden")
    assert none.stdout.decode().strip() == "0 of 0 matches shown · ranking lexical"


def test_bad_options_are_the_tools_refusals(vault_env: dict[str, str]) -> None:
    assert run_cli(vault_env, "init").returncode == 0
    too_many = run_cli(vault_env, "list", "--limit", "500")
    assert too_many.returncode == 1
    assert b"invalid arguments for list_memories: `limit` is more than 100: send" in too_many.stderr
    unknown = run_cli(vault_env, "show", "0123456789abcdef")
    assert unknown.returncode == 1
    assert unknown.stderr.decode() == "squirrel-mcp: no memory has the id '0123456789abcdef'\n"
    not_an_id = run_cli(vault_env, "show", "my secret id")
    assert (
        not_an_id.returncode == 1
        and b"invalid arguments for get_memory: `id` is not a memory's id" in not_an_id.stderr
    )
    assert b"my secret id" not in not_an_id.stderr
    wrong = run_cli({**vault_env, "SQUIRREL_PASSPHRASE": "not the passphrase"}, "list")
    assert wrong.returncode == 1 and b"passphrase does not unlock" in wrong.stderr


@needs_model
@pytest.mark.anyio
async def test_search_is_hybrid_with_the_plugin(vault_env: dict[str, str]) -> None:
    ids = await _fill(vault_env)
    env = {**vault_env, "SQUIRREL_MCP_PLUGINS": "embeddings"}
    # No word in common with the memory: only meaning finds it.
    found = _json(run_cli(env, "search", "cycling", "--json"))
    assert found["ranking"] == "hybrid"
    assert ids["bike"] in [hit["id"] for hit in found["results"]]
    text = run_cli(env, "search", "cycling")
    assert "ranking hybrid" in text.stdout.decode() and "meaning" in text.stdout.decode()
    # All is well, so stderr says nothing (no "memory: local embeddings ready").
    assert text.stderr == b""


def test_a_query_too_long_is_refused_before_any_plugin_starts(vault_env: dict[str, str]) -> None:
    assert run_cli(vault_env, "init").returncode == 0
    # Turned off, the embeddings plugin says so as it starts: the line shows whether it started.
    env = {**vault_env, "SQUIRREL_MCP_PLUGINS": "embeddings", "SQUIRREL_MEMORY_EMBEDDINGS": "0"}
    started = run_cli(env, "search", "food")
    assert started.returncode == 0 and b"local embeddings are turned off" in started.stderr
    refused = run_cli(env, "search", "my secret " * 101)
    assert refused.returncode == 1
    assert refused.stderr.decode().splitlines() == [
        "squirrel-mcp: invalid arguments for search_memory: `query` is longer than 1,000 characters: "
        "send text of 1 to 1,000 characters."
    ]


@needs_model
def test_search_waits_for_the_warm_up_so_the_answer_is_by_meaning(vault_env: dict[str, str]) -> None:
    """A one-off search cannot ask again later: it waits until every memory is embedded."""
    vault = Path(vault_env["SQUIRREL_VAULT"])
    vault.parent.mkdir(parents=True)
    # The allergy is the oldest of 1,000: the warm-up embeds it last.
    seed(vault, 1_000)
    env = {**vault_env, "SQUIRREL_MCP_PLUGINS": "embeddings"}
    # It waits for the warm-up to embed all 1,000, and the warm-up thread runs at nice +10: on
    # a machine busy with other work (the parallel test run) that takes minutes, not the 10 s
    # of an idle machine, so the backstop is the suite's warm-up wait, not run_cli's 120 s.
    found = _json(run_cli(env, "search", "food allergies", "--json", timeout=WARM_WAIT))
    assert found["ranking"] == "hybrid" and "note" not in found, found.get("note")
    assert found["results"][0]["text"] == "Is allergic to peanuts"
    assert found["results"][0]["lexicalScore"] == 0
    # The vectors were kept: the next search has nothing left to wait for.
    assert list(Path(vault_env["XDG_CACHE_HOME"]).rglob("memory-vectors-*.bin"))
