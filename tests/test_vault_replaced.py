"""A vault replaced, deleted, rolled back or edited under a running process is noticed at its next call.

Through the real processes, in both modes: a host's bridge to the vault's memory
process (SQUIRREL_MCP_SHARED=1, which stays when its hosts have gone) and a server
of its own (SQUIRREL_MCP_SHARED=0). One host stays connected, idle, while the
files change under its process; then it, and a host started afterwards, call
again. A rollback (the files put back from a copy, or an older copy restored into
the file with SQLite's backup API) and a record deleted with sqlite3 are reported
as a start reports them, every write is refused, and nothing is acknowledged that
is not in the vault on disk; a deleted vault answers every call with one line.
Last, in process: a snapshot file another process wrote meanwhile is read again,
not written over.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp.book.checkpoint import ACCEPT_COMMAND, Place
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.snapshot import STALE_RECORDS
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import call, call_error, run_cli, secrets_of_this_test, server_params
from tests.shared_support import channel_of, memory_processes, shared_host_env
from tests.test_log_integrity import CHEAP, _copy_vault, _put_back, _vault_files
from tests.test_snapshot import memory


@pytest.fixture(params=["shared", "own"])
def env(request: pytest.FixtureRequest, vault_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A host's env in each mode; the shared one's memory process outlives its hosts, and is killed after."""
    if request.param == "own":
        yield {**vault_env, "SQUIRREL_MCP_SHARED": "0"}
        return
    shared = shared_host_env(vault_env)
    # The memory process's log is what its hosts' stderr shows: scanned for secrets too.
    secrets_of_this_test().stderr_files.append(channel_of(shared).log_path)
    yield shared
    for pid in memory_processes(shared):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(shared["XDG_RUNTIME_DIR"], ignore_errors=True)


def records_on_disk(env: dict[str, str]) -> int:
    """How many records the vault file at the path holds now, as any other program reads it."""
    with contextlib.closing(sqlite3.connect(env["SQUIRREL_VAULT"])) as db:
        return int(db.execute("SELECT count(*) FROM records").fetchone()[0])


def logged() -> str:
    """Everything the servers of this test wrote on stderr (a memory process's log among them)."""
    files = secrets_of_this_test().stderr_files
    return "\n".join(path.read_text(encoding="utf-8") for path in files if path.exists())


async def save(client: Client, text: str) -> None:
    await call(client, "save_memory", text=text, tags=["vault-case"])


async def assert_rolled_back(client: Client, problem: str, total: int) -> None:
    """The host is served the log as the file holds it, told `problem`, and its save is refused."""
    context = await call(client, "get_context")
    assert context["total"] == total
    assert problem in context["note"] and ACCEPT_COMMAND in context["note"]
    refused = await call_error(client, "save_memory", text="A memory saved on the rolled-back vault")
    assert problem in refused and "nothing was written" in refused and ACCEPT_COMMAND in refused


@pytest.mark.anyio
@pytest.mark.process
async def test_a_vault_put_back_from_a_copy_while_the_process_idles_refuses_the_next_save(
    env: dict[str, str], tmp_path: Path
) -> None:
    problem = "holds 3 records, fewer than the 6 this machine saw"
    async with Client(server_params(env)) as host:
        for n in range(3):
            await save(host, f"The memory number {n} before the copy was taken")
        _copy_vault(env, tmp_path / "copy")
        for n in range(3):
            await save(host, f"The memory number {n} after the copy was taken")
        # What a backup restore, a sync tool or `mv` does: other files at the vault's paths.
        _put_back(env, tmp_path / "copy")
        await assert_rolled_back(host, problem, 3)
        async with Client(server_params(env)) as later:
            await assert_rolled_back(later, problem, 3)
        assert records_on_disk(env) == 3

        accepted = run_cli(env, "doctor", "--accept-log")
        assert accepted.returncode == 0, accepted.stdout.decode()
        await save(host, "A memory saved once the restored copy was accepted")
        assert (await call(host, "get_context"))["total"] == 4
        assert records_on_disk(env) == 4
    log = logged()
    assert "was replaced by another file while squirrel-mcp had it open" in log
    assert problem in log and "Traceback" not in log


