"""Log integrity: a rolled-back vault, or one with a record deleted, is noticed, and nothing is written on it.

In process: the checkpoint file and the watch over the log (squirrel_mcp.book.checkpoint)
on synthetic records and on a real vault. Then through the real server over stdio
and the real command line: a vault put back to an older copy, and a vault with a
record deleted by sqlite3, are each noticed at the next start (one stderr line, a
note in get_context and search_memory), every write is refused naming the command,
`doctor` fails, `doctor --accept-log` accepts, and writing works again.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import threading
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp.book.checkpoint import ACCEPT_COMMAND, LogChain, LogWatch, Place, next_link, read_checkpoint
from squirrel_mcp.book.errors import LogDivergedError
from squirrel_mcp.book.log import FirstPull
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.keys.crypto import WrongPassphraseError
from squirrel_mcp.storage import SealedRecord
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE, call, call_error, run_cli, secrets_of_this_test, server_params
from tests.exports import one_revision_each, write_export
from tests.ui_support import create_vault, library, running_ui
from tests.ui_support import save as ui_save

ACCOUNT = "0123456789abcdef0123456789abcdef"
KEY = bytes(range(32))
CHEAP = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)


def records(*names: str) -> list[SealedRecord]:
    """Synthetic records: memory id and ciphertext from `names`, revision 1."""
    return [SealedRecord(name * 16, 1, name.encode() * 40) for name in names]


def watch(path: Path, pulled: list[SealedRecord]) -> LogWatch:
    """A watch that read the checkpoint, pulled `pulled` as its first (full) pull and checked it."""
    seen = LogWatch(path, KEY, ACCOUNT)
    seen.pulled(pulled)
    seen.checked([])
    seen.opened()
    return seen


# The chain and the file -------------------------------------------------------------


def test_the_chain_binds_order_address_and_content() -> None:
    one, two = records("a", "b")
    base = LogChain(ACCOUNT)
    base.extend([one, two])
    swapped = LogChain(ACCOUNT)
    swapped.extend([two, one])
    changed = LogChain(ACCOUNT)
    changed.extend([one, SealedRecord(two.memory_id, 2, two.ciphertext)])
    other = LogChain("another account")
    other.extend([one, two])
    heads = {chain.head.link for chain in (base, swapped, changed, other)}
    assert len(heads) == 4
    assert base.count == 2 and base.link(1) == next_link(base.link(0) or b"", one)
    assert base.link(3) is None


def test_the_checkpoint_is_sealed_private_and_moves_forward(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "log.checkpoint"
    # A second process, opened before the first moves on (it read no checkpoint).
    behind = LogWatch(path, KEY, ACCOUNT)
    watch(path, records("a", "b", "c"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    blob = path.read_bytes()
    assert b"count" not in blob and b'"3"' not in blob
    checkpoint = read_checkpoint(path, KEY, ACCOUNT)
    assert checkpoint is not None and checkpoint.count == 3

    # It pulls less than the first saw (the first wrote meanwhile), and never moves the checkpoint back.
    behind.pulled(records("a"))
    behind.checked([])
    behind.opened()
    assert behind.problem is None
    assert read_checkpoint(path, KEY, ACCOUNT).count == 3  # type: ignore[union-attr]
    behind.pulled(records("b"))
    behind.checked([])
    assert read_checkpoint(path, KEY, ACCOUNT).count == 3  # type: ignore[union-attr]
    behind.pulled(records("c", "d"))
    behind.checked([])
    assert behind.problem is None
    assert read_checkpoint(path, KEY, ACCOUNT).count == 4  # type: ignore[union-attr]


def test_a_shorter_or_different_log_is_a_problem(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "log.checkpoint"
    watch(path, records("a", "b", "c"))
    shorter = watch(path, records("a", "b"))
    assert shorter.problem is not None and "holds 2 records, fewer than the 3" in shorter.problem
    forked = watch(path, records("a", "x", "y", "z"))
    assert forked.problem is not None and "no longer begins with the 3 records" in forked.problem
    missing = watch(path, records("a", "c", "d"))
    assert missing.problem is not None
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(ACCEPT_COMMAND in line for line in lines)
    # Neither a diverged watch nor a refused write touched the checkpoint.
    refusal = forked.write_refusal()
    assert refusal is not None and ACCEPT_COMMAND in refusal and "nothing was written" in refusal
    assert read_checkpoint(path, KEY, ACCOUNT).count == 3  # type: ignore[union-attr]


def test_a_running_process_sees_another_accept_and_writes_again(tmp_path: Path) -> None:
    path = tmp_path / "log.checkpoint"
    watch(path, records("a", "b", "c"))
    first, second = watch(path, records("a", "b")), watch(path, records("a", "b"))
    assert first.problem and second.problem
    assert second.accept() == 2
    assert read_checkpoint(path, KEY, ACCOUNT).count == 2  # type: ignore[union-attr]
    assert first.write_refusal() is None and first.problem is None
    # Once accepted, it moves the checkpoint on again.
    first.pulled(records("x"))
    first.checked([])
    assert read_checkpoint(path, KEY, ACCOUNT).count == 3  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "another account", "another key", "empty"],
)
def test_a_damaged_checkpoint_never_passes_a_log(tmp_path: Path, damage: str) -> None:
    """A checkpoint that does not open fails, not a fresh start: else damaging it would pass a rollback."""
    path = tmp_path / "log.checkpoint"
    watch(path, records("a", "b", "c"))
    blob = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(bytes(len(blob)))
    elif damage == "truncated":
        path.write_bytes(blob[:-5])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "another account":
        LogWatch(path, KEY, "f" * 32).accept()
    else:
        LogWatch(path, bytes(32), ACCOUNT).accept()
    damaged = watch(path, records("a", "b", "c"))
    assert damaged.problem is not None and "cannot be used" in damaged.problem
    assert damaged.write_refusal() is not None
    assert damaged.accept() == 3
    assert damaged.write_refusal() is None
    assert watch(path, records("a", "b", "c", "d")).problem is None


def test_the_store_refuses_writes_on_a_rolled_back_vault_until_accepted(tmp_path: Path) -> None:
    vault = tmp_path / "vault.sqlite3"
    place = Place(tmp_path / "cache", str(vault))
    store = MemoryStore.create(LocalVault(vault, create=True), "pass phrase", CHEAP, place)
    first = store.save(entity="user", text="first", category="note", tags=[], keywords=[])
    shutil.copy(vault, tmp_path / "old.sqlite3")
    store.save(entity="user", text="second", category="note", tags=[], keywords=[])
    store.update(first.id, changes={"text": "first, corrected"}, reason=None)
    assert store.log_problem is None

    with sqlite3.connect(vault) as db:
        db.execute("DELETE FROM records WHERE seq > 1")
    db.close()
    reopened = MemoryStore.unlock(LocalVault(vault, create=False), "pass phrase", place)
    assert reopened.log_problem is not None and "fewer than the 3" in reopened.log_problem
    assert reopened.get(first.id).text == "first"
    with pytest.raises(LogDivergedError, match="doctor --accept-log"):
        reopened.save(entity="user", text="third", category="note", tags=[], keywords=[])
    with pytest.raises(LogDivergedError):
        reopened.update(first.id, changes={"text": "again"}, reason=None)
    assert len(reopened.current()) == 1
    assert reopened.accept_log() == 1
    reopened.save(entity="user", text="third", category="note", tags=[], keywords=[])
    assert len(reopened.current()) == 2
    # Another machine's cache (no checkpoint yet) trusts the log it first sees.
    elsewhere = Place(tmp_path / "other-cache", str(vault))
    assert MemoryStore.unlock(LocalVault(vault, create=False), "pass phrase", elsewhere).log_problem is None


class _HeldVault(LocalVault):
    """A vault whose `changes_since` waits for `release`, and can be made to fail."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, create=False)
        self.reading = threading.Event()
        self.release = threading.Event()
        self.failure: Exception | None = None

    def changes_since(self, cursor: int) -> tuple[list[SealedRecord], int]:
        self.reading.set()
        assert self.release.wait(60)
        if self.failure is not None:
            raise self.failure
        return super().changes_since(cursor)


