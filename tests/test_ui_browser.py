"""`squirrel-mcp ui` in a real headless browser: Debian's chromium driven by Playwright.

A person's round: open the printed address, search, correct a memory with a
reason, delete it, restore it, read its history; add a memory, delete three at
once and restore them, see the duplicates. After each step the vault,
read through the library (not the page), holds exactly what the page shows.

The browser is Debian's `chromium` (Playwright cannot download its own here);
`nox -s tests` installs it through .ci/chromium. Without it the test is skipped,
saying why, unless SQUIRREL_TEST_BROWSER_REQUIRED=1 (set by .ci/run), which
makes its absence a failure. With SQUIRREL_UI_SCREENSHOTS=DIR it saves the list,
a search, a history, a conflict, the add form, the bulk bar and its result, and
the duplicates as PNGs into DIR, some at a phone's width too (docs/ui holds
those of one run).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.server.searching import run_search
from tests.ui_support import create_vault, library, running_ui, save

# Every test here starts `squirrel-mcp ui` (and a browser or a server) in processes of their own.
pytestmark = pytest.mark.process

CHROMIUM = Path("/usr/bin/chromium")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1100, "height": 900}
WAIT_MS = 120_000

try:
    from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright
except ImportError:  # pragma: no cover - the lock files install it
    sync_playwright = None  # type: ignore[assignment]


def _why_no_browser() -> str | None:
    if sync_playwright is None:
        return "playwright is not installed (requirements/dev.txt has it)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: .ci/chromium installs Debian's chromium (as root)"
    return None


def launch_chromium() -> Iterator[Browser]:
    """Headless Chromium for a module's browser tests: skipped where it is missing, failed where required."""
    why = _why_no_browser()
    if why is not None:
        if os.environ.get("SQUIRREL_TEST_BROWSER_REQUIRED") == "1":
            pytest.fail(f"the browser test must run here: {why}")
        pytest.skip(why)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


def open_page(browser: Browser) -> tuple[BrowserContext, Page, list[str]]:
    """A desktop-sized tab, and the list its script errors (and policy refusals) go to."""
    context = browser.new_context(viewport=DESKTOP)
    # Generous: the machine may be busy, and every wait ends as soon as the page is there.
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return context, page, problems


