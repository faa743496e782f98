"""One memory's page: as it is now, the forms to change it, and its full history.

After a refused form (the redirect's Outcome) it also shows why, the correction
form with the person's unsaved text, and, when the memory changed meanwhile,
what changed. Every value is escaped by `html`, as in squirrel_mcp.ui.cards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from squirrel_mcp.core.models import Revision
from squirrel_mcp.ui.cards import category_options, entity_link, labels, memory_card, problems_box
from squirrel_mcp.ui.forms import FIELDS, LIMITS, field_text
from squirrel_mcp.ui.html import Html, html, join
from squirrel_mcp.ui.outcomes import KEEP_SECONDS, Outcome
from squirrel_mcp.ui.projects import move_fields, project_text
from squirrel_mcp.ui.when import moment

# What a revision that changed no field did.
UNCHANGED = {
    "deleted": "Deleted: search and the agent stopped seeing it; its content stayed as it was.",
    "restored": "Restored as it was before the delete.",
}
LOST = (
    f"What this page showed after your last change of this memory is no longer kept (that lasts "
    f"{KEEP_SECONDS // 60} minutes, and ends when squirrel-mcp ui stops): this is the memory as it is now."
)


@dataclass
class MemoryView:
    """What the memory page shows: the memory, its history, and the state of its forms."""

    latest: Revision
    history: Sequence[Revision]
    #: What "3 hours ago" counts from.
    now: datetime
    #: Newer revisions that failed their integrity check (the page shows an older one).
    unreadable_above: Sequence[int] = ()
    notice: str | None = None
    #: A refused form's problems and values, after its redirect.
    outcome: Outcome | None = None
    #: The address named an outcome that is no longer kept.
    outcome_lost: bool = False
    #: Live memories that may say the same (those save_memory would name as possible duplicates).
    similar: Sequence[Revision] = ()
    #: The projects its move form offers (besides none and a new one).
    projects: Sequence[str] = ()


# How long a memory page's heading may be: about a line; the whole text follows it.
HEADLINE = 80

# The fields a history compares: those a correction form changes, and the project a move changes.
HISTORY_FIELDS = (*FIELDS, "project")


def _shown(revision: Revision, name: str) -> str:
    """One of HISTORY_FIELDS of `revision` as its history writes it."""
    return project_text(revision.project) if name == "project" else field_text(revision, name)


def _changes(previous: Revision | None, revision: Revision) -> Html:
    """What `revision` changed from `previous`, field by field (all of them for the first)."""
    rows = []
    for name in HISTORY_FIELDS:
        after = _shown(revision, name)
        if previous is None:
            rows.append(html("<tr><th>{name}</th><td></td><td>{after}</td></tr>", name=name, after=after))
            continue
        before = _shown(previous, name)
        if before != after:
            rows.append(
                html(
                    '<tr><th>{name}</th><td class="before"><del>{before}</del></td>'
                    '<td class="after"><ins>{after}</ins></td></tr>',
                    name=name,
                    before=before,
                    after=after,
                )
            )
    if not rows:
        return html(
            '<p class="unchanged">{what}</p>', what=UNCHANGED.get(revision.change, "No field changed.")
        )
    return html(
        '<table class="diff"><thead><tr><th>field</th><th>before</th><th>after</th></tr></thead>'
        "<tbody>{rows}</tbody></table>",
        rows=join(rows),
    )


def history_list(history: Sequence[Revision], now: datetime) -> Html:
    """Every readable revision, newest first: what it did, when, why, and what changed."""
    items = []
    previous: Revision | None = None
    for revision in history:
        reason = html('<p class="reason">Reason: {r}</p>', r=revision.reason) if revision.reason else Html("")
        items.append(
            html(
                '<li class="revision" data-revision="{n}">'
                '<h3>Revision {n} · <span class="change">{change}</span>'
                " · {at}</h3>{reason}{changes}</li>",
                n=revision.revision,
                change=revision.change,
                at=moment(revision.updatedAt, now),
                reason=reason,
                changes=_changes(previous, revision),
            )
        )
        previous = revision
    return html('<ol class="history" id="history" reversed>{items}</ol>', items=join(reversed(items)))


def _conflict(view: MemoryView) -> Html:
    """After a refused correction: what changed between the form's revision and the memory's then."""
    if view.outcome is None or view.outcome.changed is None:
        return Html("")
    loaded, then = view.outcome.changed
    by_number = {revision.revision: revision for revision in view.history}
    newer = by_number.get(then)
    if newer is None:
        return Html("")
    return html(
        '<section class="conflict" id="conflict"><h2>Changed meanwhile</h2>'
        "<p>Your form was loaded at revision {loaded}; revision {then} was written {at} "
        '(<span class="change">{change}</span>{reason}). What changed since your form was loaded:</p>'
        "{changes}</section>",
        loaded=loaded,
        then=then,
        at=moment(newer.updatedAt, view.now),
        change=newer.change,
        reason=f", reason: {newer.reason}" if newer.reason else "",
        changes=_changes(by_number.get(loaded), newer),
    )


def _correct_form(view: MemoryView) -> Html:
    outcome = view.outcome
    values = (
        outcome.values
        if outcome is not None and outcome.values is not None
        else {name: field_text(view.latest, name) for name in FIELDS}
    )
    revision = outcome.form_revision if outcome is not None and outcome.form_revision else None
    return html(
        '<form class="edit" method="post" action="/memory/{id}/correct"><h2>Correct</h2>'
        '<input type="hidden" name="revision" value="{revision}">'
        '<label>Text <small>{text_rule}</small><textarea name="text" rows="5">{text}</textarea></label>'
        '<label>Entity <input name="entity" value="{entity}"></label>'
        '<label>Category <select name="category">{categories}</select></label>'
        '<label>Tags <small>{tags_rule}</small><input name="tags" value="{tags}"></label>'
        '<label>Keywords <small>{keywords_rule}</small><input name="keywords" value="{keywords}"></label>'
        "<label>Reason <small>required, kept in the history</small>"
        '<input name="reason" value="{reason}" required></label>'
        '<button type="submit">Save correction</button></form>',
        id=view.latest.id,
        revision=revision or view.latest.revision,
        text_rule=LIMITS["text"],
        text=values.get("text", ""),
        entity=values.get("entity", ""),
        categories=category_options(values.get("category"), blank=None),
        tags_rule=LIMITS["tags"],
        tags=values.get("tags", ""),
        keywords_rule=LIMITS["keywords"],
        keywords=values.get("keywords", ""),
        reason=values.get("reason", ""),
    )


def _state_forms(view: MemoryView) -> Html:
    if view.latest.deleted:
        unsaved = view.outcome.values if view.outcome is not None else None
        kept = (
            html(
                '<p>Your correction, not saved:</p><blockquote class="unsaved">{text}</blockquote>',
                text=unsaved.get("text", ""),
            )
            if unsaved
            else Html("")
        )
        return html(
            '<form class="restore" method="post" action="/memory/{id}/restore"><h2>Restore</h2>'
            "<p>Deleted: search and the agent no longer see it. Restoring brings it back as it was.</p>"
            '{kept}<button type="submit">Restore</button></form>',
            id=view.latest.id,
            kept=kept,
        )
    # The move and the delete share the narrow column beside the correction.
    return join(
        [
            _correct_form(view),
            html(
                '<div class="side">{move}'
                '<form class="delete" method="post" action="/memory/{id}/delete"><h2>Delete</h2>'
                "<p>Search and the agent stop seeing it; its history stays and restoring undoes it.</p>"
                '<label>Reason <input name="reason" placeholder="optional"></label>'
                '<button type="submit" class="danger">Delete</button></form></div>',
                move=_move_form(view),
                id=view.latest.id,
            ),
        ]
    )


def _move_form(view: MemoryView) -> Html:
    """Move it to another project: the bulk bar's move, on this one memory at the revision shown."""
    return html(
        '<form class="move" id="move" method="post" action="/bulk"><h2>Move</h2>'
        "<p>In {project} now. The agent reads a memory in its project, and one with no project in "
        'every one.</p><input type="hidden" name="pick" value="{id}:{revision}">{fields}</form>',
        project=project_text(view.latest.project),
        id=view.latest.id,
        revision=view.latest.revision,
        fields=move_fields(view.projects),
    )


