"""The page's forms: correct, delete and restore a memory, add one, act on several at once.

A correction names the revision its form was rendered from: when the memory
changed since, the store refuses it, so two corrections of one memory never both
land; the page then shows what changed, with the person's correction still in the
form. Each form answers with a redirect (squirrel_mcp.ui.page).

The store's calls block (SQLite, the sync server), so they run in Starlette's
thread pool, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from squirrel_mcp.book.errors import (
    ConflictError,
    LogDivergedError,
    MemoryOperationError,
    UnknownMemoryError,
)
from squirrel_mcp.core.models import MAX_TAGS, Revision
from squirrel_mcp.server.writing import save_with_duplicates
from squirrel_mcp.storage import StorageError
from squirrel_mcp.ui import forms, selection
from squirrel_mcp.ui.forms import FormError
from squirrel_mcp.ui.outcomes import LIST, NEW, BulkOutcome
from squirrel_mcp.ui.page import UNKNOWN_ID, Page, memory_id

TOO_LARGE = f"larger than any form of this page ({forms.MAX_BODY // 1024} KiB at most): nothing was read"


def correct(page: Page, changed_id: str, form: dict[str, str]) -> Response:
    """POST /memory/{id}/correct: a new revision with the changed fields and the reason."""
    latest = page.store.get(changed_id)
    try:
        changes, reason, rendered_from = forms.correction(form, latest)
    except FormError as error:
        return page.refused(
            changed_id, error.problems, values=forms.correction_values(form), form_revision=_int(form)
        )
    try:
        page.store.update(changed_id, changes=changes, reason=reason, expected_revision=rendered_from)
    except ConflictError:
        return _conflict(page, changed_id, form, rendered_from)
    except LogDivergedError:
        raise
    except MemoryOperationError as error:
        # Deleted meanwhile, or already saying this (the same change made elsewhere).
        if page.store.get(changed_id).deleted:
            rule = "it was deleted meanwhile (by the agent or in another tab): restore it, then correct it"
        else:
            rule = str(error)
        return page.refused(
            changed_id, [("form", rule)], values=forms.correction_values(form), form_revision=_int(form)
        )
    return _done(changed_id, "corrected")


def _conflict(page: Page, changed_id: str, form: dict[str, str], loaded: int) -> Response:
    """A correction of an older revision: the form moved onto the newest, with what changed."""
    latest = page.store.get(changed_id)
    before = next((r for r in page.store.history(changed_id) if r.revision == loaded), None)
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
            ("both changed", f"{', '.join(both)}: the other change and yours differ; the form holds yours")
        )
    return page.refused(
        changed_id, problems, values=values, form_revision=latest.revision, changed=(loaded, latest.revision)
    )


def delete(page: Page, changed_id: str, form: dict[str, str]) -> Response:
    """POST /memory/{id}/delete: a tombstone revision, with the reason if one was given."""
    try:
        reason = forms.optional_reason(form)
    except FormError as error:
        return page.refused(changed_id, error.problems)
    return _change(page, changed_id, lambda: page.store.delete(changed_id, reason=reason), "delete")


def restore(page: Page, changed_id: str, form: dict[str, str]) -> Response:
    """POST /memory/{id}/restore: the memory back as it was."""
    return _change(page, changed_id, lambda: page.store.restore(changed_id), "restore")


def add(page: Page, form: dict[str, str]) -> Response:
    """POST /new: a new memory, saved as the save_memory tool saves one."""
    try:
        new = forms.new_memory(form)
    except FormError as error:
        return page.refused(NEW, error.problems, values=forms.new_memory_values(form))
    saved, written, _ = save_with_duplicates(
        page.store,
        entity=new.entity,
        text=new.text,
        category=new.category,
        tags=new.tags,
        keywords=new.keywords,
        project=new.project,
    )
    return _done(saved.id, "saved" if written else "stored-already")


def bulk(page: Page, pairs: list[tuple[str, str]]) -> Response:
    """POST /bulk: one action on the ticked memories, each judged alone; then a page saying how."""
    try:
        action = selection.bulk(pairs)
    except FormError as error:
        return page.refused(LIST, error.problems)
    done: list[tuple[str, int]] = []
    refused: list[tuple[str, str]] = []
    for picked, revision in action.picks:
        try:
            done.append((picked, _bulk_one(page, action, picked, revision).revision))
        except UnknownMemoryError:
            refused.append((picked, UNKNOWN_ID))
        except ConflictError:
            refused.append(
                (
                    picked,
                    f"it changed since the page was loaded (at revision {revision}): left as it is; "
                    "open it to see what changed",
                )
            )
        except BulkRefusal as refusal:
            refused.append((picked, str(refusal)))
        except (MemoryOperationError, StorageError) as error:
            # Unchanged (already deleted, not deleted), a diverged log, an unreachable store.
            refused.append((picked, _without_id(str(error), picked)))
    key = page.outcomes.keep(BulkOutcome(action.action, action.tag, done, refused, project=action.project))
    return RedirectResponse(f"/bulk?outcome={key}", status_code=303)


def _bulk_one(page: Page, action: selection.Bulk, picked: str, revision: int) -> Revision:
    """One memory's part of `action`: the revision written; refused if it changed since `revision`."""
    store = page.store
    if action.action == "delete":
        return store.delete(picked, reason=None, expected_revision=revision)
    if action.action == "restore":
        return store.restore(picked, expected_revision=revision)
    if action.action in ("move", "move-back"):
        return _move_one(page, action, picked, revision)
    assert action.tag is not None
    latest = store.get(picked)
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
    return store.update(picked, changes={"tags": tags}, reason=reason, expected_revision=revision)


