"""Projects on the page: the filter (every project, none, each), each memory's project, the move.

The filter and the move run in Debian's `chromium` (headless, through Playwright),
as tests/test_ui_browser.py runs the page; the move's and the add form's rules are
checked with raw HTTP on the real `squirrel-mcp ui` process. After each step the
vault, read through the library (not the page), holds exactly what the page shows.
With SQUIRREL_UI_SCREENSHOTS=DIR the browser tests save the list with its projects,
a move, its result and a moved memory's history as PNGs into DIR (docs/ui holds
those of one run).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import pytest

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import Category, Revision
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.server.searching import run_search
from tests.conftest import secrets_of_this_test
from tests.test_ui_browser import launch_chromium, open_page, screenshot, shown_cards, shown_history
from tests.ui_support import FORM, Ui, create_vault, library, running_ui

# Every test here starts `squirrel-mcp ui` (and a browser) in processes of their own.
pytestmark = pytest.mark.process

API = "github.com/acme/api"
WEB = "github.com/acme/web"
MOVED = "moved to another project on the page"
# The list's and the search's project filter.
SELECT = "form.filters select[name=project]"
BULK_RESULT = re.compile(r"/bulk\?outcome=[\w-]+$")

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


def save(
    store: MemoryStore, text: str, project: str | None, *, category: Category = "note", entity: str = "user"
) -> Revision:
    """Save a memory in `project` through the library (its text and project registered as secrets)."""
    secrets_of_this_test().add([text, project or "", entity])
    return store.save(entity=entity, text=text, category=category, tags=[], keywords=[], project=project)


def live(store: MemoryStore, *projects: str | None) -> list[tuple[str, str]]:
    """(id, text) of the live memories in `projects`, newest change first, as the list orders them."""
    return [(m.id, m.text) for m in store.current() if m.project in projects]


def unescaped(page: str) -> str:
    return html.unescape(page)


# ---------------------------------------------------------------- raw HTTP: the forms' rules


def test_the_move_is_refused_by_the_tools_rules_and_writes_nothing(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        first = save(store, "Deploys go out from the release branch", API)
        second = save(store, "Prefers short commit messages", None, category="preference")
    picks = f"pick={first.id}:1&pick={second.id}:1"
    secret_name = "kitchen-renovation-plans"
    cases = [
        # (the bar's fields besides the picks, the field named, the rule it broke)
        ("action=move", "project", "choose where to move them"),
        ("action=move&to=project:", "project", "choose where to move them"),
        ("action=move&to=project:%2A", "project", '"*" means every project'),
        ("action=move&new_project=%2A", "new project", '"*" means every project'),
        ("action=move&new_project=+%2A+", "new project", '"*" means every project'),
        (f"action=move&new_project={'x' * 1001}", "new project", "at most 1000 characters"),
        (f"action=move&new_project={secret_name}%0Aplans", "new project", "must be a single line"),
        (f"action=move&to=none&new_project={secret_name}", "project", "not both"),
        ("action=move&to=elsewhere", "project", "choose where to move them"),
    ]
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        for fields, name, rule in cases:
            body = f"{picks}&{fields}".encode()
            status, headers, _ = ui.request(
                "POST", "/bulk", headers={**session, **FORM, "Origin": ui.origin}, body=body
            )
            assert status == 303, fields
            assert re.fullmatch(r"/\?outcome=[A-Za-z0-9_-]{22}", headers["location"]), fields
            status, _, page = ui.request("GET", headers["location"], headers=session)
            assert status == 200
            shown = unescaped(page)
            # Next to the bar: the refusal box comes right before the form.
            box = re.search(r'<div class="problems" role="alert">(.*?)</div><form id="bulk"', shown, re.S)
            assert box is not None, fields
            assert "Nothing was changed:" in box.group(1)
            assert f"<b>{name}</b>: " in box.group(1) and rule in box.group(1), (fields, box.group(1))
            # The value typed is never echoed.
            assert "x" * 1001 not in shown and f"{secret_name}\nplans" not in shown
        # A move back names the revision a move wrote: one that moved nothing has nothing to undo.
        status, headers, _ = ui.request(
            "POST",
            "/bulk",
            headers={**session, **FORM, "Origin": ui.origin},
            body=f"pick={second.id}:1&action=move-back".encode(),
        )
        assert status == 303 and headers["location"].startswith("/bulk?outcome=")
        status, _, page = ui.request("GET", headers["location"], headers=session)
        assert status == 200 and "<h1>0 memories moved back</h1>" in page
        assert "its revision 1 did not move it: nothing to move back" in page
        # Without this page's Origin (another site's form), refused before any rule is read.
        status, _, body_text = ui.request(
            "POST", "/bulk", headers={**session, **FORM}, body=f"{picks}&action=move&to=none".encode()
        )
        assert status == 403 and "<" not in body_text
    with library(vault_env) as store:
        for memory, project in ((first, API), (second, None)):
            latest = store.get(memory.id)
            assert (latest.revision, latest.project) == (1, project)


def test_the_add_forms_project_and_the_filters_rules(vault_env: dict[str, str], tmp_path: Path) -> None:
    """The add form: a project by the tools' rules (blank: none); the list's and search's filter too."""
    create_vault(vault_env)
    text = "The staging database is rebuilt every night"
    secrets_of_this_test().add([text, API])
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        post = {**session, **FORM, "Origin": ui.origin}

        def add(project: str) -> tuple[str, str]:
            fields = {"text": text, "entity": "user", "category": "note", "project": project}
            status, headers, _ = ui.request("POST", "/new", headers=post, body=urlencode(fields).encode())
            assert status == 303
            status, _, page = ui.request("GET", headers["location"], headers=session)
            assert status == 200
            return headers["location"], unescaped(page)

        # "*" names every project, no one project: refused, the form back with what was typed.
        for refused in ("*", " * ", "two\nlines"):
            where, page = add(refused)
            assert where.startswith("/new?outcome=")
            assert "Nothing was saved:" in page and "<b>project</b>: " in page
            assert text in page
        with library(vault_env) as store:
            assert store.current() == []
        # Blank: no project (the page has no session's project); a name: that project.
        where, page = add("   ")
        assert re.fullmatch(r"/memory/[0-9a-f]{16}\?done=saved", where)
        assert (
            '<a class="project none" href="/?project=" title="Memories with no project">no project</a>'
            in page
        )
        in_none = where.split("/memory/")[1].split("?")[0]
        where, page = add(f"  {API} ")
        assert where.endswith("?done=saved")
        in_api = where.split("/memory/")[1].split("?")[0]
        # The same memory in the same project again: stored already, as save_memory says.
        where, page = add(API)
        assert where == f"/memory/{in_api}?done=stored-already"
        with library(vault_env) as store:
            assert store.get(in_none).project is None and store.get(in_api).project == API
            assert len(store.current()) == 2
        # The add form offers the projects there are as their name is typed.
        status, _, page = ui.request("GET", "/new", headers=session)
        assert status == 200 and f'<datalist id="projects"><option value="{API}"></datalist>' in page
        # A filter naming no project's possible name: nothing filtered, the rule said.
        for path, outcome in (
            (f"/?project={'x' * 1001}", "Not filtered (the list shows every memory):"),
            (f"/search?q=staging&project={'x' * 1001}", "Nothing was searched:"),
        ):
            status, _, page = ui.request("GET", path, headers=session)
            assert status == 400, path
            assert outcome in page and "<b>project</b>: " in page and "at most 1000 characters" in page


