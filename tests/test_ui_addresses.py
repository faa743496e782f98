"""The page's addresses: every one a page that reloads, and what its times and labels link to.

Through the real `squirrel-mcp ui` process, as tests/test_ui_http.py does: a GET
of a form's address, a refused form's outcome no longer kept, how long ago each
memory changed with the exact time on hover, and the links of the labels.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from squirrel_mcp.core.models import Revision
from tests.ui_support import FORM, create_vault, form_body, library, post_form, running_ui, save

# Every test here starts `squirrel-mcp ui` in a process of its own.
pytestmark = pytest.mark.process

SECRET_TEXT = "The spare key hides under the blue flowerpot"


def test_a_forms_address_leads_to_the_memorys_page(vault_env: dict[str, str], tmp_path: Path) -> None:
    """A GET of any form's address (a reload, Enter in the address bar) lands on the memory's page."""
    create_vault(vault_env)
    with library(vault_env) as store:
        memory = save(store, SECRET_TEXT, entity="home", tags=["house"])
        other = save(store, "Allergic to penicillin since childhood", category="profile")
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        for form in ("correct", "delete", "restore"):
            for method in ("GET", "HEAD"):
                status, headers, _ = ui.request(method, f"/memory/{memory.id}/{form}", headers=session)
                assert (status, headers["location"]) == (303, f"/memory/{memory.id}"), (form, method)
            status, _, page = ui.request("GET", headers["location"], headers=session)
            assert status == 200 and SECRET_TEXT in page
        # An address that names no memory: the list, saying so.
        for address in ("/memory/not-an-id/correct", f"/memory/{'0' * 16}/delete"):
            status, headers, _ = ui.request("GET", address, headers=session)
            assert status == 303 and headers["location"].startswith("/?outcome="), address
            status, _, page = ui.request("GET", headers["location"], headers=session)
            assert status == 200 and "no memory has this id" in page and SECRET_TEXT in page
        # An outcome no longer kept (or another memory's) is said so above the memory as it is now.
        write = {**session, **FORM, "Origin": ui.origin}
        location, page = post_form(ui, f"/memory/{memory.id}/delete", write, form_body(reason="r" * 501))
        key = location.rsplit("=", 1)[1]
        for address in (f"/memory/{memory.id}?outcome={'A' * 22}", f"/memory/{other.id}?outcome={key}"):
            status, _, page = ui.request("GET", address, headers=session)
            assert status == 200 and 'id="lost"' in page and "<b>reason</b>" not in page, address


def imported(revision: Revision, memory_id: str, age: timedelta) -> Revision:
    """A copy of `revision` under `memory_id`, saved `age` ago (as an import brings it)."""
    stamp = (datetime.now(UTC) - age).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return Revision.model_validate(
        revision.model_dump() | {"id": memory_id, "createdAt": stamp, "updatedAt": stamp}
    )


def to_the_second(stamp: str) -> datetime:
    """A stored timestamp, naive UTC, without its milliseconds."""
    return datetime.fromisoformat(stamp.removesuffix("Z")).replace(microsecond=0)


def test_times_say_how_long_ago_with_the_exact_time_on_hover(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    ages = {
        "3 hours ago": timedelta(hours=3, minutes=5),
        "2 days ago": timedelta(days=2, hours=1),
        "1 year ago": timedelta(days=400),
    }
    with library(vault_env) as store:
        fresh = save(store, SECRET_TEXT, entity="home")
        old = [imported(fresh, f"{n:016x}", age) for n, age in enumerate(ages.values(), start=1)]
        store.import_histories([[revision] for revision in old])
    # The exact time is in the page's time zone: two hours east of UTC here ("EET-2" in POSIX form).
    with running_ui({**vault_env, "TZ": "EET-2"}, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        status, _, page = ui.request("GET", "/", headers=session)
        assert status == 200
        for said, revision in [("just now", fresh), *zip(ages, old, strict=True)]:
            local = to_the_second(revision.updatedAt) + timedelta(hours=2)
            exact = f"{local:%a} {local.day} {local:%b %Y, %H:%M:%S} EET"
            element = f'<time datetime="{revision.updatedAt}" title="{exact}">{said}</time>'
            assert element in page, element
        # The memory's page and its history too, and nowhere the raw timestamp as text.
        status, _, page = ui.request("GET", f"/memory/{old[0].id}", headers=session)
        assert page.count(f'<time datetime="{old[0].updatedAt}"') == 3
        assert f">{old[0].updatedAt}<" not in page and ">3 hours ago</time>" in page


def test_the_text_opens_the_memory_and_each_label_filters_the_list(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        key = save(store, SECRET_TEXT, entity="Home & garden", tags=["house", "keys"])
        save(
            store,
            "Wi-Fi password for the guest network is on the fridge",
            entity="home network",
            tags=["house"],
        )
        save(store, "Allergic to penicillin since childhood", category="profile", tags=["health"])
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        status, _, page = ui.request("GET", "/", headers=session)
        card = page[page.index(f'<li class="card" data-id="{key.id}">') :]
        card = card[: card.index("</li>")]
        assert f'<p class="text"><a href="/memory/{key.id}">{SECRET_TEXT}</a></p>' in card
        # Category and tags are told apart by their class (ui.css draws them differently).
        links = {
            '<a class="entity" href="/?entity=Home+%26+garden"': "Home &amp; garden",
            '<a class="category" href="/?category=note"': "note",
            '<a class="tag" href="/?tags=house"': "house",
            '<a class="tag" href="/?tags=keys"': "keys",
        }
        for start, text in links.items():
            assert start in card and card[card.index(start) :].split(">", 1)[1].startswith(f"{text}</a>"), (
                start
            )
        # Each link is the list with that filter.
        for address, count in (("/?entity=Home+%26+garden", 1), ("/?tags=house", 2), ("/?category=note", 2)):
            status, _, page = ui.request("GET", address, headers=session)
            assert status == 200 and page.count('<li class="card"') == count, address


def test_a_correction_of_a_memory_deleted_meanwhile_keeps_its_text(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        memory = save(store, SECRET_TEXT, entity="home")
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        write = {**session, **FORM, "Origin": ui.origin}
        with library(vault_env) as store:
            store.delete(memory.id, reason=None)
        mine = "The spare key hides in the garden shed"
        body = form_body(text=mine, entity="home", category="note", reason="it moved", revision="1")
        location, page = post_form(ui, f"/memory/{memory.id}/correct", write, body)
        assert "it was deleted meanwhile" in page and 'class="restore"' in page
        assert f'<blockquote class="unsaved">{mine}</blockquote>' in page
        assert ui.request("GET", location, headers=session)[0] == 200
