"""The bulk bar's form: one action on several ticked memories, checked before anything is written.

A field that breaks a rule becomes a FormError naming the field and the rule,
never the value, as in squirrel_mcp.ui.forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from squirrel_mcp.ui.forms import MAX_LIST_LIMIT, TAG, Checker, named_project
from squirrel_mcp.ui.outcomes import BulkAction

# The largest bulk form: a whole page of the list picked, and the bar's few fields.
MAX_PICKS = MAX_LIST_LIMIT
MAX_BULK_FIELDS = MAX_PICKS + 10
BULK_ACTIONS = ("delete", "restore", "tag", "untag", "move", "move-back")
# The move's choice of project: none, or one of those the bar lists (its name after the prefix).
MOVE_NONE = "none"
MOVE_TO = "project:"
PICK = re.compile(r"([0-9a-f]{16}):([0-9]{1,9})")


@dataclass(frozen=True)
class Bulk:
    """An action on several memories: which, each with the revision its checkbox was rendered from."""

    action: BulkAction
    picks: list[tuple[str, int]]
    tag: str | None = None
    #: Where a move takes them (None: no project).
    project: str | None = None


def bulk(pairs: list[tuple[str, str]]) -> Bulk:
    """The bulk bar's form (repeated `pick` fields, "<id>:<revision>"); FormError when a rule is broken."""
    checker = Checker()
    form: dict[str, str] = {}
    picks: list[tuple[str, int]] = []
    for name, value in pairs:
        if name != "pick":
            form.setdefault(name, value)
        elif (found := PICK.fullmatch(value)) is None:
            checker.fail("pick", "each must be a memory id and a revision, as the list renders them")
        elif (pick := (found.group(1), int(found.group(2)))) not in picks:
            picks.append(pick)
    action = form.get("action", "")
    if action not in BULK_ACTIONS:
        checker.fail("action", f"must be one of {', '.join(BULK_ACTIONS)}")
    if not picks:
        checker.fail("pick", "tick at least one memory")
    elif len(picks) > MAX_PICKS:
        checker.fail("pick", f"at most {MAX_PICKS} memories at once")
    tag = None
    if action in ("tag", "untag"):
        if not form.get("tag", "").strip():
            checker.fail("tag", "give the tag to add or remove")
        else:
            tag = checker.check("tag", TAG, form["tag"].strip())
    project = _move_target(checker, form) if action == "move" else None
    checker.done()
    return Bulk(cast(BulkAction, action), picks, tag, project)


def _move_target(checker: Checker, form: dict[str, str]) -> str | None:
    """The project a move names: one the bar lists (`to`), none, or a new one's name typed (`new_project`)."""
    chosen, typed = form.get("to", ""), form.get("new_project", "")
    if typed.strip():
        if chosen:
            checker.fail("project", "choose a project or type a new one's name, not both")
            return None
        return named_project(checker, "new project", typed)
    if chosen == MOVE_NONE:
        return None
    if chosen.startswith(MOVE_TO) and chosen.removeprefix(MOVE_TO).strip():
        return named_project(checker, "project", chosen.removeprefix(MOVE_TO))
    checker.fail("project", "choose where to move them: a project, no project, or a new one's name")
    return None