def screenshot(page: Page, name: str) -> None:
    folder = os.environ.get("SQUIRREL_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def shown_cards(page: Page, selector: str) -> list[tuple[str, str]]:
    """(id, text) of every memory card the page shows, in order."""
    cards = page.locator(f"{selector} > li.card")
    return [
        (cards.nth(n).get_attribute("data-id") or "", cards.nth(n).locator(".text").inner_text())
        for n in range(cards.count())
    ]


def shown_history(page: Page) -> list[tuple[int, str, str | None]]:
    """(revision, change, reason) of every revision the history shows, oldest first."""
    items = page.locator("#history > li.revision")
    found = []
    for n in range(items.count()):
        item = items.nth(n)
        reason = item.locator(".reason")
        found.append(
            (
                int(item.get_attribute("data-revision") or 0),
                item.locator(".change").inner_text(),
                reason.inner_text().removeprefix("Reason: ") if reason.count() else None,
            )
        )
    return sorted(found)


def test_a_persons_round_in_chromium(browser: Browser, vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        save(store, "Prefers green tea over coffee, no sugar", category="preference", tags=["food"])
        key = save(
            store,
            "The spare key hides under the blue flowerpot",
            entity="home",
            tags=["house"],
            keywords=["keys"],
        )
        tyres = save(
            store,
            "Winter tyres are in the garage loft, stacked on the left behind the camping gear,\n"
            "with the wheel nuts in a labelled biscuit tin",
            entity="car",
        )
        save(
            store, "Sister Anna lives in Lyon and visits in June", entity="Anna (sister)", category="profile"
        )
        save(
            store,
            "Wi-Fi password for the guest network is on the fridge",
            entity="home network",
            tags=["house"],
        )
    context, page, problems = open_page(browser)
    with running_ui(vault_env, tmp_path) as ui:
        # The printed address: the token is traded for a cookie, and leaves the address bar.
        page.goto(ui.url)
        assert page.url == f"{ui.origin}/"
        with library(vault_env) as store:
            assert shown_cards(page, "#memories") == [(m.id, m.text) for m in store.current()]
        screenshot(page, "list")

        # Search, from the header's box: the hits and scores the server's search gives.
        page.fill("#q", "spare key")
        page.press("#q", "Enter")
        page.wait_for_url(re.compile(r"/search\?"))
        with library(vault_env) as store:
            expected = run_search(
                store, PluginHost(get_plugin_manager()), "spare key", limit=10, now=datetime.now(UTC)
            )
        assert shown_cards(page, "#results") == [(hit.id, hit.text) for hit in expected.results]
        # Said for a person: found by words, and how many of the query's words each hit holds.
        assert page.inner_text("#ranking") == "by words"
        lexical = page.locator("#results .lexical").all_inner_texts()
        assert lexical == [f"{round(100 * hit.lexicalScore)}%" for hit in expected.results]
        said = page.locator("#results .scores").all_inner_texts()
        assert said and all(text.startswith("matched words ") for text in said)
        scores = page.locator("#results .score").all_inner_texts()
        assert scores == [f"{hit.score:.3f}" for hit in expected.results]
        shown = page.inner_text("main")
        assert not any(name in shown for name in ("lexicalScore", "semanticScore", "ranking", "hybrid"))
        screenshot(page, "search")

        # Correct it, with a reason.
        # The memory's text is the link to its page.
        page.click(f'#results li[data-id="{key.id}"] .text a')
        page.wait_for_url(f"**/memory/{key.id}")
        # The page is headed by what the memory says, not who it is about ("home"); the tab's
        # title holds nothing of it (a browser keeps titles in its history).
        assert page.inner_text("h1") == key.text
        assert page.title() == "Memory · squirrel-mcp"
        corrected = "The spare key is with the neighbour at number 12"
        page.fill("form.edit textarea[name=text]", corrected)
        page.fill("form.edit input[name=reason]", "moved it last week")
        page.click("form.edit button[type=submit]")
        page.wait_for_url(re.compile(r"\?done=corrected$"))
        with library(vault_env) as store:
            latest = store.get(key.id)
        assert (latest.revision, latest.text, latest.reason, latest.deleted) == (
            2,
            corrected,
            "moved it last week",
            False,
        )
        assert page.inner_text("#text") == latest.text
        assert page.inner_text("#revision") == "2"

        # A long text's heading is its beginning, on one line, cut after a word; the page holds it all.
        page.goto(f"{ui.origin}/memory/{tyres.id}")
        title = page.inner_text("h1")
        flat = " ".join(tyres.text.split())
        assert title.endswith("…") and len(title) <= 80 and flat.startswith(title[:-1])
        assert flat[len(title) - 1] == " " and page.title() == "Memory · squirrel-mcp"
        assert page.inner_text("#text") == tyres.text
        page.goto(f"{ui.origin}/memory/{key.id}")

        # Delete it, then restore it.
        page.fill("form.delete input[name=reason]", "not needed")
        page.click("form.delete button[type=submit]")
        page.wait_for_url(re.compile(r"\?done=deleted$"))
        with library(vault_env) as store:
            latest = store.get(key.id)
            assert latest.deleted and latest.revision == 3
            assert key.id not in [m.id for m in store.current()]
        assert page.locator("#memory .badge.deleted").count() == 1
        assert page.locator("form.restore").count() == 1
        page.click("form.restore button[type=submit]")
        page.wait_for_url(re.compile(r"\?done=restored$"))
        with library(vault_env) as store:
            latest = store.get(key.id)
            history = store.history(key.id)
        assert (latest.revision, latest.text, latest.deleted) == (4, corrected, False)
        assert page.locator("#memory .badge.deleted").count() == 0

        # Its full history: each revision, what it did and why, as stored.
        assert shown_history(page) == [(r.revision, r.change, r.reason) for r in history]
        corrected_row = page.locator('#history li[data-revision="2"] table.diff')
        assert corrected_row.locator("del").inner_text() == "The spare key hides under the blue flowerpot"
        assert corrected_row.locator("ins").inner_text() == corrected
        screenshot(page, "history")

        # At a phone's width nothing runs off the side.
        page.set_viewport_size(PHONE)
        for path in ("/", f"/memory/{key.id}", "/search?q=key"):
            page.goto(f"{ui.origin}{path}")
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], path
        screenshot(page, "phone-search")

        # The list's filters submit themselves (ui.js ran under the page's policy).
        page.goto(f"{ui.origin}/")
        page.select_option("form.filters select[name=category]", "profile")
        page.wait_for_url(re.compile(r"[?&]category=profile"))
        with library(vault_env) as store:
            profile = [(m.id, m.text) for m in store.current() if m.category == "profile"]
        assert shown_cards(page, "#memories") == profile
    context.close()
    # No script error, and nothing the policy blocked.
    assert problems == []


def test_a_conflict_survives_a_reload_and_the_labels_filter(
    browser: Browser, vault_env: dict[str, str], tmp_path: Path
) -> None:
    """A correction refused because the agent changed the memory meanwhile, then a reload; the links."""
    create_vault(vault_env)
    with library(vault_env) as store:
        save(store, "Prefers green tea over coffee, no sugar", category="preference", tags=["food"])
        key = save(store, "The spare key hides under the blue flowerpot", entity="home", tags=["house"])
        save(
            store,
            "Wi-Fi password for the guest network is on the fridge",
            entity="home network",
            tags=["house"],
        )
    context, page, problems = open_page(browser)
    with running_ui(vault_env, tmp_path) as ui:
        page.goto(ui.url)
        # When it changed: how long ago, the exact time on hover (the title), written by the server.
        card = page.locator(f'#memories li[data-id="{key.id}"]')
        when = card.locator("time")
        assert when.inner_text() == "just now" and when.get_attribute("datetime") == key.updatedAt
        assert re.fullmatch(
            r"\w{3} \d{1,2} \w{3} \d{4}, \d\d:\d\d:\d\d \S+", when.get_attribute("title") or ""
        )
        # A tag filters the list by it; so does an entity.
        card.locator("a.tag", has_text="house").click()
        page.wait_for_url(re.compile(r"/\?tags=house$"))
        with library(vault_env) as store:
            tagged = [(m.id, m.text) for m in store.current() if "house" in m.tags]
        assert len(tagged) == 2 and shown_cards(page, "#memories") == tagged
        page.click(f'#memories li[data-id="{key.id}"] a.entity')
        page.wait_for_url(re.compile(r"/\?entity=home$"))
        assert shown_cards(page, "#memories") == [(key.id, key.text)]
        # The text opens the memory; the agent (another process) corrects it meanwhile.
        page.click(f'#memories li[data-id="{key.id}"] .text a')
        page.wait_for_url(f"**/memory/{key.id}")
        agent_text = "The spare key is with the neighbour at number 12"
        with library(vault_env) as store:
            store.update(key.id, changes={"text": agent_text}, reason="moved it")
        mine = "The spare key hides in the garden shed"
        page.fill("form.edit textarea[name=text]", mine)
        page.fill("form.edit input[name=reason]", "it moved")
        page.click("form.edit button[type=submit]")
        page.wait_for_url(re.compile(rf"/memory/{key.id}\?outcome=[\w-]+$"))
        # The conflict, then a reload: the memory as it is, what changed, the unsaved text; no 409.
        for reload in (False, True):
            if reload:
                response = page.reload()
                assert response is not None and response.status == 200
            assert page.inner_text("#text") == agent_text
            assert page.locator("#conflict del").inner_text() == key.text
            assert page.locator("#conflict ins").inner_text() == agent_text
            assert page.input_value("form.edit textarea[name=text]") == mine
            assert page.input_value("form.edit input[name=revision]") == "2"
        screenshot(page, "conflict")
        # Saved from there, it lands on the agent's revision.
        page.click("form.edit button[type=submit]")
        page.wait_for_url(re.compile(r"\?done=corrected$"))
        with library(vault_env) as store:
            assert (store.get(key.id).revision, store.get(key.id).text) == (3, mine)
        # Enter in the address bar on a form's address: the memory's page, never a 405.
        for form in ("correct", "delete", "restore"):
            response = page.goto(f"{ui.origin}/memory/{key.id}/{form}")
            assert response is not None and response.status == 200, form
            assert page.url == f"{ui.origin}/memory/{key.id}" and page.inner_text("#text") == mine
        # The search page has one search box: its own, with the filters.
        page.goto(f"{ui.origin}/search?q=key")
        assert page.locator("input[name=q]").count() == 1
        assert page.input_value("input[name=q]") == "key"
    context.close()
    assert problems == []


def test_add_act_on_several_and_find_duplicates(
    browser: Browser, vault_env: dict[str, str], tmp_path: Path
) -> None:
    """Add a memory from the page, delete three at once and restore them, then see the duplicates."""
    create_vault(vault_env)
    with library(vault_env) as store:
        save(store, "Prefers green tea over coffee, no sugar", category="preference", tags=["food"])
        save(store, "Anna's birthday is on the third of May", entity="Anna (sister)", category="profile")
        save(store, "Wi-Fi password for the guest network is on the fridge", entity="home network")
        save(store, "The boiler is serviced every October", entity="home", tags=["house"])
        save(store, "Bins go out on Tuesday evening", entity="home", tags=["house", "chores"])
        # A restatement with tags and keywords of its own: one more group.
        peanuts = save(store, "Allergic to peanuts", category="profile", tags=["health"], keywords=["food"])
        epipen = save(
            store,
            "Is allergic to peanuts; carries an EpiPen",
            category="profile",
            tags=["health", "allergy"],
            keywords=["peanut allergy", "epinephrine"],
        )
    context, page, problems = open_page(browser)
    with running_ui(vault_env, tmp_path) as ui:
        page.goto(ui.url)
        # Add: the header's link, the form, a redirect to the new memory; the library reads it as typed.
        page.click("header nav a[href='/new']")
        page.wait_for_url(f"{ui.origin}/new")
        added = "Anna's birthday: the third of May"
        page.fill("form.add textarea[name=text]", added)
        page.fill("form.add input[name=entity]", "Anna (sister)")
        page.select_option("form.add select[name=category]", "profile")
        page.fill("form.add input[name=tags]", "family, dates")
        screenshot(page, "add")
        page.click("form.add button[type=submit]")
        page.wait_for_url(re.compile(r"/memory/[0-9a-f]{16}\?done=saved$"))
        new_id = page.url.split("/memory/")[1].split("?")[0]
        with library(vault_env) as store:
            saved = store.get(new_id)
            first_of_anna = next(m for m in store.current() if m.text.startswith("Anna's birthday is"))
        assert (saved.text, saved.entity, saved.category, saved.tags) == (
            added,
            "Anna (sister)",
            "profile",
            ["family", "dates"],
        )
        assert page.inner_text("#text") == added
        # Its page names the memory it may repeat, as save_memory would have.
        assert page.locator(f'#similar li[data-id="{first_of_anna.id}"]').count() == 1

        # Tick three on the list, delete them in one go.
        page.goto(f"{ui.origin}/")
        with library(vault_env) as store:
            before = {m.id: m for m in store.current()}
        chosen = [m.id for m in before.values() if m.entity in ("home", "home network")]
        assert len(chosen) == 3
        for memory_id in chosen:
            page.check(f'#memories li[data-id="{memory_id}"] input.pick')
        screenshot(page, "bulk")
        page.click("#bulk button[value=delete]")
        page.wait_for_url(re.compile(r"/bulk\?outcome=[\w-]+$"))
        assert page.inner_text("#bulk-result h1") == "3 memories deleted"
        with library(vault_env) as store:
            tombstones = [
                r.id for m in store.current(include_deleted=True) for r in store.history(m.id) if r.deleted
            ]
            assert sorted(tombstones) == sorted(chosen)
            assert {m.id for m in store.current()} == before.keys() - set(chosen)
        screenshot(page, "bulk-done")
        # A reload shows the same count (a GET: nothing is sent again); the undo restores all three.
        response = page.reload()
        assert response is not None and response.status == 200
        assert page.inner_text("#bulk-result h1") == "3 memories deleted"
        page.click("#undo button[type=submit]")
        page.wait_for_url(re.compile(r"/bulk\?outcome=[\w-]+$"))
        assert page.inner_text("#bulk-result h1") == "3 memories restored"
        restored_page = page.url.removeprefix(ui.origin)
        with library(vault_env) as store:
            for memory_id in chosen:
                latest, history = store.get(memory_id), store.history(memory_id)
                assert (latest.text, latest.tags, latest.deleted) == (
                    before[memory_id].text,
                    before[memory_id].tags,
                    False,
                )
                assert [(r.revision, r.change) for r in history] == [
                    (1, "created"),
                    (2, "deleted"),
                    (3, "restored"),
                ]
            assert len(store.current()) == len(before)

        # Two ticked, one of them deleted by the agent meanwhile: each is reported, neither silently.
        page.goto(f"{ui.origin}/")
        tea = next(m for m in before.values() if m.category == "preference")
        page.check(f'#memories li[data-id="{tea.id}"] input.pick')
        page.check(f'#memories li[data-id="{chosen[1]}"] input.pick')
        with library(vault_env) as store:
            store.delete(chosen[1], reason="done by the agent")
        page.fill("#bulk input[name=tag]", "kept")
        page.click("#bulk button[value=tag]")
        page.wait_for_url(re.compile(r"/bulk\?outcome=[\w-]+$"))
        assert page.inner_text("#bulk-result h1") == "1 memory tagged kept"
        refusal = page.locator(f'#refused li[data-id="{chosen[1]}"] .refusal').inner_text()
        assert refusal == "it is deleted: restore it first to change its tags"
        with library(vault_env) as store:
            assert store.get(tea.id).tags == [*tea.tags, "kept"]
            assert (store.get(chosen[1]).revision, store.get(chosen[1]).tags) == (4, before[chosen[1]].tags)
        screenshot(page, "bulk-refused")

        # The duplicates: the list links to them; the added memory and the one it repeats are a group.
        page.goto(f"{ui.origin}/")
        page.click("p.shown a[href='/duplicates']")
        page.wait_for_url(f"{ui.origin}/duplicates")
        groups = page.locator("#duplicates section.group")
        assert groups.count() == 2
        # The newest group first: the one the page added.
        assert shown_cards(page, '#duplicates section.group[data-group="1"] ol') == [
            (first_of_anna.id, first_of_anna.text),
            (saved.id, saved.text),
        ]
        # Oldest first, then by id: the two were saved in a row, often within the same millisecond.
        pair = sorted((peanuts, epipen), key=lambda memory: (memory.createdAt, memory.id))
        shown = shown_cards(page, '#duplicates section.group[data-group="2"] ol')
        assert shown == [(memory.id, memory.text) for memory in pair]
        screenshot(page, "duplicates")

        # At a phone's width nothing runs off the side of the new pages either.
        page.set_viewport_size(PHONE)
        for path in ("/", "/new", "/duplicates", restored_page, f"/memory/{saved.id}"):
            page.goto(f"{ui.origin}{path}")
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], path
        screenshot(page, "phone-duplicates")
        page.goto(f"{ui.origin}/")
        page.check(f'#memories li[data-id="{chosen[0]}"] input.pick')
        screenshot(page, "phone-list")
    context.close()
    assert problems == []
