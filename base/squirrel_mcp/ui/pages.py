"""The page's HTML: the layout, the list, a search, and the pieces the memory's page shares.

Every value is escaped by `html` (squirrel_mcp.ui.html); the page layout is the
package's templates/page.html. No script or style is inline: the policy the
guard sends forbids them, so ui.js and ui.css come from /static/. One memory's
page is squirrel_mcp.ui.memory_page.
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
from squirrel_mcp.ui.forms import ListFilters, SearchForm, words
from squirrel_mcp.ui.html import Html, html, join
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


def memory_card(memory: Memory, *, deleted: bool, now: datetime, extra: Html | None = None) -> Html:
    """One memory in a list: its text (the link to its page), entity, labels, when it changed."""
    return html(
        '<li class="card" data-id="{id}"><p class="text"><a href="/memory/{id}">{text}</a></p>'
        '<p class="meta">{entity} {labels} <span class="when">changed {updated} · revision {revision}</span>'
        "</p>{extra}</li>",
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


def list_page(
    page: Sequence[Revision],
    total: int,
    filters: ListFilters,
    counts: Counts,
    problems: Sequence[tuple[str, str]],
    *,
    now: datetime,
) -> Html:
    """The memories passing `filters`, one page of them, with the counts and paging links."""
    cards = join(memory_card(memory, deleted=memory.deleted, now=now) for memory in page) or Html(
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
    cards = join(memory_card(_memory_of(hit), deleted=False, now=now, extra=_scores(hit)) for hit in hits)
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


def message_page(title: str, message: str) -> Html:
    """A page that only says something (an unknown memory, an unreachable sync server)."""
    return html(
        '<section><h1>{title}</h1><p class="warning">{message}</p></section>', title=title, message=message
    )