# ---------------------------------------------------------------- the real browser


def test_filter_by_project_in_chromium(browser: Browser, vault_env: dict[str, str], tmp_path: Path) -> None:
    """Every project (the default), none, each one: the select with counts, paging, search, the labels."""
    create_vault(vault_env)
    with library(vault_env) as store:
        for n in range(3):
            save(store, f"API deploy step {n}: run the migrations first", API)
        gone = save(store, "API deploy used to need a manual approval", API)
        store.delete(gone.id, reason="obsolete")
        save(store, "Web deploy goes through the CDN purge", WEB)
        save(store, "Web deploy needs the feature flags exported", WEB)
        save(store, "Prefers deploy notes written as checklists", None, category="preference")
        save(store, "Deploy only on weekdays before noon", None)
    context, page, problems = open_page(browser)
    with running_ui(vault_env, tmp_path) as ui:
        page.goto(ui.url)
        filter_the_list(page, ui, vault_env)
        search_in_a_project(page, ui, vault_env)
    context.close()
    assert problems == []


def filter_the_list(page: Page, ui: Ui, env: dict[str, str]) -> None:
    """The list: every project by default, the select and the counts, none, one project, paging."""
    with library(env) as store:
        assert shown_cards(page, "#memories") == live(store, API, WEB, None)
        projects = {m.id: m.project for m in store.current()}
    for memory_id, project in projects.items():
        label = page.locator(f'#memories li[data-id="{memory_id}"] a.project')
        assert label.inner_text() == (project or "no project")
    assert page.locator(f"{SELECT} option").all_inner_texts() == [
        "every project (7)",
        "no project (2)",
        f"{API} (3)",
        f"{WEB} (2)",
    ]
    counted = page.locator("#project-counts li").all_inner_texts()
    assert [" ".join(row.split()) for row in counted] == ["no project 2", f"{API} 3", f"{WEB} 2"]
    screenshot(page, "projects-list")
    # None: the memories with no project alone.
    page.select_option(SELECT, "")
    page.wait_for_url(re.compile(r"[?&]project=(&|$)"))
    with library(env) as store:
        assert shown_cards(page, "#memories") == live(store, None)
    # One project: its memories alone (not those with none).
    page.select_option(SELECT, API)
    page.wait_for_url(re.compile(r"[?&]project=github\.com%2Facme%2Fapi"))
    with library(env) as store:
        in_api = live(store, API)
    assert shown_cards(page, "#memories") == in_api and len(in_api) == 3
    assert page.input_value(SELECT) == API
    # Paging keeps the filter.
    page.goto(f"{ui.origin}/?project={API}&limit=2")
    assert shown_cards(page, "#memories") == in_api[:2]
    page.click("nav.paging a[rel=next]")
    page.wait_for_url(re.compile(r"offset=2"))
    assert "project=github.com%2Facme%2Fapi" in page.url
    assert shown_cards(page, "#memories") == in_api[2:]
    assert page.input_value(SELECT) == API


