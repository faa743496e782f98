"""The page's HTML: the list, a search, one memory with its history and forms.

Every value is escaped by `html` (squirrel_mcp.ui.html); the page layout is the
package's templates/page.html. No script or style is inline: the policy the
guard sends forbids them, so ui.js and ui.css come from /static/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from urllib.parse import urlencode

from squirrel_mcp.core.models import HALF_LIFE_DAYS, Memory, Revision
from squirrel_mcp.server.results import SearchHit, SearchResult
from squirrel_mcp.ui.forms import LIMITS, ListFilters, SearchForm, words
from squirrel_mcp.ui.html import Html, html, join

# The fields a correction can change, in the order the forms and the history show them.
FIELDS = ("text", "entity", "category", "tags", "keywords")
CATEGORIES = tuple(HALF_LIFE_DAYS)
# What a revision that changed no field did.
UNCHANGED = {
    "deleted": "Deleted: search and the agent stopped seeing it; its content stayed as it was.",
    "restored": "Restored as it was before the delete.",
}


@cache
def _template() -> str:
    return (files("squirrel_mcp.ui") / "templates" / "page.html").read_text(encoding="utf-8")


def layout(title: str, body: Html, *, where: str, query: str = "") -> Html:
    """A whole page around `body`."""
    return html(_template(), title=title, body=body, where=where, query=query)


# What did not happen when a form broke a rule, by form: the box says it above the rules.
NOT_SAVED = "Nothing was saved:"
NOT_SEARCHED = "Nothing was searched:"
NOT_FILTERED = "Not filtered (the list shows every memory):"


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


def _value(revision: Revision, name: str) -> str:
    value = getattr(revision, name)
    return words(value) if isinstance(value, list) else str(value)


def _badges(memory: Memory, *, deleted: bool) -> Html:
    tags = join(html('<span class="tag">{tag}</span>', tag=tag) for tag in memory.tags)
    deleted_badge = Html('<span class="badge deleted">deleted</span>') if deleted else Html("")
    return html(
        '<span class="badge">{category}</span>{deleted}{tags}',
        category=memory.category,
        deleted=deleted_badge,
        tags=tags,
    )


def memory_card(memory: Memory, *, deleted: bool, extra: Html | None = None) -> Html:
    """One memory in a list: entity, text, labels, a link to its page."""
    return html(
        '<li class="card" data-id="{id}"><a class="entity" href="/memory/{id}">{entity}</a>'
        '<p class="text">{text}</p><p class="meta">{badges} <span>revision {revision} · {updated}</span>'
        "</p>{extra}</li>",
        id=memory.id,
        entity=memory.entity,
        text=memory.text,
        badges=_badges(memory, deleted=deleted),
        revision=memory.revision,
        updated=memory.updatedAt,
        extra=extra or "",
    )


def _category_options(selected: str | None, *, blank: str | None) -> Html:
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
        categories=_category_options(filters.category, blank="any"),
        tags=words(list(filters.tags)),
        entity=filters.entity or "",
        deleted=Html(" checked" if filters.deleted else ""),
    )


def list_page(
    page: Sequence[Revision],
    total: int,
    filters: ListFilters,
    counts: Counts,
    problems: Sequence[tuple[str, str]],
) -> Html:
    """The memories passing `filters`, one page of them, with the counts and paging links."""
    cards = join(memory_card(memory, deleted=memory.deleted) for memory in page) or Html(
        '<li class="empty">No memories here.</li>'
    )
    links = []
    if filters.offset > 0:
        back = max(0, filters.offset - filters.limit)
        links.append(html('<a rel="prev" href="/?{q}">Newer</a>', q=urlencode(filters.query(offset=back))))
    if filters.offset + filters.limit < total:
        ahead = filters.offset + filters.limit
        links.append(html('<a rel="next" href="/?{q}">Older</a>', q=urlencode(filters.query(offset=ahead))))
    shown = f"{filters.offset + 1}-{filters.offset + len(page)} of {total}" if page else f"0 of {total}"
    return html(
        '<div class="columns"><section><h1>Memories</h1>{filters}{problems}'
        '<p class="shown">{shown}, most recently changed first</p>'
        '<ul class="cards" id="memories">{cards}</ul>'
        '<nav class="paging">{links}</nav></section>{counts}</div>',
        filters=_filters_form(filters),
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
        '<label>Query <input name="q" type="search" value="{q}" maxlength="1000" required></label>'
        '<label>Category <select name="category">{categories}</select></label>'
        '<label>Tags <input name="tags" value="{tags}" placeholder="all of these"></label>'
        '<label class="check"><input type="checkbox" name="near" value="1"{near}> near misses</label>'
        '<button type="submit">Search</button></form>',
        q=form.query,
        categories=_category_options(form.category, blank="any"),
        tags=words(list(form.tags)),
        near=Html(" checked" if form.near_misses else ""),
    )


def search_page(
    form: SearchForm,
    result: SearchResult | None,
    problems: Sequence[tuple[str, str]],
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
    cards = join(memory_card(_memory_of(hit), deleted=False, extra=_scores(hit)) for hit in hits)
    if result is not None and not hits:
        cards = Html('<li class="empty">Nothing matched. Try near misses, or other words.</li>')
    return html(
        "<section><h1>Search</h1>{form}{problems}{summary}"
        '<ol class="cards" id="results">{cards}</ol></section>',
        form=_search_form(form),
        problems=problems_box(problems, outcome=NOT_SEARCHED),
        summary=summary,
        cards=cards,
    )


@dataclass
class MemoryView:
    """What the memory page shows: the memory, its history, and the state of its forms."""

    latest: Revision
    history: Sequence[Revision]
    #: Newer revisions that failed their integrity check (the page shows an older one).
    unreadable_above: Sequence[int] = ()
    #: The correction form's values when it comes back with problems; else the memory's own.
    values: Mapping[str, str] | None = None
    problems: Sequence[tuple[str, str]] = ()
    notice: str | None = None
    #: The revision the correction form was rendered from (kept when it comes back).
    form_revision: int | None = None


def _changes(previous: Revision | None, revision: Revision) -> Html:
    """What `revision` changed from `previous`, field by field (all of them for the first)."""
    rows = []
    for name in FIELDS:
        after = _value(revision, name)
        if previous is None:
            rows.append(html("<tr><th>{name}</th><td></td><td>{after}</td></tr>", name=name, after=after))
            continue
        before = _value(previous, name)
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


def history_list(history: Sequence[Revision]) -> Html:
    """Every readable revision, newest first: what it did, when, why, and what changed."""
    items = []
    previous: Revision | None = None
    for revision in history:
        reason = html('<p class="reason">Reason: {r}</p>', r=revision.reason) if revision.reason else Html("")
        items.append(
            html(
                '<li class="revision" data-revision="{n}">'
                '<h3>Revision {n} · <span class="change">{change}</span>'
                " · <time>{at}</time></h3>{reason}{changes}</li>",
                n=revision.revision,
                change=revision.change,
                at=revision.updatedAt,
                reason=reason,
                changes=_changes(previous, revision),
            )
        )
        previous = revision
    return html('<ol class="history" id="history" reversed>{items}</ol>', items=join(reversed(items)))


def _correct_form(view: MemoryView) -> Html:
    values = view.values or {name: _value(view.latest, name) for name in FIELDS}
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
        revision=view.form_revision or view.latest.revision,
        text_rule=LIMITS["text"],
        text=values.get("text", ""),
        entity=values.get("entity", ""),
        categories=_category_options(values.get("category"), blank=None),
        tags_rule=LIMITS["tags"],
        tags=values.get("tags", ""),
        keywords_rule=LIMITS["keywords"],
        keywords=values.get("keywords", ""),
        reason=values.get("reason", ""),
    )


def _state_forms(view: MemoryView) -> Html:
    if view.latest.deleted:
        return html(
            '<form class="restore" method="post" action="/memory/{id}/restore"><h2>Restore</h2>'
            "<p>Deleted: search and the agent no longer see it. Restoring brings it back as it was.</p>"
            '<button type="submit">Restore</button></form>',
            id=view.latest.id,
        )
    return join(
        [
            _correct_form(view),
            html(
                '<form class="delete" method="post" action="/memory/{id}/delete"><h2>Delete</h2>'
                "<p>Search and the agent stop seeing it; its history stays and restoring undoes it.</p>"
                '<label>Reason <input name="reason" placeholder="optional"></label>'
                '<button type="submit" class="danger">Delete</button></form>',
                id=view.latest.id,
            ),
        ]
    )


def memory_page(view: MemoryView) -> Html:
    """One memory: as it is now, the forms to change it, and its full history."""
    latest = view.latest
    notice = html('<p class="notice" role="status">{n}</p>', n=view.notice) if view.notice else Html("")
    older = (
        html(
            '<p class="warning">Revision {numbers} failed its integrity check (damaged or tampered with); '
            "this is revision {n}, the newest readable one.</p>",
            numbers=", ".join(str(n) for n in view.unreadable_above),
            n=latest.revision,
        )
        if view.unreadable_above
        else Html("")
    )
    return html(
        '<article class="memory" id="memory" data-id="{id}" data-revision="{revision}">'
        "{notice}{older}<h1>{entity}</h1>"
        '<p class="text" id="text">{text}</p><p class="meta">{badges}</p>'
        '<p class="meta">id {id} · revision <b id="revision">{revision}</b> · created {created} · '
        'changed {updated}</p>{problems}<div class="forms">{forms}</div>'
        "<h2>History</h2>{history}</article>",
        id=latest.id,
        revision=latest.revision,
        notice=notice,
        older=older,
        entity=latest.entity,
        text=latest.text,
        badges=_badges(latest, deleted=latest.deleted),
        created=latest.createdAt,
        updated=latest.updatedAt,
        problems=problems_box(view.problems),
        forms=_state_forms(view),
        history=history_list(view.history),
    )


def message_page(title: str, message: str) -> Html:
    """A page that only says something (an unknown memory, an unreachable sync server)."""
    return html(
        '<section><h1>{title}</h1><p class="warning">{message}</p></section>', title=title, message=message
    )
