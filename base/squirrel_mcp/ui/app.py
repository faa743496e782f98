"""The page's Starlette application: its routes, on the same MemoryStore and plugins as the MCP server.

The routes live by what they do: squirrel_mcp.ui.reading (the pages),
squirrel_mcp.ui.writing (the forms), squirrel_mcp.ui.export (the export, behind the
passphrase); squirrel_mcp.ui.page holds what they share. The guard in front of
them all is squirrel_mcp.ui.guard.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.resources import files

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from squirrel_mcp.book.errors import LogDivergedError, MemoryOperationError, UnknownMemoryError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.plugins.manager import PluginHost
from squirrel_mcp.storage import StorageError
from squirrel_mcp.ui import pages, reading, writing
from squirrel_mcp.ui.export import Export
from squirrel_mcp.ui.page import Page

STATIC = {
    "ui.css": "text/css; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
Reader = Callable[[Page, Request], Response]


@cache
def _static(name: str) -> bytes:
    return (files("squirrel_mcp.ui") / "static" / name).read_bytes()


def _on(page: Page, route: Reader) -> Callable[[Request], Response]:
    """`route` for `page`, as Starlette calls an endpoint (a plain function: run in its thread pool)."""

    def endpoint(request: Request) -> Response:
        return route(page, request)

    return endpoint


def _routes(page: Page) -> list[Route]:
    export = Export(page)
    return [
        Route("/", _on(page, reading.list_memories)),
        Route("/search", _on(page, reading.search)),
        Route("/new", _on(page, reading.new), methods=["GET"]),
        Route("/new", writing.add_form(page), methods=["POST"]),
        Route("/bulk", _on(page, reading.bulk_result), methods=["GET"]),
        Route("/bulk", writing.bulk_form(page), methods=["POST"]),
        Route("/duplicates", _on(page, reading.duplicates)),
        Route("/export", export.form, methods=["GET"]),
        Route("/export", export.download, methods=["POST"]),
        Route("/memory/{memory_id}", _on(page, reading.show)),
        *(
            Route(f"/memory/{{memory_id}}/{form}", endpoint, methods=[method])
            for form, handler in writing.FORMS.items()
            for method, endpoint in (
                ("POST", writing.memory_form(handler, page)),
                ("GET", _on(page, reading.to_memory)),
            )
        ),
        Route("/static/{name}", _static_file),
    ]


def _static_file(request: Request) -> Response:
    name = str(request.path_params["name"])
    if name not in STATIC:
        return PlainTextResponse("not found\n", status_code=404)
    return Response(_static(name), media_type=STATIC[name])


def create_app(store: MemoryStore, host: PluginHost, *, where: str) -> Starlette:
    """The page's Starlette application (without the guard: squirrel_mcp.ui.serve puts it in front)."""
    page = Page(store, host, where)

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

    handlers: dict[type[Exception], Callable[[Request, Exception], Response]] = {
        UnknownMemoryError: not_found,
        LogDivergedError: diverged,
        MemoryOperationError: refused,
        StorageError: storage_failed,
    }
    return Starlette(routes=_routes(page), exception_handlers=handlers)
