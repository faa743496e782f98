"""`squirrel-mcp import` into the sync server: one pull, then appends of up to 500 records.

The real command against the reference server, under the server's default rate
limit: every memory arrives, a second import adds nothing, and the server's access
log (one line per request) shows a handful of appends rather than one per memory.
Then, on a server slow enough that every command lasts seconds (one request a
second), import and export draw their progress bar when stderr is a terminal, and
nothing of it when stderr is a pipe.
"""

from __future__ import annotations

import json
import math
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from squirrel_mcp.storage.wire import MAX_RECORDS_PER_APPEND
from squirrel_mcp.syncserver.app import Limits
from tests.conftest import run_cli, secrets_of_this_test
from tests.exports import export_of
from tests.sync.conftest import start_sync_server
from tests.sync.test_remote_cli import remote_env

DEFAULT_RATE = ("--rate-limit", str(Limits.rate), "--burst", str(Limits.burst))
# One request a second, two at once: each command below then lasts seconds, whatever the load.
SLOW_RATE = ("--rate-limit", "1", "--burst", "2")
LONGEST_HISTORY = 3
BAR_START = "\r\x1b"  # what no plain log line holds: a carriage return, an escape sequence


def export_file(count: int) -> dict[str, Any]:
    """An export of `count` memories, a third of them with a history of two or three revisions."""
    memories = []
    for number in range(count):
        memory_id = f"{number:016x}"
        revisions = []
        for revision in range(1, 1 + 1 + number % LONGEST_HISTORY):
            stamp = f"2026-03-{1 + revision:02d}T10:00:{number % 60:02d}.000Z"
            revisions.append(
                {
                    "id": memory_id,
                    "entity": "user",
                    "text": f"Imported memory number {number}, revision {revision}.",
                    "tags": ["imported"],
                    "keywords": [],
                    "category": "note",
                    # As this version exports it: every revision says its project (none here).
                    "project": None,
                    "createdAt": "2026-03-02T10:00:00.000Z",
                    "updatedAt": stamp,
                    "revision": revision,
                    "change": "created" if revision == 1 else "corrected",
                    "deleted": False,
                    "reason": None,
                }
            )
        memories.append({"id": memory_id, "revisions": revisions})
    return export_of(memories)


def requests_in(log: Path, method: str) -> int:
    """How many `method /v1/records` requests the server's access log shows."""
    return log.read_text(errors="replace").count(f'"{method} /v1/records')


def test_import_appends_in_batches_and_twice_adds_nothing(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "sync-server.log"
    with start_sync_server(database_url, *DEFAULT_RATE, log=log) as server:
        env = remote_env(tmp_path, server)
        assert run_cli(env, "init").returncode == 0
        exported = export_file(1_200)
        records = sum(len(memory["revisions"]) for memory in exported["memories"])
        file = tmp_path / "export.json"
        file.write_text(json.dumps(exported), encoding="utf-8")

        pulls_before = requests_in(log, "GET")
        first = run_cli(env, "import", str(file))
        assert first.returncode == 0, first.stderr
        added = f"imported 1200 memories: {records} revisions added, 0 already present"
        assert added in first.stdout.decode()
        appends = requests_in(log, "POST")
        # Whole memories per append, at most 500 records each: before, one append per memory.
        fullest = MAX_RECORDS_PER_APPEND - (LONGEST_HISTORY - 1)
        assert math.ceil(records / MAX_RECORDS_PER_APPEND) <= appends <= math.ceil(records / fullest)
        # Pulls of an empty account (at unlock, and before comparing), then one of what it
        # appended, in pages of 500 records: nothing per memory.
        assert requests_in(log, "GET") - pulls_before <= 2 + math.ceil(records / 500)

        again = run_cli(env, "import", str(file))
        assert again.returncode == 0, again.stderr
        assert f"0 revisions added, {records} already present, 0 conflicting" in again.stdout.decode()
        assert requests_in(log, "POST") == appends

        back = run_cli(env, "export")
        assert back.returncode == 0, back.stderr
        assert json.loads(back.stdout)["memories"] == exported["memories"]
        assert BAR_START not in first.stderr.decode() + again.stderr.decode() + back.stderr.decode()


def run_on_terminal(env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run `squirrel-mcp ARGS` with stderr on a pseudo-terminal: its exit status and what the terminal got."""
    registry = secrets_of_this_test()
    registry.add_env(env)
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "squirrel_mcp", *args],
            env={"PATH": os.environ["PATH"], **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
        )
    finally:
        os.close(terminal)
    received: list[bytes] = []

    def read() -> None:
        # Read as it comes, so a full terminal buffer never blocks the command.
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the command closed its end
                return
            if not chunk:
                return
            received.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=600)
        reader.join(timeout=60)
    finally:
        os.close(controller)
    text = b"".join(received).decode(errors="replace")
    registry.texts.append((f"terminal of squirrel-mcp {' '.join(args)}", text))
    return status, text


def graph_file(path: Path, entities: int, observations: int) -> None:
    """A server-memory JSONL file: `entities` people with `observations` observations each."""
    lines = [
        json.dumps(
            {
                "type": "entity",
                "name": f"person {number}",
                "entityType": "person",
                "observations": [f"fact {fact} about person {number}" for fact in range(observations)],
            }
        )
        for number in range(entities)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def new_machine(env: dict[str, str], tmp_path: Path, name: str) -> dict[str, str]:
    """`env` with a cache directory of its own: no state snapshot, so every record is decrypted."""
    return {**env, "XDG_CACHE_HOME": str(tmp_path / f"cache-of-machine-{name}")}


def test_import_and_export_draw_a_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path}/sync-db/sync.sqlite3"
    with start_sync_server(database, *SLOW_RATE, log=tmp_path / "sync-server.log") as server:
        env = remote_env(tmp_path, server)
        assert run_cli(env, "init").returncode == 0
        file = tmp_path / "export.json"
        file.write_text(json.dumps(export_file(1_200)), encoding="utf-8")

        piped = run_cli(env, "import", str(file))
        assert piped.returncode == 0, piped.stderr
        assert piped.stderr.decode() == ""

        # The bar shows the records decrypted: on a machine with a state snapshot there are none
        # to decrypt, so these commands run as on a machine new to the account (a fresh cache).
        status, shown = run_on_terminal(
            new_machine(env, tmp_path, "b"), "export", "-o", str(tmp_path / "back.json")
        )
        assert status == 0, shown
        assert "squirrel-mcp: reading [" in shown and "records" in shown
        # Erased once done: the last thing before the closing line is the erase sequence.
        assert shown.rstrip().endswith(f"\r\x1b[2Ksquirrel-mcp: exported to {tmp_path / 'back.json'}")

        graph = tmp_path / "memory.jsonl"
        graph_file(graph, entities=60, observations=10)
        status, shown = run_on_terminal(env, "import", "--from", "server-memory", str(graph))
        assert status == 0, shown
        assert "squirrel-mcp: importing [" in shown and "/600 memories" in shown

        status, shown = run_on_terminal(new_machine(env, tmp_path, "c"), "import", str(file))
        assert status == 0, shown
        assert "squirrel-mcp: reading [" in shown
