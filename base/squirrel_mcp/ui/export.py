"""Export from the page: every memory with its history, once the passphrase is given again.

The download holds every memory in plaintext, so the session cookie alone does not
get it: a cookie copied out of the browser (or sent to the wrong listener) would
otherwise be worth every memory. GET /export is a form asking for the passphrase
that unlocks the memories; POST /export checks it as the memory process checks a
changed passphrase (`MemoryStore.opened_by`: one key derivation, in the thread
pool) and answers with the same JSON as `squirrel-mcp export`. A refused form
answers with a redirect to the form, which says why by a fixed key, never echoing
what was typed. After MAX_WRONG wrong passphrases export is closed until the page
is started again: each try costs a key derivation, and guesses stay few. One check
runs at a time, so tries cannot pile key derivations up in memory.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from squirrel_mcp.book.transfer import export_json
from squirrel_mcp.ui import forms
from squirrel_mcp.ui.cards import problems_box
from squirrel_mcp.ui.html import html
from squirrel_mcp.ui.page import Page

MAX_WRONG = 5
FIELD = "passphrase"
FORM = (
    "<section><h1>Export</h1>"
    "<p>Every memory with its whole history, as JSON: the same file as "
    "<code>squirrel-mcp export</code>. It is plaintext: keep it somewhere private.</p>{problems}"
    '<form class="add export" method="post" action="/export">'
    '<label for="passphrase">The passphrase that unlocks your memories'
    '<input id="passphrase" name="passphrase" type="password" autocomplete="current-password" required>'
    "</label>"
    "<small>Asked again here because the file holds every memory: being signed in to this page "
    "is not enough to take them all away.</small> "
    '<button type="submit">Download the export</button></form></section>'
)
# Why the form was refused, by the key its redirect names.
REFUSALS = {
    "empty": (FIELD, "give the passphrase that unlocks your memories"),
    "wrong": (FIELD, "it does not unlock these memories"),
    "closed": (
        "export",
        f"closed after {MAX_WRONG} wrong passphrases: stop squirrel-mcp ui and run it again to export",
    ),
    "form": ("form", "not a form of this page: nothing was read"),
}
NOT_EXPORTED = "Nothing was exported:"


@dataclass
class Export:
    """The export form and its download, with the count of wrong passphrases on this page."""

    page: Page
    wrong: int = 0
    _checking: threading.Lock = field(default_factory=threading.Lock)

    def form(self, request: Request) -> Response:
        """GET /export: the form; after a refusal, why (a fixed text, never what was typed)."""
        refusal = REFUSALS.get(request.query_params.get("refused", ""))
        if self.wrong >= MAX_WRONG:
            refusal = REFUSALS["closed"]
        problems = problems_box([refusal] if refusal else [], outcome=NOT_EXPORTED)
        return self.page.render("Export", html(FORM, problems=problems))

    async def download(self, request: Request) -> Response:
        """POST /export: the JSON file when the passphrase unlocks the memories; else back to the form."""
        try:
            form = await forms.read_form(request)
        except (forms.BodyTooLarge, forms.FormError):
            return _refused("form")
        passphrase = form.get(FIELD, "")
        if not passphrase:
            return _refused("empty")
        return await run_in_threadpool(self._checked, passphrase)

    def _checked(self, passphrase: str) -> Response:
        with self._checking:
            if self.wrong >= MAX_WRONG:
                return _refused("closed")
            if not self.page.store.opened_by(passphrase):
                self.wrong += 1
                return _refused("closed" if self.wrong >= MAX_WRONG else "wrong")
        return _file(self.page)


def _refused(key: str) -> Response:
    # 303: a reload shows the form again, never sends the passphrase again.
    return RedirectResponse(f"/export?refused={key}", status_code=303)


def _file(page: Page) -> Response:
    """Every memory with its history as JSON, like `squirrel-mcp export`."""
    export = export_json(page.store)
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
