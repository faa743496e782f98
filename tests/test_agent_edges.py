"""Never mislead the agent: each answer means what an agent takes it to mean.

Through the real server over stdio, with the `mcp` client and with a host built
on the TypeScript SDK (tests/hosts/ts_calls.mjs):

1. an argument a tool does not take is refused, naming the one probably meant;
2. a search while a ranker is still starting waits for it (a bound), else says it
   is by words only; a one-shot host's first question is never "nothing" silently;
3. every annotation keeps its promise: a writer called twice (a retry after a lost
   answer) leaves the vault as one call did, a reader leaves it as it was;
4. get_context says how many memories a section left out and how to list them;
5. a memory is saved once, also when two processes save it at the same moment;
6. a missing passphrase is reported as what it is: a vault to open, or none yet.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.cli.unlock import open_store
from squirrel_mcp.core.config import Config
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugins.manager import READY_WAIT, STARTING_NOTE
from squirrel_mcp.server.tools import CONTEXT_SECTION_LIMIT
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import (
    PASSPHRASE,
    WARMING,
    call,
    call_error,
    needs_model,
    plugin_path,
    search_warm,
    secrets_of_this_test,
    served_error,
    server_params,
    ts_calls,
)

pytestmark = [pytest.mark.anyio, pytest.mark.process]

SLOW_RANKER = Path(__file__).parent / "plugins" / "slow_ranker.py"
WINDOW = {"text": "Prefers window seats on long flights", "tags": ["travel"], "category": "preference"}


def records(env: dict[str, str]) -> list[tuple[str, int, bytes]]:
    """Every record the vault holds, in the order written: what the vault stores, byte for byte."""
    path = Path(env["SQUIRREL_VAULT"])
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute("SELECT memory_id, revision, ciphertext FROM records ORDER BY seq").fetchall()


@asynccontextmanager
async def serving(env: dict[str, str]) -> AsyncIterator[Client]:
    async with Client(server_params(env)) as client:
        yield client


# 1. Unknown arguments ------------------------------------------------------------------------------


async def test_every_input_schema_refuses_arguments_it_does_not_know(client: Client) -> None:
    for tool in (await client.list_tools()).tools:
        assert tool.input_schema["additionalProperties"] is False, tool.name


async def test_a_misspelt_argument_is_refused_naming_the_one_meant_and_nothing_is_written(
    client: Client, vault_env: dict[str, str]
) -> None:
    await call(client, "get_context")
    before = records(vault_env)
    error = await call_error(
        client, "save_memory", text="Prefers window seats", tag=["travel"], categry="preference"
    )
    assert "unknown argument `tag`; did you mean `tags`?" in error
    assert "unknown argument `categry`; did you mean `category`?" in error
    assert "Prefers window seats" not in error and "travel" not in error
    bogus = await call_error(client, "save_memory", text="Prefers window seats", bogus=1)
    assert "unknown argument `bogus`" in bogus and "did you mean" not in bogus
    # A key that is no argument name (a memory's text sent as a key) is not repeated.
    secrets_of_this_test().add("Is allergic to peanuts")
    keyed = await call_error(client, "save_memory", **{"text": "x", "Is allergic to peanuts": True})
    assert "does not take" in keyed and "peanuts" not in keyed
    assert records(vault_env) == before
    assert (await call(client, "list_memories"))["total"] == 0


async def test_every_tool_refuses_an_unknown_argument_and_changes_nothing(
    client: Client, vault_env: dict[str, str]
) -> None:
    saved = (await call(client, "save_memory", text="Keeps bees on the roof"))["memory"]["id"]
    gone = (await call(client, "save_memory", text="Had a red bicycle"))["memory"]["id"]
    await call(client, "delete_memory", id=gone)
    valid = {
        "get_context": {},
        "search_memory": {"query": "bees"},
        "save_memory": {"text": "Grows tomatoes"},
        "update_memory": {"id": saved, "text": "Keeps two hives on the roof"},
        "get_memory": {"id": saved},
        "delete_memory": {"id": saved},
        "restore_memory": {"id": gone},
        "list_memories": {},
    }
    assert set(valid) == {tool.name for tool in (await client.list_tools()).tools}
    before = records(vault_env)
    for tool, arguments in valid.items():
        error = await call_error(client, tool, **arguments, limitt=3)
        assert f"invalid arguments for {tool}: unknown argument `limitt`" in error, tool
    assert records(vault_env) == before


def test_the_typescript_host_is_refused_a_misspelt_argument(ts_sdk: Path, vault_env: dict[str, str]) -> None:
    refused, listed = ts_calls(
        ts_sdk,
        vault_env,
        [
            {"tool": "save_memory", "arguments": {"text": "Prefers window seats", "tag": ["travel"]}},
            {"tool": "list_memories", "arguments": {}},
        ],
    )
    assert refused["isError"] and "unknown argument `tag`; did you mean `tags`?" in refused["text"]
    assert listed["structuredContent"]["total"] == 0


# 2. A ranker still starting ------------------------------------------------------------------------


def slow_env(vault_env: dict[str, str], tmp_path: Path, startup: float) -> dict[str, str]:
    """A server whose one ranker takes `startup` seconds to start (tests/plugins/slow_ranker.py)."""
    return {
        **vault_env,
        "PYTHONPATH": plugin_path(tmp_path / "plugins", SLOW_RANKER, "slow"),
        "SQUIRREL_MCP_PLUGINS": "slow",
        "SLOW_RANKER_STARTUP": str(startup),
    }


async def test_a_first_search_waits_for_a_ranker_starting_then_says_it_is_by_words(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    # Far longer than the wait, however slow the machine; the server still exits at its 5 s bound
    # for the plugins' shutdown (their threads are daemons).
    async with serving(slow_env(vault_env, tmp_path, startup=30)) as client:
        began = time.monotonic()
        found = await call(client, "search_memory", query="scared of planes")
        waited = time.monotonic() - began
    assert found["ranking"] == "lexical" and found["total"] == 0
    assert found["note"] == STARTING_NOTE
    # It waited for the ranker (the bound counts from the ranker's start, after the unlock).
    assert waited >= READY_WAIT - 0.1


async def test_a_first_search_is_ranked_by_a_ranker_that_starts_within_the_wait(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    async with serving(slow_env(vault_env, tmp_path, startup=1)) as client:
        found = await call(client, "search_memory", query="scared of planes")
    assert found["ranking"] == "hybrid" and "note" not in found


def test_the_typescript_host_hears_that_search_by_meaning_is_starting(
    ts_sdk: Path, vault_env: dict[str, str], tmp_path: Path
) -> None:
    (found,) = ts_calls(
        ts_sdk,
        slow_env(vault_env, tmp_path, startup=30),
        [{"tool": "search_memory", "arguments": {"query": "scared of planes"}}],
    )
    answer = found["structuredContent"]
    assert answer["ranking"] == "lexical" and answer["note"] == STARTING_NOTE


# Paraphrases: no word of the question is in the memory it asks about.
ONE_SHOT_MEMORIES = [
    {"text": "Is allergic to peanuts", "category": "profile", "tags": ["health"]},
    {"text": "Is afraid of flying and takes the train when possible", "category": "profile"},
    {"text": "Runs Pi-hole on a Raspberry Pi for DNS ad blocking", "entity": "home network"},
]
ONE_SHOT_QUESTION = "food allergies"
ONE_SHOT_ANSWER = "Is allergic to peanuts"
ONE_SHOT_PROCESSES = 20
# At most this many of them start at once: the machine's load, not the test's, decides which answer
# comes, and both are checked; four at once keep the whole test under a minute on two cores.
ONE_SHOT_AT_ONCE = 4


@needs_model
async def test_one_shot_hosts_are_answered_by_meaning_or_told_it_is_starting(
    vault_env: dict[str, str], tmp_path: Path, ts_sdk: Path
) -> None:
    env = {
        **vault_env,
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "c"),
    }
    # The vault as a user has it after a first session: its memories, and their vector file.
    async with serving(env) as client:
        for memory in ONE_SHOT_MEMORIES:
            await call(client, "save_memory", **memory)
        assert (await search_warm(client, query=ONE_SHOT_QUESTION))["ranking"] == "hybrid"
    search = {"query": ONE_SHOT_QUESTION, "limit": 3}
    answers: list[dict[str, Any]] = []
    limiter = anyio.CapacityLimiter(ONE_SHOT_AT_ONCE)

    async def ask(number: int) -> None:
        async with limiter:
            # Half through each client; each a fresh server whose very first call is the question.
            if number % 2:
                async with serving(env) as client:
                    answers.append(await call(client, "search_memory", **search))
            else:
                question = [{"tool": "search_memory", "arguments": search}]
                (answer,) = await anyio.to_thread.run_sync(ts_calls, ts_sdk, env, question)
                assert not answer["isError"], answer["text"]
                answers.append(answer["structuredContent"])

    async with anyio.create_task_group() as group:
        for number in range(ONE_SHOT_PROCESSES):
            group.start_soon(ask, number)
    assert len(answers) == ONE_SHOT_PROCESSES
    for answer in answers:
        if answer["ranking"] == "hybrid":
            assert answer["results"][0]["text"] == ONE_SHOT_ANSWER
            assert WARMING not in answer.get("note", "")
        else:
            assert answer["note"] == STARTING_NOTE
        assert answer["results"] or answer.get("note"), "an empty answer by words without a note"
    by_meaning = sum(answer["ranking"] == "hybrid" for answer in answers)
    print(f"{by_meaning} of {ONE_SHOT_PROCESSES} one-shot questions answered by meaning")


# 3. The annotations' promises, and a retry after a lost answer ------------------------------------


async def _target(client: Client) -> tuple[str, str]:
    """A live memory and a deleted one to work on."""
    live = (await call(client, "save_memory", text="Keeps bees on the roof", tags=["garden"]))["memory"]["id"]
    gone = (await call(client, "save_memory", text="Had a red bicycle"))["memory"]["id"]
    await call(client, "delete_memory", id=gone)
    return live, gone


# Each tool's call, given the live and the deleted memory's ids: every tool, readers too.
CALLS: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "save_memory": lambda live, gone: {**WINDOW, "keywords": ["aisle", "plane"]},
    "update_memory": lambda live, gone: {"id": live, "text": "Keeps two hives", "reason": "more bees"},
    "delete_memory": lambda live, gone: {"id": live, "reason": "moved house"},
    "restore_memory": lambda live, gone: {"id": gone},
    "get_context": lambda live, gone: {},
    "search_memory": lambda live, gone: {"query": "bees"},
    "get_memory": lambda live, gone: {"id": live, "history": True},
    "list_memories": lambda live, gone: {"includeDeleted": True},
}


@pytest.mark.parametrize("tool", list(CALLS))
async def test_each_tool_keeps_its_annotations_promises_called_twice(
    client: Client, vault_env: dict[str, str], tool: str
) -> None:
    live, gone = await _target(client)
    (listed,) = [t for t in (await client.list_tools()).tools if t.name == tool]
    hints = listed.annotations
    assert hints is not None
    arguments = CALLS[tool](live, gone)
    before = records(vault_env)
    first = await call(client, tool, **arguments)
    once = records(vault_env)
    # The answer to the first call is lost; the host retries the same call.
    second = await call(client, tool, **arguments)
    twice = records(vault_env)
    if hints.read_only_hint:
        assert before == once == twice
        return
    assert once != before, f"{tool} wrote nothing the first time: the setup does not exercise it"
    if hints.destructive_hint is False:
        # Nothing stored before is gone or changed: every change is a new record.
        assert once[: len(before)] == before and twice[: len(before)] == before
    if hints.idempotent_hint:
        assert twice == once, f"{tool} called twice stored more than one call"
        # The retry is answered as a success, with the memory as the first call left it.
        assert second["memory"] == first["memory"] and second["note"]


async def test_a_second_delete_or_restore_succeeds_changing_nothing_and_says_so(
    client: Client, vault_env: dict[str, str]
) -> None:
    live, gone = await _target(client)
    before = records(vault_env)
    again = await call(client, "delete_memory", id=gone)
    assert again["deleted"] is True and "deleted already" in again["note"]
    assert again["previousRevision"] == again["memory"]["revision"] == 2
    restored = await call(client, "restore_memory", id=live)
    assert restored["deleted"] is False and "not deleted" in restored["note"]
    assert records(vault_env) == before


async def test_a_correction_to_what_a_memory_says_writes_nothing_and_says_so(
    client: Client, vault_env: dict[str, str]
) -> None:
    live, _ = await _target(client)
    before = records(vault_env)
    same = await call(client, "update_memory", id=live, text="Keeps bees on the roof", tags=["garden"])
    assert "already says this" in same["note"] and same["memory"]["revision"] == 1
    history = (await call(client, "get_memory", id=live, history=True))["history"]
    assert [revision["change"] for revision in history] == ["created"]
    # A retry of a correction that names the revision it read: its own write is there, no conflict.
    fixed = await call(client, "update_memory", id=live, text="Keeps hives", expectedRevision=1)
    retry = await call(client, "update_memory", id=live, text="Keeps hives", expectedRevision=1)
    assert retry["memory"] == fixed["memory"] and "revision 2, not 1" in retry["note"]
    assert len(records(vault_env)) == len(before) + 1


def test_the_typescript_host_retries_every_writer_and_the_vault_holds_one_call(
    ts_sdk: Path, vault_env: dict[str, str]
) -> None:
    save = {"tool": "save_memory", "arguments": WINDOW}
    correct = {"tool": "update_memory", "arguments": {"id": "$0.memory.id", "text": "Prefers the aisle"}}
    delete = {"tool": "delete_memory", "arguments": {"id": "$0.memory.id"}}
    restore = {"tool": "restore_memory", "arguments": {"id": "$0.memory.id"}}
    answers = ts_calls(ts_sdk, vault_env, [save, save, correct, correct, delete, delete, restore, restore])
    assert not any(answer["isError"] for answer in answers), [a["text"] for a in answers]
    for first, second in zip(answers[::2], answers[1::2], strict=True):
        assert second["structuredContent"]["memory"] == first["structuredContent"]["memory"]
        assert "nothing was written" in second["structuredContent"]["note"]
    # One memory, revision 1 saved, 2 corrected, 3 deleted, 4 restored: what one call each stores.
    assert [(revision, memory_id) for memory_id, revision, _ in records(vault_env)] == [
        (n, answers[0]["structuredContent"]["memory"]["id"]) for n in (1, 2, 3, 4)
    ]


# 4. get_context says what it left out --------------------------------------------------------------


def _check_cut(context: dict[str, Any], preferences: int, others: int) -> None:
    bound = CONTEXT_SECTION_LIMIT
    assert len(context["preferences"]) == bound and len(context["recent"]) == 10
    assert context["leftOut"] == [
        {
            "section": "preferences",
            "shown": bound,
            "total": preferences,
            "listWith": {"category": "preference", "offset": bound},
        },
        {"section": "recent", "shown": 10, "total": others, "listWith": {}},
    ]
    assert f"preferences shows {bound} of {preferences}, {preferences - bound} left out" in context["note"]
    assert f'list_memories {{"category": "preference", "offset": {bound}}} lists them' in context["note"]


CUT_PREFERENCES = CONTEXT_SECTION_LIMIT + 3
CUT_OTHERS = 12


async def test_get_context_says_how_many_it_left_out_and_how_to_list_them(client: Client) -> None:
    description = next(t.description for t in (await client.list_tools()).tools if t.name == "get_context")
    assert description is not None and f"at most {CONTEXT_SECTION_LIMIT} memories" in description
    assert "leftOut" in description
    assert (await call(client, "get_context"))["leftOut"] == []
    for n in range(CUT_PREFERENCES):
        await call(client, "save_memory", text=f"Likes flavour number {n}", category="preference")
    for n in range(CUT_OTHERS):
        await call(client, "save_memory", text=f"Note number {n}")
    context = await call(client, "get_context")
    _check_cut(context, CUT_PREFERENCES, CUT_OTHERS)
    rest = await call(client, "list_memories", **context["leftOut"][0]["listWith"])
    shown = {memory["id"] for memory in context["preferences"]}
    assert len(rest["memories"]) == CUT_PREFERENCES - CONTEXT_SECTION_LIMIT
    assert not shown & {memory["id"] for memory in rest["memories"]}


def test_the_typescript_host_hears_what_get_context_left_out(ts_sdk: Path, vault_env: dict[str, str]) -> None:
    saves = [
        {"tool": "save_memory", "arguments": {"text": f"Likes flavour number {n}", "category": "preference"}}
        for n in range(CUT_PREFERENCES)
    ] + [{"tool": "save_memory", "arguments": {"text": f"Note number {n}"}} for n in range(CUT_OTHERS)]
    *_, context = ts_calls(ts_sdk, vault_env, [*saves, {"tool": "get_context", "arguments": {}}])
    _check_cut(context["structuredContent"], CUT_PREFERENCES, CUT_OTHERS)


# 5. Each fact saved once ---------------------------------------------------------------------------


async def test_saving_a_memory_again_returns_the_stored_one_and_writes_nothing(
    client: Client, vault_env: dict[str, str]
) -> None:
    first = await call(client, "save_memory", **WINDOW)
    once = records(vault_env)
    # The same after the tools' normalisation (spaces around the text) is the same memory.
    again = await call(client, "save_memory", **{**WINDOW, "text": f"  {WINDOW['text']} "})
    assert again["memory"] == first["memory"] and "stored already" in again["note"]
    assert records(vault_env) == once
    # A near-duplicate is a memory of its own, with today's hint.
    near = await call(client, "save_memory", **{**WINDOW, "tags": ["travel", "flights"]})
    assert near["memory"]["id"] != first["memory"]["id"]
    assert [hint["id"] for hint in near["possibleDuplicates"]] == [first["memory"]["id"]]
    assert "Similar memories exist" in near["note"]
    # Once deleted, the same memory saved again is a new one.
    await call(client, "delete_memory", id=first["memory"]["id"])
    anew = await call(client, "save_memory", **WINDOW)
    assert anew["memory"]["id"] not in (first["memory"]["id"], near["memory"]["id"])
    assert (await call(client, "list_memories"))["total"] == 2


def test_the_typescript_host_saving_twice_stores_once(ts_sdk: Path, vault_env: dict[str, str]) -> None:
    save = {"tool": "save_memory", "arguments": WINDOW}
    first, second, listed = ts_calls(
        ts_sdk, vault_env, [save, save, {"tool": "list_memories", "arguments": {}}]
    )
    assert second["structuredContent"]["memory"] == first["structuredContent"]["memory"]
    assert "stored already" in second["structuredContent"]["note"]
    assert listed["structuredContent"]["total"] == 1


RACES = 6


async def test_two_processes_saving_the_same_memory_at_once_make_one(vault_env: dict[str, str]) -> None:
    async with serving(vault_env) as one, serving(vault_env) as two:
        await call(one, "get_context")
        await call(two, "get_context")
        for n in range(RACES):
            memory = {"text": f"Parks on level {n} of the garage", "tags": ["car"]}
            saved: list[dict[str, Any]] = []

            async def save(client: Client, memory: dict[str, Any] = memory, saved: list[Any] = saved) -> None:
                saved.append(await call(client, "save_memory", **memory))

            async with anyio.create_task_group() as group:
                group.start_soon(save, one)
                group.start_soon(save, two)
            assert saved[0]["memory"]["id"] == saved[1]["memory"]["id"]
        assert (await call(one, "list_memories"))["total"] == RACES
    assert len(records(vault_env)) == RACES


def test_a_save_that_loses_the_race_finds_the_winners_memory(tmp_path: Path) -> None:
    """The interleaving forced: both look, find nothing, then the other appends first."""
    cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
    path = tmp_path / "vault.sqlite3"
    first = MemoryStore.create(LocalVault(path, create=True), PASSPHRASE, kdf=cheap)
    second = MemoryStore.unlock(LocalVault(path, create=False), PASSPHRASE)
    fields: dict[str, Any] = {"entity": "user", "text": "Parks on level 3", "category": "note"}
    fields |= {"tags": ["car"], "keywords": []}
    looked = second._identical
    winner: list[Any] = []

    def look_then_lose(wanted: Any) -> Any:
        found = looked(wanted)
        if not winner:
            # Between this store's look and its append, the other process saves the same memory.
            winner.append(threading.Thread(target=lambda: winner.append(first.save_once(**fields))))
            winner[0].start()
            winner[0].join()
        return found

    second._identical = look_then_lose  # type: ignore[method-assign]
    memory, written = second.save_once(**fields)
    (won, won_written) = winner[1]
    assert won_written and not written and memory == won
    assert len(second.current()) == len(first.current()) == 1


def test_a_host_that_loses_the_race_to_create_a_new_vault_unlocks_the_winners_account(
    vault_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two hosts started at once on a new vault: both find no account, the other creates it first."""
    cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
    config = Config.from_env(vault_env)
    create = MemoryStore.create
    winner: list[MemoryStore] = []

    def created_by_the_other_first(cls: Any, storage: Any, passphrase: str, **kwargs: Any) -> Any:
        if not winner:
            other = LocalVault(config.vault_path, create=False)
            winner.append(create(other, passphrase, kdf=cheap))
            winner[0].save_once(entity="user", text="Parks on level 3", category="note", tags=[], keywords=[])
        return create(storage, passphrase, kdf=cheap, **kwargs)

    monkeypatch.setattr(MemoryStore, "create", classmethod(created_by_the_other_first))
    store = open_store(config, create=True)
    try:
        assert winner and store.account_id == winner[0].account_id
        assert [memory.text for memory in store.current()] == ["Parks on level 3"]
    finally:
        store.close()
        winner[0].close()


