"""The duplicates page's groups and the bulk bar's form, in this interpreter on a real vault."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from squirrel_mcp.search.duplicates import likely_duplicates
from squirrel_mcp.ui import forms, selection
from squirrel_mcp.ui.duplicates import groups
from tests.ui_support import create_vault, library, save


def test_a_group_is_every_memory_linked_one_after_the_other(vault_env: dict[str, str]) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        first = save(store, "harbour ferry timetable lighthouse")
        second = save(store, "harbour ferry timetable schedule")
        third = save(store, "ferry timetable schedule weekends")
        alone = save(store, "Prefers green tea over coffee, no sugar")
        other_pair = [
            save(store, "dentist appointment thursday"),
            save(store, "dentist appointment thursday morning"),
        ]
        # The links save_memory would name: first-second and second-third, never first-third.
        linked = {m.id: {hit.memory.id for hit in likely_duplicates(store.index, m)} for m in (first, third)}
        assert linked == {first.id: {second.id}, third.id: {second.id}}
        found = groups(store)
        assert {frozenset(m.id for m in group) for group in found} == {
            frozenset(m.id for m in other_pair),
            frozenset({first.id, second.id, third.id}),
        }
        assert all(alone.id not in {m.id for m in group} for group in found)
        # In each group the oldest first (saved in one millisecond: by id); the newest group first.
        assert all(group == sorted(group, key=lambda m: (m.createdAt, m.id)) for group in found)
        newest = [max(m.updatedAt for m in group) for group in found]
        assert newest == sorted(newest, reverse=True)
        # A deleted memory is in no group: the pair it made is gone, and a chain through it breaks.
        store.delete(other_pair[1].id, reason=None)
        store.delete(second.id, reason=None)
        assert groups(store) == []


def pairs(query: str) -> list[tuple[str, str]]:
    return parse_qsl(query, keep_blank_values=True)


def test_the_bulk_form_names_the_rule_it_breaks() -> None:
    one, two = "0123456789abcdef", "fedcba9876543210"
    bulk = selection.bulk(pairs(f"action=tag&tag=+chores+&pick={one}:3&pick={two}:1&pick={one}:3"))
    assert (bulk.action, bulk.tag, bulk.picks) == ("tag", "chores", [(one, 3), (two, 1)])
    cases = [
        ("action=delete", "pick", "tick at least one memory"),
        (f"action=burn&pick={one}:1", "action", "must be one of"),
        (f"action=delete&pick={one}", "pick", "a memory id and a revision"),
        (f"action=delete&pick={one.upper()}:1", "pick", "a memory id and a revision"),
        (f"action=untag&tag=&pick={one}:1", "tag", "give the tag"),
        (f"action=tag&tag={'t' * 65}&pick={one}:1", "tag", "is longer than 64 characters"),
        (
            "action=delete&" + "&".join(f"pick={n:016x}:1" for n in range(selection.MAX_PICKS + 1)),
            "pick",
            "at most",
        ),
    ]
    for query, field, rule in cases:
        with pytest.raises(forms.FormError) as refused:
            selection.bulk(pairs(query))
        assert any(name == field and rule in why for name, why in refused.value.problems), (
            query[:40],
            refused,
        )
