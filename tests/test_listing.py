"""Listings cost their page, and answer exactly what sorting every memory answered.

The catalog (squirrel_mcp/book/catalog.py) keeps the current revisions in order as they
change; these tests hold its pages, totals and counts against the plain definition
(every current revision sorted by (updatedAt, id), newest first, then filtered):
in process over random changes, then through the real server's list_memories and
get_context on a vault with varied timestamps, categories, tags and entities.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from squirrel_mcp.book.catalog import BULK_CHANGES, Catalog, Filters
from squirrel_mcp.core.models import HALF_LIFE_DAYS, Revision
from tests.conftest import call, run_cli, server_params
from tests.exports import export_of

CATEGORIES = sorted(HALF_LIFE_DAYS)
# Few values, in several spellings: ties in time, shared entities and tags, case folding.
STAMPS = [f"2026-0{month}-1{day}T08:00:00.000Z" for month in range(1, 4) for day in range(3)]
ENTITIES = ["user", "User", "Anna (sister)", "anna (SISTER)", "project Falcon"]
TAGS = ["home", "Home", "work", "travel", "TRAVEL", "health"]
PROJECTS = [None, "github.com/acme/api", "github.com/acme/web", "/home/u/notes"]


def reference(current: list[Revision], filters: Filters) -> list[Revision]:
    """Every current revision passing `filters`, by (updatedAt, id), newest first: the definition."""
    ordered = sorted(current, key=lambda r: (r.updatedAt, r.id), reverse=True)
    return [revision for revision in ordered if filters.accepts(revision)]


def random_revision(rng: random.Random, memory_id: str, number: int) -> Revision:
    stamp = rng.choice(STAMPS)
    return Revision(
        id=memory_id,
        entity=rng.choice(ENTITIES),
        text=f"memory {memory_id} at revision {number}",
        tags=rng.sample(TAGS, k=rng.randint(0, 3)),
        keywords=[],
        category=rng.choice(CATEGORIES),
        project=rng.choice(PROJECTS),
        createdAt=stamp,
        updatedAt=stamp,
        revision=number,
        change="created" if number == 1 else "corrected",
        deleted=rng.random() < 0.2,
    )


def random_filters(rng: random.Random) -> Filters:
    categories = None
    if rng.random() < 0.5:
        categories = frozenset(rng.sample(CATEGORIES, k=rng.choice([1, 1, 2, 5])))
    projects = None
    if rng.random() < 0.5:
        projects = frozenset(rng.sample([*PROJECTS, "github.com/none/such"], k=rng.choice([1, 2, 2, 3])))
    return Filters(
        categories=categories,
        projects=projects,
        entity=rng.choice([None, None, *ENTITIES, "nobody"]),
        tags=tuple(rng.sample([*TAGS, "absent"], k=rng.choice([0, 0, 1, 2]))),
        include_deleted=rng.random() < 0.3,
    )


def test_catalog_pages_match_a_full_sort_through_random_changes() -> None:
    rng = random.Random(20261130)
    catalog = Catalog()
    current: dict[str, Revision] = {}
    numbers: Counter[str] = Counter()
    ids = [f"{n:016x}" for n in range(400)]
    # Large batches take the catalog's bulk path, small ones its bisection; removals
    # stand for memories whose every record became unreadable.
    for size in [300, 1, 5, BULK_CHANGES, BULK_CHANGES + 1, 2, 150, 1, 40, 3]:
        changed: dict[str, Revision | None] = {}
        for memory_id in rng.sample(ids, k=size):
            if memory_id in current and rng.random() < 0.1:
                changed[memory_id] = None
                continue
            numbers[memory_id] += 1
            changed[memory_id] = random_revision(rng, memory_id, numbers[memory_id])
        catalog.update(changed)
        for memory_id, revision in changed.items():
            if revision is None:
                current.pop(memory_id, None)
            else:
                current[memory_id] = revision
        revisions = list(current.values())
        live = [r for r in revisions if not r.deleted]
        assert catalog.newest_first(include_deleted=True) == reference(
            revisions, Filters(include_deleted=True)
        )
        assert catalog.newest_first() == reference(revisions, Filters())
        assert (len(catalog), catalog.live_count) == (len(revisions), len(live))
        assert dict(catalog.live_counts()) == dict(Counter(r.category for r in live))
        assert dict(catalog.live_project_counts()) == dict(Counter(r.project for r in live))
        for _ in range(60):
            filters = random_filters(rng)
            expected = reference(revisions, filters)
            offset = rng.choice(
                [0, 0, 1, 7, len(expected) // 2, max(0, len(expected) - 1), len(expected) + 5]
            )
            limit = rng.choice([1, 3, 20, 100, 500])
            page = catalog.page(filters, offset, limit)
            assert page.total == len(expected), filters
            assert page.memories == expected[offset : offset + limit], (filters, offset, limit)


def exported_vault(rng: random.Random, count: int) -> dict[str, Any]:
    """An export file of `count` memories with histories, some deleted at their last revision."""
    memories = []
    for number in range(count):
        memory_id = f"{number:016x}"
        history = [random_revision(rng, memory_id, 1).model_copy(update={"deleted": False})]
        for revision in range(2, rng.choice([2, 2, 2, 3, 4])):
            later = random_revision(rng, memory_id, revision)
            stamp = max(later.updatedAt, history[-1].updatedAt)
            history.append(later.model_copy(update={"createdAt": history[0].createdAt, "updatedAt": stamp}))
        memories.append({"id": memory_id, "revisions": [r.model_dump(mode="json") for r in history]})
    return export_of(memories)


def current_of(export: dict[str, Any]) -> list[Revision]:
    """Each memory's newest revision in an export file."""
    return [Revision.model_validate(memory["revisions"][-1]) for memory in export["memories"]]