def test_the_first_pull_reads_the_checkpoint_before_the_records(tmp_path: Path) -> None:
    vault = tmp_path / "vault.sqlite3"
    place = Place(tmp_path / "cache", str(vault))
    store = MemoryStore.create(LocalVault(vault, create=True), "pass phrase", CHEAP, place)
    store.save(entity="user", text="first", category="note", tags=[], keywords=[])
    account = store.account_id
    held = _HeldVault(vault)
    first = FirstPull(held, account, place)
    assert held.reading.wait(60)
    # While the records are being read, another process appends and moves the checkpoint on.
    before = place.file(account).read_bytes()
    store.save(entity="user", text="second", category="note", tags=[], keywords=[])
    assert place.file(account).read_bytes() != before
    held.release.set()
    read, records, _ = first.result()
    assert read.checkpoint == before
    assert read.chain.count == len(records) == 2
    reopened = MemoryStore.unlock(LocalVault(vault, create=False), "pass phrase", place)
    assert reopened.log_problem is None and len(reopened.current()) == 2


def test_the_first_pull_raises_the_storages_error_a_wrong_passphrase_is_still_wrong(tmp_path: Path) -> None:
    vault = tmp_path / "vault.sqlite3"
    place = Place(tmp_path / "cache", str(vault))
    MemoryStore.create(LocalVault(vault, create=True), "pass phrase", CHEAP, place).save(
        entity="user", text="first", category="note", tags=[], keywords=[]
    )
    held = _HeldVault(vault)
    held.failure = OSError("the disk went away")
    held.release.set()
    with pytest.raises(OSError, match="the disk went away"):
        MemoryStore.unlock(held, "pass phrase", place)
    with pytest.raises(WrongPassphraseError):
        MemoryStore.unlock(LocalVault(vault, create=False), "not the pass phrase", place)


