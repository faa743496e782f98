"""`squirrel-mcp ui` over raw HTTP: its refusals (token, Host, Origin), form errors, and a server beside it.

Every request goes to the real process started as a person starts it
(`squirrel-mcp ui --no-browser --port 0`, the printed address parsed); what the
vault holds is read through the library, never through the page.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from mcp import Client

from tests.conftest import PASSPHRASE, WARM_WAIT, WARMING, call, needs_model, run_cli, server_params
from tests.ui_support import (
    FORM,
    create_vault,
    form_body,
    library,
    outcome_address,
    post_form,
    running_ui,
    save,
)

# Every test here starts `squirrel-mcp ui` (and a browser or a server) in processes of their own.
pytestmark = pytest.mark.process

SECRET_TEXT = "The spare key hides under the blue flowerpot"


def rendered_revision(page: str) -> str:
    found = re.search(r'name="revision" value="(\d+)"', page)
    assert found is not None
    return found.group(1)


def assert_refusal_only(body: str) -> None:
    """A refusal is one short line: no page, no memory text."""
    assert body.count("\n") == 1
    assert len(body) < 120
    assert "<" not in body
    assert "flowerpot" not in body


def test_token_cookie_host_and_origin(vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        memory = save(store, SECRET_TEXT, entity="home", tags=["house"])
    with running_ui(vault_env, tmp_path) as ui:
        # No token, no cookie: 401 and nothing else.
        status, headers, body = ui.request("GET", "/")
        assert status == 401
        assert_refusal_only(body)
        assert "set-cookie" not in headers
        for path in ("/search?q=key", f"/memory/{memory.id}", "/export", "/static/ui.js"):
            assert ui.request("GET", path)[0] == 401
        # A wrong token: 403.
        status, headers, body = ui.request("GET", "/?token=not-the-token")
        assert status == 403
        assert_refusal_only(body)
        assert "set-cookie" not in headers
        # The right one: a cookie (HttpOnly, SameSite=Strict) and a redirect to the address without it.
        status, headers, body = ui.request("GET", f"/?token={ui.token}")
        assert status == 303
        assert headers["location"] == "/"
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and ui.token not in cookie
        session = {"Cookie": cookie.split(";")[0]}
        # The token opens once.
        status, _, body = ui.request("GET", f"/?token={ui.token}")
        assert status == 403
        assert_refusal_only(body)
        # A wrong cookie: 403.
        name = cookie.split("=")[0]
        assert ui.request("GET", "/", headers={"Cookie": f"{name}=forged"})[0] == 403
        # With the cookie: the page, under a strict policy.
        status, headers, body = ui.request("GET", "/", headers=session)
        assert status == 200
        assert SECRET_TEXT in body
        policy = headers["content-security-policy"]
        assert "default-src 'none'" in policy and "unsafe" not in policy and "script-src 'self'" in policy
        assert headers["cache-control"] == "no-store"
        assert headers["x-frame-options"] == "DENY"
        # No inline script or style, nothing fetched from elsewhere.
        assert re.search(r"<script(?![^>]*\ssrc=\"/static/)", body) is None
        assert "style=" not in body and "<style" not in body
        assert re.search(r"(src|href)=\"(https?:)?//", body) is None
        status, headers, _ = ui.request("GET", "/static/ui.js", headers=session)
        assert status == 200 and headers["content-type"].startswith("text/javascript")
        # DNS rebinding: another name for this address is refused, cookie or not.
        for host in ("attacker.example", f"attacker.example:{ui.port}", f"127.0.0.1:{ui.port + 1}"):
            status, _, body = ui.request("GET", "/", headers={**session, "Host": host})
            assert status == 421
            assert_refusal_only(body)
        # CSRF: a write without this page's Origin is refused and writes nothing.
        path = f"/memory/{memory.id}/delete"
        for origin in (None, "http://attacker.example", f"http://127.0.0.1:{ui.port + 1}", "null"):
            headers_sent = {**session, **FORM, **({"Origin": origin} if origin else {})}
            status, _, body = ui.request("POST", path, headers=headers_sent, body=form_body(reason="cleanup"))
            assert status == 403
            assert_refusal_only(body)
        with library(vault_env) as store:
            assert store.get(memory.id).revision == 1
        # The same write from the page's origin lands.
        status, headers, _ = ui.request(
            "POST", path, headers={**session, **FORM, "Origin": ui.origin}, body=form_body(reason="cleanup")
        )
        assert status == 303
        assert headers["location"] == f"/memory/{memory.id}?done=deleted"
        with library(vault_env) as store:
            assert store.get(memory.id).deleted


def test_the_redirect_that_drops_the_token_stays_on_the_page(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    with running_ui(vault_env, tmp_path) as ui:
        # The review's request: the redirect named another site ("//evil.example/x").
        status, headers, _ = ui.request("GET", f"//evil.example/x?token={ui.token}")
        assert status == 303
        assert headers["location"] == "/evil.example/x"
        session = {"Cookie": headers["set-cookie"].split(";")[0]}
        # With the session, a token in the address is dropped the same way; each of these would
        # leave the origin once a browser read it as a network-path reference.
        for path, expected in [
            ("//evil.example/x?q=1", "/evil.example/x?q=1"),
            ("///evil.example", "/evil.example"),
            ("/\\evil.example/x", "/%5Cevil.example/x"),
            ("/%09/evil.example", "/%09/evil.example"),
            ("/%2F%2Fevil.example", "/evil.example"),
            ("/search?q=key", "/search?q=key"),
        ]:
            joiner = "&" if "?" in path else "?"
            status, headers, _ = ui.request("GET", f"{path}{joiner}token=spent", headers=session)
            assert (status, headers["location"]) == (303, expected), path


def test_form_errors_name_the_rule_and_write_nothing(vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        memory = save(store, SECRET_TEXT, entity="home", tags=["house"])
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        write = {**session, **FORM, "Origin": ui.origin}
        good = {
            "text": SECRET_TEXT + " (the green one now)",
            "entity": "home",
            "category": "note",
            "tags": "house",
            "keywords": "",
            "reason": "it moved",
            "revision": "1",
        }
        cases = [
            ({"text": "x" * 4001}, "text", "is longer than 4,000 characters: send text of 1 to"),
            ({"text": "   "}, "text", "is empty (spaces aside): send text of 1 to 4,000 characters"),
            ({"entity": "home\x07"}, "entity", "must not contain control characters"),
            ({"category": "gossip"}, "category", "is not one of the values it takes: send one of"),
            ({"tags": ",".join(f"t{n}" for n in range(21))}, "tags", "has more than 20 items"),
            ({"tags": "y" * 65}, "tags 1", "is longer than 64 characters"),
            ({"reason": ""}, "reason", "is empty (spaces aside)"),
            ({"reason": "r" * 501}, "reason", "is longer than 500 characters"),
            ({"revision": "zero"}, "revision", "is not a whole number: send a whole number of at least 1"),
            ({"text": SECRET_TEXT}, "form", "nothing to change"),
        ]
        # Each refusal redirects to the memory's page, which names the field and the rule above
        # the form as it was sent; the address holds a key, never what was typed.
        for change, field, rule in cases:
            sent = good | change
            location, body = post_form(ui, f"/memory/{memory.id}/correct", write, form_body(**sent))
            assert outcome_address(memory.id).fullmatch(location), (field, location)
            assert "Nothing was saved:" in body
            assert f"<b>{field}</b>: " in body and rule in body, (field, rule)
            # Said for a person, never in the validation library's words.
            assert "Input should" not in body and "String should" not in body and "List should" not in body
            assert f'<input name="reason" value="{sent["reason"]}" required>' in body, field
        # A body that is no form of this page.
        location, body = post_form(
            ui,
            f"/memory/{memory.id}/correct",
            {**write, "content-type": "application/json"},
            json.dumps(good).encode(),
        )
        assert outcome_address(memory.id).fullmatch(location)
        assert "application/x-www-form-urlencoded" in body
        # A body larger than any form of the page: not read, and a redirect too, never a 413 answer.
        location, body = post_form(ui, f"/memory/{memory.id}/correct", write, form_body(text="x" * 300_000))
        assert outcome_address(memory.id).fullmatch(location)
        assert "larger than any form of this page" in body and "xxxx" not in body
        # A delete's reason follows the same rule.
        location, body = post_form(ui, f"/memory/{memory.id}/delete", write, form_body(reason="r" * 501))
        assert outcome_address(memory.id).fullmatch(location) and "<b>reason</b>: " in body
        with library(vault_env) as store:
            assert [r.revision for r in store.history(memory.id)] == [1]
        # Filters and searches too, each box saying what did not happen (nothing was being saved).
        status, _, body = ui.request("GET", "/?category=gossip", headers=session)
        assert status == 400 and "<b>category</b>: " in body
        assert "Not filtered" in body and "saved" not in body
        status, _, body = ui.request("GET", "/?limit=1000", headers=session)
        assert status == 400 and "<b>limit</b>: " in body
        status, _, body = ui.request("GET", "/search?q=" + quote("q" * 1001), headers=session)
        assert status == 400 and "<b>query</b>: " in body
        assert "Nothing was searched:" in body and "saved" not in body
        status, _, _ = ui.request("GET", "/memory/not-an-id", headers=session)
        assert status == 404
        # A valid correction lands, as the newest revision with its reason.
        location, body = post_form(ui, f"/memory/{memory.id}/correct", write, form_body(**good))
        assert location == f"/memory/{memory.id}?done=corrected" and "Saved: " in body
        with library(vault_env) as store:
            latest = store.get(memory.id)
            assert (latest.revision, latest.text, latest.reason) == (2, good["text"], "it moved")


@pytest.mark.anyio
async def test_beside_a_running_server(vault_env: dict[str, str], tmp_path: Path) -> None:
    """The page and a server on one vault see each other's writes; a stale correction shows the change."""
    create_vault(vault_env)
    async with Client(server_params(vault_env)) as client:
        saved = await call(client, "save_memory", text=SECRET_TEXT, entity="home", tags=["house"])
        memory_id = saved["memory"]["id"]
        with running_ui(vault_env, tmp_path) as ui:
            session = {"Cookie": ui.login()}
            write = {**session, **FORM, "Origin": ui.origin}
            # The server's memory is on the page.
            status, _, page = ui.request("GET", f"/memory/{memory_id}", headers=session)
            assert status == 200 and SECRET_TEXT in page
            rendered = rendered_revision(page)
            # The agent corrects its text and tags after the page was rendered.
            agent_text = "The spare key is with the neighbour at number 12"
            await call(
                client,
                "update_memory",
                id=memory_id,
                text=agent_text,
                tags=["house", "keys"],
                reason="moved it",
            )
            # The page's correction of the text, made on revision 1, is refused.
            page_text = "The spare key hides in the garden shed"
            body = form_body(
                text=page_text,
                entity="home",
                category="note",
                tags="house",
                keywords="",
                reason="wrong",
                revision=rendered,
            )
            location, page = post_form(ui, f"/memory/{memory_id}/correct", write, body)
            assert outcome_address(memory_id).fullmatch(location) and "garden" not in location
            with library(vault_env) as store:
                assert [(r.revision, r.text) for r in store.history(memory_id)] == [
                    (1, SECRET_TEXT),
                    (2, agent_text),
                ]
            # A reload of that address (twice) shows the memory as it is now, the conflict with what
            # changed meanwhile, and the person's unsaved text, in a form now on revision 2; never a 409.
            for _ in range(2):
                status, _, page = ui.request("GET", location, headers=session)
                assert status == 200
                assert f'<h1 class="text" id="text">{agent_text}</h1>' in page
                assert "changed since this form was loaded (at revision 1; it is now at revision 2)" in page
                conflict = page[
                    page.index('id="conflict"') : page.index("</section>", page.index('id="conflict"'))
                ]
                assert f"<del>{SECRET_TEXT}</del>" in conflict and f"<ins>{agent_text}</ins>" in conflict
                assert "<del>house</del>" in conflict and "<ins>house, keys</ins>" in conflict
                assert f'<textarea name="text" rows="5">{page_text}</textarea>' in page
                assert rendered_revision(page) == "2"
                # The tags the person left alone take the agent's; the text both changed is theirs.
                assert '<input name="tags" value="house, keys">' in page
                assert "<b>both changed</b>: text" in page
            # Sent again from that page, the correction lands on top of the agent's.
            sent = dict(re.findall(r'<input name="(\w+)" value="([^"]*)"', page))
            body = form_body(**sent, text=page_text, category="note", revision=rendered_revision(page))
            location, page = post_form(ui, f"/memory/{memory_id}/correct", write, body)
            assert location == f"/memory/{memory_id}?done=corrected"
            with library(vault_env) as store:
                latest = store.get(memory_id)
                assert (latest.revision, latest.text, latest.tags) == (3, page_text, ["house", "keys"])
            # The page shows the agent's changes at its next request, and the server the page's delete.
            await call(client, "update_memory", id=memory_id, text=agent_text, reason="no, the neighbour")
            status, _, page = ui.request("GET", "/", headers=session)
            assert agent_text in page
            location, _ = post_form(ui, f"/memory/{memory_id}/delete", write, form_body(reason="obsolete"))
            assert location == f"/memory/{memory_id}?done=deleted"
            got = await call(client, "get_memory", id=memory_id)
            assert got["deleted"] is True and got["memory"]["revision"] == 5
            # A second delete (another tab, stale) is refused, on a page that reloads: it already is deleted.
            location, page = post_form(ui, f"/memory/{memory_id}/delete", write, b"")
            assert outcome_address(memory_id).fullmatch(location) and "already deleted" in page
            assert ui.request("GET", location, headers=session)[0] == 200


