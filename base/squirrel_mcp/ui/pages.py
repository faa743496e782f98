"""The page's HTML: the layout, the list, a search and the add form.

A memory's card and what every list shares are squirrel_mcp.ui.cards; the bulk bar
and the page of what it did, squirrel_mcp.ui.bulk_page.

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

from squirrel_mcp.core.models import EVERY_PROJECT, Memory, Revision
from squirrel_mcp.server.results import SearchHit, SearchResult
from squirrel_mcp.ui.bulk_page import bulk_bar
from squirrel_mcp.ui.cards import (
    NOT_DONE_FORM,
    NOT_FILTERED,
    NOT_SEARCHED,
    category_options,
    memory_card,
    problems_box,
)
from squirrel_mcp.ui.forms import LIMITS, ListFilters, SearchForm, words
from squirrel_mcp.ui.html import Html, html, join
from squirrel_mcp.ui.outcomes import KEEP_SECONDS
from squirrel_mcp.ui.projects import ProjectCounts, counts_section, known, names_list, scope_select

# The header's search box, on every page but the search's own (which has its form with filters).
HEADER_SEARCH = (
    '<form class="search" method="get" action="/search" role="search">'
    '<label for="q" class="hidden">Search memories</label>'
    '<input id="q" name="q" type="search" placeholder="Search memories" maxlength="1000">'
    '{scope}<button type="submit">Search</button></form>'
)


@cache
def _template() -> str:
    return (files("squirrel_mcp.ui") / "templates" / "page.html").read_text(encoding="utf-8")


def layout(
    title: str, body: Html, *, where: str, search_box: bool = True, project: str = EVERY_PROJECT
) -> Html:
    """A whole page around `body`; with `search_box`, the header's search box.

    `project`: the list's project filter, which a search from the header keeps.
    """
    search = Html("")
    if search_box:
        scope = (
            html('<input type="hidden" name="project" value="{project}">', project=project)
            if project != EVERY_PROJECT
            else Html("")
        )
        search = html(HEADER_SEARCH, scope=scope)
    return html(_template(), title=title, body=body, where=where, search=search)


@dataclass
class Counts:
    """How many memories each category and each project holds (live ones), and how many are deleted."""

    by_category: Mapping[str, int]
    deleted: int
    unreadable: list[str] = field(default_factory=list)
    by_project: ProjectCounts = field(default_factory=dict)


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
        '<li><a href="/?deleted=1">deleted</a> <span>{deleted}</span></li></ul>{projects}{unreadable}'
        "</aside>",
        rows=rows,
        deleted=counts.deleted,
        projects=counts_section(counts.by_project),
        unreadable=unreadable,
    )


def _filters_form(filters: ListFilters, projects: ProjectCounts) -> Html:
    return html(
        '<form class="filters" method="get" action="/" data-autosubmit>'
        '<label>Category <select name="category">{categories}</select></label>{project}'
        '<label>Tags <input name="tags" value="{tags}" placeholder="all of these"></label>'
        '<label>Entity <input name="entity" value="{entity}"></label>'
        '<label class="check"><input type="checkbox" name="deleted" value="1"{deleted}> deleted too</label>'
        '<button type="submit">Filter</button></form>',
        categories=category_options(filters.category, blank="any"),
        project=scope_select(filters.project, projects),
        tags=words(list(filters.tags)),
        entity=filters.entity or "",
        deleted=Html(" checked" if filters.deleted else ""),
    )


def new_page(
    values: Mapping[str, str], problems: Sequence[tuple[str, str]], *, lost: bool, projects: Sequence[str]
) -> Html:
    """The form that adds a memory; after a refusal, with what was typed and the rules it broke.

    Its project field offers `projects` as it is typed in; left blank, the memory has none.
    """
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
        "<label>Project <small>{project_rule}</small>"
        '<input name="project" value="{project}" list="projects" maxlength="1000"></label>{names}'
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
        project_rule=LIMITS["project"],
        project=values.get("project", ""),
        names=names_list(projects),
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
        '<div class="columns"><section><h1>Memories</h1>{filters}{problems}'
        '<p class="shown">{shown}, most recently changed first · <a href="/new">Add a memory</a> · '
        '<a href="/duplicates">Duplicates</a></p>{refused}{bar}'
        '<ul class="cards" id="memories">{cards}</ul>'
        '<nav class="paging">{links}</nav></section>{counts}</div>',
        refused=problems_box(refused, outcome=NOT_DONE_FORM),
        filters=_filters_form(filters, counts.by_project),
        bar=bulk_bar(known(counts.by_project), restore=filters.deleted) if page else Html(""),
        problems=problems_box(problems, outcome=NOT_FILTERED),
        shown=shown,
        cards=cards,
        links=join(links, " "),
        counts=_counts_box(counts),
    )


# How a search's hits were found, in a person's words, by the answer's ranking.
FOUND_BY = {"lexical": "by words", "hybrid": "by words and meaning"}


def _scores(hit: SearchHit) -> Html:
    """What a hit was found by: the share of the query's words it holds, its closeness in meaning.

    The meaning is left out when no ranker measured it (search by words alone).
    """
    near = Html('<span class="badge near">near miss: check it</span> ') if hit.nearMiss else Html("")
    meaning = (
        Html("")
        if hit.semanticScore is None
        else html(' · meaning <b class="semantic">{semantic}</b>', semantic=f"{hit.semanticScore:.2f}")
    )
    # score is what orders the hits; the other two are what it was made from.
    return html(
        '<p class="scores">{near}matched words <b class="lexical">{lexical}</b>{meaning} · '
        'score <b class="score">{score}</b></p>',
        near=near,
        lexical=f"{hit.lexicalScore:.0%}",
        meaning=meaning,
        score=Html(f"{hit.score:.3f}"),
    )


def _memory_of(hit: SearchHit) -> Memory:
    return Memory.model_validate(hit.model_dump(include=set(Memory.model_fields)))


def _search_form(form: SearchForm, projects: ProjectCounts) -> Html:
    return html(
        '<form class="filters" method="get" action="/search">'
        '<label class="query">Query '
        '<input id="q" name="q" type="search" value="{q}" maxlength="1000" required></label>'
        '<label>Category <select name="category">{categories}</select></label>{project}'
        '<label>Tags <input name="tags" value="{tags}" placeholder="all of these"></label>'
        '<label class="check"><input type="checkbox" name="near" value="1"{near}> near misses</label>'
        '<button type="submit">Search</button></form>',
        q=form.query,
        categories=category_options(form.category, blank="any"),
        project=scope_select(form.project, projects),
        tags=words(list(form.tags)),
        near=Html(" checked" if form.near_misses else ""),
    )


def search_page(
    form: SearchForm,
    result: SearchResult | None,
    problems: Sequence[tuple[str, str]],
    *,
    now: datetime,
    projects: ProjectCounts,
) -> Html:
    """A search's results in rank order, each with its score and what it was found by (words, meaning).

    `projects`: how many memories each project holds, for the project filter and the move.
    """
    if result is None:
        summary = Html("")
    else:
        note = html('<p class="note">{note}</p>', note=result.note) if result.note else Html("")
        summary = html(
            '<p class="shown">{total} found <b id="ranking" data-ranking="{ranking}">{how}</b></p>{note}',
            total=result.total,
            ranking=result.ranking,
            how=FOUND_BY[result.ranking],
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
        bar=bulk_bar(known(projects)) if hits else Html(""),
        form=_search_form(form, projects),
        problems=problems_box(problems, outcome=NOT_SEARCHED),
        summary=summary,
        cards=cards,
    )


def message_page(title: str, message: str) -> Html:
    """A page that only says something (an unknown memory, an unreachable sync server)."""
    return html(
        '<section><h1>{title}</h1><p class="warning">{message}</p></section>', title=title, message=message
    )
