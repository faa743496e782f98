"""Import from the official memory server (`@modelcontextprotocol/server-memory`): its JSONL graph.

That server keeps a knowledge graph in a file (MEMORY_FILE_PATH), one JSON object
a line: entities `{"type": "entity", "name", "entityType", "observations": [...]}`
and relations `{"type": "relation", "from", "to", "relationType"}`. The mapping:

- each observation becomes a memory about its entity (`entity` = the entity's
  name, `text` = the observation), tagged with the entity type and `server-memory`;
- an entity without observations becomes one memory, `NAME (TYPE)`, so it is not lost;
- each relation becomes a memory in words about its `from` entity:
  `FROM RELATION TO` (underscores in the relation type read as spaces), tagged
  `relation` and `server-memory`;
- every memory is of category `fact`, created at the time of the import.

Running it twice adds nothing: a memory's id is a keyed hash of what it was made
from (entity and observation, or the relation), so the second run finds it
present, also after it was corrected or deleted since. The key is the account's
own (derived from its data key): a sync server, which sees ids, cannot test a
guess of the content against them.

The whole file is checked before anything is written, as the native import does:
every line must be an entity or a relation whose fields fit a memory's bounds,
or nothing is imported; asked to (`skip_invalid`), the import leaves the faulty
lines out and imports the rest. Errors name line numbers, fields and rules,
never a value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from squirrel_mcp.book.ids import keyed_id
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.book.transfer import ImportFileError, problems
from squirrel_mcp.core.models import Entity, MemoryText, Revision, Tag, now_iso

SOURCE = "server-memory"
SOURCE_TAG = "server-memory"
RELATION_TAG = "relation"
CATEGORY: Literal["fact"] = "fact"
# The key the ids are derived under (see the module docstring).
ID_KEY_PURPOSE = "server-memory-import-ids"
# How many faulty lines an error names before summing up the rest.
MAX_LINES_NAMED = 10
# An entity's observations are memories of their own; this bounds one line's count of them.
MAX_OBSERVATIONS = 10_000


class GraphEntity(BaseModel):
    """An entity line; extra keys a newer server writes are ignored."""

    name: Entity
    entityType: Tag
    observations: list[MemoryText] = Field(max_length=MAX_OBSERVATIONS)


class GraphRelation(BaseModel):
    """A relation line; `from` is a Python keyword, hence the alias."""

    source: Entity = Field(alias="from")
    to: Entity
    # An entity's bounds, so that "FROM RELATION TO" always fits a memory's text.
    relationType: Entity


@dataclass(frozen=True)
class Planned:
    """One memory the file maps to, before it gets its id."""

    kind: Literal["observation", "entity", "relation"]
    parts: tuple[str, ...]
    entity: str
    text: str
    tags: tuple[str, ...]


@dataclass
class GraphReport:
    """What an import from server-memory did."""

    entities: int = 0
    relations: int = 0
    added: int = 0
    present: int = 0


def _line(line: str) -> GraphEntity | GraphRelation:
    """One line, checked; ValueError with a message naming fields and rules, never values."""
    try:
        item = json.loads(line)
    except json.JSONDecodeError:
        raise ValueError("not JSON") from None
    except RecursionError:
        # Python's parser recurses once per level: arrays or objects a thousand deep stop it.
        raise ValueError("JSON nested too deeply to read") from None
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    kind = item.get("type")
    model: type[GraphEntity] | type[GraphRelation]
    if kind == "entity":
        model = GraphEntity
    elif kind == "relation":
        model = GraphRelation
    else:
        raise ValueError('neither an entity nor a relation ("type" must be "entity" or "relation")')
    try:
        return model.model_validate(item)
    except ValidationError as error:
        raise ValueError(f"{kind}: {problems(error)}") from None


def parse_graph(
    data: bytes, name: str = "the file", *, skip_invalid: bool = False
) -> tuple[list[GraphEntity | GraphRelation], list[str]]:
    """A server-memory file's entities and relations, checked, and the faulty lines left out.

    Each faulty line is named "line N: PROBLEM" (fields and rules, never values). By
    default any fault is ImportFileError naming the lines at fault, and the list is
    empty; with `skip_invalid` the faulty lines are left out and listed instead. A
    file that is not UTF-8 is refused either way.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportFileError(f"{name} is not UTF-8 text, so not a {SOURCE} file") from None
    items: list[GraphEntity | GraphRelation] = []
    faults: list[str] = []
    # The memory server splits on "\n" and skips blank lines; so do we, numbering from 1.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            items.append(_line(line))
        except ValueError as error:
            faults.append(f"line {number}: {error}")
    if faults and not skip_invalid:
        more = f"; and {len(faults) - MAX_LINES_NAMED} more lines" if len(faults) > MAX_LINES_NAMED else ""
        raise ImportFileError(
            f"{name} is not a valid {SOURCE} file; nothing was imported (--skip-invalid imports "
            "the valid lines). " + "; ".join(faults[:MAX_LINES_NAMED]) + more
        )
    return items, faults


def plan(items: list[GraphEntity | GraphRelation]) -> list[Planned]:
    """The memories the graph maps to (see the module docstring), in file order."""
    planned: list[Planned] = []
    for item in items:
        if isinstance(item, GraphEntity):
            tags = (item.entityType, SOURCE_TAG)
            if not item.observations:
                text = f"{item.name} ({item.entityType})"
                planned.append(Planned("entity", (item.name, item.entityType), item.name, text, tags))
            for observation in item.observations:
                planned.append(Planned("observation", (item.name, observation), item.name, observation, tags))
        else:
            words = " ".join(item.relationType.replace("_", " ").split())
            text = f"{item.source} {words} {item.to}"
            parts = (item.source, item.relationType, item.to)
            planned.append(Planned("relation", parts, item.source, text, (RELATION_TAG, SOURCE_TAG)))
    return planned


def memory_id(key: bytes, memory: Planned) -> str:
    """The memory's id: a keyed hash of what it was made from, under the account's key."""
    return keyed_id(key, [memory.kind, *memory.parts])


def import_graph(
    store: MemoryStore,
    items: list[GraphEntity | GraphRelation],
    progress: Callable[[int, int], None] | None = None,
) -> GraphReport:
    """Add the memories the graph maps to that the account has never held; see the module docstring.

    The new memories go to storage in batches (`MemoryStore.import_histories`), whose
    `progress` is told how many of them are done.
    """
    report = GraphReport(
        entities=sum(isinstance(item, GraphEntity) for item in items),
        relations=sum(isinstance(item, GraphRelation) for item in items),
    )
    key = MemoryReader(store).derive_key(ID_KEY_PURPOSE)
    # Deleted and unreadable memories count as held: the import must not bring back what was deleted.
    held = {memory.id for memory in store.current(include_deleted=True)} | set(store.unreadable_ids())
    stamp = now_iso()
    new: list[list[Revision]] = []
    for memory in plan(items):
        identifier = memory_id(key, memory)
        if identifier in held:
            report.present += 1
            continue
        held.add(identifier)
        revision = Revision(
            id=identifier,
            entity=memory.entity,
            text=memory.text,
            tags=list(memory.tags),
            keywords=[],
            category=CATEGORY,
            createdAt=stamp,
            updatedAt=stamp,
            revision=1,
            change="created",
        )
        new.append([revision])
    report.added = sum(added for added, _, _ in store.import_histories(new, progress))
    return report
