"""The local side hardened: exports with damaged records, hostile vault files, temp files, SQLite errors.

Each case builds the hostile state on disk, then runs the real CLI (or the server
process, which is the CLI with no command) on it:

- a damaged older revision: export writes every readable revision, names the gap
  by memory id and revision on stderr (never text), exits 3; import of that export
  round-trips what was readable;
- out-of-bounds KDF parameters in the vault: one line from serve, export and
  import, before scrypt runs (checked under a 1 GiB address-space limit);
- a vault, -wal or -shm file others may read: set to 0600 and said; a symlink at
  the vault, -wal or export path: refused, its target untouched;
- temp files beside a written file that `atomic_write` did not make: left alone;
- a text column holding bytes that are not UTF-8: the error names no value.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from pydantic import BaseModel

from squirrel_mcp.book import transfer
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.cli import backup as backup_command
from squirrel_mcp.cli import main
from squirrel_mcp.cli.backup import EXIT_EXPORT_INCOMPLETE
from squirrel_mcp.core.files import STALE_TEMP_SECONDS, TEMP_MARKER, atomic_write
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import (
    PASSPHRASE,
    call,
    call_error,
    host_env,
    run_cli,
    secrets_of_this_test,
    served_error,
    server_params,
)

# The cheapest scrypt a vault may carry, so each CLI run unlocks in milliseconds.
CHEAP_KDF = crypto.KdfParams(salt=b"h" * crypto.SALT_BYTES, n=2**14)
# The first ciphertext byte of a sealed record (version byte, then the 12-byte nonce).
CIPHERTEXT_START = 13
OLD_TEXT = "Parks the camper van behind the old sawmill on Ridge Road"
REASON = "Moved the camper van after the sawmill was sold to Fernsby Holdings"
NEW_TEXT = "Parks the camper van at the Fernsby marina, berth seventeen"
LATEST_TEXT = "Parks the camper van at the Fernsby marina, berth nineteen"
OTHER_TEXT = "Allergic to hazelnuts and to the pollen of silver birches"


def make_vault(path: Path) -> tuple[str, str]:
    """A vault at `path`: one memory with three revisions (the 2nd with a reason), one with one.

    Returns the two memory ids. Every text used is registered as a secret of the test.
    """
    secrets_of_this_test().add([OLD_TEXT, REASON, NEW_TEXT, LATEST_TEXT, OTHER_TEXT])
    vault = LocalVault(path, create=True)
    try:
        store = MemoryStore.create(vault, PASSPHRASE, CHEAP_KDF)
        van = store.save(entity="camper van", text=OLD_TEXT, category="fact", tags=[], keywords=[]).id
        store.update(van, changes={"text": NEW_TEXT}, reason=REASON)
        store.update(van, changes={"text": LATEST_TEXT}, reason=None)
        other = store.save(entity="allergies", text=OTHER_TEXT, category="profile", tags=[], keywords=[]).id
    finally:
        vault.close()
    return van, other


def flip_ciphertext(path: Path, memory_id: str, revision: int) -> None:
    """Flip one bit of a record's ciphertext in place, as a damaged disk or a tamperer would."""
    with sqlite3.connect(path) as db:
        (blob,) = db.execute(
            "SELECT ciphertext FROM records WHERE memory_id = ? AND revision = ?", (memory_id, revision)
        ).fetchone()
        damaged = bytearray(blob)
        damaged[CIPHERTEXT_START] ^= 0x01
        db.execute(
            "UPDATE records SET ciphertext = ? WHERE memory_id = ? AND revision = ?",
            (bytes(damaged), memory_id, revision),
        )
    db.close()


def one_clear_line(result: subprocess.CompletedProcess[bytes]) -> str:
    """The single stderr line of a failed run (asserting it is exactly one, without a traceback)."""
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 1, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def revisions_by_id(export: bytes) -> dict[str, list[int]]:
    data = json.loads(export)
    return {m["id"]: [r["revision"] for r in m["revisions"]] for m in data["memories"]}


# 1. An export with a damaged older revision ---------------------------------------------------