def tool_filters(arguments: dict[str, Any]) -> Filters:
    """The list_memories arguments as the catalog's filters."""
    category = arguments.get("category")
    project = arguments.get("project")
    return Filters(
        categories=None if category is None else frozenset({category}),
        # The suite's hosts are in no project: absent reads the memories with none.
        projects=None if project == "*" else frozenset({project or None, None}),
        entity=arguments.get("entity"),
        tags=tuple(arguments.get("tags", ())),
        include_deleted=arguments.get("includeDeleted", False),
    )


async def check_listings(client: Client, current: list[Revision], rng: random.Random) -> None:
    """list_memories and get_context against the full sort of `current`."""
    cases: list[dict[str, Any]] = [{}, {"includeDeleted": True}]
    cases += [{"category": category} for category in CATEGORIES]
    cases += [{"entity": "ANNA (sister)"}, {"tags": ["home"]}, {"tags": ["HOME", "travel"]}]
    cases += [{"category": "note", "entity": "user", "includeDeleted": True}, {"entity": "nobody"}]
    # Each in every project too, and some in one project (with the memories of none).
    cases += [{**arguments, "project": "*"} for arguments in cases]
    cases += [{"project": project, "category": "note"} for project in PROJECTS[1:]]
    cases += [{"project": PROJECTS[1], "includeDeleted": True}, {"project": ""}]
    for arguments in cases:
        expected = reference(current, tool_filters(arguments))
        for offset, limit in [(0, 20), (0, 100), (rng.randrange(len(current)), 7), (len(expected), 5)]:
            answer = await call(client, "list_memories", offset=offset, limit=limit, **arguments)
            assert answer["total"] == len(expected), arguments
            assert [m["id"] for m in answer["memories"]] == [m.id for m in expected[offset : offset + limit]]
            assert [m["deleted"] for m in answer["memories"]] == [
                m.deleted for m in expected[offset : offset + limit]
            ]
    every = [r for r in current if not r.deleted]
    for recent, project in [(0, None), (10, None), (50, None), (10, "*"), (50, PROJECTS[2])]:
        context = await call(
            client, "get_context", recent=recent, **({} if project is None else {"project": project})
        )
        projects = tool_filters({} if project is None else {"project": project}).projects
        live = [r for r in every if projects is None or r.project in projects]
        others = frozenset(CATEGORIES) - {"profile", "preference"}
        for key, categories, count in [
            ("profile", frozenset({"profile"}), 50),
            ("preferences", frozenset({"preference"}), 50),
            ("recent", others, recent),
        ]:
            expected = reference(live, Filters(categories=categories))[:count]
            assert [m["id"] for m in context[key]] == [m.id for m in expected], key
        assert context["total"] == len(live)
        counted = Counter(r.category for r in live)
        assert context["counts"] == {category: counted[category] for category in HALF_LIFE_DAYS}
        assert context["project"] is None
        assert {entry["project"]: entry["count"] for entry in context["projects"]} == dict(
            Counter(r.project for r in every)
        )


@pytest.mark.anyio
async def test_list_memories_and_get_context_match_a_full_sort(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    rng = random.Random(7)
    export = exported_vault(rng, 300)
    file = tmp_path / "export.json"
    file.write_text(json.dumps(export), encoding="utf-8")
    imported = run_cli(vault_env, "import", "--create", str(file))
    assert imported.returncode == 0, imported.stderr
    async with Client(server_params(vault_env)) as client:
        await check_listings(client, current_of(export), rng)
        # Changes one at a time move memories to the top (the catalog's bisection path).
        for memory in rng.sample(export["memories"], k=12):
            newest = Revision.model_validate(memory["revisions"][-1])
            if newest.deleted:
                await call(client, "restore_memory", id=newest.id)
            elif rng.random() < 0.5:
                await call(client, "delete_memory", id=newest.id, reason="test")
            else:
                await call(client, "update_memory", id=newest.id, tags=["Home", "moved"])
        exported = run_cli(vault_env, "export")
        assert exported.returncode == 0, exported.stderr
        await check_listings(client, current_of(json.loads(exported.stdout)), rng)
