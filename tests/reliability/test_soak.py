"""Soak: 10,000 memories, 2,000 mixed calls over stdio; no error, resident memory flat after warm-up.

The vault is seeded in this process through the real MemoryStore (10,000 saves; the
seeding connection skips fsync, which only makes it quicker: a tool call would write
the same records). Then the real server starts over stdio and an mcp client makes
2,000 calls: searches 40%, get_memory 15%, list_memories 11%, get_context 1% (it
costs ~0.6 s at this size, see docs/reliability.md), saves 16%, corrections 10%,
deletes and restores 7%. Every call must succeed. The server's resident set size (VmRSS of
/proc/<pid>/status) is read before the first call and after every 100; the curve is
written to build/reliability/rss/soak.json for docs/reliability.md.

"Flat" means: from call WARM_UP to call 2,000, RSS grows by less than GROWTH_LIMIT of
its value at WARM_UP (the calls add ~300 memories and ~200 revisions to the 10,000,
so a little growth is data), and over READ_TAIL more calls that only read (search,
get, list, get_context), which add no data, by less than READ_TAIL_LIMIT_KIB.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp.core.models import HALF_LIFE_DAYS
from tests.conftest import call, server_params
from tests.reliability.conftest import open_vault, rss_kib, server_pids
from tests.reliability.figures import FIGURES_DIR, record

MEMORIES = 10_000
CALLS = 2_000
SAMPLE_EVERY = 100
WARM_UP = 500
GROWTH_LIMIT = 0.10
# Then calls that only read: they add no data, so RSS must stay within allocator noise.
READ_TAIL = 500
READ_TAIL_LIMIT_KIB = 2048
SECONDS = 240.0
SEED = 8

pytestmark = pytest.mark.anyio

# A made-up vocabulary, so texts share words the way real memories do and searches
# match hundreds of memories, not one.
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "to",
    "sa",
    "vel",
    "dor",
    "qu",
    "in",
    "pa",
    "zu",
    "ex",
    "or",
    "bi",
    "ta",
]


def vocabulary(rng: random.Random, size: int = 2_000) -> list[str]:
    """`size` distinct made-up words."""
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))))
    return sorted(words)


def sentence(rng: random.Random, words: list[str]) -> str:
    """A memory text of 6-40 words, common words more likely than rare ones."""
    count = rng.randint(6, 40)
    return " ".join(words[int(rng.paretovariate(1.2)) % len(words)] for _ in range(count))


def seed_vault(path: Path, rng: random.Random, words: list[str]) -> list[str]:
    """MEMORIES saves through the real MemoryStore; their ids."""
    store = open_vault(path)
    try:
        # Only the seeding connection: no fsync per save (a crash here only loses test data).
        store._log.storage._db.execute("PRAGMA synchronous = OFF")  # type: ignore[attr-defined]
        categories = list(HALF_LIFE_DAYS)
        return [
            store.save(
                entity=rng.choice(["user", "Anna (sister)", "home network", "work"]),
                text=sentence(rng, words),
                category=rng.choice(categories),
                tags=rng.sample(words[:50], k=rng.randint(0, 3)),
                keywords=rng.sample(words, k=rng.randint(0, 4)),
            ).id
            for _ in range(MEMORIES)
        ]
    finally:
        store._log.storage.close()


async def one_call(
    client: Client, rng: random.Random, words: list[str], live: list[str], deleted: list[str], *, reads: bool
) -> str:
    """One call of the mix (only reads when `reads`); the tool's name. Any error fails the test."""
    roll = rng.random() * (0.67 if reads else 1.0)
    if roll < 0.40:
        query = " ".join(rng.choices(words[:300], k=rng.randint(1, 4)))
        await call(client, "search_memory", query=query, nearMisses=rng.random() < 0.2)
        return "search_memory"
    if roll < 0.55:
        await call(client, "get_memory", id=rng.choice(live), history=rng.random() < 0.3)
        return "get_memory"
    if roll < 0.66:
        await call(client, "list_memories", offset=rng.randrange(0, 5_000), limit=50)
        return "list_memories"
    if roll < 0.67:
        await call(client, "get_context")
        return "get_context"
    if roll < 0.83:
        live.append((await call(client, "save_memory", text=sentence(rng, words)))["memory"]["id"])
        return "save_memory"
    if roll < 0.93:
        await call(client, "update_memory", id=rng.choice(live), text=sentence(rng, words))
        return "update_memory"
    if roll < 0.97 or not deleted:
        target = live.pop(rng.randrange(len(live)))
        await call(client, "delete_memory", id=target)
        deleted.append(target)
        return "delete_memory"
    target = deleted.pop(rng.randrange(len(deleted)))
    await call(client, "restore_memory", id=target)
    live.append(target)
    return "restore_memory"


