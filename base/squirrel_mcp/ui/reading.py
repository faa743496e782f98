"""The page's GET routes: the list, search, a memory with its history, the add form, duplicates.

Reads pull what other processes appended first (the store does that on every
call), so a server running on the same vault and this page see each other's
writes at their next request.
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from squirrel_mcp.book.catalog import Filters
from squirrel_mcp.book.errors import UnknownMemoryError
from squirrel_mcp.core.models import HALF_LIFE_DAYS
from squirrel_mcp.search.duplicates import likely_duplicates
from squirrel_mcp.server.searching import run_search
from squirrel_mcp.ui import bulk_page, forms, pages
from squirrel_mcp.ui import duplicates as duplicate_groups
from squirrel_mcp.ui.forms import FormError
from squirrel_mcp.ui.html import Html
from squirrel_mcp.ui.memory_page import MemoryView, memory_page
from squirrel_mcp.ui.outcomes import BULK, LIST, NEW, BulkOutcome, Outcome
from squirrel_mcp.ui.page import UNKNOWN_ID, Page, memory_id
from squirrel_mcp.ui.projects import known

# What the memory page says after a change; the redirect names one of these, never free text.
NOTICES = {
    "corrected": "Saved: the correction is the newest revision.",
    "deleted": "Deleted. Restore it below if that was a mistake.",
    "restored": "Restored: search and the agent see it again.",
    "saved": "Saved: a new memory, as the agent's save_memory saves one.",
    "stored-already": "This memory was stored already (the same text, entity, category, tags, "
    "keywords and project): nothing was written. This is the stored one.",
}


def list_memories(page: Page, request: Request) -> Response:
    """GET /: the memories with the list tool's filters and paging, and counts by category and project."""
    params = dict(request.query_params)
    problems: list[tuple[str, str]] = []
    kept = page.kept(params.pop("outcome", None), LIST)
    try:
        filters = forms.list_filters(params)
    except FormError as error:
        filters, problems = forms.ListFilters(), error.problems
    wanted = Filters(
        categories=None if filters.category is None else frozenset({filters.category}),
        entity=filters.entity,
        tags=filters.tags,
        include_deleted=filters.deleted,
        projects=forms.projects_in(filters.project),
    )
    with page.store.reading() as catalog:
        by_category = catalog.live_counts()
        counts = pages.Counts(
            {category: by_category.get(category, 0) for category in HALF_LIFE_DAYS},
            deleted=len(catalog) - catalog.live_count,
            unreadable=page.store.unreadable_ids(),
            by_project=dict(catalog.live_project_counts()),
        )
        shown = catalog.page(wanted, filters.offset, filters.limit)
    body = pages.list_page(
        shown.memories,
        shown.total,
        filters,
        counts,
        problems,
        now=datetime.now(UTC),
        refused=kept.problems if isinstance(kept, Outcome) else (),
    )
    return page.render("Memories", body, status=400 if problems else 200, project=filters.project)


def search(page: Page, request: Request) -> Response:
    """GET /search: the search_memory tool's answer, with its scores."""
    params = dict(request.query_params)
    now = datetime.now(UTC)
    projects = _project_counts(page)
    if "q" not in params:
        body = pages.search_page(forms.SearchForm(), None, [], now=now, projects=projects)
        return _search_page(page, body)
    try:
        form = forms.search_form(params)
    except FormError as error:
        empty = forms.SearchForm(query=params.get("q", "")[: forms.MAX_QUERY])
        body = pages.search_page(empty, None, error.problems, now=now, projects=projects)
        return _search_page(page, body, status=400)
    result = run_search(
        page.store,
        page.host,
        form.query,
        limit=form.limit,
        category=form.category,
        tags=list(form.tags) or None,
        near_misses=form.near_misses,
        projects=forms.projects_in(form.project),
        now=now,
    )
    return _search_page(page, pages.search_page(form, result, [], now=now, projects=projects))


def _project_counts(page: Page) -> dict[str | None, int]:
    """How many live memories each project holds (None: those with none)."""
    with page.store.reading() as catalog:
        return dict(catalog.live_project_counts())


def _search_page(page: Page, body: Html, *, status: int = 200) -> Response:
    # Its own form holds the query with the filters: no second search box in the header.
    return page.render("Search", body, status=status, search_box=False)


def show(page: Page, request: Request) -> Response:
    """GET /memory/{id}: the memory, its forms and its full history; after a form, its outcome."""
    shown_id = memory_id(request)
    key = request.query_params.get("outcome")
    kept = page.kept(key, shown_id)
    outcome = kept if isinstance(kept, Outcome) else None
    latest = page.store.get(shown_id)
    # The memories save_memory would have named as possible duplicates of this one.
    similar = (
        [hit.memory for hit in likely_duplicates(page.store.index, latest)]
        if page.store.index.number(shown_id) is not None
        else []
    )
    view = MemoryView(
        latest=latest,
        history=page.store.history(shown_id),
        now=datetime.now(UTC),
        unreadable_above=page.store.unreadable_above(shown_id),
        notice=NOTICES.get(request.query_params.get("done", "")),
        outcome=outcome,
        outcome_lost=key is not None and outcome is None,
        similar=similar,
        projects=known(_project_counts(page)),
    )
    # Titled by its heading, which is its text; the tab's title holds none of it, as browsers
    # keep titles in their history on disk, where no-store keeps the page itself out of the cache.
    return page.render("Memory", memory_page(view))


def new(page: Page, request: Request) -> Response:
    """GET /new: the form that adds a memory; after a refused one, with what was typed."""
    key = request.query_params.get("outcome")
    kept = page.kept(key, NEW)
    outcome = kept if isinstance(kept, Outcome) else None
    body = pages.new_page(
        values=dict(outcome.values or {}) if outcome is not None else {},
        problems=outcome.problems if outcome is not None else (),
        lost=key is not None and outcome is None,
        projects=known(_project_counts(page)),
    )
    return page.render("Add a memory", body)


def duplicates(page: Page, request: Request) -> Response:
    """GET /duplicates: groups of live memories that may say the same thing."""
    groups = duplicate_groups.groups(page.store)
    body = duplicate_groups.duplicates_page(
        groups, now=datetime.now(UTC), projects=known(_project_counts(page))
    )
    return page.render("Duplicates", body)


def bulk_result(page: Page, request: Request) -> Response:
    """GET /bulk: what an action on several memories did to each; without an outcome, the list."""
    key = request.query_params.get("outcome")
    if key is None:
        return RedirectResponse("/", status_code=303)
    kept = page.kept(key, BULK)
    if not isinstance(kept, BulkOutcome):
        body = pages.message_page("No longer kept", bulk_page.BULK_LOST)
        return page.render("No longer kept", body)
    shown = {done_id: page.store.get(done_id) for done_id, _ in kept.done}
    for refused_id, _ in kept.refused:
        try:
            shown[refused_id] = page.store.get(refused_id)
        except UnknownMemoryError:
            continue
    body = bulk_page.bulk_page(kept, shown, now=datetime.now(UTC))
    return page.render("Done", body)


def to_memory(page: Page, request: Request) -> Response:
    """GET of a form's address (a reload, the address bar, a bookmark): the memory's page, or the list."""
    try:
        wanted = memory_id(request)
        page.store.get(wanted)
    except UnknownMemoryError:
        return page.refused(LIST, [("memory", UNKNOWN_ID)])
    return RedirectResponse(f"/memory/{wanted}", status_code=303)