def search_in_a_project(page: Page, ui: Ui, env: dict[str, str]) -> None:
    """From the list filtered by a project: the header's search keeps it, the search's own filter; links."""
    page.fill("#q", "deploy")
    page.press("#q", "Enter")
    page.wait_for_url(re.compile(r"/search\?"))
    host = PluginHost(get_plugin_manager())
    with library(env) as store:
        expected = run_search(
            store, host, "deploy", limit=10, projects=frozenset({API}), now=datetime.now(UTC)
        )
    assert [hit.project for hit in expected.results] == [API] * 3
    assert shown_cards(page, "#results") == [(hit.id, hit.text) for hit in expected.results]
    assert page.input_value(SELECT) == API
    # The search's own filter: none, then every project.
    for choice, in_url, projects_read in (
        ("", r"[?&]project=(&|$)", frozenset({None})),
        ("*", r"[?&]project=(\*|%2A)(&|$)", None),
    ):
        page.select_option(SELECT, choice)
        page.click("form.filters button[type=submit]")
        page.wait_for_url(re.compile(in_url))
        with library(env) as store:
            expected = run_search(
                store, host, "deploy", limit=10, projects=projects_read, now=datetime.now(UTC)
            )
        assert shown_cards(page, "#results") == [(hit.id, hit.text) for hit in expected.results]
        assert page.input_value(SELECT) == choice
    assert len(expected.results) == 7
    # A card's project is a link to the list of that project.
    web_card = next(hit for hit in expected.results if hit.project == WEB)
    page.click(f'#results li[data-id="{web_card.id}"] a.project')
    page.wait_for_url(re.compile(r"/\?project=github\.com%2Facme%2Fweb$"))
    with library(env) as store:
        assert shown_cards(page, "#memories") == live(store, WEB)
    # The counts link to each project's list, "no project" first.
    page.click("#project-counts li:first-child a")
    page.wait_for_url(re.compile(r"/\?project=$"))
    with library(env) as store:
        with_none = live(store, None)
    assert shown_cards(page, "#memories") == with_none
    # A memory's own page says its project.
    page.goto(f"{ui.origin}/memory/{with_none[0][0]}")
    assert page.locator("#memory a.project").inner_text() == "no project"


