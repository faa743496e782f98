"""The duplicates page: groups of live memories that may say the same thing.

Two memories are duplicates here exactly when save_memory would name one as a
possible duplicate of the other by words (`squirrel_mcp.search.duplicates`: more
than half the words of the shorter one's text shared); those a plugin names by
meaning when one is saved are not grouped here. A group is every memory linked to
another by that, one after the other (A like B, B like C: one group), so each
memory is in one group.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import Revision
from squirrel_mcp.search.duplicates import likely_duplicates
from squirrel_mcp.ui.bulk_page import bulk_bar
from squirrel_mcp.ui.cards import memory_card
from squirrel_mcp.ui.html import Html, html, join


def groups(store: MemoryStore) -> list[list[Revision]]:
    """The groups of live memories that duplicate each other, the most recently changed group first.

    In a group, the oldest memory comes first (the one the others most likely repeat).
    """
    live = {memory.id: memory for memory in store.current()}
    index = store.index
    # Union-find over the ids: each link joins two groups.
    parent = {memory_id: memory_id for memory_id in live}

    def root(memory_id: str) -> str:
        while parent[memory_id] != memory_id:
            parent[memory_id] = parent[parent[memory_id]]
            memory_id = parent[memory_id]
        return memory_id

    for memory in live.values():
        # Under the index's lock, a memory another request deletes meanwhile is either
        # still indexed for the whole lookup or skipped, never gone in the middle of it.
        with index.lock:
            if index.number(memory.id) is None:
                continue
            # Every pair is found from its shorter memory, so each looks only at longer ones.
            hits = likely_duplicates(index, memory, limit=len(live), longer_only=True)
        for hit in hits:
            if hit.memory.id in parent:
                parent[root(hit.memory.id)] = root(memory.id)
    found: dict[str, list[Revision]] = {}
    for memory_id, memory in live.items():
        found.setdefault(root(memory_id), []).append(memory)
    grouped = [sorted(group, key=lambda m: (m.createdAt, m.id)) for group in found.values() if len(group) > 1]
    grouped.sort(key=lambda group: max(m.updatedAt for m in group), reverse=True)
    return grouped


def duplicates_page(found: Sequence[Sequence[Revision]], *, now: datetime, projects: Sequence[str]) -> Html:
    """Each group as a list of cards that can be ticked, under the bar that acts on the ticked ones.

    `projects`: the projects the bar can move them to.
    """
    if not found:
        body = Html(
            '<p class="empty" id="no-duplicates">No duplicates: no two memories say much the same.</p>'
        )
    else:
        body = join(
            html(
                '<section class="group" data-group="{n}"><h2>Group {n} · {size} memories</h2>'
                '<ol class="cards">{cards}</ol></section>',
                n=number,
                size=len(group),
                cards=join(memory_card(m, deleted=False, now=now, select=True) for m in group),
            )
            for number, group in enumerate(found, start=1)
        )
    return html(
        '<section id="duplicates"><h1>Duplicates</h1>'
        '<p class="shown">Memories that share at least half their words, as the agent is told when it '
        "saves one. Keep one of each group: tick the others and delete them, or open one to correct it."
        "</p>{bar}{groups}</section>",
        bar=bulk_bar(projects) if found else Html(""),
        groups=body,
    )
