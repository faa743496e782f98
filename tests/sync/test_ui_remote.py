"""`squirrel-mcp ui` on a sync account: the same page, its changes written to the sync server."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.storage.remote import RemoteStorage
from tests.conftest import PASSPHRASE
from tests.sync.conftest import start_sync_server
from tests.ui_support import CHEAP_KDF, running_ui, save


def test_the_page_reads_and_corrects_a_sync_account(tmp_path: Path) -> None:
    with start_sync_server(f"sqlite:///{tmp_path}/sync/sync.sqlite3", log=tmp_path / "sync.log") as server:
        store = MemoryStore.create(RemoteStorage(server.url, server.api_key), PASSPHRASE, CHEAP_KDF)
        memory = save(store, "Books the yearly dentist check-up every March", category="task")
        env = {
            "SQUIRREL_API_BASE_URL": server.url,
            "SQUIRREL_API_KEY": server.api_key,
            "SQUIRREL_PASSPHRASE": PASSPHRASE,
            "HOME": str(tmp_path / "home"),
            "SQUIRREL_MCP_PLUGINS": "",
        }
        with running_ui(env, tmp_path) as ui:
            session = {"Cookie": ui.login()}
            status, _, page = ui.request("GET", "/", headers=session)
            assert status == 200 and memory.text in page and "the sync server at " in page
            corrected = "Books the yearly dentist check-up every April"
            body = urlencode(
                {
                    "text": corrected,
                    "entity": "user",
                    "category": "task",
                    "tags": "",
                    "keywords": "",
                    "reason": "the dentist moved it",
                    "revision": "1",
                }
            ).encode()
            headers = {**session, "content-type": "application/x-www-form-urlencoded", "Origin": ui.origin}
            status, _, _ = ui.request("POST", f"/memory/{memory.id}/correct", headers=headers, body=body)
            assert status == 303
        # Another machine, unlocking the account afresh, sees the correction.
        again = MemoryStore.unlock(RemoteStorage(server.url, server.api_key), PASSPHRASE)
        latest = again.get(memory.id)
        assert (latest.revision, latest.text, latest.reason) == (2, corrected, "the dentist moved it")
