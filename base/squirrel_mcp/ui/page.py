"""What every route of the page shares: the unlocked store, the plugins, the kept refusals.

Every form answers its POST with a redirect (303), saved or refused: to the
memory's page, to the add form, to the list, or to the page of an action on
several memories (squirrel_mcp.ui.outcomes keeps what that page shows); only the
export's form, given the right passphrase, answers with the file itself. That
holds for every refusal: a rule broken, a body too large, a conflict, an unknown
id, the store busy or unreachable. So the address bar never holds a form's
target: a reload shows the page again rather than sending the form again, and a
GET of a form's address leads to a page.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from squirrel_mcp.book.errors import MemoryOperationError, UnknownMemoryError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import EVERY_PROJECT
from squirrel_mcp.plugins.manager import PluginHost
from squirrel_mcp.storage import StorageError
from squirrel_mcp.ui import pages
from squirrel_mcp.ui.html import Html
from squirrel_mcp.ui.outcomes import LIST, NEW, Outcome, Outcomes

MEMORY_ID = re.compile(r"[0-9a-f]{16}")
# Why a refused form's page says what it says, when the store itself refused.
UNKNOWN_ID = "no memory has this id (it may have been typed wrong)"


@dataclass
class Page:
    """The routes' shared state: the unlocked store, the plugins, and where the memories live."""

    store: MemoryStore
    host: PluginHost
    where: str
    outcomes: Outcomes = field(default_factory=Outcomes)

    def render(
        self,
        title: str,
        body: Html,
        *,
        status: int = 200,
        search_box: bool = True,
        project: str = EVERY_PROJECT,
    ) -> HTMLResponse:
        """A whole HTML page; `project`, the list's project filter, is kept by the header's search."""
        page = pages.layout(title, body, where=self.where, search_box=search_box, project=project)
        return HTMLResponse(page, status_code=status)

    def kept(self, key: str | None, where: str) -> object | None:
        """The outcome the address names for the page `where`, if it is still kept."""
        return None if key is None else self.outcomes.find(key, where)

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


def memory_id(request: Request) -> str:
    """The memory id in the path; UnknownMemoryError (a 404) when it cannot be one."""
    found = str(request.path_params["memory_id"])
    if MEMORY_ID.fullmatch(found) is None:
        # Not echoed: whatever was typed in its place is no id.
        raise UnknownMemoryError("?")
    return found
