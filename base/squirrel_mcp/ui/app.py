"""The page's routes, on the same MemoryStore and plugins as the MCP server.

Reads pull what other processes appended first (the store does that on every
call), so a server running on the same vault and this page see each other's
writes at their next request. A correction names the revision its form was
rendered from: when the memory changed since, the store refuses it, so two
corrections of one memory never both land; the page then shows what changed,
with the person's correction still in the form.

Every form answers its POST with a redirect (303), saved or refused: to the
memory's page, to the add form, to the list, or to the page of an action on
several memories (squirrel_mcp.ui.outcomes keeps what that page shows). That
holds for every refusal: a rule broken, a body too large, a conflict, an unknown
id, the store busy or unreachable. So the address bar never holds a form's
target: a reload shows the page again rather than sending the form again, and a
GET of a form's address leads to a page.

The store's calls block (SQLite, the sync server, scrypt-free but not instant),
so they run in Starlette's thread pool, never on the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib.resources import files

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from squirrel_mcp.book.catalog import Filters
from squirrel_mcp.book.errors import (
    ConflictError,
    LogDivergedError,
    MemoryOperationError,
    UnknownMemoryError,
)
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.transfer import export_json
from squirrel_mcp.core.models import HALF_LIFE_DAYS, MAX_TAGS, Revision
from squirrel_mcp.plugins.manager import PluginHost
from squirrel_mcp.search import bm25
from squirrel_mcp.server.searching import run_search
from squirrel_mcp.server.writing import save_with_duplicates
from squirrel_mcp.storage import StorageError
from squirrel_mcp.ui import duplicates, forms, pages
from squirrel_mcp.ui.forms import FormError
from squirrel_mcp.ui.html import Html
from squirrel_mcp.ui.memory_page import MemoryView, memory_page
from squirrel_mcp.ui.outcomes import BULK, LIST, NEW, BulkOutcome, Outcome, Outcomes

STATIC = {
    "ui.css": "text/css; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
MEMORY_ID = re.compile(r"[0-9a-f]{16}")
# The forms of a memory's page, each posted to /memory/<id>/<form>.
FORMS = ("correct", "delete", "restore")
# What the memory page says after a change; the redirect names one of these, never free text.
NOTICES = {
    "corrected": "Saved: the correction is the newest revision.",
    "deleted": "Deleted. Restore it below if that was a mistake.",
    "restored": "Restored: search and the agent see it again.",
    "saved": "Saved: a new memory, as the agent's save_memory saves one.",
    "stored-already": "This memory was stored already (the same text, entity, category, tags and "
    "keywords): nothing was written. This is the stored one.",
}
# Why a refused form's page says what it says, when the store itself refused.
UNKNOWN_ID = "no memory has this id (it may have been typed wrong)"
TOO_LARGE = f"larger than any form of this page ({forms.MAX_BODY // 1024} KiB at most): nothing was read"


@cache
def _static(name: str) -> bytes:
    return (files("squirrel_mcp.ui") / "static" / name).read_bytes()


@dataclass
class Page:
    """The routes' shared state: the unlocked store, the plugins, and where the memories live."""

    store: MemoryStore
    host: PluginHost
    where: str
    outcomes: Outcomes = field(default_factory=Outcomes)

    def render(self, title: str, body: Html, *, status: int = 200, search_box: bool = True) -> HTMLResponse:
        """A whole HTML page."""
        page = pages.layout(title, body, where=self.where, search_box=search_box)
        return HTMLResponse(page, status_code=status)

    # Reading ------------------------------------------------------------------

    def list_memories(self, request: Request) -> Response:
        """GET /: the memories with the list tool's filters and paging, and counts by category."""
        params = dict(request.query_params)
        problems: list[tuple[str, str]] = []
        kept = self._kept(params.pop("outcome", None), LIST)
        try:
            filters = forms.list_filters(params)
        except FormError as error:
            filters, problems = forms.ListFilters(), error.problems
        wanted = Filters(
            categories=None if filters.category is None else frozenset({filters.category}),
            entity=filters.entity,
            tags=filters.tags,
            include_deleted=filters.deleted,
        )
        with self.store.reading() as catalog:
            by_category = catalog.live_counts()
            counts = pages.Counts(
                {category: by_category.get(category, 0) for category in HALF_LIFE_DAYS},
                deleted=len(catalog) - catalog.live_count,
                unreadable=self.store.unreadable_ids(),
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
        return self.render("Memories", body, status=400 if problems else 200)

    def _kept(self, key: str | None, where: str) -> object | None:
        """The outcome the address names for the page `where`, if it is still kept."""
        return None if key is None else self.outcomes.find(key, where)

    def search(self, request: Request) -> Response:
        """GET /search: the search_memory tool's answer, with its scores."""
        params = dict(request.query_params)
        now = datetime.now(UTC)
        if "q" not in params:
            return self._search_page(pages.search_page(forms.SearchForm(), None, [], now=now))
        try:
            form = forms.search_form(params)
        except FormError as error:
            empty = forms.SearchForm(query=params.get("q", "")[: forms.MAX_QUERY])
            return self._search_page(pages.search_page(empty, None, error.problems, now=now), status=400)
        result = run_search(
            self.store,
            self.host,
            form.query,
            limit=form.limit,
            category=form.category,
            tags=list(form.tags) or None,
            near_misses=form.near_misses,
            now=now,
        )
        return self._search_page(pages.search_page(form, result, [], now=now))

    def _search_page(self, body: Html, *, status: int = 200) -> Response:
        # Its own form holds the query with the filters: no second search box in the header.
        return self.render("Search", body, status=status, search_box=False)

    def show(self, request: Request) -> Response:
        """GET /memory/{id}: the memory, its forms and its full history; after a form, its outcome."""
        memory_id = _memory_id(request)
        key = request.query_params.get("outcome")
        kept = self._kept(key, memory_id)
        outcome = kept if isinstance(kept, Outcome) else None
        latest = self.store.get(memory_id)
        # The memories save_memory would have named as possible duplicates of this one.
        similar = (
            [hit.memory for hit in bm25.likely_duplicates(self.store.index, latest)]
            if self.store.index.number(memory_id) is not None
            else []
        )
        view = MemoryView(
            latest=latest,
            history=self.store.history(memory_id),
            now=datetime.now(UTC),
            unreadable_above=self.store.unreadable_above(memory_id),
            notice=NOTICES.get(request.query_params.get("done", "")),
            outcome=outcome,
            outcome_lost=key is not None and outcome is None,
            similar=similar,
        )
        return self.render(latest.entity, memory_page(view))

    def new(self, request: Request) -> Response:
        """GET /new: the form that adds a memory; after a refused one, with what was typed."""
        key = request.query_params.get("outcome")
        kept = self._kept(key, NEW)
        outcome = kept if isinstance(kept, Outcome) else None
        body = pages.new_page(
            values=dict(outcome.values or {}) if outcome is not None else {},
            problems=outcome.problems if outcome is not None else (),
            lost=key is not None and outcome is None,
        )
        return self.render("Add a memory", body)

    def duplicates(self, request: Request) -> Response:
        """GET /duplicates: groups of live memories that may say the same thing."""
        groups = duplicates.groups(self.store)
        return self.render("Duplicates", duplicates.duplicates_page(groups, now=datetime.now(UTC)))

    def bulk_result(self, request: Request) -> Response:
        """GET /bulk: what an action on several memories did to each; without an outcome, the list."""
        key = request.query_params.get("outcome")
        if key is None:
            return RedirectResponse("/", status_code=303)
        kept = self._kept(key, BULK)
        if not isinstance(kept, BulkOutcome):
            body = pages.message_page("No longer kept", pages.BULK_LOST)
            return self.render("No longer kept", body)
        shown = {memory_id: self.store.get(memory_id) for memory_id, _ in kept.done}
        for memory_id, _ in kept.refused:
            try:
                shown[memory_id] = self.store.get(memory_id)
            except UnknownMemoryError:
                continue
        body = pages.bulk_page(kept, shown, now=datetime.now(UTC))
        return self.render("Done", body)

    def refused(
        self,
        memory_id: str,
        problems: list[tuple[str, str]],
        *,
        values: dict[str, str] | None = None,
        form_revision: int | None = None,
        changed: tuple[int, int] | None = None,
    ) -> Response:
        """A refused form: its Outcome kept, and a redirect to the page that shows it.

        `memory_id` is the memory's, or LIST or NEW for the list and the add form.
        """
        outcome = Outcome(memory_id, problems, values, form_revision, changed)
        key = self.outcomes.keep(outcome)
        page = {LIST: "/", NEW: "/new"}.get(memory_id, f"/memory/{memory_id}")
        return RedirectResponse(f"{page}?outcome={key}", status_code=303)

    def safely(self, write: Callable[[], Response], where: str, values: dict[str, str] | None) -> Response:
        """`write`'s answer; a refusal by the store (unknown id, busy, unreachable) as a refused form's.

        So a POST never answers with an error page: the person's browser lands on a
        page that reloads, saying what went wrong.
        """
        try:
            return write()
        except UnknownMemoryError:
            return self.refused(LIST, [("memory", UNKNOWN_ID)])
        except (MemoryOperationError, StorageError) as error:
            # These name a memory's id, a path or the sync server's address, never content.
            return self.refused(where, [("store", str(error))], values=values)

    def to_memory(self, request: Request) -> Response:
        """GET of a form's address (a reload, the address bar, a bookmark): the memory's page, or the list."""
        try:
            memory_id = _memory_id(request)
            self.store.get(memory_id)
        except UnknownMemoryError:
            return self.refused(LIST, [("memory", UNKNOWN_ID)])
        return RedirectResponse(f"/memory/{memory_id}", status_code=303)

    def export(self, request: Request) -> Response:
        """GET /export: every memory with its history as JSON, like `squirrel-mcp export`."""
        export = export_json(self.store)
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        return Response(
            export.data,
            media_type="application/json",
            headers={
                "content-disposition": f'attachment; filename="squirrel-mcp-export-{stamp}.json"',
                # How many memories lack revisions that could not be read; their ids are in the terminal.
                "x-squirrel-export-gaps": str(len(export.gaps)),
            },
        )

    # Writing ------------------------------------------------------------------

    def correct(self, memory_id: str, form: dict[str, str]) -> Response:
        """POST /memory/{id}/correct: a new revision with the changed fields and the reason."""
        latest = self.store.get(memory_id)
        try:
            changes, reason, rendered_from = forms.correction(form, latest)
        except FormError as error:
            return self.refused(
                memory_id, error.problems, values=forms.correction_values(form), form_revision=_int(form)
            )
        try:
            self.store.update(memory_id, changes=changes, reason=reason, expected_revision=rendered_from)
        except ConflictError:
            return self._conflict(memory_id, form, rendered_from)
        except LogDivergedError:
            raise
        except MemoryOperationError as error:
            # Deleted meanwhile, or already saying this (the same change made elsewhere).
            if self.store.get(memory_id).deleted:
                rule = (
                    "it was deleted meanwhile (by the agent or in another tab): restore it, then correct it"
                )
            else:
                rule = str(error)
            return self.refused(
                memory_id, [("form", rule)], values=forms.correction_values(form), form_revision=_int(form)
            )
        return _done(memory_id, "corrected")

    def _conflict(self, memory_id: str, form: dict[str, str], loaded: int) -> Response:
        """A correction of an older revision: the form moved onto the newest, with what changed."""
        latest = self.store.get(memory_id)
        before = next((r for r in self.store.history(memory_id) if r.revision == loaded), None)
        values, both = forms.rebase(form, before, latest)
        problems = [
            (
                "revision",
                f"this memory changed since this form was loaded (at revision {loaded}; it is now at "
                f"revision {latest.revision}). What changed is shown below; your correction is still in "
                "the form, on top of that change: check it, then save it again",
            )
        ]
        if both:
            problems.append(
                (
                    "both changed",
                    f"{', '.join(both)}: the other change and yours differ; the form holds yours",
                )
            )
        return self.refused(
            memory_id,
            problems,
            values=values,
            form_revision=latest.revision,
            changed=(loaded, latest.revision),
        )

    def delete(self, memory_id: str, form: dict[str, str]) -> Response:
        """POST /memory/{id}/delete: a tombstone revision, with the reason if one was given."""
        try:
            reason = forms.optional_reason(form)
        except FormError as error:
            return self.refused(memory_id, error.problems)
        return self._change(memory_id, lambda: self.store.delete(memory_id, reason=reason), "delete")

    def restore(self, memory_id: str, form: dict[str, str]) -> Response:
        """POST /memory/{id}/restore: the memory back as it was."""
        return self._change(memory_id, lambda: self.store.restore(memory_id), "restore")

    def add(self, form: dict[str, str]) -> Response:
        """POST /new: a new memory, saved as the save_memory tool saves one."""
        try:
            new = forms.new_memory(form)
        except FormError as error:
            return self.refused(NEW, error.problems, values=forms.new_memory_values(form))
        saved, written, _ = save_with_duplicates(
            self.store,
            entity=new.entity,
            text=new.text,
            category=new.category,
            tags=new.tags,
            keywords=new.keywords,
        )
        return _done(saved.id, "saved" if written else "stored-already")

    def bulk(self, pairs: list[tuple[str, str]]) -> Response:
        """POST /bulk: one action on the ticked memories, each judged alone; then a page saying how."""
        try:
            action = forms.bulk(pairs)
        except FormError as error:
            return self.refused(LIST, error.problems)
        done: list[tuple[str, int]] = []
        refused: list[tuple[str, str]] = []
        for memory_id, revision in action.picks:
            try:
                done.append((memory_id, self._bulk_one(action, memory_id, revision).revision))
            except UnknownMemoryError:
                refused.append((memory_id, UNKNOWN_ID))
            except ConflictError:
                refused.append(
                    (
                        memory_id,
                        f"it changed since the page was loaded (at revision {revision}): left as it is; "
                        "open it to see what changed",
                    )
                )
            except BulkRefusal as refusal:
                refused.append((memory_id, str(refusal)))
            except (MemoryOperationError, StorageError) as error:
                # Unchanged (already deleted, not deleted), a diverged log, an unreachable store.
                refused.append((memory_id, _without_id(str(error), memory_id)))
        key = self.outcomes.keep(BulkOutcome(action.action, action.tag, done, refused))
        return RedirectResponse(f"/bulk?outcome={key}", status_code=303)

    def _bulk_one(self, action: forms.Bulk, memory_id: str, revision: int) -> Revision:
        """One memory's part of `action`: the revision written; refused if it changed since `revision`."""
        if action.action == "delete":
            return self.store.delete(memory_id, reason=None, expected_revision=revision)
        if action.action == "restore":
            return self.store.restore(memory_id, expected_revision=revision)
        assert action.tag is not None
        latest = self.store.get(memory_id)
        if latest.deleted:
            raise BulkRefusal("it is deleted: restore it first to change its tags")
        held = [tag.casefold() for tag in latest.tags]
        if action.action == "tag":
            if action.tag.casefold() in held:
                raise BulkRefusal("it carries this tag already")
            if len(latest.tags) >= MAX_TAGS:
                raise BulkRefusal(f"it has {MAX_TAGS} tags, the most a memory can carry")
            tags, reason = [*latest.tags, action.tag], "tag added on the page"
        else:
            if action.tag.casefold() not in held:
                raise BulkRefusal("it does not carry this tag")
            tags = [tag for tag in latest.tags if tag.casefold() != action.tag.casefold()]
            reason = "tag removed on the page"
        return self.store.update(memory_id, changes={"tags": tags}, reason=reason, expected_revision=revision)

    def _change(self, memory_id: str, change: Callable[[], Revision], form: str) -> Response:
        self.store.get(memory_id)  # an unknown id: the list says so (Page.safely)
        try:
            change()
        except LogDivergedError:
            raise
        except MemoryOperationError as error:
            # Already deleted, or not deleted: another process (or tab) got there first.
            rule = f"{error}: the agent or another tab got there first; this is the memory as it is now"
            return self.refused(memory_id, [(form, rule)])
        return _done(memory_id, f"{form}d")


def _memory_id(request: Request) -> str:
    """The memory id in the path; UnknownMemoryError (a 404) when it cannot be one."""
    memory_id = str(request.path_params["memory_id"])
    if MEMORY_ID.fullmatch(memory_id) is None:
        # Not echoed: whatever was typed in its place is no id.
        raise UnknownMemoryError("?")
    return memory_id


class BulkRefusal(Exception):
    """Why an action on several memories left one of them as it was."""


def _without_id(message: str, memory_id: str) -> str:
    """A store's message about one memory, which the bulk page already shows beside its id."""
    return message.removeprefix(f"memory {memory_id} ")


def _int(form: dict[str, str]) -> int | None:
    value = form.get("revision", "")
    return int(value) if value.isdigit() and len(value) < 10 else None


def _done(memory_id: str, what: str) -> Response:
    # 303: the browser follows with a GET, so a reload does not post the form again.
    return RedirectResponse(f"/memory/{memory_id}?done={what}", status_code=303)


Handler = Callable[[str, dict[str, str]], Response]


def _write(handler: Handler, page: Page) -> Callable[[Request], Awaitable[Response]]:
    """A memory's form: read it (bounded), then run `handler` in the thread pool; every answer a redirect."""

    async def endpoint(request: Request) -> Response:
        try:
            memory_id = _memory_id(request)
        except UnknownMemoryError:
            return page.refused(LIST, [("memory", UNKNOWN_ID)])
        try:
            form = await forms.read_form(request)
        except forms.BodyTooLarge:
            return page.refused(memory_id, [("form", TOO_LARGE)])
        except FormError as error:
            return page.refused(memory_id, error.problems)
        # A correction's text comes back into its form if the store refuses it.
        values = forms.correction_values(form) if "text" in form else None
        return await run_in_threadpool(page.safely, lambda: handler(memory_id, form), memory_id, values)

    return endpoint


def _add(page: Page) -> Callable[[Request], Awaitable[Response]]:
    """POST /new, as `_write` does for a memory's forms."""

    async def endpoint(request: Request) -> Response:
        try:
            form = await forms.read_form(request)
        except forms.BodyTooLarge:
            return page.refused(NEW, [("form", TOO_LARGE)])
        except FormError as error:
            return page.refused(NEW, error.problems)
        values = forms.new_memory_values(form)
        return await run_in_threadpool(page.safely, lambda: page.add(form), NEW, values)

    return endpoint


def _bulk(page: Page) -> Callable[[Request], Awaitable[Response]]:
    """POST /bulk, as `_write` does, with room for a page of ticked memories."""

    async def endpoint(request: Request) -> Response:
        try:
            pairs = await forms.read_pairs(request, max_fields=forms.MAX_BULK_FIELDS)
        except forms.BodyTooLarge:
            return page.refused(LIST, [("form", TOO_LARGE)])
        except FormError as error:
            return page.refused(LIST, error.problems)
        return await run_in_threadpool(page.safely, lambda: page.bulk(pairs), LIST, None)

    return endpoint


def create_app(store: MemoryStore, host: PluginHost, *, where: str) -> Starlette:
    """The page's Starlette application (without the guard: squirrel_mcp.ui.serve puts it in front)."""
    page = Page(store, host, where)

    def static(request: Request) -> Response:
        name = str(request.path_params["name"])
        if name not in STATIC:
            return PlainTextResponse("not found\n", status_code=404)
        return Response(_static(name), media_type=STATIC[name])

    def refused(request: Request, error: Exception) -> Response:
        # An unreadable memory: the message names its id, never content.
        return page.render("Unreadable", pages.message_page("Unreadable", str(error)), status=409)

    def diverged(request: Request, error: Exception) -> Response:
        # The log no longer extends what this machine saw: the message says what to run.
        return page.render("Not written", pages.message_page("Not written", str(error)), status=409)

    def not_found(request: Request, error: Exception) -> Response:
        body = pages.message_page("Not found", "No memory has this id (it may have been typed wrong).")
        return page.render("Not found", body, status=404)

    def storage_failed(request: Request, error: Exception) -> Response:
        # Storage errors name the cause (a path, the server's address), never a key or memory text.
        return page.render("Storage error", pages.message_page("Storage error", str(error)), status=503)

    routes = [
        Route("/", page.list_memories),
        Route("/search", page.search),
        Route("/new", page.new, methods=["GET"]),
        Route("/new", _add(page), methods=["POST"]),
        Route("/bulk", page.bulk_result, methods=["GET"]),
        Route("/bulk", _bulk(page), methods=["POST"]),
        Route("/duplicates", page.duplicates),
        Route("/export", page.export),
        Route("/memory/{memory_id}", page.show),
        *(
            Route(f"/memory/{{memory_id}}/{form}", endpoint, methods=[method])
            for form, write in zip(FORMS, (page.correct, page.delete, page.restore), strict=True)
            for method, endpoint in (("POST", _write(write, page)), ("GET", page.to_memory))
        ),
        Route("/static/{name}", static),
    ]
    handlers: dict[type[Exception], Callable[[Request, Exception], Response]] = {
        UnknownMemoryError: not_found,
        LogDivergedError: diverged,
        MemoryOperationError: refused,
        StorageError: storage_failed,
    }
    return Starlette(routes=routes, exception_handlers=handlers)