def _move_one(page: Page, action: selection.Bulk, picked: str, revision: int) -> Revision:
    """One memory moved to `action.project`, or (move-back) to the project it left at `revision`.

    A correction, as update_memory's `project` makes one: the history shows the move.
    """
    store = page.store
    latest = store.get(picked)
    if latest.deleted:
        raise BulkRefusal("it is deleted: restore it first to move it")
    if action.action == "move":
        target, reason = action.project, "moved to another project on the page"
    else:
        # The form names the revision the move wrote; the project is read from the one before it.
        history = store.history(picked)
        moved = next((r for r in history if r.revision == revision), None)
        before = max((r for r in history if r.revision < revision), key=lambda r: r.revision, default=None)
        if moved is None or before is None or moved.project == before.project:
            raise BulkRefusal(f"its revision {revision} did not move it: nothing to move back")
        target, reason = before.project, "moved back to its project on the page"
    if latest.project == target:
        raise BulkRefusal("it is in this project already" if target else "it has no project already")
    return store.update(picked, changes={"project": target}, reason=reason, expected_revision=revision)


def _change(page: Page, changed_id: str, change: Callable[[], Revision], form: str) -> Response:
    page.store.get(changed_id)  # an unknown id: the list says so (Page.safely)
    try:
        change()
    except LogDivergedError:
        raise
    except MemoryOperationError as error:
        # Already deleted, or not deleted: another process (or tab) got there first.
        rule = f"{error}: the agent or another tab got there first; this is the memory as it is now"
        return page.refused(changed_id, [(form, rule)])
    return _done(changed_id, f"{form}d")


class BulkRefusal(Exception):
    """Why an action on several memories left one of them as it was."""


def _without_id(message: str, changed_id: str) -> str:
    """A store's message about one memory, which the bulk page already shows beside its id."""
    return message.removeprefix(f"memory {changed_id} ")


def _int(form: dict[str, str]) -> int | None:
    value = form.get("revision", "")
    return int(value) if value.isdigit() and len(value) < 10 else None


def _done(changed_id: str, what: str) -> Response:
    # 303: the browser follows with a GET, so a reload does not post the form again.
    return RedirectResponse(f"/memory/{changed_id}?done={what}", status_code=303)


Handler = Callable[[Page, str, dict[str, str]], Response]
# A memory's forms, each posted to /memory/<id>/<form>.
FORMS: dict[str, Handler] = {"correct": correct, "delete": delete, "restore": restore}


def memory_form(handler: Handler, page: Page) -> Callable[[Request], Awaitable[Response]]:
    """A memory's form: read it (bounded), then run `handler` in the thread pool; every answer a redirect."""

    async def endpoint(request: Request) -> Response:
        try:
            changed_id = memory_id(request)
        except UnknownMemoryError:
            return page.refused(LIST, [("memory", UNKNOWN_ID)])
        try:
            form = await forms.read_form(request)
        except forms.BodyTooLarge:
            return page.refused(changed_id, [("form", TOO_LARGE)])
        except FormError as error:
            return page.refused(changed_id, error.problems)
        # A correction's text comes back into its form if the store refuses it.
        values = forms.correction_values(form) if "text" in form else None
        return await run_in_threadpool(
            page.safely, lambda: handler(page, changed_id, form), changed_id, values
        )

    return endpoint


def add_form(page: Page) -> Callable[[Request], Awaitable[Response]]:
    """POST /new, as `memory_form` does for a memory's forms."""

    async def endpoint(request: Request) -> Response:
        try:
            form = await forms.read_form(request)
        except forms.BodyTooLarge:
            return page.refused(NEW, [("form", TOO_LARGE)])
        except FormError as error:
            return page.refused(NEW, error.problems)
        values = forms.new_memory_values(form)
        return await run_in_threadpool(page.safely, lambda: add(page, form), NEW, values)

    return endpoint


def bulk_form(page: Page) -> Callable[[Request], Awaitable[Response]]:
    """POST /bulk, as `memory_form` does, with room for a page of ticked memories."""

    async def endpoint(request: Request) -> Response:
        try:
            pairs = await forms.read_pairs(request, max_fields=selection.MAX_BULK_FIELDS)
        except forms.BodyTooLarge:
            return page.refused(LIST, [("form", TOO_LARGE)])
        except FormError as error:
            return page.refused(LIST, error.problems)
        return await run_in_threadpool(page.safely, lambda: bulk(page, pairs), LIST, None)

    return endpoint