def test_move_a_selection_in_chromium(browser: Browser, vault_env: dict[str, str], tmp_path: Path) -> None:
    """Move ticked memories to a project, back, to a new one, and one to none; each move in the history."""
    create_vault(vault_env)
    with library(vault_env) as store:
        first = save(store, "The API's rate limit is 100 requests a minute", API)
        second = save(store, "The API answers errors as problem+json", API)
        third = save(store, "Prefers tabs over spaces", None, category="preference")
        fourth = save(store, "The web app is built with Vite", WEB)
    context, page, problems = open_page(browser)
    with running_ui(vault_env, tmp_path) as ui:
        page.goto(ui.url)
        move_and_move_back(page, ui, vault_env, (first, second, third, fourth))
        move_elsewhere_and_refusals(page, ui, vault_env, (first, second, third, fourth))
    context.close()
    assert problems == []


def move_and_move_back(page: Page, ui: Ui, env: dict[str, str], saved: tuple[Revision, ...]) -> None:
    """Two memories of two projects moved to a third, the move in the history, then the undo."""
    first, second, third, fourth = saved
    # Tick one of the API and the one with none; move them to the web project.
    page.check(f'#memories li[data-id="{first.id}"] input.pick')
    page.check(f'#memories li[data-id="{third.id}"] input.pick')
    page.select_option("#bulk select[name=to]", f"project:{WEB}")
    screenshot(page, "projects-move")
    page.click("#bulk button[value=move]")
    page.wait_for_url(BULK_RESULT)
    assert page.inner_text("#bulk-result h1") == f"2 memories moved to {WEB}"
    with library(env) as store:
        for memory in (first, third):
            latest = store.get(memory.id)
            assert (latest.project, latest.revision, latest.change, latest.reason) == (
                WEB,
                2,
                "corrected",
                MOVED,
            )
            assert (latest.text, latest.category) == (memory.text, memory.category)
        assert store.get(second.id).revision == 1 and store.get(fourth.id).revision == 1
    assert sorted(page.locator("#done a.project").all_inner_texts()) == [WEB, WEB]
    screenshot(page, "projects-moved")
    # The move is in the history: the project it left, and where it went.
    result = page.url
    page.goto(f"{ui.origin}/memory/{first.id}")
    with library(env) as store:
        history = store.history(first.id)
    assert shown_history(page) == [(r.revision, r.change, r.reason) for r in history]
    moved_row = page.locator('#history li[data-revision="2"] table.diff')
    assert moved_row.locator("th").all_inner_texts()[3:] == ["project"]
    assert moved_row.locator("del").inner_text() == API
    assert moved_row.locator("ins").inner_text() == WEB
    assert page.locator("#memory a.project").inner_text() == WEB
    screenshot(page, "projects-history")
    # The undo moves each back where it was (one to the API, one to none).
    page.goto(result)
    assert page.inner_text("#undo button[type=submit]") == "Move these 2 memories back"
    page.click("#undo button[type=submit]")
    page.wait_for_url(BULK_RESULT)
    assert page.inner_text("#bulk-result h1") == "2 memories moved back"
    with library(env) as store:
        assert (store.get(first.id).project, store.get(first.id).revision) == (API, 3)
        assert (store.get(third.id).project, store.get(third.id).revision) == (None, 3)
        assert [r.project for r in store.history(third.id)] == [None, WEB, None]
    # Moving back what was moved back takes each where the first move had, and back again.
    for revision, projects in ((4, (WEB, WEB)), (5, (API, None))):
        page.click("#undo button[type=submit]")
        page.wait_for_url(BULK_RESULT)
        assert page.inner_text("#bulk-result h1") == "2 memories moved back"
        with library(env) as store:
            assert [(store.get(m.id).project, store.get(m.id).revision) for m in (first, third)] == [
                (projects[0], revision),
                (projects[1], revision),
            ]