def _warnings(view: MemoryView) -> Html:
    """An integrity failure above the shown revision, and a refused form's outcome no longer kept."""
    parts = []
    if view.unreadable_above:
        parts.append(
            html(
                '<p class="warning">Revision {numbers} failed its integrity check (damaged or tampered '
                "with); this is revision {n}, the newest readable one.</p>",
                numbers=", ".join(str(n) for n in view.unreadable_above),
                n=view.latest.revision,
            )
        )
    if view.outcome_lost:
        parts.append(html('<p class="warning" id="lost">{lost}</p>', lost=LOST))
    return join(parts)


def _similar(view: MemoryView) -> Html:
    """The memories this one may duplicate, as the agent is told when it saves one."""
    if not view.similar:
        return Html("")
    return html(
        '<section class="similar" id="similar"><h2>May say the same</h2>'
        "<p>Their texts share most of their words with this one's. If one says the same thing, "
        'keep one: correct it, and delete the other. <a href="/duplicates">All duplicates</a></p>'
        '<ul class="cards">{cards}</ul></section>',
        cards=join(memory_card(m, deleted=False, now=view.now) for m in view.similar),
    )


def headline(text: str) -> str:
    """A memory's text as its page's heading: on one line, cut after a word with "…" past HEADLINE."""
    flat = " ".join(text.split())
    if len(flat) <= HEADLINE:
        return flat
    cut = flat[: HEADLINE - 1]
    # At the last space, unless that would leave too little: a long word is cut where it falls.
    space = cut.rfind(" ")
    return (cut[:space] if space > HEADLINE // 2 else cut).rstrip(" ,;:.") + "…"


def _heading(text: str) -> Html:
    """The page's heading: the text itself when it is short, else its headline above the whole text."""
    if headline(text) == text:
        return html('<h1 class="text" id="text">{text}</h1>', text=text)
    return html('<h1>{title}</h1><p class="text" id="text">{text}</p>', title=headline(text), text=text)


def memory_page(view: MemoryView) -> Html:
    """One memory: as it is now, the forms to change it, and its full history."""
    latest = view.latest
    notice = html('<p class="notice" role="status">{n}</p>', n=view.notice) if view.notice else Html("")
    problems = view.outcome.problems if view.outcome is not None else ()
    return html(
        '<article class="memory" id="memory" data-id="{id}" data-revision="{revision}">'
        "{notice}{warnings}{heading}"
        '<p class="meta">{entity} {labels}</p>'
        '<p class="meta">id {id} · revision <b id="revision">{revision}</b> · created {created} · '
        'changed {updated}</p>{problems}{conflict}<div class="forms">{forms}</div>'
        "{similar}<h2>History</h2>{history}</article>",
        id=latest.id,
        revision=latest.revision,
        notice=notice,
        warnings=_warnings(view),
        heading=_heading(latest.text),
        entity=entity_link(latest.entity),
        labels=labels(latest, deleted=latest.deleted),
        created=moment(latest.createdAt, view.now),
        updated=moment(latest.updatedAt, view.now),
        problems=problems_box(problems),
        conflict=_conflict(view),
        forms=_state_forms(view),
        similar=_similar(view),
        history=history_list(view.history, view.now),
    )