# Through the real server and command line ---------------------------------------------


def _vault_files(env: dict[str, str]) -> list[Path]:
    vault = Path(env["SQUIRREL_VAULT"])
    return [vault, vault.with_name(vault.name + "-wal"), vault.with_name(vault.name + "-shm")]


def _copy_vault(env: dict[str, str], to: Path) -> None:
    to.mkdir()
    for file in _vault_files(env):
        if file.exists():
            shutil.copy2(file, to / file.name)


def _put_back(env: dict[str, str], copy: Path) -> None:
    for file in _vault_files(env):
        file.unlink(missing_ok=True)
        if (copy / file.name).exists():
            shutil.copy2(copy / file.name, file)


def _last_server_stderr() -> list[str]:
    return secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8").strip().splitlines()


async def _save(client: Client, text: str) -> str:
    saved = await call(client, "save_memory", text=text, tags=["integrity"])
    return str(saved["memory"]["id"])


async def assert_diverged_then_accepted(
    env: dict[str, str], readable_id: str, problem: str, now: int
) -> None:
    """Start a server: the log's problem is noticed, reads work, writes are refused; accept; writes work.

    `problem` is what the line and the notes must say, `now` how many records the log holds.

    Shared with the sync tests: `env` is a local vault's or a sync server's.
    """
    async with Client(server_params(env)) as client:
        context = await call(client, "get_context")
        assert problem in context["note"] and ACCEPT_COMMAND in context["note"]
        found = await call(client, "search_memory", query="integrity check memory")
        assert found["note"] is not None and problem in found["note"]
        assert (await call(client, "get_memory", id=readable_id))["memory"]["id"] == readable_id
        total = context["total"]
        for tool, arguments in (
            ("save_memory", {"text": "A memory written on a diverged log"}),
            ("update_memory", {"id": readable_id, "text": "A correction on a diverged log"}),
            ("delete_memory", {"id": readable_id}),
        ):
            refused = await call_error(client, tool, **arguments)
            assert problem in refused and "nothing was written" in refused and ACCEPT_COMMAND in refused
        assert (await call(client, "get_context"))["total"] == total

        doctor = run_cli(env, "doctor")
        assert doctor.returncode == 1
        assert any(
            line.startswith("✗ log integrity: ") and ACCEPT_COMMAND in line
            for line in doctor.stdout.decode().splitlines()
        )
        export = tmp_export(env)
        imported = run_cli(env, "import", str(export))
        assert imported.returncode == 1 and ACCEPT_COMMAND in imported.stderr.decode()

        accepted = run_cli(env, "doctor", "--accept-log")
        assert accepted.returncode == 0, accepted.stdout.decode()
        assert f"✓ log integrity: accepted as it is now ({now} records)" in accepted.stdout.decode()
        # The running server reads the new checkpoint before its next write.
        await call(client, "save_memory", text="A memory written after the log was accepted")
        assert (await call(client, "get_context"))["total"] == total + 1
    lines = _last_server_stderr()
    assert len(lines) == 1 and problem in lines[0] and ACCEPT_COMMAND in lines[0], lines

    async with Client(server_params(env)) as client:
        assert "note" not in await call(client, "get_context")
        await call(client, "save_memory", text="A memory written after a restart")
    assert _last_server_stderr() == []
    assert run_cli(env, "doctor").returncode == 0


