"""The current revision of every memory, newest change first, kept in order as it changes.

`list_memories`, `get_context` and the page list memories most recently changed
first, filtered by category, tags and entity, a page at a time. Sorting every
memory on each call costs a large vault hundreds of milliseconds; this catalog
instead keeps the order and the filters' indexes up to date as revisions are
decrypted, so a call costs about its page:

- the order: two sorted lists of (updatedAt, id), one of every memory and one of
  the live ones (not deleted), updated by bisection when a few memories change
  and merged in one sort when many do; an empty catalog (a vault's first pull) is
  filled in one pass;
- the indexes: for each category, each project (none included), each entity and
  each tag (ignoring case), the ids of the memories that have it (those by entity
  and tag are built at the first listing that filters by them); and live counts
  per category and per project;
- by exact text, the ids of the memories saying it (built at the first save through
  the tools, which looks for a live memory identical to the one it is given).

A filtered page either walks the order from the newest, skipping memories that
fail the filters, or picks the newest of the smallest index's matches, whichever
is expected to look at fewer memories. Totals come from the counts when only
categories and projects are asked for, else from counting the smallest index's matches.
Results are exactly those of sorting every memory by (updatedAt, id), newest
first, and filtering: the order is total, since ids are unique.

Not thread-safe: `MemoryStore` holds its lock around every change and read.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from squirrel_mcp.core.models import Revision

# Past this many changed memories in one update, the order is rebuilt in one
# sort (which merges the already sorted run) rather than bisected one by one.
BULK_CHANGES = 32

_Key = tuple[str, str]


def _key(revision: Revision) -> _Key:
    return (revision.updatedAt, revision.id)


@dataclass(frozen=True)
class Filters:
    """What a listing keeps.

    Memories of any of `categories` (None: any), in any of `projects` (None in it:
    the memories with no project; `projects` None: any), about `entity` (ignoring
    case; None: any), holding every one of `tags` (ignoring case), and deleted ones
    only with `include_deleted`.
    """

    categories: frozenset[str] | None = None
    projects: frozenset[str | None] | None = None
    entity: str | None = None
    tags: tuple[str, ...] = ()
    include_deleted: bool = False

    def accepts(self, revision: Revision) -> bool:
        """Whether `revision` passes every filter."""
        if revision.deleted and not self.include_deleted:
            return False
        if self.categories is not None and revision.category not in self.categories:
            return False
        if self.projects is not None and revision.project not in self.projects:
            return False
        if self.entity is not None and revision.entity.casefold() != self.entity.casefold():
            return False
        if self.tags:
            held = {tag.casefold() for tag in revision.tags}
            return all(tag.casefold() in held for tag in self.tags)
        return True


@dataclass(frozen=True)
class Page:
    """One page of a listing, newest change first, and how many memories pass the filters in all."""

    memories: list[Revision]
    total: int


class Catalog:
    """The newest readable revision of each memory, in order and indexed (see the module docstring)."""

    def __init__(self) -> None:
        """An empty catalog."""
        self._current: dict[str, Revision] = {}
        self._all: list[_Key] = []
        self._live: list[_Key] = []
        self._by_category: dict[str, set[str]] = {}
        self._by_project: dict[str | None, set[str]] = {}
        # Built at the first listing by entity or tag (most never ask): a vault's start does not pay for them.
        self._by_entity: dict[str, set[str]] | None = None
        self._by_tag: dict[str, set[str]] | None = None
        # Built at the first `live_with_text` (the tools' save): a vault's start does not pay for it.
        self._by_text: dict[str, set[str]] | None = None
        self._live_by_category = Counter[str]()
        self._live_by_project = Counter[str | None]()
        # How many memories (and live ones) each (category, project) holds: a listing filtered by
        # these alone gets its total from them without looking at a memory.
        self._pairs = Counter[tuple[str, str | None]]()
        self._live_pairs = Counter[tuple[str, str | None]]()

    def __len__(self) -> int:
        """How many memories it holds, deleted ones included."""
        return len(self._current)

    @property
    def live_count(self) -> int:
        """How many memories are not deleted."""
        return len(self._live)

    def live_counts(self) -> Mapping[str, int]:
        """How many live memories each category holds (categories without any may be absent)."""
        return self._live_by_category

    def live_counts_in(self, projects: frozenset[str | None] | None) -> Mapping[str, int]:
        """How many live memories each category holds among `projects` (None: in every project)."""
        if projects is None:
            return self._live_by_category
        counts = Counter[str]()
        for (category, project), count in self._live_pairs.items():
            if project in projects:
                counts[category] += count
        return counts

    def live_project_counts(self) -> Mapping[str | None, int]:
        """How many live memories each project holds (None: those with none; empty ones may be absent)."""
        return self._live_by_project

    def update(self, changed: Mapping[str, Revision | None]) -> None:
        """Make each memory's current revision the one given (None: it has no readable one)."""
        if not self._current:
            self._load(changed)
            return
        bulk = len(changed) > BULK_CHANGES
        for memory_id, revision in changed.items():
            old = self._current.pop(memory_id, None)
            if old is not None:
                self._unindex(old, ordered=not bulk)
            if revision is not None:
                self._current[memory_id] = revision
                self._index(revision, ordered=not bulk)
        if bulk:
            # Keep the keys still current, add the new ones, and let one sort merge the runs.
            gone = set(changed)
            self._all = [key for key in self._all if key[1] not in gone]
            self._live = [key for key in self._live if key[1] not in gone]
            fresh = [self._current[memory_id] for memory_id in changed if memory_id in self._current]
            self._all.extend(_key(revision) for revision in fresh)
            self._live.extend(_key(revision) for revision in fresh if not revision.deleted)
            self._all.sort()
            self._live.sort()

    def _load(self, changed: Mapping[str, Revision | None]) -> None:
        """Fill the empty catalog with the revisions given, in one pass (a vault's first pull)."""
        current = self._current = {i: revision for i, revision in changed.items() if revision is not None}
        self._all = sorted([(revision.updatedAt, i) for i, revision in current.items()])
        self._live = [key for key in self._all if not current[key[1]].deleted]
        by_category: dict[str, set[str]] = {}
        by_project: dict[str | None, set[str]] = {}
        for i, revision in current.items():
            ids = by_category.get(revision.category)
            if ids is None:
                by_category[revision.category] = {i}
            else:
                ids.add(i)
            in_project = by_project.get(revision.project)
            if in_project is None:
                by_project[revision.project] = {i}
            else:
                in_project.add(i)
        self._by_category, self._by_project = by_category, by_project
        live = [current[key[1]] for key in self._live]
        self._live_by_category = Counter(revision.category for revision in live)
        self._live_by_project = Counter(revision.project for revision in live)
        self._pairs = Counter((revision.category, revision.project) for revision in current.values())
        self._live_pairs = Counter((revision.category, revision.project) for revision in live)
        # Built again from `_current` at the first listing by entity or tag, or save.
        self._by_entity = self._by_tag = self._by_text = None

    def _index(self, revision: Revision, *, ordered: bool) -> None:
        memory_id = revision.id
        for index, value in self._index_values(revision):
            ids = index.get(value)
            if ids is None:
                index[value] = {memory_id}
            else:
                ids.add(memory_id)
        in_project = self._by_project.get(revision.project)
        if in_project is None:
            self._by_project[revision.project] = {memory_id}
        else:
            in_project.add(memory_id)
        pair = (revision.category, revision.project)
        self._pairs[pair] += 1
        if not revision.deleted:
            self._live_pairs[pair] += 1
            self._live_by_category[revision.category] += 1
            self._live_by_project[revision.project] += 1
        if ordered:
            key = _key(revision)
            bisect.insort(self._all, key)
            if not revision.deleted:
                bisect.insort(self._live, key)

    def _unindex(self, revision: Revision, *, ordered: bool) -> None:
        for index, value in self._index_values(revision):
            ids = index.get(value)
            if ids is not None:
                ids.discard(revision.id)
                if not ids:
                    del index[value]
        in_project = self._by_project.get(revision.project)
        if in_project is not None:
            in_project.discard(revision.id)
            if not in_project:
                del self._by_project[revision.project]
        pair = (revision.category, revision.project)
        _count_down(self._pairs, pair)
        if not revision.deleted:
            _count_down(self._live_pairs, pair)
            self._live_by_category[revision.category] -= 1
            if not self._live_by_category[revision.category]:
                del self._live_by_category[revision.category]
            self._live_by_project[revision.project] -= 1
            if not self._live_by_project[revision.project]:
                del self._live_by_project[revision.project]
        if ordered:
            key = _key(revision)
            _remove(self._all, key)
            if not revision.deleted:
                _remove(self._live, key)

    def _index_values(self, revision: Revision) -> list[tuple[dict[str, set[str]], str]]:
        """Each index the revision belongs in, with its value there (a tag held twice counts once)."""
        values: list[tuple[dict[str, set[str]], str]] = [(self._by_category, revision.category)]
        if self._by_entity is not None:
            values.append((self._by_entity, revision.entity.casefold()))
        if self._by_tag is not None:
            values.extend((self._by_tag, tag) for tag in {tag.casefold() for tag in revision.tags})
        if self._by_text is not None:
            values.append((self._by_text, revision.text))
        return values

    def live_with_text(self, text: str) -> list[Revision]:
        """The live memories whose text is exactly `text`, oldest first (the index is built on first use)."""
        if self._by_text is None:
            by_text: dict[str, set[str]] = {}
            for memory_id, revision in self._current.items():
                by_text.setdefault(revision.text, set()).add(memory_id)
            self._by_text = by_text
        found = [self._current[i] for i in self._by_text.get(text, ())]
        return sorted((r for r in found if not r.deleted), key=lambda r: (r.createdAt, r.id))

    def _lookups(self) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """The entity and tag indexes, built from the current revisions on first use."""
        if self._by_entity is None or self._by_tag is None:
            by_entity: dict[str, set[str]] = {}
            by_tag: dict[str, set[str]] = {}
            for memory_id, revision in self._current.items():
                by_entity.setdefault(revision.entity.casefold(), set()).add(memory_id)
                for tag in {tag.casefold() for tag in revision.tags}:
                    by_tag.setdefault(tag, set()).add(memory_id)
            self._by_entity, self._by_tag = by_entity, by_tag
        return self._by_entity, self._by_tag

    def newest_first(self, *, include_deleted: bool = False) -> list[Revision]:
        """Every current revision (deleted ones only with `include_deleted`), newest change first."""
        order = self._all if include_deleted else self._live
        return [self._current[memory_id] for _, memory_id in reversed(order)]

    def page(self, filters: Filters, offset: int, limit: int) -> Page:
        """The memories passing `filters`, newest change first, from `offset`, at most `limit`."""
        order = self._all if filters.include_deleted else self._live
        if (
            filters.categories is None
            and filters.projects is None
            and filters.entity is None
            and not filters.tags
        ):
            end = min(len(order), offset + limit)
            memories = [self._current[order[-1 - position][1]] for position in range(offset, end)]
            return Page(memories, len(order))
        source = self._smallest_source(filters)
        matches: list[str] | None = None
        if filters.entity is None and not filters.tags:
            # Only categories and projects: the counts give the total without looking at a memory.
            total = self._counted_total(filters)
        else:
            matches = [i for ids in source for i in ids if filters.accepts(self._current[i])]
            total = len(matches)
        wanted = offset + limit
        if total <= offset or limit <= 0:
            return Page([], total)
        # Walking the order looks at about wanted * len(order) / total memories; picking
        # the newest matches looks at each of them once (after gathering them).
        if wanted * len(order) <= total * total:
            return Page(self._walk(order, filters, offset, limit), total)
        if matches is None:
            matches = [i for ids in source for i in ids if filters.accepts(self._current[i])]
        newest = heapq.nlargest(wanted, matches, key=lambda i: _key(self._current[i]))
        return Page([self._current[i] for i in newest[offset:]], total)

    def _counted_total(self, filters: Filters) -> int:
        """How many memories pass filters of categories and projects alone, from the counts."""
        pairs = self._pairs if filters.include_deleted else self._live_pairs
        return sum(
            count
            for (category, project), count in pairs.items()
            if (filters.categories is None or category in filters.categories)
            and (filters.projects is None or project in filters.projects)
        )

    def _smallest_source(self, filters: Filters) -> Sequence[Collection[str]]:
        """Id sets whose union holds every memory passing `filters`: the smallest such union known."""
        empty: set[str] = set()
        sources: list[list[set[str]]] = []
        if filters.categories is not None:
            sources.append([self._by_category.get(category, empty) for category in filters.categories])
        if filters.projects is not None:
            sources.append([self._by_project.get(project, empty) for project in filters.projects])
        if filters.entity is not None or filters.tags:
            by_entity, by_tag = self._lookups()
            if filters.entity is not None:
                sources.append([by_entity.get(filters.entity.casefold(), empty)])
            sources.extend([by_tag.get(tag.casefold(), empty)] for tag in filters.tags)
        return min(sources, key=lambda sets: sum(len(ids) for ids in sets))

    def _walk(self, order: list[_Key], filters: Filters, offset: int, limit: int) -> list[Revision]:
        found: list[Revision] = []
        skip = offset
        for _, memory_id in reversed(order):
            revision = self._current[memory_id]
            if not filters.accepts(revision):
                continue
            if skip:
                skip -= 1
                continue
            found.append(revision)
            if len(found) == limit:
                break
        return found


def _count_down(counter: Counter[tuple[str, str | None]], key: tuple[str, str | None]) -> None:
    counter[key] -= 1
    if not counter[key]:
        del counter[key]


def _remove(order: list[_Key], key: _Key) -> None:
    at = bisect.bisect_left(order, key)
    if at < len(order) and order[at] == key:
        del order[at]