def move_elsewhere_and_refusals(page: Page, ui: Ui, env: dict[str, str], saved: tuple[Revision, ...]) -> None:
    """A new project typed, one memory to none from its page, "*" refused, one already there."""
    first, second, _, fourth = saved
    # A new project, typed; Enter in its field presses Move (ui.js), not the bar's first button.
    page.goto(f"{ui.origin}/")
    page.check(f'#memories li[data-id="{second.id}"] input.pick')
    page.fill("#bulk input[name=new_project]", "notes/kitchen")
    secrets_of_this_test().add(["notes/kitchen"])
    page.press("#bulk input[name=new_project]", "Enter")
    page.wait_for_url(BULK_RESULT)
    assert page.inner_text("#bulk-result h1") == "1 memory moved to notes/kitchen"
    with library(env) as store:
        assert (store.get(second.id).project, store.get(second.id).revision) == ("notes/kitchen", 2)
    page.goto(f"{ui.origin}/")
    assert "notes/kitchen (1)" in page.locator(f"{SELECT} option").all_inner_texts()
    # One memory from its own page, to none.
    page.goto(f"{ui.origin}/memory/{fourth.id}")
    page.select_option("#move select[name=to]", "none")
    page.click("#move button[value=move]")
    page.wait_for_url(BULK_RESULT)
    assert page.inner_text("#bulk-result h1") == "1 memory moved to no project"
    with library(env) as store:
        assert (store.get(fourth.id).project, store.get(fourth.id).revision) == (None, 2)
    # Refused: "*" is every project, no one's name; the rule shows next to the bar, nothing moves.
    page.goto(f"{ui.origin}/")
    page.check(f'#memories li[data-id="{first.id}"] input.pick')
    page.fill("#bulk input[name=new_project]", "*")
    page.click("#bulk button[value=move]")
    page.wait_for_url(re.compile(r"/\?outcome=[\w-]+$"))
    box = page.locator("div.problems:has(+ form#bulk)")
    assert "new project" in box.inner_text() and "means every project" in box.inner_text()
    # Already there: that memory is listed with the reason, the other moved.
    page.check(f'#memories li[data-id="{first.id}"] input.pick')
    page.check(f'#memories li[data-id="{fourth.id}"] input.pick')
    page.select_option("#bulk select[name=to]", f"project:{API}")
    page.click("#bulk button[value=move]")
    page.wait_for_url(BULK_RESULT)
    assert page.inner_text("#bulk-result h1") == f"1 memory moved to {API}"
    refusal = page.locator(f'#refused li[data-id="{first.id}"] .refusal').inner_text()
    assert refusal == "it is in this project already"
    with library(env) as store:
        assert store.get(first.id).revision == 5 and store.get(fourth.id).project == API
