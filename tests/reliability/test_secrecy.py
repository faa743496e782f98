"""Secrecy: what the server writes (logs, errors, files) never shows a memory, a query or a key.

- The suite-wide scan of tests/conftest.py (every test's server stderr, CLI stderr
  and tool errors against the secrets that test used) is shown to catch a leak.
- A whole session with the embeddings plugin and hook tracing on, under umask 000:
  its stderr, every error it gave and every file it wrote are searched for the
  memory texts, the queries, the passphrase, the API key, the data key, the key
  that encrypts the vectors, in raw, hex and base64 form. The vault and the vector
  file must hold ciphertext only.
- Every file and directory of the project's own is owner-only (0600 / 0700), even
  though the umask would have let anyone read them.
"""

from __future__ import annotations

import base64
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import vectors
from tests.conftest import (
    PASSPHRASE,
    call,
    call_error,
    needs_model,
    run_cli,
    search_when,
    secrets_of_this_test,
    server_params,
)
from tests.reliability.figures import record

pytestmark = pytest.mark.anyio

API_KEY = "sk-test-0123456789abcdef-never-logged"
MEMORIES = [
    ("Takes levothyroxine every morning before breakfast", "profile", ["health"], ["thyroid"]),
    ("Bank PIN reminder lives in the blue notebook", "fact", ["finance"], ["pin code"]),
    ("Sister Marguerite is moving to Valparaíso in June", "event", ["family"], []),
    ("Prefers answers in metric units, never imperial", "preference", [], ["units"]),
    ("Working on the Heliotrope migration at Quillfeather Ltd", "project", ["work"], ["heliotrope"]),
]
QUERIES = ["which medicine in the morning", "where is the PIN written", "Marguerite Valparaíso move"]
REASON = "She changed her plans after the Valparaíso flat fell through"


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """Run with this umask (the server inherits it); the old one is put back."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def encodings(key: bytes) -> list[bytes]:
    """How a key could show up in a log: raw, hex (both cases), base64 (both alphabets)."""
    return [
        key,
        key.hex().encode(),
        key.hex().upper().encode(),
        base64.b64encode(key),
        base64.urlsafe_b64encode(key),
        base64.b64encode(key).rstrip(b"="),
    ]


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def test_the_suite_wide_scan_catches_a_leak(vault_env: dict[str, str], tmp_path: Path) -> None:
    """A server made to print its passphrase on stderr is caught by the conftest scan."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\nprint('leaking', os.environ.get('SQUIRREL_PASSPHRASE'), file=sys.stderr)\n"
    )
    result = run_cli({**vault_env, "PYTHONPATH": str(site)}, "--version")
    registry = secrets_of_this_test()
    where, text = registry.texts[-1]
    assert registry.leaks(text) == [PASSPHRASE], (where, text)
    # Caught: take it out again, or the scan would (rightly) fail this test.
    registry.texts.pop()
    assert result.returncode == 0


