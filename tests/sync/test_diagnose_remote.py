"""The recall diagnostic against the sync server: it asks for the API key without echo, too."""

from __future__ import annotations

import json
import os
from pathlib import Path

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.storage.remote import RemoteStorage
from tests.conftest import PASSPHRASE, needs_model
from tests.recall.corpus import CORPUS, revision
from tests.sync.conftest import start_sync_server
from tests.test_diagnose import SCRIPT, on_terminal, questions

pytestmark = needs_model


def test_the_api_key_and_passphrase_are_asked_without_echo(tmp_path: Path) -> None:
    with start_sync_server(f"sqlite:///{tmp_path}/sync/sync.sqlite3", log=tmp_path / "sync.log") as server:
        store = MemoryStore.create(RemoteStorage(server.url, server.api_key), PASSPHRASE)
        for memory in CORPUS[:60]:
            store.import_history([revision(memory)])
        queries = tmp_path / "queries.json"
        queries.write_text(json.dumps(questions(3)), encoding="utf-8")
        (tmp_path / "scratch").mkdir()
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path / "home"),
            "TMPDIR": str(tmp_path / "scratch"),
            "SQUIRREL_API_BASE_URL": server.url,
        }
        code, seen = on_terminal(
            [str(SCRIPT), str(queries)],
            env,
            {b"API key: ": server.api_key.encode(), b"Passphrase: ": PASSPHRASE.encode()},
        )
    assert code == 0, seen[-500:]
    assert "60 memories · model " in seen
    assert server.api_key not in seen and PASSPHRASE not in seen
    assert list((tmp_path / "scratch").iterdir()) == []
