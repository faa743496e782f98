"""The sealed snapshot of the decrypted state: a reopened store takes it only when it is of this very log.

In process, on real SQLite vaults through MemoryStore: a reopen that uses the
snapshot decrypts only the records after it and holds exactly the state a full
rebuild (a store opened without a cache directory) holds: every memory, history,
unreadable record, listing and search. A snapshot of another log (a vault put
back to an older copy, one written to since, a record changed) or a file that
does not open (damaged, truncated, another key, another format) is not used, and
is written anew. Through the real command line and server over stdio: an import
leaves a snapshot, and a server started on it answers as one without.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp.book.catalog import Filters
from squirrel_mcp.book.checkpoint import Place
from squirrel_mcp.book.errors import LogDivergedError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.snapshot import FORMAT, PURPOSE, STALE_RECORDS, _ad
from squirrel_mcp.core.models import EVERY_FIELD, Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.search.bm25 import search
from squirrel_mcp.storage import SealedRecord
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import call, run_cli, server_params
from tests.exports import one_revision_each, write_export

PASSPHRASE = "snapshot test pass phrase"
CHEAP = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
# Enough memories that an open decrypts more than STALE_RECORDS records and writes a snapshot.
MEMORIES = STALE_RECORDS + 150
WORDS = [
    "garden",
    "tomato",
    "hiking",
    "boots",
    "violin",
    "lesson",
    "tax",
    "return",
    "dentist",
    "appointment",
    "sister",
    "birthday",
    "python",
    "project",
    "deadline",
    "coffee",
    "oat",
    "milk",
    "allergy",
    "peanuts",
    "flight",
    "lisbon",
    "marathon",
    "training",
    "piano",
    "recital",
    "bicycle",
    "repair",
    "budget",
    "spreadsheet",
    "novel",
    "chapter",
    "sourdough",
    "starter",
]
CATEGORIES = ["profile", "preference", "fact", "project", "note", "event", "task"]
QUERIES = [
    "garden",
    "violin lesson",
    "tax",
    "lisbon flight",
    "sourdough",
    "pea",
    "birthday sister",
    "nothing-here",
]
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def memory(number: int, rng: random.Random) -> Revision:
    """A synthetic memory: a few words of WORDS, a category, tags, a date in the last two years."""
    stamp = (NOW - timedelta(days=rng.uniform(0, 730))).isoformat(timespec="milliseconds")
    stamp = stamp.replace("+00:00", "Z")
    return Revision(
        id=f"{number:016x}",
        entity=rng.choice(["user", "sister", "work", "doctor"]),
        text=" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + f" number {number}",
        tags=rng.sample(["home", "health", "travel", "music"], k=rng.randint(0, 2)),
        keywords=rng.sample(WORDS, k=rng.randint(0, 2)),
        category=rng.choice(CATEGORIES),
        createdAt=stamp,
        updatedAt=stamp,
        revision=1,
        change="created",
    )


# The records `fill` writes besides one per memory: 10 corrections, 6 deletes, a restore, 2 unreadable.
EXTRA = 19


def fill(store: MemoryStore, vault: Path, count: int, seed: int, start: int = 0) -> None:
    """Import `count` memories, then correct, delete and restore some, and add unreadable records."""
    rng = random.Random(seed)
    store.import_histories([[memory(start + number, rng)] for number in range(count)])
    ids = [f"{start + number:016x}" for number in range(count)]
    for memory_id in ids[:10]:
        store.update(memory_id, changes={"text": f"corrected {rng.choice(WORDS)} text"}, reason="typo")
    for memory_id in ids[10:16]:
        store.delete(memory_id, reason="no longer true")
    store.restore(ids[10])
    # A damaged newest revision (served at the older one), and a memory no record of which opens.
    storage = LocalVault(vault, create=False)
    storage.append([SealedRecord(ids[20], 2, b"\x01" + b"damaged" * 8)])
    storage.append([SealedRecord(f"{start + count:016x}", 1, b"\x01" + b"unreadable" * 8)])
    store.refresh()


def vault_of(tmp_path: Path, count: int = MEMORIES, seed: int = 1) -> tuple[Path, Place]:
    """A vault of `count` memories made without a cache directory, and the Place of its cache."""
    vault = tmp_path / "vault.sqlite3"
    store = MemoryStore.create(LocalVault(vault, create=True), PASSPHRASE, CHEAP)
    fill(store, vault, count, seed)
    return vault, Place(tmp_path / "cache", str(vault))


def opened(vault: Path, place: Place | None) -> tuple[MemoryStore, int]:
    """The store on `vault` with the cache at `place`, and how many records its open decrypted."""
    decrypted: list[int] = []
    store = MemoryStore.unlock(
        LocalVault(vault, create=False),
        PASSPHRASE,
        place,
        progress=lambda done, total: decrypted.append(total),
    )
    return store, decrypted[-1] if decrypted else 0


def state(store: MemoryStore) -> dict[str, object]:
    """Everything a reader of the store can see, with search scores to nine digits."""
    with store.reading() as catalog:
        pages = {
            str(filters): [revision.id for revision in catalog.page(filters, 0, 40).memories]
            + [catalog.page(filters, 0, 40).total]
            for filters in (
                Filters(),
                Filters(include_deleted=True),
                Filters(categories=frozenset({"task", "note"})),
                Filters(entity="Sister"),
                Filters(tags=("home",)),
            )
        }
    searches = {
        query: [
            (hit.memory.id, round(hit.score, 9), round(hit.lexical_score, 9))
            for hit in search(store.index, query, NOW, limit=30).hits
        ]
        for query in QUERIES
    }
    current = store.current(include_deleted=True)
    return {
        "histories": [[revision.model_dump() for revision in history] for history in store.all_revisions()],
        "current": [revision.model_dump() for revision in current],
        "live": [revision.id for revision in store.current()],
        "unreadable": store.unreadable_ids(),
        "older": store.older_revision_ids(),
        "above": {revision.id: store.unreadable_above(revision.id) for revision in current},
        "indexed": sorted(
            (memory_id, store.live(memory_id) is not None) for memory_id in store._view.histories
        ),
        "pages": pages,
        "searches": searches,
        "fields set": {revision.id: sorted(revision.model_fields_set) for revision in current},
    }


def log_length(vault: Path) -> int:
    with sqlite3.connect(vault) as db:
        (count,) = db.execute("SELECT COUNT(*) FROM records").fetchone()
    db.close()
    return int(count)


def data_key(vault: Path) -> tuple[str, bytes]:
    """The vault's account id and data key, as an unlock finds them."""
    account = LocalVault(vault, create=False).load_account()
    assert account is not None
    key = crypto.unwrap_data_key(PASSPHRASE, account.kdf, account.account_id, account.wrapped_data_key)
    return account.account_id, key