@needs_model
async def test_a_whole_session_leaks_nothing_and_writes_owner_only_files(tmp_path: Path) -> None:
    started = time.monotonic()
    home = tmp_path / "home"
    env = {
        # No SQUIRREL_VAULT and no SQUIRREL_MEMORY_CACHE_DIR: the default places are checked.
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MCP_TRACE_HOOKS": "1",
    }
    registry = secrets_of_this_test()
    registry.add([text for text, *_ in MEMORIES])
    registry.add(QUERIES)
    # No API key in the environment: local mode refuses one without SQUIRREL_API_BASE_URL. It is
    # still searched for (a leak from elsewhere would show); the sync tests' servers run with real
    # keys, and the suite-wide scan of tests/conftest.py checks their stderr and errors for them.
    registry.add([REASON, API_KEY])
    errors: list[str] = []
    modes_seen: dict[str, bool] = {}
    with umask(0):
        async with Client(server_params(env)) as client:
            ids = []
            for text, category, tags, keywords in MEMORIES:
                saved = await call(
                    client, "save_memory", text=text, category=category, tags=tags, keywords=keywords
                )
                ids.append(saved["memory"]["id"])
            for query in QUERIES:
                assert (await search_when(client, "hybrid", query=query))["ranking"] == "hybrid"
                await call(client, "search_memory", query=query, nearMisses=True)
            await call(
                client, "update_memory", id=ids[2], text=MEMORIES[2][0] + " (postponed)", reason=REASON
            )
            await call(client, "delete_memory", id=ids[1], reason=REASON)
            await call(client, "restore_memory", id=ids[1])
            await call(client, "get_memory", id=ids[2], history=True)
            # Errors built from what the agent sent: none may repeat it.
            errors.append(await call_error(client, "save_memory", text=MEMORIES[0][0] + "\x07"))
            errors.append(await call_error(client, "save_memory", text=MEMORIES[1][0] * 100))
            errors.append(
                await call_error(client, "update_memory", id=ids[0], expectedRevision=9, text=REASON)
            )
            errors.append(await call_error(client, "update_memory", id="0" * 16, text=REASON))
            errors.append(await call_error(client, "search_memory", query=QUERIES[0] * 100))
            errors.append(await call_error(client, "list_memories", entity=MEMORIES[3][0] + "\nsecond line"))
            # While the server runs, SQLite's -wal and -shm files exist: their modes count too.
            for path in (home / "data").rglob("*"):
                modes_seen[str(path.relative_to(home))] = private(path)
        export = tmp_path / "out" / "export.json"
        # export -o refuses a missing directory: the user makes it (owner-only, as the product would).
        export.parent.mkdir(mode=0o700)
        exported = run_cli(env, "export", "-o", str(export))
        assert exported.returncode == 0, exported.stderr

    vault = home / "data" / "squirrel-mcp" / "vault.sqlite3"
    (vector_file,) = (home / "cache" / "squirrel-notes").glob("memory-vectors-*.bin")
    opened = LocalVault(vault, create=False)
    try:
        store = MemoryStore.unlock(opened, PASSPHRASE)
        # The test reads the key to look for it; nothing else may.
        data_key = store._log._key
        vector_key = MemoryReader(store).derive_key(vectors.KEY_PURPOSE)
    finally:
        opened.close()
    keys = [data_key, vector_key]
    secrets = [text.encode() for text in registry.values] + [e for key in keys for e in encodings(key)]

    # Logs and errors: no secret, no key in any encoding.
    logs = [path.read_bytes() for path in registry.stderr_files] + [
        text.encode() for _, text in registry.texts
    ]
    logs += [error.encode() for error in errors]
    log_hits = [secret for secret in secrets for log in logs if secret.lower() in log.lower()]
    assert not log_hits, log_hits
    traced = b"".join(path.read_bytes() for path in registry.stderr_files)
    assert b"hook rank_memories(" in traced, "tracing was on: its lines are part of what was scanned"

    # Files at rest: the vault and the vector file hold ciphertext only.
    at_rest = {path: path.read_bytes() for path in [*vault.parent.iterdir(), vector_file]}
    file_hits = [
        (path.name, secret[:20]) for path, data in at_rest.items() for secret in secrets if secret in data
    ]
    assert not file_hits, file_hits

    # Modes: the project's files and directories owner-only, though umask 000 allowed anything.
    written = [vault.parent, *vault.parent.iterdir(), vector_file.parent, vector_file, export.parent, export]
    for path in written:
        modes_seen[str(path.relative_to(tmp_path))] = private(path)
    assert all(modes_seen.values()), {path: ok for path, ok in modes_seen.items() if not ok}
    assert any(name.endswith("-wal") for name in modes_seen), modes_seen
    # The missing XDG base directories above them, which the server made too: owner-only as well.
    base_dirs = {name: oct(stat.S_IMODE((home / name).stat().st_mode)) for name in ("data", "cache")}
    assert set(base_dirs.values()) == {"0o700"}, base_dirs

    record(
        "secrecy",
        runs=1,
        inputs_tried=len(secrets),
        data_lost=0,
        seconds=time.monotonic() - started,
        notes=(
            f"one hybrid session with hook tracing on ({len(MEMORIES)} memories, {len(QUERIES)} queries "
            f"searched twice each, a correction, delete, restore, {len(errors)} provoked errors, an export) "
            f"under umask 000: {len(secrets)} secrets (texts, queries, reason, passphrase, API key, the data "
            "key and the vector key in raw/hex/base64) searched in its stderr, its errors and its files "
            f"at rest: 0 found; {len(modes_seen)} files and directories written, all owner-only "
            "(vault, -wal, -shm, vector file, export, their directories), and so were the missing XDG "
            f"base directories it made above them ({base_dirs})"
        ),
    )
