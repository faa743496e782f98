"""The page's HTML: the layout, the list, a search, the add form, and the pieces the other pages share.

Also the bulk bar (an action on the ticked memories) and the page of what it did.

Every value is escaped by `html` (squirrel_mcp.ui.html); the page layout is the
package's templates/page.html. No script or style is inline: the policy the
guard sends forbids them, so ui.js and ui.css come from /static/. One memory's
page is squirrel_mcp.ui.memory_page, the duplicates squirrel_mcp.ui.duplicates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib.resources import files
from urllib.parse import urlencode

from squirrel_mcp.core.models import HALF_LIFE_DAYS, Memory, Revision
from squirrel_mcp.server.results import SearchHit, SearchResult
from squirrel_mcp.ui.forms import LIMITS, ListFilters, SearchForm, words
from squirrel_mcp.ui.html import Html, html, join
from squirrel_mcp.ui.outcomes import KEEP_SECONDS, BulkAction, BulkOutcome
from squirrel_mcp.ui.when import moment

CATEGORIES = tuple(HALF_LIFE_DAYS)
# The header's search box, on every page but the search's own (which has its form with filters).
HEADER_SEARCH = Html(
    '<form class="search" method="get" action="/search" role="search">'
    '<label for="q" class="hidden">Search memories</label>'
    '<input id="q" name="q" type="search" placeholder="Search memories" maxlength="1000">'
    '<button type="submit">Search</button></form>'
)


@cache
def _template() -> str:
    return (files("squirrel_mcp.ui") / "templates" / "page.html").read_text(encoding="utf-8")


def layout(title: str, body: Html, *, where: str, search_box: bool = True) -> Html:
    """A whole page around `body`; with `search_box`, the header's search box."""
    search = HEADER_SEARCH if search_box else Html("")
    return html(_template(), title=title, body=body, where=where, search=search)


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
    """Its category and tags, each a link to the list filtered by it, and whether it is deleted."""
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
        '<a class="category" href="{href}" title="The {category} memories">{category}</a>{deleted} {tags}',
        href=list_link(category=memory.category),
        category=memory.category,
        deleted=deleted_badge,
        tags=tags,
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


@dataclass
class Counts:
    """How many memories each category holds (live ones), and how many are deleted."""

    by_category: Mapping[str, int]
    deleted: int
    unreadable: list[str] = field(default_factory=list)


def _counts_box(counts: Counts) -> Html:
    rows = join(
        html(
            '<li><a href="/?{q}">{category}</a> <span>{n}</span></li>',
            q=urlencode({"category": c}),
            category=c,
            n=n,
        )
        for c, n in counts.by_category.items()
    )
    unreadable = (
        html(
            '<p class="warning">{n} memories could not be read: '
            "their records failed the integrity check.</p>",
            n=len(counts.unreadable),
        )
        if counts.unreadable
        else Html("")
    )
    return html(
        '<aside class="counts"><h2>By category</h2><ul>{rows}'
        '<li><a href="/?deleted=1">deleted</a> <span>{deleted}</span></li></ul>{unreadable}</aside>',
        rows=rows,
        deleted=counts.deleted,
        unreadable=unreadable,
    )


def _filters_form(filters: ListFilters) -> Html:
    return html(
        '<form class="filters" method="get" action="/" data-autosubmit>'
        '<label>Category <select name="category">{categories}</select></label>'
        '<label>Tags <input name="tags" value="{tags}" placeholder="all of these"></label>'
        '<label>Entity <input name="entity" value="{entity}"></label>'
        '<label class="check"><input type="checkbox" name="deleted" value="1"{deleted}> deleted too</label>'
        '<button type="submit">Filter</button></form>',
        categories=category_options(filters.category, blank="any"),
        tags=words(list(filters.tags)),
        entity=filters.entity or "",
        deleted=Html(" checked" if filters.deleted else ""),
    )