def snapshot_file(place: Place) -> Path:
    [path] = place.directory.glob("state-*.snapshot")
    return path


def snapshotted(vault: Path, place: Place) -> Path:
    """Open `vault` with its cache (a full open: writes the snapshot), and the snapshot file."""
    store, decrypted = opened(vault, place)
    assert decrypted == MEMORIES + EXTRA
    store.close()
    return snapshot_file(place)


def test_a_reopen_uses_the_snapshot_and_holds_what_a_full_rebuild_holds(tmp_path: Path) -> None:
    vault, place = vault_of(tmp_path)
    path = snapshotted(vault, place)
    assert path.name == place.file(opened(vault, None)[0].account_id, "state-{}.snapshot").name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    blob = path.read_bytes()
    for text in ("garden", "tomato", "sister", "corrected", "number 17", "0000000000000011"):
        assert text.encode() not in blob
    reopened, decrypted = opened(vault, place)
    assert decrypted == 0
    rebuilt, _ = opened(vault, None)
    assert state(reopened) == state(rebuilt)
    # A restored revision is a Revision like any other: a write on it is validated and stored.
    first = reopened.history("0000000000000000")
    assert first[0].text != first[-1].text
    reopened.update("0000000000000000", changes={"text": "after the snapshot"}, reason=None)
    assert opened(vault, None)[0].get("0000000000000000").text == "after the snapshot"


def test_records_another_process_appended_after_the_snapshot_are_decrypted(tmp_path: Path) -> None:
    vault, place = vault_of(tmp_path)
    snapshotted(vault, place)
    other, _ = opened(vault, None)
    fill(other, vault, 40, seed=2, start=5000)
    other.update("0000000000000003", changes={"tags": ["moved"]}, reason=None)
    other.delete("0000000000000004", reason=None)
    reopened, decrypted = opened(vault, place)
    assert decrypted == 40 + EXTRA + 2
    assert state(reopened) == state(opened(vault, None)[0])
    assert reopened.get("0000000000000004").deleted


def backup(vault: Path, to: Path) -> None:
    """A consistent copy of `vault` (its write-ahead log included) at `to`."""
    source, target = sqlite3.connect(vault), sqlite3.connect(to)
    source.backup(target)
    source.close()
    target.close()


