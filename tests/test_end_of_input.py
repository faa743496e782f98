"""Requests piped into the real server, stdin closed right after: every one is answered.

A client may write its whole conversation at once and close stdin (a shell pipe,
a batch job). The server reads to the end of input, then must still answer every
request it read, and every save it acknowledged must be in the vault.
"""

from __future__ import annotations

import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys.crypto import SALT_BYTES, KdfParams
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE, run_cli, secrets_of_this_test

# Requests per run, after initialize: 20 runs, from 1 to 50, in no particular order.
BATCHES = [1, 50, 2, 37, 5, 50, 13, 3, 44, 8, 29, 1, 21, 49, 4, 34, 17, 9, 40, 25]
LANES = 2
WORDS = ["garden", "bicycle", "sister", "piano", "coffee", "passport", "dentist", "holiday"]


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def conversation(run: int, count: int) -> tuple[bytes, dict[int, str]]:
    """The bytes a client writes before closing stdin, and the saves among its requests by id."""
    initialize = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "pipe", "version": "1"},
    }
    data = line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize})
    data += line({"jsonrpc": "2.0", "method": "notifications/initialized"})
    chance = random.Random(run)
    saves: dict[int, str] = {}
    for request_id in range(1, count + 1):
        word = chance.choice(WORDS)
        if chance.random() < 0.5:
            text = f"run {run} request {request_id}: a note about the {word}"
            saves[request_id] = text
            call = {"name": "save_memory", "arguments": {"text": text, "tags": [word]}}
        else:
            call = {"name": "search_memory", "arguments": {"query": word}}
        data += line({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": call})
    secrets_of_this_test().add(list(saves.values()))
    return data, saves


def stored_ids(vault: Path) -> set[str]:
    """The ids of the memories in the vault, read through the library as another process would."""
    storage = LocalVault(vault, create=False)
    try:
        return {memory.id for memory in MemoryStore.unlock(storage, PASSPHRASE).current()}
    finally:
        storage.close()


def new_vault(env: dict[str, str], name: str) -> dict[str, str]:
    """The environment of a server on a vault made beforehand, with the cheapest key derivation allowed."""
    vault = Path(env["SQUIRREL_VAULT"]).with_name(name)
    vault.parent.mkdir(parents=True, exist_ok=True)
    storage = LocalVault(vault, create=True)
    MemoryStore.create(storage, PASSPHRASE, KdfParams(salt=os.urandom(SALT_BYTES), n=2**14))
    storage.close()
    return {**env, "SQUIRREL_VAULT": str(vault)}


def serve_runs(env: dict[str, str], runs: list[int]) -> None:
    """Pipe each run's conversation into a server of its own on one vault, checking each as it ends."""
    vault = Path(env["SQUIRREL_VAULT"])
    acknowledged: set[str] = set()
    for run in runs:
        count = BATCHES[run]
        data, saves = conversation(run, count)
        served = run_cli(env, stdin=data)
        assert served.returncode == 0, served.stderr
        assert b"unanswered" not in served.stderr
        answers = [json.loads(text) for text in served.stdout.decode().splitlines()]
        by_id = {answer["id"]: answer for answer in answers}
        assert len(answers) == len(by_id) == count + 1, (run, count, sorted(by_id))
        assert set(by_id) == set(range(count + 1))
        for request_id, answer in by_id.items():
            assert "result" in answer, (run, request_id, answer.get("error"))
            if request_id:
                assert answer["result"]["isError"] is False, (run, request_id)
        saved = {by_id[request_id]["result"]["structuredContent"]["memory"]["id"] for request_id in saves}
        assert len(saved) == len(saves)
        acknowledged |= saved
        assert stored_ids(vault) == acknowledged, run


def test_every_request_read_before_the_end_of_input_is_answered(vault_env: dict[str, str]) -> None:
    # Two lanes of runs at once, each on a vault of its own: a server's start-up (importing
    # the SDK) is most of a run's time, and the machine has two cores.
    lanes = [list(range(lane, len(BATCHES), LANES)) for lane in range(LANES)]
    with ThreadPoolExecutor(LANES) as pool:
        done = [
            pool.submit(serve_runs, new_vault(vault_env, f"lane-{i}.sqlite3"), runs)
            for i, runs in enumerate(lanes)
        ]
        for lane in done:
            lane.result()