async def test_soak_10000_memories_2000_calls(cheap_vault_env: dict[str, str]) -> None:
    rng = random.Random(SEED)
    words = vocabulary(rng)
    seed_started = time.monotonic()
    live = seed_vault(Path(cheap_vault_env["SQUIRREL_VAULT"]), rng, words)
    seeding = time.monotonic() - seed_started
    deleted: list[str] = []
    kinds: dict[str, int] = {}
    busy: dict[str, float] = {}
    curve: list[tuple[int, int, float]] = []
    started = time.monotonic()
    before = set(server_pids())
    async with Client(server_params(cheap_vault_env)) as client:
        # The server this client started (not one another test left running).
        (pid,) = set(server_pids()) - before
        curve.append((0, rss_kib(pid), 0.0))
        made = 0
        for made in range(1, CALLS + READ_TAIL + 1):
            if time.monotonic() - started > SECONDS:
                made -= 1
                break
            began = time.monotonic()
            kind = await one_call(client, rng, words, live, deleted, reads=made > CALLS)
            kinds[kind] = kinds.get(kind, 0) + 1
            busy[kind] = busy.get(kind, 0.0) + time.monotonic() - began
            if made % SAMPLE_EVERY == 0:
                curve.append((made, rss_kib(pid), round(time.monotonic() - started, 1)))
    seconds = time.monotonic() - started
    rss_at = {calls: kib for calls, kib, _ in curve}
    at_warm_up = rss_at[WARM_UP]
    growth = (
        max(kib for calls, kib in rss_at.items() if WARM_UP <= calls <= CALLS) - at_warm_up
    ) / at_warm_up
    tail_kib = max(kib for calls, kib in rss_at.items() if calls >= CALLS) - rss_at[CALLS]
    (FIGURES_DIR / "rss").mkdir(parents=True, exist_ok=True)
    (FIGURES_DIR / "rss" / "soak.json").write_text(
        json.dumps(
            {
                "memories": MEMORIES,
                "calls": made,
                "seeding_seconds": round(seeding, 1),
                "warm_up": WARM_UP,
                "growth_after_warm_up": round(growth, 4),
                "read_tail": READ_TAIL,
                "read_tail_growth_kib": tail_kib,
                "calls_by_tool": dict(sorted(kinds.items())),
                "mean_ms_by_tool": {
                    kind: round(1000 * busy[kind] / kinds[kind], 1) for kind in sorted(kinds)
                },
                "curve": [{"calls": c, "rss_kib": kib, "seconds": s} for c, kib, s in curve],
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    record(
        "soak",
        runs=1,
        inputs_tried=made,
        data_lost=0,
        seconds=seconds,
        notes=f"{MEMORIES} memories seeded in-process through MemoryStore ({seeding:.0f} s), then {made} "
        f"mixed calls over stdio, 0 errors; RSS {curve[0][1] // 1024} MiB at start, "
        f"{at_warm_up // 1024} MiB at call {WARM_UP}, {rss_at[CALLS] // 1024} MiB at call {CALLS} "
        f"({growth:+.1%} after warm-up); then {READ_TAIL} read-only calls: {tail_kib / 1024:+.1f} MiB",
    )
    assert made == CALLS + READ_TAIL
    assert growth < GROWTH_LIMIT, curve
    assert tail_kib < READ_TAIL_LIMIT_KIB, curve