@pytest.mark.anyio
@pytest.mark.process
async def test_a_vault_deleted_under_the_process_answers_every_call_in_one_line(
    env: dict[str, str], tmp_path: Path
) -> None:
    async with Client(server_params(env)) as host:
        await save(host, "The first memory of a vault about to be deleted")
        await save(host, "The second memory of a vault about to be deleted")
        _copy_vault(env, tmp_path / "copy")
        for file in _vault_files(env):
            file.unlink(missing_ok=True)
        for tool, arguments in (
            ("get_context", {}),
            ("search_memory", {"query": "memory"}),
            ("save_memory", {"text": "A memory saved while the vault is gone"}),
            ("list_memories", {}),
        ):
            error = await call_error(host, tool, **arguments)
            assert "is gone: it was deleted or moved away" in error and "\n" not in error, (tool, error)
        assert not Path(env["SQUIRREL_VAULT"]).exists()

        # Put back, it is served again: the same log, so nothing to report.
        _put_back(env, tmp_path / "copy")
        context = await call(host, "get_context")
        assert context["total"] == 2 and "note" not in context
        await save(host, "A memory saved once the vault was back")
        assert records_on_disk(env) == 3
    assert "Traceback" not in logged()


def restore_into(vault: Path, copy: Path) -> None:
    """Write `copy` into the vault file in place (the same file), as SQLite's `.restore` does."""
    with (
        contextlib.closing(sqlite3.connect(copy)) as source,
        contextlib.closing(sqlite3.connect(vault)) as target,
    ):
        source.backup(target)


@pytest.mark.anyio
@pytest.mark.process
async def test_an_older_copy_restored_into_the_file_is_noticed_by_the_next_call(
    env: dict[str, str], tmp_path: Path
) -> None:
    vault, older = Path(env["SQUIRREL_VAULT"]), tmp_path / "older.sqlite3"
    problem = "holds 3 records, fewer than the 6 this machine saw"
    async with Client(server_params(env)) as host:
        for n in range(3):
            await save(host, f"The memory number {n} of the older copy")
        restore_into(older, vault)
        for n in range(3):
            await save(host, f"The memory number {n} written after the older copy")
        inode = vault.stat().st_ino
        restore_into(vault, older)
        assert vault.stat().st_ino == inode
        # A host started now, and the one that stayed.
        async with Client(server_params(env)) as later:
            await assert_rolled_back(later, problem, 3)
        await assert_rolled_back(host, problem, 3)
        assert records_on_disk(env) == 3
    log = logged()
    assert problem in log and "Traceback" not in log


@pytest.mark.anyio
@pytest.mark.process
async def test_a_record_deleted_with_sqlite3_is_noticed_by_the_next_call(env: dict[str, str]) -> None:
    problem = "holds 2 records, fewer than the 3 this machine saw"
    async with Client(server_params(env)) as host:
        for n in range(3):
            await save(host, f"The memory number {n} of a log about to lose one")
        with contextlib.closing(sqlite3.connect(env["SQUIRREL_VAULT"])) as db, db:
            db.execute("DELETE FROM records WHERE seq = 2")
        await assert_rolled_back(host, problem, 2)
        async with Client(server_params(env)) as later:
            await assert_rolled_back(later, problem, 2)
        assert records_on_disk(env) == 2
    log = logged()
    assert "changed by another program while squirrel-mcp had it open" in log
    assert problem in log and "Traceback" not in log


def test_a_snapshot_another_process_wrote_meanwhile_is_read_again_not_written_over(tmp_path: Path) -> None:
    """Two processes of one machine on one vault: the one behind keeps the other's snapshot.

    In process, on real files: the snapshot is the cache directory's, not the vault's.
    """
    vault = tmp_path / "vault.sqlite3"
    place = Place(tmp_path / "cache", str(vault))
    writer = MemoryStore.create(LocalVault(vault, create=True), "snapshot pass phrase", CHEAP, place)
    behind = MemoryStore.unlock(LocalVault(vault, create=False), "snapshot pass phrase", place)
    rng = random.Random(7)
    writer.import_histories([[memory(number, rng)] for number in range(STALE_RECORDS + 50)])
    writer.close()
    snapshot = place.file(writer.account_id, "state-{}.snapshot")
    written = snapshot.stat()
    # The process behind pulls as many records: it would write the same snapshot over the other's.
    behind.refresh()
    behind.close()
    assert len(behind.current()) == STALE_RECORDS + 50
    assert (snapshot.stat().st_ino, snapshot.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    # Once it is further on than the file, it writes its own.
    writer.import_histories([[memory(STALE_RECORDS + 50 + n, rng)] for n in range(STALE_RECORDS)])
    behind.refresh()
    behind.close()
    assert snapshot.stat().st_ino != written.st_ino
