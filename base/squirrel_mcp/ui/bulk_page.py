"""The bulk bar (one action on the ticked memories) and the page of what it did.

Every value is escaped by `html` (squirrel_mcp.ui.html).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from squirrel_mcp.core.models import Revision
from squirrel_mcp.ui.cards import memory_card
from squirrel_mcp.ui.html import Html, html, join
from squirrel_mcp.ui.outcomes import KEEP_SECONDS, BulkAction, BulkOutcome
from squirrel_mcp.ui.projects import move_fields, project_text


def bulk_bar(projects: Sequence[str], *, restore: bool = False) -> Html:
    """The form that acts on the ticked memories (their checkboxes name it); with `restore`, Restore too.

    Its move offers `projects`, no project, and a new one's name. The tag's buttons
    come first: Enter in a field submits the first button, which must not be Delete
    (ui.js makes Enter in the new project's name press Move).
    """
    restore_button = (
        Html('<button type="submit" name="action" value="restore">Restore</button>') if restore else Html("")
    )
    return html(
        '<form id="bulk" class="bulk" method="post" action="/bulk">'
        '<span class="what">With the ticked memories:</span>'
        '<label>Tag <input name="tag" maxlength="64" placeholder="a tag" data-enter="tag"></label>'
        '<button type="submit" name="action" value="tag">Add tag</button>'
        '<button type="submit" name="action" value="untag">Remove tag</button>{move}'
        '{restore}<button type="submit" name="action" value="delete" class="danger">Delete</button></form>',
        move=move_fields(projects),
        restore=restore_button,
    )


# What an action did, by action: "3 memories deleted"; and the action that undoes it.
DONE = {
    "delete": "deleted",
    "restore": "restored",
    "tag": "tagged",
    "untag": "untagged",
    "move": "moved",
    "move-back": "moved back",
}
NOT_DONE = {action: f"not {done}" for action, done in DONE.items()}
AFTER = {
    "delete": "Search and the agent no longer see them; their histories stay. Restore them here if "
    "that was a mistake.",
    "restore": "Search and the agent see them again, as they were before the delete.",
    "tag": "Each changed one is a new revision; its history shows the tag added.",
    "untag": "Each changed one is a new revision; its history shows the tag removed.",
    "move": "Each moved one is a new revision; its history shows the project it left. The agent reads "
    "it in that project now (and, with no project, in every one).",
    "move-back": "Each is back in the project it was in before the move; its history shows both moves.",
}
UNDO: dict[BulkAction, BulkAction] = {
    "delete": "restore",
    "restore": "delete",
    "tag": "untag",
    "untag": "tag",
    "move": "move-back",
    # Moving back the memories moved back takes them where the first move had.
    "move-back": "move-back",
}
BULK_LOST = (
    f"What this page showed after an action on several memories is no longer kept (that lasts "
    f"{KEEP_SECONDS // 60} minutes, and ends when squirrel-mcp ui stops). The list shows them as they are."
)


def memories(count: int) -> str:
    """The count with its noun: 1 memory, 3 memories."""
    return f"{count} memory" if count == 1 else f"{count} memories"


def _undo_form(outcome: BulkOutcome) -> Html:
    """The form that undoes what was done, on the revisions it wrote."""
    undo = UNDO[outcome.action]
    labels = {
        "restore": f"Restore these {memories(len(outcome.done))}",
        "delete": f"Delete these {memories(len(outcome.done))} again",
        "untag": "Remove the tag again",
        "tag": "Add the tag back",
        # After a move back too: each goes back to the project it was in before.
        "move-back": f"Move these {memories(len(outcome.done))} back",
    }
    picks = join(
        html('<input type="hidden" name="pick" value="{id}:{revision}">', id=memory_id, revision=revision)
        for memory_id, revision in outcome.done
    )
    tag = html('<input type="hidden" name="tag" value="{tag}">', tag=outcome.tag) if outcome.tag else Html("")
    return html(
        '<form class="undo" id="undo" method="post" action="/bulk">{picks}{tag}'
        '<button type="submit" name="action" value="{undo}"{danger}>{label}</button></form>',
        picks=picks,
        tag=tag,
        undo=undo,
        danger=Html(' class="danger"' if undo == "delete" else ""),
        label=labels[undo],
    )


def _what(outcome: BulkOutcome) -> str:
    """What the headline says after its verb: the tag, or the project a move took them to."""
    if outcome.action in ("tag", "untag") and outcome.tag:
        return f" {outcome.tag}"
    if outcome.action == "move":
        return f" to {project_text(outcome.project)}"
    return ""


def bulk_page(outcome: BulkOutcome, shown: Mapping[str, Revision], *, now: datetime) -> Html:
    """What an action on several memories did: a count, each refusal beside its memory, and the undo."""
    headline = f"{memories(len(outcome.done))} {DONE[outcome.action]}{_what(outcome)}"
    refused = Html("")
    if outcome.refused:
        items = join(
            memory_card(
                shown[memory_id],
                deleted=shown[memory_id].deleted,
                now=now,
                extra=html('<p class="warning refusal">{rule}</p>', rule=rule),
            )
            if memory_id in shown
            else html(
                '<li class="card" data-id="{id}"><p class="warning refusal">{id}: {rule}</p></li>',
                id=memory_id,
                rule=rule,
            )
            for memory_id, rule in outcome.refused
        )
        refused = html(
            '<div class="problems" role="alert"><p>{count} {not_done}, each for the reason shown:</p></div>'
            '<ul class="cards" id="refused">{items}</ul>',
            count=memories(len(outcome.refused)),
            not_done=NOT_DONE[outcome.action],
            items=items,
        )
    done = join(
        memory_card(shown[memory_id], deleted=shown[memory_id].deleted, now=now)
        for memory_id, _ in outcome.done
        if memory_id in shown
    )
    return html(
        '<section id="bulk-result"><h1>{headline}</h1>'
        '<p class="notice" role="status">{after}</p>{undo}{refused}'
        '{done_heading}<ul class="cards" id="done">{done}</ul>'
        '<p><a href="/">All memories</a> · <a href="/?deleted=1">With the deleted ones</a></p></section>',
        headline=headline,
        after=AFTER[outcome.action] if outcome.done else "Nothing was changed.",
        undo=_undo_form(outcome) if outcome.done else Html(""),
        refused=refused,
        done_heading=html("<h2>{changed}</h2>", changed=DONE[outcome.action].capitalize())
        if outcome.refused and outcome.done
        else Html(""),
        done=done,
    )