def tmp_export(env: dict[str, str]) -> Path:
    """An export file with one memory this account lacks (for a refused import)."""
    path = Path(env["HOME"]).parent / "import.json"
    revision = {
        "id": "00000000000000aa",
        "entity": "user",
        "text": "An imported memory",
        "tags": [],
        "keywords": [],
        "category": "note",
        "createdAt": "2026-01-01T00:00:00Z",
        "updatedAt": "2026-01-01T00:00:00Z",
        "revision": 1,
        "change": "created",
    }
    return write_export(path, one_revision_each([revision]), exported_at="2026-01-01T00:00:00Z")


@pytest.mark.anyio
async def test_a_vault_put_back_to_an_older_copy_is_noticed(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    async with Client(server_params(vault_env)) as client:
        first = await _save(client, "The first memory of the integrity check")
        await _save(client, "The second memory of the integrity check")
    _copy_vault(vault_env, tmp_path / "backup")
    async with Client(server_params(vault_env)) as client:
        await _save(client, "The third memory of the integrity check")
        await call(client, "update_memory", id=first, text="The first memory, corrected")
    _put_back(vault_env, tmp_path / "backup")
    await assert_diverged_then_accepted(
        vault_env, first, "holds 2 records, fewer than the 4 this machine saw", 2
    )


@pytest.mark.anyio
async def test_a_record_deleted_from_the_vault_file_is_noticed(vault_env: dict[str, str]) -> None:
    async with Client(server_params(vault_env)) as client:
        first = await _save(client, "The first memory of the integrity check")
        await _save(client, "The second memory of the integrity check")
        await _save(client, "The third memory of the integrity check")
    db = sqlite3.connect(vault_env["SQUIRREL_VAULT"])
    with db:
        db.execute("DELETE FROM records WHERE seq = 2")
    db.close()
    await assert_diverged_then_accepted(
        vault_env, first, "holds 2 records, fewer than the 3 this machine saw", 2
    )


@pytest.mark.anyio
async def test_a_record_deleted_and_another_written_is_a_different_history(vault_env: dict[str, str]) -> None:
    async with Client(server_params(vault_env)) as client:
        first = await _save(client, "The first memory of the integrity check")
        await _save(client, "The second memory of the integrity check")
    # Someone without this machine's cache (another machine on a synced folder) deletes and writes.
    other = {**vault_env, "XDG_CACHE_HOME": str(Path(vault_env["HOME"]).parent / "other-cache")}
    db = sqlite3.connect(vault_env["SQUIRREL_VAULT"])
    with db:
        db.execute("DELETE FROM records WHERE seq = 2")
    db.close()
    async with Client(server_params(other)) as client:
        await _save(client, "A memory written on the other machine")
        await _save(client, "Another memory written on the other machine")
    await assert_diverged_then_accepted(
        vault_env, first, "no longer begins with the 2 records this machine saw in it (it holds 3)", 3
    )


def _without_unique_revisions(vault: Path) -> None:
    """Rebuild the vault's records table without UNIQUE (memory_id, revision): a storage that lost it."""
    db = sqlite3.connect(vault)
    with db:
        db.executescript(
            """
            CREATE TABLE loose (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                memory_id TEXT NOT NULL,
                revision INTEGER NOT NULL,
                ciphertext BLOB NOT NULL
            );
            INSERT INTO loose SELECT seq, memory_id, revision, ciphertext FROM records;
            DROP TABLE records;
            ALTER TABLE loose RENAME TO records;
            """
        )
    db.close()


def _seal_revision(vault: Path, memory_id: str, revision: int, text: str) -> bytes:
    """A record of `text` as revision `revision` of the memory, sealed under the data key (a key holder's)."""
    storage = LocalVault(vault, create=False)
    try:
        account = storage.load_account()
    finally:
        storage.close()
    assert account is not None
    key = crypto.unwrap_data_key(PASSPHRASE, account.kdf, account.account_id, account.wrapped_data_key)
    fields = {
        "id": memory_id,
        "entity": "user",
        "text": text,
        "tags": ["integrity"],
        "keywords": [],
        "category": "note",
        "createdAt": "2026-01-01T00:00:00.000Z",
        "updatedAt": "2026-01-01T00:00:00.000Z",
        "revision": revision,
        "change": "corrected",
    }
    return crypto.seal(
        key, json.dumps(fields).encode(), crypto.record_ad(account.account_id, memory_id, revision)
    )


@pytest.mark.anyio
@pytest.mark.parametrize("second", ["sealed", "garbage"])
async def test_a_second_record_for_a_revision_makes_the_log_diverged(
    vault_env: dict[str, str], second: str
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    async with Client(server_params(vault_env)) as client:
        first = await _save(client, "The first memory of the integrity check")
        # Revision 2, written and checkpointed by this machine.
        await call(client, "update_memory", id=first, text="The first memory, corrected here")
        other = await _save(client, "The second memory of the integrity check")
    # A storage without its uniqueness rule takes a second revision 2 (another machine's, say).
    _without_unique_revisions(vault)
    planted = "The first memory, corrected on another machine"
    secrets_of_this_test().add(planted)
    ciphertext = _seal_revision(vault, first, 2, planted) if second == "sealed" else bytes(200)
    db = sqlite3.connect(vault)
    with db:
        db.execute(
            "INSERT INTO records (memory_id, revision, ciphertext) VALUES (?, 2, ?)", (first, ciphertext)
        )
    db.close()
    problem = f"holds a second record for revision 2 of memory {first} (record 4 of the log)"

    # The revision this machine saw is the one served; doctor names the problem.
    async with Client(server_params(vault_env)) as client:
        got = await call(client, "get_memory", id=first, history=True)
        assert got["memory"]["text"] == "The first memory, corrected here"
        assert [h["text"] for h in got["history"]][-1] == "The first memory, corrected here"
    doctor = run_cli(vault_env, "doctor")
    assert doctor.returncode == 1
    assert any(
        line.startswith("✗ log integrity: ") and problem in line
        for line in doctor.stdout.decode().splitlines()
    ), doctor.stdout.decode()
    # The line, the notes, the refusals, as for any diverged log; accepted, it writes again.
    await assert_diverged_then_accepted(vault_env, other, problem, 4)


CORRECTION = b"text=Corrected+text&entity=user&category=note&reason=A+correction&revision=1"


def test_the_page_writes_nothing_on_a_diverged_log(vault_env: dict[str, str], tmp_path: Path) -> None:
    create_vault(vault_env)
    with library(vault_env) as store:
        kept = ui_save(store, "The first memory of the page's integrity check")
        ui_save(store, "The second memory of the page's integrity check")
    # The page's first start trusts the log it finds, and records it.
    with running_ui(vault_env, tmp_path) as ui:
        assert ui.request("GET", "/", headers={"Cookie": ui.login()})[0] == 200
    db = sqlite3.connect(vault_env["SQUIRREL_VAULT"])
    with db:
        db.execute("DELETE FROM records WHERE seq = 2")
    db.close()
    with running_ui(vault_env, tmp_path) as ui:
        write = {
            "Cookie": ui.login(),
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": ui.origin,
        }
        for action, body in (("delete", b"reason=gone"), ("correct", CORRECTION)):
            status, headers, _ = ui.request("POST", f"/memory/{kept.id}/{action}", headers=write, body=body)
            # Refused as every form's refusal is: a redirect to a page that says why.
            assert status == 303, (action, status)
            status, _, answer = ui.request("GET", headers["location"], headers={"Cookie": write["Cookie"]})
            assert status == 200 and "Nothing was saved" in answer and ACCEPT_COMMAND in answer, (
                action,
                status,
            )
    with library(vault_env) as store:
        assert [revision.revision for revision in store.history(kept.id)] == [1]
    (stderr,) = tmp_path.glob("stderr-ui-1.txt")
    lines = stderr.read_text(encoding="utf-8").strip().splitlines()
    assert len(lines) == 1 and "fewer than the 2 this machine saw" in lines[0], lines