@pytest.mark.anyio
async def test_an_unreadable_older_revision_leaves_a_named_gap_and_the_rest_is_exported(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    van, other = make_vault(vault)
    flip_ciphertext(vault, van, 2)

    backup = tmp_path / "backup.json"
    result = run_cli(vault_env, "export", "-o", str(backup))
    stderr = result.stderr.decode()
    assert result.returncode == EXIT_EXPORT_INCOMPLETE, stderr
    assert "Traceback" not in stderr and "input_value" not in stderr
    assert f"memory {van}: revision 2" in stderr
    assert other not in stderr
    assert revisions_by_id(backup.read_bytes()) == {van: [1, 3], other: [1]}
    assert (backup.stat().st_mode & 0o777) == 0o600
    # The same to stdout; and the secrets scan (conftest) checks no text or reason reached stderr.
    to_stdout = run_cli(vault_env, "export")
    assert to_stdout.returncode == EXIT_EXPORT_INCOMPLETE
    assert revisions_by_id(to_stdout.stdout) == {van: [1, 3], other: [1]}

    # Import elsewhere: what was readable arrives, numbered as it was, and the memory goes on.
    target = {**vault_env, "SQUIRREL_VAULT": str(tmp_path / "elsewhere" / "vault.sqlite3")}
    imported = run_cli(target, "import", "--create", str(backup))
    assert imported.returncode == 0, imported.stderr
    assert b"3 revisions added" in imported.stdout
    again = run_cli(target, "import", str(backup))
    assert again.returncode == 0 and b"0 revisions added, 3 already present" in again.stdout
    reexported = run_cli(target, "export")
    assert reexported.returncode == EXIT_EXPORT_INCOMPLETE
    assert json.loads(reexported.stdout)["memories"] == json.loads(backup.read_bytes())["memories"]
    async with Client(server_params(target)) as client:
        history = (await call(client, "get_memory", id=van, history=True))["history"]
        assert [(h["revision"], h["text"]) for h in history] == [(1, OLD_TEXT), (3, LATEST_TEXT)]
        updated = await call(client, "update_memory", id=van, text=NEW_TEXT, reason=REASON)
        assert updated["memory"]["revision"] == 4


def test_an_unreadable_latest_or_only_revision_is_named_too(vault_env: dict[str, str]) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    van, other = make_vault(vault)
    flip_ciphertext(vault, van, 1)
    flip_ciphertext(vault, van, 3)
    flip_ciphertext(vault, other, 1)
    result = run_cli(vault_env, "export")
    stderr = result.stderr.decode()
    assert result.returncode == EXIT_EXPORT_INCOMPLETE, stderr
    assert f"memory {van}: revisions 1, 3" in stderr
    assert f"memory {other}: every revision" in stderr
    assert revisions_by_id(result.stdout) == {van: [2]}


def test_a_validation_error_is_one_line_naming_places_not_values(
    vault_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any pydantic error reaching the command line shows where, never the value (its repr holds it)."""

    class Strict(BaseModel):
        count: int

    def broken_export(store: MemoryStore) -> transfer.Export:
        Strict.model_validate({"count": REASON})
        raise AssertionError("unreachable")

    make_vault(Path(vault_env["SQUIRREL_VAULT"]))
    for name, value in vault_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(backup_command, "export_json", broken_export)
    assert main.main(["export"]) == 1
    stderr = capsys.readouterr().err
    assert stderr == "squirrel-mcp: invalid data at: count\n"


def test_an_unknown_key_in_an_export_is_named_by_its_place_not_its_name(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    make_vault(Path(vault_env["SQUIRREL_VAULT"]))
    exported = run_cli(vault_env, "export")
    assert exported.returncode == 0, exported.stderr
    data = json.loads(exported.stdout)
    # A key is the file's own text: it could be anything, a memory's text too.
    key = "Kept the spare key of the Fernsby marina under the doormat"
    secrets_of_this_test().add(key)
    places = []
    for number, memory in enumerate(data["memories"]):
        memory["revisions"][-1][key] = True
        places.append(f"memories.{number}.revisions.{len(memory['revisions']) - 1}")
    crafted = tmp_path / "crafted.json"
    crafted.write_text(json.dumps(data), encoding="utf-8")
    line = one_clear_line(run_cli(vault_env, "import", str(crafted)))
    assert line == (
        f"squirrel-mcp: {crafted} is not a valid squirrel-mcp-export file; problems at: "
        + "; ".join(f"{place} (holds a field that is not defined there)" for place in places)
    )


# 2. Key-derivation parameters out of bounds ---------------------------------------------------


def set_kdf(vault: Path, **params: int) -> None:
    with sqlite3.connect(vault) as db:
        (value,) = db.execute("SELECT value FROM meta WHERE key = 'account'").fetchone()
        account = json.loads(value)
        account["kdf"].update(params)
        db.execute("UPDATE meta SET value = ? WHERE key = 'account'", (json.dumps(account),))
    db.close()


# The CLI run with 1 GiB of address space, so a 4 GiB scrypt could not even start: a limit set
# inside the child before it imports squirrel_mcp (no preexec_fn, which is unsafe with threads).
UNDER_1_GIB = (
    "import resource, runpy; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
    "runpy.run_module('squirrel_mcp', run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize(
    "params",
    [
        {"n": 2**20, "r": 32, "p": 1},  # 4 GiB
        {"n": 2**20, "r": 8, "p": 16},  # 1 GiB, sixteen times over
        {"n": 2**17, "r": 8, "p": 16},  # 128 MiB, but sixteen times the default's work
        {"n": 2**30, "r": 8, "p": 1},  # beyond any range
    ],
    ids=["4GiB", "1GiBx16", "work", "N-range"],
)
@pytest.mark.anyio
async def test_out_of_bounds_key_parameters_are_one_line_before_any_scrypt(
    vault_env: dict[str, str], tmp_path: Path, params: dict[str, int]
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    make_vault(vault)
    set_kdf(vault, **params)
    before = vault.read_bytes()
    backup = tmp_path / "backup.json"
    # A valid (empty) export: import checks the file before it opens the vault.
    exported = {"format": "squirrel-mcp-export", "version": 1, "exportedAt": "2026-01-01T00:00:00Z"}
    backup.write_text(json.dumps({**exported, "exportedBy": "a test", "memories": []}))
    secrets_of_this_test().add_env(vault_env)
    served = StdioServerParameters(
        command=sys.executable,
        args=["-c", UNDER_1_GIB],
        env={"PATH": os.environ["PATH"], **host_env(vault_env)},
    )
    line = await served_error(served)
    assert "key parameters of the vault" in line and "out of bounds" in line, line
    assert "MemoryError" not in line
    for args in (("export",), ("import", str(backup))):
        result = subprocess.run(
            [sys.executable, "-c", UNDER_1_GIB, *args],
            env={"PATH": os.environ["PATH"], **vault_env},
            input=b"",
            capture_output=True,
            timeout=120,
            check=False,
        )
        secrets_of_this_test().texts.append(("stderr", result.stderr.decode(errors="replace")))
        line = one_clear_line(result)
        assert "key parameters of the vault" in line and "out of bounds" in line, line
        assert "MemoryError" not in line
        assert result.stdout == b""
    assert vault.read_bytes() == before


# 3. The vault's mode, and symlinks at the vault and export paths -------------------------------


def test_init_makes_an_existing_world_readable_file_owner_only(vault_env: dict[str, str]) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    vault.parent.mkdir(mode=0o700, parents=True)
    vault.touch(mode=0o644)
    vault.chmod(0o644)
    result = run_cli(vault_env, "init")
    assert result.returncode == 0, result.stderr
    assert b"(mode 0644); its mode is now 0600" in result.stderr
    assert (vault.stat().st_mode & 0o777) == 0o600


@pytest.mark.anyio
async def test_serving_a_vault_others_can_read_sets_it_and_its_wal_and_shm_to_0600(
    vault_env: dict[str, str],
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    make_vault(vault)
    # A connection held open keeps the -wal and -shm files in place, as a second server would.
    holder = sqlite3.connect(vault)
    try:
        holder.execute("PRAGMA journal_mode = WAL")
        holder.execute("SELECT count(*) FROM records").fetchone()
        files = [vault, vault.with_name(vault.name + "-wal"), vault.with_name(vault.name + "-shm")]
        for file in files:
            file.chmod(0o664)
        # A tool call waits for the unlock, which opens the vault (and corrects the modes).
        async with Client(server_params(vault_env)) as client:
            await call(client, "get_context")
        stderr = secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8")
        for file in files:
            assert f"{file} could be read or written by other users (mode 0664)" in stderr
            assert (file.stat().st_mode & 0o777) == 0o600
        # Once private, nothing more is said.
        quiet = run_cli(vault_env, "export")
        assert quiet.returncode == 0 and quiet.stderr == b""
    finally:
        holder.close()


@pytest.mark.parametrize("target_exists", [False, True], ids=["dangling", "to-a-vault"])
@pytest.mark.anyio
async def test_a_symlink_at_the_vault_path_is_refused(
    vault_env: dict[str, str], tmp_path: Path, target_exists: bool
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    vault.parent.mkdir(mode=0o700, parents=True)
    target = tmp_path / "elsewhere.sqlite3"
    if target_exists:
        make_vault(target)
    vault.symlink_to(target)
    before = target.read_bytes() if target_exists else None
    assert f"{vault} is a symbolic link" in await served_error(server_params(vault_env))
    for args in (("init",), ("export",)):
        line = one_clear_line(run_cli(vault_env, *args, stdin=b""))
        assert f"{vault} is a symbolic link" in line, line
    assert (target.read_bytes() if target_exists else None) == before
    assert target.exists() == target_exists


def test_a_symlink_at_the_wal_path_is_refused(vault_env: dict[str, str], tmp_path: Path) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    make_vault(vault)
    wal = vault.with_name(vault.name + "-wal")
    wal.symlink_to(tmp_path / "planted-wal")
    line = one_clear_line(run_cli(vault_env, "export"))
    assert f"{wal} is a symbolic link" in line
    assert not (tmp_path / "planted-wal").exists()


def test_export_refuses_a_symlink_and_an_existing_file_without_force(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    make_vault(Path(vault_env["SQUIRREL_VAULT"]))
    precious = tmp_path / "precious.txt"
    precious.write_text("not to be overwritten")
    link = tmp_path / "link.json"
    link.symlink_to(precious)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    for path in (link, dangling):
        for extra in ((), ("--force",)):
            line = one_clear_line(run_cli(vault_env, "export", "-o", str(path), *extra))
            assert f"{path} is a symbolic link" in line
    assert precious.read_text() == "not to be overwritten"
    assert not (tmp_path / "nowhere.json").exists()

    line = one_clear_line(run_cli(vault_env, "export", "-o", str(precious)))
    assert "exists; add --force" in line
    assert precious.read_text() == "not to be overwritten"
    forced = run_cli(vault_env, "export", "-o", str(precious), "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(precious.read_text())["format"] == "squirrel-mcp-export"
    assert (precious.stat().st_mode & 0o777) == 0o600


# 4. Temp files: only our own leftovers are swept -----------------------------------------------


def test_atomic_write_sweeps_only_temp_files_it_made(tmp_path: Path) -> None:
    target = tmp_path / "vectors.bin"
    aged = time.time() - STALE_TEMP_SECONDS - 60

    def temp(name: str, mode: int = 0o600) -> Path:
        path = tmp_path / name
        path.write_bytes(b"partial")
        path.chmod(mode)
        os.utime(path, (aged, aged))
        return path

    ours = temp(f".{target.name}.{TEMP_MARKER}k1ll3d.tmp")
    foreign = temp(f".{target.name}.swap.tmp")  # another program's, same pattern as before
    chmodded = temp(f".{target.name}.{TEMP_MARKER}sh4red.tmp", 0o644)
    linked = temp(f".{target.name}.{TEMP_MARKER}h4rdln.tmp")
    os.link(linked, tmp_path / "kept-elsewhere")
    symlink = tmp_path / f".{target.name}.{TEMP_MARKER}symlnk.tmp"
    symlink.symlink_to(foreign)
    young = tmp_path / f".{target.name}.{TEMP_MARKER}wr1t1n.tmp"
    young.write_bytes(b"partial")
    young.chmod(0o600)

    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert not ours.exists()
    for kept in (foreign, chmodded, linked, symlink, young):
        assert os.path.lexists(kept), kept
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f".{target.name}.")) == sorted(
        p.name for p in (foreign, chmodded, linked, symlink, young)
    )


def test_export_leaves_another_programs_temp_files_beside_its_output(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    make_vault(Path(vault_env["SQUIRREL_VAULT"]))
    backup = tmp_path / "backup.json"
    editors = tmp_path / ".backup.json.edit.tmp"
    editors.write_text("someone else's work in progress")
    aged = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(editors, (aged, aged))
    assert run_cli(vault_env, "export", "-o", str(backup)).returncode == 0
    assert editors.read_text() == "someone else's work in progress"


# 5. SQLite's errors name no stored value ------------------------------------------------------


@pytest.mark.anyio
async def test_a_text_column_holding_ciphertext_gives_an_error_without_the_bytes(
    vault_env: dict[str, str],
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    van, _ = make_vault(vault)
    marker = "CIPHERTEXT-SHOWN-HERE"
    secrets_of_this_test().add(marker)
    with sqlite3.connect(vault) as db:
        (blob,) = db.execute(
            "SELECT ciphertext FROM records WHERE memory_id = ? AND revision = 1", (van,)
        ).fetchone()
        # Not UTF-8 (0xff never is), so reading the column fails with Python's decode error.
        planted = b"\xff" + marker.encode() + bytes(blob)
        db.execute(
            "UPDATE records SET memory_id = CAST(? AS TEXT) WHERE memory_id = ? AND revision = 1",
            (planted, van),
        )
    db.close()
    for line in (one_clear_line(run_cli(vault_env, "export")), await served_error(server_params(vault_env))):
        assert "damaged or unreadable" in line and "not valid UTF-8" in line, line
        assert "with text" not in line
        assert base64.b64encode(bytes(blob)).decode()[:16] not in line


# 6. Revision numbers past what storage holds --------------------------------------------------

# The highest number SQLite stores: the review's record; one more overflows its INTEGER.
SQLITE_MAX = 2**63 - 1


def data_key(vault: Path) -> tuple[str, bytes]:
    """The vault's account id and data key, unwrapped with the test passphrase (as a key holder could)."""
    storage = LocalVault(vault, create=False)
    try:
        account = storage.load_account()
    finally:
        storage.close()
    assert account is not None
    key = crypto.unwrap_data_key(PASSPHRASE, account.kdf, account.account_id, account.wrapped_data_key)
    return account.account_id, key


def plant(vault: Path, memory_id: str, revision: int, text: str | None) -> None:
    """A record at `revision` written with sqlite3: sealed under the data key with `text`, or garbage."""
    if text is None:
        ciphertext = os.urandom(200)
    else:
        account_id, key = data_key(vault)
        stamp = "2026-01-01T00:00:00.000Z"
        fields = {
            "id": memory_id,
            "entity": "camper van",
            "text": text,
            "tags": [],
            "keywords": [],
            "category": "fact",
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": revision,
            "change": "corrected",
        }
        ciphertext = crypto.seal(
            key, json.dumps(fields).encode(), crypto.record_ad(account_id, memory_id, revision)
        )
    with sqlite3.connect(vault) as db:
        db.execute(
            "INSERT INTO records (memory_id, revision, ciphertext) VALUES (?, ?, ?)",
            (memory_id, revision, ciphertext),
        )
    db.close()


@pytest.mark.anyio
@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "garbage"])
async def test_a_record_at_revision_2_63_minus_1_leaves_the_memory_usable(
    vault_env: dict[str, str], sealed: bool
) -> None:
    vault = Path(vault_env["SQUIRREL_VAULT"])
    van, other = make_vault(vault)
    planted = "Parks the camper van on the moon, says a planted record"
    secrets_of_this_test().add(planted)
    plant(vault, van, SQLITE_MAX, planted if sealed else None)
    # A memory whose only record is past the bound has no readable revision.
    lone = "0123456789abcdef"
    plant(vault, lone, SQLITE_MAX, planted if sealed else None)
    # At the bound itself: readable below it, but no revision can follow it.
    plant(vault, other, 2**31 - 1, None)

    async with Client(server_params(vault_env)) as client:
        got = await call(client, "get_memory", id=van, history=True)
        assert (got["memory"]["revision"], got["memory"]["text"]) == (3, LATEST_TEXT)
        assert f"Revision {SQLITE_MAX} of this memory failed its integrity check" in got["note"]
        assert "writes revision 4 on top of it" in got["note"]
        assert [h["revision"] for h in got["history"]] == [1, 2, 3]
        context = await call(client, "get_context")
        assert context["unreadable"] == [lone]
        assert sorted(context["olderRevision"]) == sorted([van, other])
        # Update, delete and restore write 4, 5, 6: the record past the bound is not counted.
        updated = await call(client, "update_memory", id=van, text=NEW_TEXT, reason=REASON)
        assert updated["memory"]["revision"] == 4
        deleted = await call(client, "delete_memory", id=van, reason="sold the van")
        assert deleted["deleted"] and deleted["memory"]["revision"] == 5
        restored = await call(client, "restore_memory", id=van)
        assert restored["memory"]["revision"] == 6
        got = await call(client, "get_memory", id=van)
        assert (got["memory"]["revision"], got["memory"]["text"]) == (6, NEW_TEXT)
        # The memory at the bound: read at its revision, refused in words when changed.
        got = await call(client, "get_memory", id=other)
        assert got["memory"]["revision"] == 1 and "cannot be changed" in got["note"]
        error = await call_error(client, "update_memory", id=other, text=NEW_TEXT)
        assert f"memory {other} has a revision {2**31 - 1}, the highest a record can have" in error, error
        error = await call_error(client, "get_memory", id=lone)
        assert lone in error and "unreadable" in error, error
    server_stderr = secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8")
    assert "Traceback" not in server_stderr and "Error" not in server_stderr, server_stderr

    # The command line agrees: export names what it left out, by number; doctor finds the log fine.
    result = run_cli(vault_env, "export")
    stderr = result.stderr.decode()
    assert result.returncode == EXIT_EXPORT_INCOMPLETE, stderr
    assert "Traceback" not in stderr
    assert f"memory {van}: revision {SQLITE_MAX}" in stderr
    assert f"memory {lone}: every revision" in stderr
    assert revisions_by_id(result.stdout)[van] == [1, 2, 3, 4, 5, 6]
    doctor = run_cli(vault_env, "doctor")
    assert "✓ log integrity" in doctor.stdout.decode(), doctor.stdout.decode()


