"""The pieces every list of memories shares: a memory's card, its labels, and a form's refusals.

Every value is escaped by `html` (squirrel_mcp.ui.html).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from urllib.parse import urlencode

from squirrel_mcp.core.models import HALF_LIFE_DAYS, Memory
from squirrel_mcp.ui.html import Html, html, join
from squirrel_mcp.ui.projects import project_label
from squirrel_mcp.ui.when import moment

CATEGORIES = tuple(HALF_LIFE_DAYS)

# What did not happen when a form broke a rule, by form: the box says it above the rules.
NOT_SAVED = "Nothing was saved:"
NOT_SEARCHED = "Nothing was searched:"
NOT_FILTERED = "Not filtered (the list shows every memory):"
NOT_DONE_FORM = "Nothing was changed:"


def problems_box(problems: Sequence[tuple[str, str]], *, outcome: str = NOT_SAVED) -> Html:
    """The rules a form broke, field by field (never the values given), under what did not happen."""
    if not problems:
        return Html("")
    items = join(html("<li><b>{name}</b>: {rule}</li>", name=name, rule=rule) for name, rule in problems)
    return html(
        '<div class="problems" role="alert"><p>{outcome}</p><ul>{items}</ul></div>',
        outcome=outcome,
        items=items,
    )


def list_link(**filters: str) -> str:
    """The list's address with `filters` (a tag, an entity, a category)."""
    return "/?" + urlencode(filters)


def labels(memory: Memory, *, deleted: bool) -> Html:
    """Its category, tags and project, each a link to the list filtered by it, and whether it is deleted."""
    tags = join(
        (
            html(
                '<a class="tag" href="{href}" title="Memories tagged {tag}">{tag}</a>',
                href=list_link(tags=tag),
                tag=tag,
            )
            for tag in memory.tags
        ),
        " ",
    )
    deleted_badge = Html(' <span class="badge deleted">deleted</span>') if deleted else Html("")
    return html(
        '<a class="category" href="{href}" title="The {category} memories">{category}</a>{deleted} {tags} '
        "{project}",
        href=list_link(category=memory.category),
        category=memory.category,
        deleted=deleted_badge,
        tags=tags,
        project=project_label(memory.project),
    )


def entity_link(entity: str) -> Html:
    """The entity, a link to the list of its memories."""
    return html(
        '<a class="entity" href="{href}" title="Memories about {entity}">{entity}</a>',
        href=list_link(entity=entity),
        entity=entity,
    )


def memory_card(
    memory: Memory, *, deleted: bool, now: datetime, extra: Html | None = None, select: bool = False
) -> Html:
    """One memory in a list: its text (the link to its page), entity, labels, when it changed.

    With `select`, a checkbox of the bulk bar's form (`bulk_bar`), naming the memory
    and the revision shown, so an action on it is refused if it changed since.
    """
    pick = (
        html(
            '<input class="pick" type="checkbox" name="pick" value="{id}:{revision}" form="bulk" '
            'aria-label="Select this memory">',
            id=memory.id,
            revision=memory.revision,
        )
        if select
        else Html("")
    )
    return html(
        '<li class="card" data-id="{id}">{pick}<p class="text"><a href="/memory/{id}">{text}</a></p>'
        '<p class="meta">{entity} {labels} <span class="when">changed {updated} · revision {revision}</span>'
        "</p>{extra}</li>",
        pick=pick,
        id=memory.id,
        entity=entity_link(memory.entity),
        text=memory.text,
        labels=labels(memory, deleted=deleted),
        revision=memory.revision,
        updated=moment(memory.updatedAt, now),
        extra=extra or "",
    )


def category_options(selected: str | None, *, blank: str | None) -> Html:
    """The <option>s of a category <select>, `selected` chosen; `blank` first when it is not None."""
    options = [html('<option value="">{blank}</option>', blank=blank)] if blank is not None else []
    for category in CATEGORIES:
        chosen = " selected" if category == selected else ""
        options.append(html('<option value="{c}"{s}>{c}</option>', c=category, s=Html(chosen)))
    return join(options)