# 6. The missing passphrase ------------------------------------------------------------------------


async def test_without_a_passphrase_an_existing_vault_asks_for_it_and_not_for_init(
    vault_env: dict[str, str],
) -> None:
    async with serving(vault_env) as client:
        await call(client, "get_context")
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_PASSPHRASE"}
    line = await served_error(server_params(env))
    assert "SQUIRREL_PASSPHRASE is not set" in line and vault_env["SQUIRREL_VAULT"] in line
    assert "exists and opens only with its passphrase" in line and "init" not in line


async def test_without_a_passphrase_and_no_vault_init_is_the_advice(vault_env: dict[str, str]) -> None:
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_PASSPHRASE"}
    line = await served_error(server_params(env))
    assert "there is no vault at" in line and "run `squirrel-mcp init` to create one" in line


def test_the_typescript_host_hears_that_the_vault_needs_its_passphrase(
    ts_sdk: Path, vault_env: dict[str, str]
) -> None:
    (created,) = ts_calls(ts_sdk, vault_env, [{"tool": "get_context", "arguments": {}}])
    assert not created["isError"]
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_PASSPHRASE"}
    (refused,) = ts_calls(ts_sdk, env, [{"tool": "get_context", "arguments": {}}])
    assert refused["isError"] and "exists and opens only with its passphrase" in refused["text"]