@pytest.mark.parametrize("revision", [2**63, 2**31, SQLITE_MAX])
def test_an_export_file_with_a_revision_past_the_bound_is_one_line(
    vault_env: dict[str, str], tmp_path: Path, revision: int
) -> None:
    make_vault(Path(vault_env["SQUIRREL_VAULT"]))
    exported = run_cli(vault_env, "export")
    assert exported.returncode == 0, exported.stderr
    data = json.loads(exported.stdout)
    data["memories"][0]["revisions"][-1]["revision"] = revision
    crafted = tmp_path / "crafted.json"
    crafted.write_text(json.dumps(data), encoding="utf-8")
    target = {**vault_env, "SQUIRREL_VAULT": str(tmp_path / "elsewhere" / "vault.sqlite3")}
    assert run_cli(target, "init").returncode == 0
    line = one_clear_line(run_cli(target, "import", str(crafted)))
    last = len(data["memories"][0]["revisions"]) - 1
    assert f"problems at: memories.0.revisions.{last}.revision (" in line, line
    assert "less than or equal to 2147483647" in line, line
    assert json.loads(run_cli(target, "export").stdout)["memories"] == []


# 7. JSON nested too deeply for Python's parser ------------------------------------------------

DEEP = 200_000


@pytest.mark.parametrize("importer", [(), ("--from", "server-memory")], ids=["export file", "server-memory"])
@pytest.mark.parametrize(
    "content",
    [
        "[" * DEEP,
        '{"format": "squirrel-mcp-export", "version": 1, "memories": ' + "[" * DEEP + "]" * DEEP + "}",
        '{"type": "entity", "name": "x", "entityType": "y", "observations": ' + '{"a": ' * DEEP,
    ],
    ids=["arrays", "inside an export", "inside an entity"],
)
def test_json_nested_too_deeply_is_one_line(
    vault_env: dict[str, str], tmp_path: Path, importer: tuple[str, ...], content: str
) -> None:
    make_vault(Path(vault_env["SQUIRREL_VAULT"]))
    deep = tmp_path / "deep.json"
    deep.write_text(content, encoding="utf-8")
    line = one_clear_line(run_cli(vault_env, "import", *importer, str(deep)))
    assert line.startswith(f"squirrel-mcp: {deep} "), line
    assert "JSON nested too deeply to read" in line, line
    assert "RecursionError" not in line