def put_back(vault: Path, copy: Path) -> None:
    """Replace `vault` (and its write-ahead log) with `copy`."""
    for suffix in ("", "-wal", "-shm"):
        vault.with_name(vault.name + suffix).unlink(missing_ok=True)
    shutil.copy(copy, vault)


def _older_copy_written_to(vault: Path, copy: Path) -> None:
    put_back(vault, copy)
    # More records than the snapshot covers, so only its link can tell the logs apart.
    fill(opened(vault, None)[0], vault, 40, seed=3, start=7000)


def _changed_record(vault: Path, copy: Path) -> None:
    del copy
    with sqlite3.connect(vault) as db:
        (memory_id, revision) = db.execute("SELECT memory_id, revision FROM records WHERE seq = 7").fetchone()
        other = db.execute("SELECT ciphertext FROM records WHERE seq = 8").fetchone()[0]
        db.execute(
            "UPDATE records SET ciphertext = ? WHERE memory_id = ? AND revision = ?",
            (other, memory_id, revision),
        )
    db.close()


@pytest.mark.parametrize(
    "replace",
    [
        pytest.param(put_back, id="older-copy"),
        pytest.param(_older_copy_written_to, id="older-copy-written-to"),
        pytest.param(_changed_record, id="record-changed"),
    ],
)
def test_a_snapshot_of_another_log_is_not_used(tmp_path: Path, replace: object) -> None:
    vault, place = vault_of(tmp_path)
    copy = tmp_path / "copy.sqlite3"
    backup(vault, copy)
    # The snapshot is of the log after more was written: the copy lacks it.
    fill(opened(vault, None)[0], vault, 30, seed=4, start=9000)
    store, _ = opened(vault, place)
    store.close()
    before = snapshot_file(place).read_bytes()
    assert callable(replace)
    replace(vault, copy)
    records = log_length(vault)
    reopened, decrypted = opened(vault, place)
    assert decrypted == records
    assert state(reopened) == state(opened(vault, None)[0])
    reopened.close()
    # Rewritten for this log: the next open decrypts nothing.
    assert snapshot_file(place).read_bytes() != before
    assert opened(vault, place)[1] == 0


