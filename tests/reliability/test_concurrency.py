"""Two servers on one vault (two agents at once): 1,000 interleaved saves and corrections.

Two real servers over stdio, each with its own mcp client, run side by side on one
vault. Each does 500 writes (a save, or a correction of any memory either of them
saved; half of the corrections go to the first five memories, so the two collide)
and after each write one read of the other's latest acknowledged write: a get_memory
of it, or a search for the keyword only that memory carries.

What must hold:
- every acknowledged write is in the vault, with the text its answer showed;
- each memory's revisions are 1, 2, ..., n with no gap, and the vault holds no record
  nobody was told about (a correction refused as a conflict stores nothing);
- visibility bound: a write acknowledged before a call is sent is seen by that call in
  the other process (MemoryStore refreshes from storage before every operation), so
  the bound is "the next call".
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import call, server_params
from tests.reliability.conftest import open_vault
from tests.reliability.figures import record

WRITES_PER_SERVER = 500
SECONDS = 120.0

pytestmark = pytest.mark.anyio


@dataclass
class Shared:
    """What both agents know: every write acknowledged so far, and the latest one of each."""

    acked: dict[tuple[str, int], str] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    latest: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    conflicts: int = 0
    checks: int = 0
    missed: list[str] = field(default_factory=list)


async def agent(name: str, client: Client, other: str, shared: Shared, rng: random.Random) -> int:
    """WRITES_PER_SERVER writes by `name`, each followed by a read of `other`'s latest write."""
    deadline = time.monotonic() + SECONDS
    writes = 0
    for n in range(WRITES_PER_SERVER):
        if time.monotonic() > deadline:
            break
        if not shared.ids or rng.random() < 0.5:
            keyword = f"zq{name}{n}"
            answer = await call(
                client, "save_memory", text=f"{name} saved note {n}", keywords=[keyword], category="fact"
            )
            memory = answer["memory"]
            shared.ids.append(memory["id"])
        else:
            # Half the corrections go to the first five memories, so the two collide often.
            target = rng.choice(shared.ids[:5] if rng.random() < 0.5 else shared.ids)
            result = await client.call_tool("update_memory", {"id": target, "text": f"{name} corrected {n}"})
            if result.is_error:
                # Both corrected one memory at the same moment: refused, nothing stored.
                assert "changed by another process" in result.content[0].text  # type: ignore[union-attr]
                shared.conflicts += 1
                continue
            assert result.structured_content is not None
            memory = result.structured_content["memory"]
        writes += 1
        shared.acked[(memory["id"], memory["revision"])] = memory["text"]
        shared.latest[name] = (memory["id"], memory["revision"], memory["keywords"][0])
        # The other agent's latest acknowledged write, read here: it was acknowledged before
        # this call is sent, so this call must see it.
        seen = shared.latest.get(other)
        if seen is None:
            continue
        memory_id, revision, keyword = seen
        shared.checks += 1
        if n % 2:
            got = (await call(client, "get_memory", id=memory_id))["memory"]
            if got["revision"] < revision:
                shared.missed.append(f"{name} read {memory_id} at {got['revision']} < {revision}")
        else:
            hits = (await call(client, "search_memory", query=keyword))["results"]
            if memory_id not in [hit["id"] for hit in hits]:
                shared.missed.append(f"{name} searched {keyword}: {memory_id} not found")
    return writes


async def test_two_servers_interleave_1000_writes(cheap_vault_env: dict[str, str]) -> None:
    shared = Shared()
    started = time.monotonic()
    writes: dict[str, int] = {}

    async def run(name: str, other: str, seed: int) -> None:
        async with Client(server_params(cheap_vault_env)) as client:
            writes[name] = await agent(name, client, other, shared, random.Random(seed))

    async with anyio.create_task_group() as group:
        group.start_soon(run, "a", "b", 1)
        group.start_soon(run, "b", "a", 2)
    seconds = time.monotonic() - started

    store = open_vault(Path(cheap_vault_env["SQUIRREL_VAULT"]))
    try:
        stored = store._log.storage.changes_since(0)[0]
        lost = gaps = 0
        for memory_id in {memory_id for memory_id, _ in shared.acked}:
            numbers = [revision.revision for revision in store.history(memory_id)]
            gaps += numbers != list(range(1, len(numbers) + 1))
            held = {revision.revision: revision.text for revision in store.history(memory_id)}
            lost += sum(
                1
                for (mid, number), text in shared.acked.items()
                if mid == memory_id and held.get(number) != text
            )
    finally:
        store._log.storage.close()
    total_writes = sum(writes.values())
    record(
        "concurrency",
        runs=total_writes,
        faults_injected=0,
        inputs_tried=total_writes + shared.checks,
        data_lost=lost + gaps + len(shared.missed) + (len(stored) - len(shared.acked)),
        seconds=seconds,
        notes=f"2 servers on one vault; {total_writes} acknowledged saves+corrections, "
        f"{shared.conflicts} simultaneous corrections refused as conflicts (nothing stored); "
        f"{shared.checks} reads of the other's latest write: {len(shared.missed)} missed (bound: next call)",
    )
    assert total_writes + shared.conflicts == 2 * WRITES_PER_SERVER
    assert not shared.missed
    assert lost == 0
    assert gaps == 0
    # Every stored record was acknowledged to one of the two: a refused conflict left nothing.
    assert len(stored) == len(shared.acked)