def bulk_bar(*, restore: bool = False) -> Html:
    """The form that acts on the ticked memories (their checkboxes name it); with `restore`, Restore too.

    The tag's buttons come first: Enter in the tag field submits the first button,
    which must not be Delete.
    """
    restore_button = (
        Html('<button type="submit" name="action" value="restore">Restore</button>') if restore else Html("")
    )
    return html(
        '<form id="bulk" class="bulk" method="post" action="/bulk">'
        '<span class="what">With the ticked memories:</span>'
        '<label>Tag <input name="tag" maxlength="64" placeholder="a tag"></label>'
        '<button type="submit" name="action" value="tag">Add tag</button>'
        '<button type="submit" name="action" value="untag">Remove tag</button>'
        '{restore}<button type="submit" name="action" value="delete" class="danger">Delete</button></form>',
        restore=restore_button,
    )


# What an action did, by action: "3 memories deleted"; and the action that undoes it.
DONE = {"delete": "deleted", "restore": "restored", "tag": "tagged", "untag": "untagged"}
NOT_DONE = {"delete": "not deleted", "restore": "not restored", "tag": "not tagged", "untag": "not untagged"}
AFTER = {
    "delete": "Search and the agent no longer see them; their histories stay. Restore them here if "
    "that was a mistake.",
    "restore": "Search and the agent see them again, as they were before the delete.",
    "tag": "Each changed one is a new revision; its history shows the tag added.",
    "untag": "Each changed one is a new revision; its history shows the tag removed.",
}
UNDO: dict[BulkAction, BulkAction] = {
    "delete": "restore",
    "restore": "delete",
    "tag": "untag",
    "untag": "tag",
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


def bulk_page(outcome: BulkOutcome, shown: Mapping[str, Revision], *, now: datetime) -> Html:
    """What an action on several memories did: a count, each refusal beside its memory, and the undo."""
    tag = f" {outcome.tag}" if outcome.action in ("tag", "untag") and outcome.tag else ""
    headline = f"{memories(len(outcome.done))} {DONE[outcome.action]}{tag}"
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


def new_page(values: Mapping[str, str], problems: Sequence[tuple[str, str]], *, lost: bool) -> Html:
    """The form that adds a memory; after a refusal, with what was typed and the rules it broke."""
    warning = html('<p class="warning" id="lost">{w}</p>', w=NEW_LOST) if lost else Html("")
    return html(
        "<section><h1>Add a memory</h1>{warning}"
        "<p>Saved as the agent saves one: the same rules, and a memory identical to a stored one "
        "is not stored twice.</p>{problems}"
        '<form class="edit add" method="post" action="/new">'
        "<label>Text <small>{text_rule}</small>"
        '<textarea name="text" rows="5" required>{text}</textarea></label>'
        '<label>Entity <small>who or what it is about</small><input name="entity" value="{entity}"></label>'
        '<label>Category <select name="category">{categories}</select></label>'
        '<label>Tags <small>{tags_rule}</small><input name="tags" value="{tags}"></label>'
        '<label>Keywords <small>{keywords_rule}</small><input name="keywords" value="{keywords}"></label>'
        '<button type="submit">Save memory</button></form></section>',
        warning=warning,
        problems=problems_box(problems),
        text_rule=LIMITS["text"],
        text=values.get("text", ""),
        entity=values.get("entity", "user"),
        categories=category_options(values.get("category", "note"), blank=None),
        tags_rule=LIMITS["tags"],
        tags=values.get("tags", ""),
        keywords_rule=LIMITS["keywords"],
        keywords=values.get("keywords", ""),
    )


NEW_LOST = (
    f"What you typed in this form is no longer kept (that lasts {KEEP_SECONDS // 60} minutes, and ends "
    "when squirrel-mcp ui stops)."
)


def list_page(
    page: Sequence[Revision],
    total: int,
    filters: ListFilters,
    counts: Counts,
    problems: Sequence[tuple[str, str]],
    *,
    now: datetime,
    refused: Sequence[tuple[str, str]] = (),
) -> Html:
    """The memories passing `filters`, one page of them, with the counts and paging links.

    `refused`: what a form that redirected here broke (an unknown id, a bulk action with nothing ticked).
    """
    cards = join(
        memory_card(memory, deleted=memory.deleted, now=now, select=True) for memory in page
    ) or Html('<li class="empty">No memories here.</li>')
    links = []
    if filters.offset > 0:
        back = max(0, filters.offset - filters.limit)
        links.append(html('<a rel="prev" href="/?{q}">Newer</a>', q=urlencode(filters.query(offset=back))))
    if filters.offset + filters.limit < total:
        ahead = filters.offset + filters.limit
        links.append(html('<a rel="next" href="/?{q}">Older</a>', q=urlencode(filters.query(offset=ahead))))
    shown = f"{filters.offset + 1}-{filters.offset + len(page)} of {total}" if page else f"0 of {total}"
    return html(
        '<div class="columns"><section><h1>Memories</h1>{refused}{filters}{problems}'
        '<p class="shown">{shown}, most recently changed first · <a href="/new">Add a memory</a> · '
        '<a href="/duplicates">Duplicates</a></p>{bar}'
        '<ul class="cards" id="memories">{cards}</ul>'
        '<nav class="paging">{links}</nav></section>{counts}</div>',
        refused=problems_box(refused, outcome=NOT_DONE_FORM),
        filters=_filters_form(filters),
        bar=bulk_bar(restore=filters.deleted) if page else Html(""),
        problems=problems_box(problems, outcome=NOT_FILTERED),
        shown=shown,
        cards=cards,
        links=join(links, " "),
        counts=_counts_box(counts),
    )


def _scores(hit: SearchHit) -> Html:
    semantic = "none (no semantic ranker)" if hit.semanticScore is None else f"{hit.semanticScore:.3f}"
    near = Html('<span class="badge near">near miss: check it</span> ') if hit.nearMiss else Html("")
    # score is what orders the hits; the other two are what it was made from.
    return html(
        '<p class="scores">{near}score <b class="score">{score}</b> · '
        'lexicalScore <b class="lexical">{lexical}</b> · '
        'semanticScore <b class="semantic">{semantic}</b></p>',
        near=near,
        score=Html(f"{hit.score:.3f}"),
        lexical=Html(f"{hit.lexicalScore:.3f}"),
        semantic=semantic,
    )


def _memory_of(hit: SearchHit) -> Memory:
    return Memory.model_validate(hit.model_dump(include=set(Memory.model_fields)))


def _search_form(form: SearchForm) -> Html:
    return html(
        '<form class="filters" method="get" action="/search">'
        '<label class="query">Query '
        '<input id="q" name="q" type="search" value="{q}" maxlength="1000" required></label>'
        '<label>Category <select name="category">{categories}</select></label>'
        '<label>Tags <input name="tags" value="{tags}" placeholder="all of these"></label>'
        '<label class="check"><input type="checkbox" name="near" value="1"{near}> near misses</label>'
        '<button type="submit">Search</button></form>',
        q=form.query,
        categories=category_options(form.category, blank="any"),
        tags=words(list(form.tags)),
        near=Html(" checked" if form.near_misses else ""),
    )


def search_page(
    form: SearchForm,
    result: SearchResult | None,
    problems: Sequence[tuple[str, str]],
    *,
    now: datetime,
) -> Html:
    """A search's results in rank order, each with its score and the lexical and semantic ones."""
    if result is None:
        summary = Html("")
    else:
        note = html('<p class="note">{note}</p>', note=result.note) if result.note else Html("")
        summary = html(
            '<p class="shown">{total} found · ranking <b id="ranking">{ranking}</b></p>{note}',
            total=result.total,
            ranking=result.ranking,
            note=note,
        )
    hits = result.results if result is not None else []
    cards = join(
        memory_card(_memory_of(hit), deleted=False, now=now, extra=_scores(hit), select=True) for hit in hits
    )
    if result is not None and not hits:
        cards = Html('<li class="empty">Nothing matched. Try near misses, or other words.</li>')
    return html(
        "<section><h1>Search</h1>{form}{problems}{summary}{bar}"
        '<ol class="cards" id="results">{cards}</ol></section>',
        bar=bulk_bar() if hits else Html(""),
        form=_search_form(form),
        problems=problems_box(problems, outcome=NOT_SEARCHED),
        summary=summary,
        cards=cards,
    )


def message_page(title: str, message: str) -> Html:
    """A page that only says something (an unknown memory, an unreachable sync server)."""
    return html(
        '<section><h1>{title}</h1><p class="warning">{message}</p></section>', title=title, message=message
    )
