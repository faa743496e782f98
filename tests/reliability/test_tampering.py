"""Tampering: damaged records, a wrong passphrase, truncated vaults and vector files.

Each case is applied to the files on disk while no server runs, then the real
server (or CLI) is started on them:

- a record changed in any part (version byte, nonce, ciphertext, tag), moved to
  another memory, or cut short: that memory is reported unreadable by id, every
  other memory is still served; an older revision replayed as the newest: the
  memory is served at that older revision, with a note saying the newest failed;
- a wrong passphrase: one clear line (the server answers every tool call with it,
  export exits 1 with it), the vault byte-identical;
- a vault truncated or with a page overwritten: one clear line (or, for an empty
  file, a new account said so), never a traceback;
- a vault damaged under a running server: each tool call a clear tool error;
- a vector file truncated or flipped: discarded with the one REBUILT line, rebuilt,
  search hybrid again.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from mcp import Client

from squirrel_mcp.cli.backup import EXIT_EXPORT_INCOMPLETE
from squirrel_mcp_embeddings import warmup
from tests.conftest import (
    PASSPHRASE,
    call,
    call_error,
    needs_model,
    run_cli,
    search_when,
    secrets_of_this_test,
    served_error,
    server_params,
)
from tests.reliability.figures import record

pytestmark = pytest.mark.anyio

ROUNDS = 3
SAVED = 120
MODES = ["version byte", "nonce", "ciphertext", "tag", "moved", "replayed", "cut"]
NONCE = slice(1, 13)


def blob_of(db: sqlite3.Connection, memory_id: str, revision: int) -> bytes:
    (blob,) = db.execute(
        "SELECT ciphertext FROM records WHERE memory_id = ? AND revision = ?", (memory_id, revision)
    ).fetchone()
    return bytes(blob)


def damage(vault: Path, mode: str, victim: str, donor: str, rng: random.Random) -> None:
    """Change the latest record of `victim` on disk the way `mode` says."""
    with sqlite3.connect(vault) as db:
        (latest,) = db.execute("SELECT max(revision) FROM records WHERE memory_id = ?", (victim,)).fetchone()
        blob = bytearray(blob_of(db, victim, latest))
        if mode == "version byte":
            blob[0] ^= 0xFF
        elif mode == "nonce":
            blob[rng.randrange(NONCE.start, NONCE.stop)] ^= 1 << rng.randrange(8)
        elif mode == "ciphertext":
            blob[rng.randrange(NONCE.stop, len(blob) - 16)] ^= 1 << rng.randrange(8)
        elif mode == "tag":
            blob[rng.randrange(len(blob) - 16, len(blob))] ^= 1 << rng.randrange(8)
        elif mode == "moved":
            blob = bytearray(blob_of(db, donor, 1))
        elif mode == "replayed":
            assert latest > 1, "the replayed case needs a corrected memory"
            blob = bytearray(blob_of(db, victim, latest - 1))
        elif mode == "cut":
            blob = blob[: rng.randrange(len(blob))]
        db.execute(
            "UPDATE records SET ciphertext = ? WHERE memory_id = ? AND revision = ?",
            (bytes(blob), victim, latest),
        )


def no_traceback_in_server_stderr() -> None:
    for path in secrets_of_this_test().stderr_files:
        if path.exists():
            assert "Traceback" not in path.read_text(), path.read_text()[-2000:]


async def test_a_damaged_record_is_reported_by_id_and_the_rest_served(
    cheap_vault_env: dict[str, str],
) -> None:
    started = time.monotonic()
    vault = Path(cheap_vault_env["SQUIRREL_VAULT"])
    rng = random.Random(8)
    healthy: dict[str, str] = {}
    damaged: set[str] = set()
    # Memories whose newest revision is damaged but an older one readable: served at that one.
    fell_back: dict[str, str] = {}
    checks = 0
    for round_number in range(ROUNDS):
        async with Client(server_params(cheap_vault_env)) as client:
            saved = {}
            for n in range(len(MODES) + 2):
                text = f"Round {round_number} memory {n} about the quokka greenhouse"
                saved[(await call(client, "save_memory", text=text))["memory"]["id"]] = text
            ids = list(saved)
            # The replayed mode needs a second revision; so does one healthy memory.
            first_text = saved[ids[MODES.index("replayed")]]
            for memory_id in (ids[MODES.index("replayed")], ids[-1]):
                saved[memory_id] += " (corrected)"
                await call(client, "update_memory", id=memory_id, text=saved[memory_id])
        victims = dict(zip(MODES, ids, strict=False))
        for mode, victim in victims.items():
            damage(vault, mode, victim, donor=ids[-2], rng=rng)
            if mode == "replayed":
                fell_back[victim] = first_text
            else:
                damaged.add(victim)
        # Records changed in place change the log: this machine notices and writes nothing until the
        # log is accepted (tests/test_log_integrity.py). Accepted here, so the next round can save
        # and this test checks what each record's own integrity check does.
        assert run_cli(cheap_vault_env, "doctor", "--accept-log").returncode == 0
        healthy.update({memory_id: saved[memory_id] for memory_id in ids[len(MODES) :]})

        async with Client(server_params(cheap_vault_env)) as client:
            for memory_id in sorted(damaged):
                for tool in ("get_memory", "update_memory", "delete_memory"):
                    extra = {"text": "A new text"} if tool == "update_memory" else {}
                    error = await call_error(client, tool, id=memory_id, **extra)
                    assert memory_id in error and "unreadable" in error, error
                    checks += 1
            for memory_id, text in fell_back.items():
                got = await call(client, "get_memory", id=memory_id)
                assert got["memory"]["text"] == text and got["memory"]["revision"] == 1
                assert "Revision 2 of this memory failed its integrity check" in got["note"]
                checks += 1
            for memory_id, text in healthy.items():
                assert (await call(client, "get_memory", id=memory_id))["memory"]["text"] == text
                checks += 1
            served = set(healthy) | set(fell_back)
            context = await call(client, "get_context")
            assert context["unreadable"] == sorted(damaged)
            assert context["olderRevision"] == sorted(fell_back)
            assert context["total"] == len(served)
            listed = await call(client, "list_memories", limit=100)
            assert {m["id"] for m in listed["memories"]} == served
            found = await call(client, "search_memory", query="quokka greenhouse", limit=50)
            assert {hit["id"] for hit in found["results"]} == served
            checks += 3
    no_traceback_in_server_stderr()
    record(
        "tampering-records",
        runs=ROUNDS,
        faults_injected=len(damaged) + len(fell_back),
        inputs_tried=checks,
        data_lost=0,
        seconds=time.monotonic() - started,
        notes=(
            f"{len(damaged) + len(fell_back)} records damaged on disk ({len(MODES)} ways: "
            f"{', '.join(MODES)}) over {ROUNDS} restarts: the {len(damaged)} memories with no readable "
            f"revision reported unreadable by id (get/update/delete), the {len(fell_back)} replayed "
            f"ones served at their older revision with a note, all {len(healthy)} others served by "
            "get, list and search; no traceback"
        ),
    )


async def test_a_vault_damaged_while_serving_gives_a_clear_tool_error(
    cheap_vault_env: dict[str, str],
) -> None:
    """Records gone from under a running server: every tool says so in words, and the server stays up."""
    started = time.monotonic()
    async with Client(server_params(cheap_vault_env)) as client:
        saved = await call(client, "save_memory", text="Keeps bees on the garage roof")
        with sqlite3.connect(cheap_vault_env["SQUIRREL_VAULT"]) as db:
            db.execute("DROP TABLE records")
        calls = 0
        for tool, arguments in (
            ("get_context", {}),
            ("search_memory", {"query": "bees"}),
            ("save_memory", {"text": "Another memory"}),
            ("get_memory", {"id": saved["memory"]["id"]}),
            ("list_memories", {}),
        ):
            error = await call_error(client, tool, **arguments)
            assert "damaged or unreadable" in error and "no such table" in error, error
            calls += 1
    no_traceback_in_server_stderr()
    record(
        "tampering-vault-while-serving",
        runs=1,
        faults_injected=1,
        inputs_tried=calls,
        data_lost=0,
        seconds=time.monotonic() - started,
        notes=(
            f"the records table dropped under a running server: {calls} tool calls (read, search, save, "
            "get, list) each a tool error naming the damaged vault, the server up to the end, no traceback"
        ),
    )


def files_of(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {path.name: (path.read_bytes(), path.stat().st_mode) for path in sorted(directory.iterdir())}


async def test_a_wrong_passphrase_is_refused_and_the_vault_left_byte_identical(
    vault_env: dict[str, str],
) -> None:
    started = time.monotonic()
    assert run_cli(vault_env, "init").returncode == 0
    async with Client(server_params(vault_env)) as client:
        await call(client, "save_memory", text="Keeps the spare key under the blue flowerpot")
    vault_dir = Path(vault_env["SQUIRREL_VAULT"]).parent
    before = files_of(vault_dir)
    wrong = [
        PASSPHRASE.upper(),
        PASSPHRASE + " ",
        PASSPHRASE[:-1],
        "correct horse battery stap1e",
        "ünïcödé passphrase ✓",
        "x" * 1000,
    ]
    runs = 0
    for passphrase in wrong:
        env = {**vault_env, "SQUIRREL_PASSPHRASE": passphrase}
        # The server keeps serving and answers every tool call with the line; export exits with it.
        assert "passphrase does not unlock this vault" in await served_error(server_params(env))
        assert files_of(vault_dir) == before
        result = run_cli(env, "export", stdin=b"")
        runs += 2
        lines = result.stderr.decode().strip().splitlines()
        assert result.returncode == 1, result.stderr
        assert len(lines) == 1 and "passphrase does not unlock this vault" in lines[0], lines
        assert result.stdout == b""
        assert files_of(vault_dir) == before
    record(
        "tampering-wrong-passphrase",
        runs=runs,
        faults_injected=len(wrong),
        inputs_tried=runs,
        data_lost=0,
        seconds=time.monotonic() - started,
        notes=(
            f"{len(wrong)} wrong passphrases (case, trailing space, one character short or changed, "
            f"Unicode, 1,000 characters) x serve and export = {runs} runs: the server answering every "
            "tool call with one clear line, export exiting 1 with it; no output, the vault's files "
            "byte-identical (and modes unchanged)"
        ),
    )


async def serve_once(env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """One get_context on a server, told as a CLI run: status 1 for a tool error, and its stderr."""
    async with Client(server_params(env)) as client:
        answer = await client.call_tool("get_context", {})
    stderr = secrets_of_this_test().stderr_files[-1].read_bytes()
    if answer.is_error:
        text = answer.content[0]
        assert text.type == "text" and stderr.decode().strip().splitlines() == [text.text], stderr
    return subprocess.CompletedProcess([], 1 if answer.is_error else 0, b"", stderr)


async def test_a_truncated_or_overwritten_vault_gives_one_clear_line(cheap_vault_env: dict[str, str]) -> None:
    started = time.monotonic()
    vault = Path(cheap_vault_env["SQUIRREL_VAULT"])
    async with Client(server_params(cheap_vault_env)) as client:
        for n in range(SAVED):
            await call(client, "save_memory", text=f"Memory {n} of the truncation check " + "padding " * 30)
    original = vault.read_bytes()
    size = len(original)
    rng = random.Random(80)
    cases: list[tuple[str, int, int | None]] = [
        ("truncated", length, None) for length in (0, 50, 100, 4096, size // 2, size - 4096, size - 1)
    ]
    cases += [("page overwritten", rng.randrange(4096, size - 600), None) for _ in range(4)]
    outcomes: dict[str, int] = {}
    served_exports: list[int] = []
    for kind, at, _ in cases:
        vault.write_bytes(original)
        for leftover in vault.parent.glob(vault.name + "-*"):
            leftover.unlink()
        # As opened by a machine that never saw the vault: one that did also notices that the log
        # lost records (tests/test_log_integrity.py), a line of its own on top of these.
        shutil.rmtree(cheap_vault_env["XDG_CACHE_HOME"], ignore_errors=True)
        with vault.open("r+b") as handle:
            if kind == "truncated":
                handle.truncate(at)
            else:
                handle.seek(at)
                handle.write(rng.randbytes(500))
        for args in (("export",), ()):
            result = run_cli(cheap_vault_env, *args, stdin=b"") if args else await serve_once(cheap_vault_env)
            stderr = result.stderr.decode()
            assert "Traceback" not in stderr, stderr
            lines = stderr.strip().splitlines()
            if args == ("export",) and result.returncode == EXIT_EXPORT_INCOMPLETE:
                # Records the damage hit are left out and named by id; the rest is exported.
                assert all(
                    line.startswith("squirrel-mcp: left out, unreadable: memory ") for line in lines[:-1]
                )
                assert "exported WITHOUT the revisions above" in lines[-1], lines
                outcome = "served"
                served_exports.append(len(json.loads(result.stdout)["memories"]))
            elif result.returncode == 0:
                outcome = "served" if not lines else "new account"
                if args == ("export",) and not lines:
                    exported = len(json.loads(result.stdout)["memories"])
                    assert exported <= SAVED
                    served_exports.append(exported)
                if lines:
                    assert lines == [
                        f"squirrel-mcp: the vault at {vault} held no account; created a new one in it"
                    ]
            else:
                assert result.returncode == 1 and len(lines) == 1, stderr
                assert "vault" in lines[0], lines
                outcome = "refused"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    record(
        "tampering-vault-file",
        runs=2 * len(cases),
        faults_injected=len(cases),
        inputs_tried=2 * len(cases),
        data_lost=0,
        seconds=time.monotonic() - started,
        notes=(
            f"a {size // 1024} KiB vault truncated at 7 lengths and overwritten with 500 random bytes at 4 "
            "places, each opened by export and serve: "
            + ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
            + f"; never a traceback. 'served': the damage missed SQLite's structure, and export read "
            f"{', '.join(f'{n}/{SAVED}' for n in served_exports)} memories "
            "(the rest unreadable: left out, named by id, exit status 3); "
            "'new account': an emptied file, said in one line"
        ),
    )


# --- the vector file ---------------------------------------------------------------------

MEMORIES = [
    "Is allergic to peanuts",
    "Runs Pi-hole on a Raspberry Pi for DNS ad blocking",
    "Prefers short answers with code first",
    "Sister Anna lives in Zürich",
]


@needs_model
async def test_a_truncated_or_flipped_vector_file_is_rebuilt(
    cheap_vault_env: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    env = {
        **cheap_vault_env,
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "c"),
    }
    async with Client(server_params(env)) as client:
        for text in MEMORIES:
            await call(client, "save_memory", text=text)
        assert (await search_when(client, "hybrid", query="allergic to peanuts"))["ranking"] == "hybrid"
    (vectors,) = (tmp_path / "c" / "squirrel-notes").glob("memory-vectors-*.bin")
    original = vectors.read_bytes()
    size = len(original)
    rng = random.Random(800)
    cases = [("truncated", length) for length in (0, 3, 5, 40, size // 2, size - 1)]
    cases += [("flipped", rng.randrange(size)) for _ in range(3)]
    registry = secrets_of_this_test()
    for kind, at in cases:
        damaged = bytearray(original)
        if kind == "truncated":
            damaged = damaged[:at]
        else:
            damaged[at] ^= 1 << rng.randrange(8)
        vectors.write_bytes(bytes(damaged))
        first = len(registry.stderr_files)
        async with Client(server_params(env)) as client:
            found = await search_when(client, "hybrid", query="allergic to peanuts")
            assert found["ranking"] == "hybrid"
            assert found["results"][0]["text"] == "Is allergic to peanuts"
        (stderr,) = registry.stderr_files[first:]
        lines = stderr.read_text().splitlines()
        assert lines.count(warmup.REBUILT) == 1 and "Traceback" not in stderr.read_text(), lines
        rebuilt = vectors.read_bytes()
        assert len(rebuilt) == size and rebuilt != bytes(damaged)
    # The rebuilt file is read without complaint.
    first = len(registry.stderr_files)
    async with Client(server_params(env)) as client:
        assert (await search_when(client, "hybrid", query="allergic to peanuts"))["ranking"] == "hybrid"
    assert warmup.REBUILT not in registry.stderr_files[first].read_text()
    record(
        "tampering-vector-file",
        runs=len(cases) + 1,
        faults_injected=len(cases),
        inputs_tried=len(cases),
        data_lost=0,
        seconds=time.monotonic() - started,
        notes=(
            f"the vector file ({size} bytes) truncated at 6 lengths (0 bytes to one short) and one bit "
            "flipped at 3 places: each time one REBUILT line, search hybrid with the right first hit, "
            "the file rewritten whole and read cleanly at the next start; no traceback"
        ),
    )