def _damage(path: Path, how: str, account_id: str, data_key: bytes) -> None:
    blob = path.read_bytes()
    if how == "flipped":
        path.write_bytes(
            blob[: len(blob) // 2] + bytes([blob[len(blob) // 2] ^ 1]) + blob[len(blob) // 2 + 1 :]
        )
    elif how == "truncated":
        path.write_bytes(blob[: len(blob) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "foreign-key":
        text = crypto.open_sealed(crypto.derive_key(data_key, PURPOSE), blob, _ad(account_id))
        path.write_bytes(crypto.seal(crypto.derive_key(data_key, "another purpose"), text, _ad(account_id)))
    elif how == "other-code":
        text = crypto.open_sealed(crypto.derive_key(data_key, PURPOSE), blob, _ad(account_id))
        length = int.from_bytes(text[:4], "big")
        header = json.loads(text[4 : 4 + length])
        header["code"] = "0" * 64
        encoded = json.dumps(header).encode()
        text = len(encoded).to_bytes(4, "big") + encoded + text[4 + length :]
        path.write_bytes(crypto.seal(crypto.derive_key(data_key, PURPOSE), text, _ad(account_id)))
    elif how == "other-format":
        header = json.dumps({"format": FORMAT + 1}).encode()
        text = len(header).to_bytes(4, "big") + header
        path.write_bytes(crypto.seal(crypto.derive_key(data_key, PURPOSE), text, _ad(account_id)))


@pytest.mark.parametrize(
    "how", ["flipped", "truncated", "empty", "foreign-key", "other-format", "other-code"]
)
def test_a_snapshot_that_does_not_open_is_ignored_and_rewritten(
    tmp_path: Path, how: str, capfd: pytest.CaptureFixture[str]
) -> None:
    vault, place = vault_of(tmp_path)
    path = snapshotted(vault, place)
    _damage(path, how, *data_key(vault))
    capfd.readouterr()
    reopened, decrypted = opened(vault, place)
    assert decrypted == MEMORIES + EXTRA
    assert state(reopened) == state(opened(vault, None)[0])
    reopened.close()
    assert capfd.readouterr().err == ""
    # Rewritten: the next open decrypts nothing.
    assert opened(vault, place)[1] == 0


def test_writes_are_still_refused_on_a_rolled_back_log_when_the_snapshot_is_used(tmp_path: Path) -> None:
    vault, place = vault_of(tmp_path)
    snapshotted(vault, place)
    store, _ = opened(vault, place)
    store.save(entity="user", text="written after the snapshot", category="note", tags=[], keywords=[])
    store.save(entity="user", text="and another", category="note", tags=[], keywords=[])
    with sqlite3.connect(vault) as db:
        db.execute("DELETE FROM records WHERE seq > (SELECT MAX(seq) - 2 FROM records)")
    db.close()
    # The log is again the one the snapshot is of: it is used, and the checkpoint still catches the rollback.
    reopened, decrypted = opened(vault, place)
    assert decrypted == 0
    assert reopened.log_problem is not None and "fewer than" in reopened.log_problem
    with pytest.raises(LogDivergedError, match="doctor --accept-log"):
        reopened.save(entity="user", text="refused", category="note", tags=[], keywords=[])
    assert state(reopened) == state(opened(vault, None)[0])


def test_a_restored_revision_equals_the_validated_one(tmp_path: Path) -> None:
    vault, place = vault_of(tmp_path)
    snapshotted(vault, place)
    reopened, _ = opened(vault, place)
    rebuilt, _ = opened(vault, None)
    for revision in reopened.current(include_deleted=True)[:50]:
        validated = rebuilt.get(revision.id)
        assert type(revision) is Revision and revision == validated
        assert revision.model_dump_json() == validated.model_dump_json()
        assert revision.model_fields_set == validated.model_fields_set
        assert Revision.model_validate_json(revision.model_dump_json()) == revision


def test_revisions_share_one_fields_set_that_no_change_alters(tmp_path: Path) -> None:
    vault, place = vault_of(tmp_path)
    snapshotted(vault, place)
    every = set(Revision.model_fields)
    for store in (opened(vault, place)[0], opened(vault, None)[0]):  # from the snapshot, then from records
        revisions = store.current(include_deleted=True)
        assert all(revision.__pydantic_fields_set__ is EVERY_FIELD for revision in revisions)
        first = revisions[0]
        copy = first.model_copy(update={"text": "changed in a copy"})
        first.text = first.text  # assigning a field adds its name to the set it holds
        assert copy.__pydantic_fields_set__ is not EVERY_FIELD
        assert every == EVERY_FIELD and first.model_fields_set == every


def _export(path: Path, count: int, seed: int, start: int) -> Path:
    rng = random.Random(seed)
    memories = [memory(start + number, rng).model_dump() for number in range(count)]
    return write_export(path, one_revision_each(memories))


async def _answers(env: dict[str, str]) -> list[object]:
    """Searches (the hits' ids in order: scores move as the clock does) and listings of a server on `env`."""
    async with Client(server_params(env)) as client:
        answers: list[object] = []
        for query in QUERIES:
            found = await call(client, "search_memory", query=query, limit=20)
            answers.append(([hit["id"] for hit in found["results"]], found.get("total")))
        answers.append(await call(client, "list_memories", limit=50))
        answers.append(await call(client, "list_memories", category="task", tags=["home"], limit=50))
        return answers


@pytest.mark.anyio
async def test_a_server_started_on_a_snapshot_answers_as_one_without(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    export = _export(tmp_path / "export.json", MEMORIES, 5, 0)
    imported = run_cli(vault_env, "import", "--create", str(export))
    assert imported.returncode == 0, imported.stderr.decode()
    [path] = (Path(vault_env["XDG_CACHE_HOME"]) / "squirrel-mcp").glob("state-*.snapshot")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    written = path.read_bytes()
    assert b"number 17" not in written
    with_snapshot = await _answers(vault_env)
    # Used, not rewritten: a store that could not use it would write a new one (a fresh nonce).
    assert path.read_bytes() == written
    fresh = {**vault_env, "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "fresh-cache")}
    assert with_snapshot == await _answers(fresh)
    # The server without one decrypted every record, and wrote one (in the background, or as it closed).
    assert len(list((tmp_path / "fresh-cache" / "squirrel-mcp").glob("state-*.snapshot"))) == 1
    # Another process appends; the next server decrypts it after the snapshot's records.
    again = run_cli(vault_env, "import", str(_export(tmp_path / "more.json", 30, 6, 4000)))
    assert again.returncode == 0, again.stderr.decode()
    assert await _answers(vault_env) == await _answers(fresh)