def test_search_counts_and_export(vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        first = save(store, SECRET_TEXT, entity="home", tags=["house"])
        save(store, "Allergic to penicillin since childhood", category="profile", tags=["health"])
        deleted = save(store, "Dentist appointment on Thursday afternoon", category="event")
        store.delete(deleted.id, reason=None)
    with running_ui(vault_env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        status, _, page = ui.request("GET", "/search?" + urlencode({"q": "spare key"}), headers=session)
        assert status == 200
        assert SECRET_TEXT in page and "penicillin" not in page
        # Said for a person: what it was found by, how many of the query's words each hit holds.
        assert 'data-ranking="lexical">by words<' in page and 'class="lexical">100%<' in page
        assert "lexicalScore" not in page and "semanticScore" not in page and "meaning" not in page
        # The score that orders the hits is shown beside the two it is made from.
        assert re.search(r'score <b class="score">\d\.\d{3}</b>', page)
        # Near misses on request.
        status, _, page = ui.request(
            "GET", "/search?" + urlencode({"q": "medicine", "near": "1"}), headers=session
        )
        assert status == 200 and "near miss" in page
        # Counts by category; deleted ones only on request.
        status, _, page = ui.request("GET", "/", headers=session)
        assert re.search(r"profile</a> <span>1<", page) and re.search(r"deleted</a> <span>1<", page)
        assert "Dentist" not in page
        status, _, page = ui.request("GET", "/?deleted=1&category=event", headers=session)
        assert "Dentist" in page and SECRET_TEXT not in page
        status, _, page = ui.request("GET", "/?tags=HOUSE&entity=Home", headers=session)
        assert SECRET_TEXT in page and "penicillin" not in page
        status, _, page = ui.request("GET", "/?limit=1", headers=session)
        assert "1-1 of 2" in page and 'rel="next"' in page
        # The export is the CLI's: every memory with its history, once the passphrase is given again.
        status, _, page = ui.request("GET", "/export", headers=session)
        assert status == 200 and 'name="passphrase" type="password"' in page and SECRET_TEXT not in page
        write = {**session, **FORM, "Origin": ui.origin}
        status, headers, data = ui.request(
            "POST", "/export", headers=write, body=form_body(passphrase=PASSPHRASE)
        )
        assert status == 200 and headers["content-disposition"].startswith("attachment;")
        exported = json.loads(data)
        assert exported["format"] == "squirrel-mcp-export"
        assert {m["id"] for m in exported["memories"]} >= {first.id, deleted.id}


def test_ctrl_c_stops_it_and_a_wrong_passphrase_is_one_line(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    with running_ui(vault_env, tmp_path) as ui:
        assert ui.request("GET", "/")[0] == 401
        # A port already taken: one line naming it.
        taken = run_cli(vault_env, "ui", "--no-browser", "--port", str(ui.port))
        assert taken.returncode == 1
        assert taken.stdout == b""
        assert taken.stderr.decode().strip() == (
            f"squirrel-mcp: cannot listen on 127.0.0.1:{ui.port} (Address already in use); try another --port"
        )
    # running_ui stopped it with SIGINT and checked the exit status and stderr.
    wrong = {**vault_env, "SQUIRREL_PASSPHRASE": "not the passphrase at all"}
    result = run_cli(wrong, "ui", "--no-browser")
    assert result.returncode == 1
    assert result.stdout == b""
    assert len(result.stderr.decode().strip().splitlines()) == 1


@needs_model
def test_search_is_hybrid_with_the_embeddings_plugin(vault_env: dict[str, str], tmp_path: Path) -> None:
    """With the plugin the page ranks as the server does: by meaning too, each hit with its closeness."""
    create_vault(vault_env)
    with library(vault_env) as store:
        save(store, "Allergic to penicillin since childhood", category="profile", tags=["health"])
        save(store, SECRET_TEXT, entity="home", tags=["house"])
    env = {**vault_env, "SQUIRREL_MCP_PLUGINS": "embeddings"}
    with running_ui(env, tmp_path) as ui:
        session = {"Cookie": ui.login()}
        query = "/search?" + urlencode({"q": "antibiotic allergy"})
        # The model loads in the background (search is lexical until then), and then the warm-up
        # embeds the memories (search is hybrid over what is embedded so far, with a note): ask
        # again until hybrid without that note. The warm-up runs at nice +10, so on a loaded
        # machine it can take minutes: WARM_WAIT at most, as search_warm waits.
        deadline = time.monotonic() + WARM_WAIT
        page = ui.request("GET", query, headers=session)[2]
        hybrid = 'data-ranking="hybrid">by words and meaning<'
        while not (hybrid in page and WARMING not in page) and time.monotonic() < deadline:
            time.sleep(0.5)
            page = ui.request("GET", query, headers=session)[2]
        assert hybrid in page and WARMING not in page
        first = page.index('<li class="card"')
        assert "penicillin" in page[first : first + 600]
        assert re.search(r'meaning <b class="semantic">-?\d\.\d{2}<', page)
