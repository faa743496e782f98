"""The page's add form, its actions on several memories, its duplicates, and its refusals as redirects.

Through the real `squirrel-mcp ui` process, as tests/test_ui_http.py does; what
the vault holds is read through the library, never through the page.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from squirrel_mcp.search.duplicates import likely_duplicates
from tests.ui_support import (
    FORM,
    Ui,
    create_vault,
    form_body,
    library,
    outcome_address,
    post_form,
    running_ui,
    save,
)

# Every test here starts `squirrel-mcp ui` in a process of its own.
pytestmark = pytest.mark.process

SECRET_TEXT = "The spare key hides under the blue flowerpot"
KEY = r"[A-Za-z0-9_-]{22}"


def bulk_body(action: str, picks: list[tuple[str, int]], **fields: str) -> bytes:
    """The bulk bar's form: the action, a `pick` per ticked memory ("<id>:<revision>")."""
    pairs = [("action", action), *(("pick", f"{i}:{r}") for i, r in picks), *fields.items()]
    return "&".join(f"{name}={value}" for name, value in pairs).encode()


def writer(ui: Ui) -> dict[str, str]:
    """The headers of a form the page itself sends."""
    return {"Cookie": ui.login(), **FORM, "Origin": ui.origin}


def test_add_saves_as_the_save_tool_does(vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        stored = save(store, "Prefers green tea over coffee, no sugar", category="preference", tags=["food"])
    with running_ui(vault_env, tmp_path) as ui:
        write = writer(ui)
        session = {"Cookie": write["Cookie"]}
        status, _, page = ui.request("GET", "/new", headers=session)
        assert status == 200 and '<form class="edit add" method="post" action="/new">' in page
        # A rule broken: the form again, with what was typed, under a key; the vault unchanged.
        typed = "The birthday of Anna is on the 3rd of May"
        location, page = post_form(
            ui, "/new", write, form_body(text=typed, entity="Anna", category="gossip", tags="family")
        )
        assert re.fullmatch(rf"/new\?outcome={KEY}", location) and "Anna" not in location
        assert "<b>category</b>: " in page and f">{typed}</textarea>" in page
        assert 'name="tags" value="family"' in page
        # Too large a body: a redirect to the form too, nothing read.
        location, page = post_form(ui, "/new", write, form_body(text="x" * 300_000))
        assert re.fullmatch(rf"/new\?outcome={KEY}", location) and "larger than any form" in page
        with library(vault_env) as store:
            assert [m.id for m in store.current()] == [stored.id]
        # Saved: a redirect to the new memory, which the library reads as sent.
        fields = {"text": typed, "entity": "Anna (sister)", "category": "profile", "tags": "family, dates"}
        location, page = post_form(ui, "/new", write, form_body(**fields, keywords="birthday"))
        found = re.fullmatch(r"/memory/([0-9a-f]{16})\?done=saved", location)
        assert found is not None and typed in page
        with library(vault_env) as store:
            saved = store.get(found.group(1))
        assert (saved.text, saved.entity, saved.category, saved.tags, saved.keywords, saved.revision) == (
            typed,
            "Anna (sister)",
            "profile",
            ["family", "dates"],
            ["birthday"],
            1,
        )
        # The same memory again: nothing written, the stored one shown, as save_memory answers.
        location, page = post_form(ui, "/new", write, form_body(**fields, keywords="birthday"))
        assert location == f"/memory/{saved.id}?done=stored-already" and "nothing was written" in page
        # Entity and category left out take the tool's defaults.
        location, _ = post_form(ui, "/new", write, form_body(text="Reads before sleeping"))
        with library(vault_env) as store:
            assert len(store.current()) == 3
            plain = store.get(location.split("/")[2].split("?")[0])
        assert (plain.entity, plain.category, plain.tags) == ("user", "note", [])


def test_bulk_actions_report_each_memory(vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        memories = [
            save(store, text, tags=["house"])
            for text in (
                SECRET_TEXT,
                "Wi-Fi password for the guest network is on the fridge",
                "The boiler is serviced every October",
                "Bins go out on Tuesday evening",
            )
        ]
    first, second, third, fourth = memories
    with running_ui(vault_env, tmp_path) as ui:
        write = writer(ui)
        session = {"Cookie": write["Cookie"]}
        # The list's cards carry a checkbox of the bulk form, naming the revision shown.
        status, _, page = ui.request("GET", "/", headers=session)
        assert f'name="pick" value="{first.id}:1" form="bulk"' in page and 'id="bulk"' in page
        # Search results carry them too.
        status, _, page = ui.request("GET", "/search?q=boiler", headers=session)
        assert f'name="pick" value="{third.id}:1" form="bulk"' in page and 'id="bulk"' in page
        # The guard stands in front of the new forms: without this page's Origin, a 403 and nothing written.
        for path, body in (("/bulk", bulk_body("delete", [(first.id, 1)])), ("/new", form_body(text="x"))):
            status, _, _ = ui.request("POST", path, headers={**session, **FORM}, body=body)
            assert status == 403, path
        with library(vault_env) as store:
            assert {(m.id, m.revision) for m in store.current()} == {(m.id, 1) for m in memories}
        # Meanwhile the agent corrects the second and deletes the third.
        with library(vault_env) as store:
            store.update(second.id, changes={"text": "The Wi-Fi password is on the router"}, reason="moved")
            store.delete(third.id, reason=None)
        picks = [(m.id, 1) for m in memories]
        location, page = post_form(ui, "/bulk", write, bulk_body("delete", picks))
        assert re.fullmatch(rf"/bulk\?outcome={KEY}", location)
        assert "<h1>2 memories deleted</h1>" in page and "2 memories not deleted" in page
        refused = page[page.index('id="refused"') : page.index('id="done"')]
        assert re.search(rf'data-id="{second.id}".*?changed since the page was loaded', refused, re.S)
        assert re.search(rf'data-id="{third.id}".*?is already deleted', refused, re.S)
        assert first.id not in refused and fourth.id not in refused
        with library(vault_env) as store:
            assert [store.get(m.id).deleted for m in memories] == [True, False, True, True]
            assert [store.get(m.id).revision for m in memories] == [2, 2, 2, 2]
        # A reload shows the same page; the undo restores the two on the tombstones it wrote.
        assert ui.request("GET", location, headers=session)[2] == page
        undo = page[
            page.index('<form class="undo"') : page.index("</form>", page.index('<form class="undo"'))
        ]
        assert re.findall(r'name="pick" value="([^"]+)"', undo) == [f"{first.id}:2", f"{fourth.id}:2"]
        assert 'name="action" value="restore">Restore these 2 memories</button>' in undo
        location, page = post_form(ui, "/bulk", write, bulk_body("restore", [(first.id, 2), (fourth.id, 2)]))
        assert "<h1>2 memories restored</h1>" in page
        with library(vault_env) as store:
            assert [(store.get(m.id).deleted, store.get(m.id).text) for m in (first, fourth)] == [
                (False, first.text),
                (False, fourth.text),
            ]
        # A tag added to several, then removed; one already carrying it is said so.
        with library(vault_env) as store:
            store.update(fourth.id, changes={"tags": ["house", "chores"]}, reason="tagged")
            picks = [(m.id, store.get(m.id).revision) for m in (first, second, fourth)]
        location, page = post_form(ui, "/bulk", write, bulk_body("tag", picks, tag="chores"))
        assert "<h1>2 memories tagged chores</h1>" in page and "carries this tag already" in page
        with library(vault_env) as store:
            assert [store.get(m.id).tags for m in (first, second, fourth)] == [["house", "chores"]] * 3
            picks = [(m.id, store.get(m.id).revision) for m in (first, second)]
        location, page = post_form(ui, "/bulk", write, bulk_body("untag", picks, tag="CHORES"))
        assert "<h1>2 memories untagged CHORES</h1>" in page
        with library(vault_env) as store:
            assert [store.get(m.id).tags for m in (first, second)] == [["house"], ["house"]]
            assert store.get(first.id).reason == "tag removed on the page"
        # Nothing ticked, an unknown action, a malformed pick: the list, saying so, nothing written.
        for body, rule in [
            (b"action=delete", "tick at least one memory"),
            (bulk_body("burn", [(first.id, 1)]), "must be one of"),
            (b"action=delete&pick=nope", "a memory id and a revision"),
            (bulk_body("tag", [(first.id, 1)]), "give the tag"),
        ]:
            location, page = post_form(ui, "/bulk", write, body)
            assert re.fullmatch(rf"/\?outcome={KEY}", location) and rule in page, rule
            assert "Nothing was changed:" in page
        # Its address in the address bar: the list; a key no longer kept: said so.
        status, headers, _ = ui.request("GET", "/bulk", headers=session)
        assert (status, headers["location"]) == (303, "/")
        status, _, page = ui.request("GET", f"/bulk?outcome={'A' * 22}", headers=session)
        assert status == 200 and "no longer kept" in page


def test_duplicates_are_grouped_as_save_names_them(vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        one = save(store, "Anna's birthday is on the third of May", entity="Anna")
        two = save(store, "Anna's birthday: the third of May", entity="Anna")
        other = save(store, "Prefers green tea over coffee, no sugar", category="preference")
        lone = save(store, "The boiler is serviced every October")
        # The notion the page groups by: what save_memory names as possible duplicates.
        assert [hit.memory.id for hit in likely_duplicates(store.index, two)] == [one.id]
        assert likely_duplicates(store.index, other) == []
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        status, _, page = ui.request("GET", "/duplicates", headers=session)
        assert status == 200
        groups = re.findall(r'<section class="group" data-group="\d+">(.*?)</section>', page, re.S)
        assert len(groups) == 1
        # The oldest first (two saved in one millisecond: by id).
        oldest_first = [m.id for m in sorted((one, two), key=lambda m: (m.createdAt, m.id))]
        assert re.findall(r'<li class="card" data-id="(\w+)"', groups[0]) == oldest_first
        assert other.id not in page and lone.id not in page
        # The list links to it, and a memory's page names the one it may repeat.
        assert 'href="/duplicates"' in ui.request("GET", "/", headers=session)[2]
        status, _, page = ui.request("GET", f"/memory/{one.id}", headers=session)
        similar = page[page.index('id="similar"') : page.index("<h2>History</h2>")]
        assert two.id in similar
        assert 'id="similar"' not in ui.request("GET", f"/memory/{lone.id}", headers=session)[2]
        # Once one of them is deleted, there is no group any more.
        with library(vault_env) as store:
            store.delete(two.id, reason=None)
        status, _, page = ui.request("GET", "/duplicates", headers=session)
        assert 'id="no-duplicates"' in page and one.id not in page


def test_the_store_refusing_a_form_is_a_page_that_reloads(vault_env: dict[str, str], tmp_path: Path) -> None:
    """An unknown id, and the vault locked by another process: redirects to a page, never a 404 or 503."""
    create_vault(vault_env)
    with library(vault_env) as store:
        memory = save(store, SECRET_TEXT, entity="home", tags=["house"])
    with running_ui(vault_env, tmp_path) as ui:
        write = writer(ui)
        session = {"Cookie": write["Cookie"]}
        for path in (
            f"/memory/{'0' * 16}/delete",
            "/memory/not-an-id/restore",
            f"/memory/{'1' * 16}/correct",
        ):
            location, page = post_form(ui, path, write, form_body(reason="cleanup"))
            assert re.fullmatch(rf"/\?outcome={KEY}", location) and "no memory has this id" in page, path
        # Another process holds the vault's write lock past the busy timeout: the delete is refused
        # with a redirect to the memory's page, which says why, and reloads once the lock is gone.
        locker = sqlite3.connect(vault_env["SQUIRREL_VAULT"], isolation_level=None)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            location, page = post_form(ui, f"/memory/{memory.id}/delete", write, form_body(reason="cleanup"))
        finally:
            locker.rollback()
            locker.close()
        assert outcome_address(memory.id).fullmatch(location)
        assert "<b>store</b>: " in page and "is busy: another process held its write lock" in page
        status, _, page = ui.request("GET", location, headers=session)
        assert status == 200 and "locked" in page
        with library(vault_env) as store:
            assert store.get(memory.id).revision == 1
        # A correction refused that way keeps what was typed.
        locker = sqlite3.connect(vault_env["SQUIRREL_VAULT"], isolation_level=None)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            typed = "The spare key hides in the garden shed"
            body = form_body(
                text=typed,
                entity="home",
                category="note",
                tags="house",
                keywords="",
                reason="moved",
                revision="1",
            )
            location, page = post_form(ui, f"/memory/{memory.id}/correct", write, body)
        finally:
            locker.rollback()
            locker.close()
        assert outcome_address(memory.id).fullmatch(location) and "garden" not in location
        assert f">{typed}</textarea>" in page and "locked" in page
